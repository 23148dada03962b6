"""Spawned gloo worlds for the multi-process tests: :func:`spawn` runs a test module's function on
every rank of a fresh world and brings each rank's result (or its error and traceback) back. Ranks
are killed at a deadline, so a test whose ranks hang fails instead of hanging the suite.

Ranks start from torch's forkserver with torch imported there (never a fork of a process that loaded
recgo: the server imports torch only): a spawned rank spent ~3 s of CPU importing torch, and the
suite starts about a hundred. Each rank takes the parent's environment as it is at the call, as a
spawned one would (the server's was fixed when it started)."""

from __future__ import annotations

import importlib
import os
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

mp.set_forkserver_preload(["torch", "torch.distributed"])


def _entry(rank: int, target: str, world: int, store: str, out: str, env: dict[str, str], args: tuple) -> None:
    os.environ.clear()
    os.environ.update(env, RECGO_TEST_OUT=out)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        mod, _, name = target.rpartition(":")
        res = getattr(importlib.import_module(mod), name)(rank, world, *args)
    except BaseException as exc:  # report to the parent instead of tearing the world down
        res = {"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}", "error_type": type(exc).__name__}
    torch.save(res, os.path.join(out, f"{rank}.pt"))
    try:
        dist.destroy_process_group()
    except Exception:
        pass


def spawn(fn: Callable, world: int, tmp: Path, *args: Any, wait: float = 240.0,
          expect: list[int] | None = None) -> list[dict]:
    """Run fn(rank, world, *args) (a module-level function of an importable module) on a fresh gloo
    world of new processes; return each rank's result (once the ranks in ``expect``, default all,
    have reported, or ``wait`` seconds passed, the others are killed; a rank without a result gives
    ``{"error": "no result"}``). ``RECGO_TEST_OUT`` in the ranks names their output folder."""
    out = tmp / f"out-{fn.__name__}-{world}"
    out.mkdir()
    target = f"{fn.__module__}:{fn.__name__}"
    store = str(tmp / f"store-{fn.__name__}-{world}")
    ctx = mp.start_processes(_entry, args=(target, world, store, str(out), dict(os.environ), args),
                             nprocs=world, start_method="forkserver", join=False)
    deadline = time.monotonic() + wait
    want = list(range(world)) if expect is None else expect
    while time.monotonic() < deadline and not all((out / f"{r}.pt").exists() for r in want):
        if not any(p.is_alive() for p in ctx.processes):
            break
        time.sleep(0.2)
    time.sleep(0.5)  # let a finished rank close its file
    for p in ctx.processes:
        if p.is_alive():
            p.kill()
        p.join()
    return [torch.load(out / f"{r}.pt", weights_only=False) if (out / f"{r}.pt").exists() else {"error": "no result"}
            for r in range(world)]


def ok(results: list[dict]) -> None:
    """Assert that no rank reported an error (the first one's traceback in the message)."""
    for r, res in enumerate(results):
        assert "error" not in res, f"rank {r}: {res['error']}"


@contextmanager
def one_rank(tmp: Path) -> Iterator[None]:
    """This process as a one-rank gloo world (its store in folder ``tmp``), for the checks of sharded
    collections that need no peer."""
    dist.init_process_group("gloo", init_method=f"file://{tmp / 'store-one'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
