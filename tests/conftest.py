"""Fixtures shared by the test modules."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Iterator

# Before torch loads its OpenMP runtime (it reads this once; nothing imports torch before conftest):
# a team that sleeps at a barrier instead of spinning. The suite's processes, spawned ranks included,
# share two cores, and spinning teams that outnumber the cores slowed single-process training tests
# several times over.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Spawned ranks (and every other child) print each thread's Python stack when a fatal signal stops
# them: a crash in native code then says in the test's captured stderr where it happened.
os.environ.setdefault("PYTHONFAULTHANDLER", "1")

import pytest

#: Optional packages with compiled parts tied to one torch release: installed but failing to import (e.g.
#: fbgemm-gpu 1.9.0 under torch 2.15: OSError, undefined symbol c10::report_overflow), they are hidden so
#: that pytest.importorskip skips their tests instead of erroring at collection; the header says why.
_UNUSABLE: dict[str, str] = {}
for _name in ("torchrec",):
    try:
        importlib.import_module(_name)
    except ModuleNotFoundError:
        pass
    except Exception as _exc:  # OSError, RuntimeError, AttributeError from an ABI mismatch
        _UNUSABLE[_name] = f"{type(_exc).__name__}: {(str(_exc).splitlines() or [''])[0]}"
        for _mod in [m for m in sys.modules if m == _name or m.startswith(_name + ".")]:
            del sys.modules[_mod]
        sys.modules[_name] = None  # type: ignore[assignment]  # import → ModuleNotFoundError → importorskip skips


def pytest_report_header() -> list[str]:
    import torch

    return [f"{name}: installed but does not import on torch {torch.__version__}, its tests skip ({why})"
            for name, why in _UNUSABLE.items()]


@pytest.fixture
def compile_failures() -> Iterator[list[str]]:
    """The messages torch.compile logs when a backend fails and it falls back to eager for a frame
    (which a test of a compiled model asserts never happens); collected while the test runs."""
    got: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if "Backend compiler" in msg or "failed while compiling" in msg:
                got.append(msg.splitlines()[0])

    handler = Catch(level=logging.WARNING)
    logger = logging.getLogger("torch._dynamo")
    logger.addHandler(handler)
    try:
        yield got
    finally:
        logger.removeHandler(handler)
