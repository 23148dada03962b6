"""The leak checks of the reliability tests (``test_reliability_leaks``, ``test_reliability_ctrl_c``):
what the engine holds (handles, goroutines, off-heap bytes), a body run N times must give it all back,
and the small collections and batches those tests build."""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Callable

import torch

import recgo
from recgo import _debug
from recgo.data import SyntheticField, SyntheticSource
from recgo.feature import Feature
from recgo.modules import optim

N = 20
SOURCE = SyntheticSource(600, [SyntheticField("u", 300, 1.1), SyntheticField("h", 800, 0.9, 0.8, 4.0)], dense=2)
FEATURES = [Feature("u").hash().mod(200), Feature("h").mod(400)]


@dataclass(frozen=True)
class Counts:
    """What the engine holds: live handles, process and pipeline goroutines, off-heap bytes mapped."""

    handles: int
    goroutines: int
    pipeline_goroutines: int
    mapped: int

    @staticmethod
    def now(collect: bool = True) -> Counts:
        if collect:
            gc.collect()
        total, running = recgo.pipeline.goroutines()
        return Counts(_debug.live_handles(), total, running, _debug.memory_in_use()[1])

    def within(self, base: Counts) -> bool:
        return (self.handles == base.handles and self.goroutines <= base.goroutines
                and self.pipeline_goroutines <= base.pipeline_goroutines and self.mapped <= base.mapped)


def settled(base: Counts, collect: bool = True, timeout: float = 10.0) -> Counts:
    """The counts once they are back within ``base``, or as they stand at the timeout: goroutines told
    to stop (a freed pipeline's, a cancelled plan job's) exit asynchronously. ``collect``: run Python's
    cyclic garbage collector before each reading."""
    deadline = time.monotonic() + timeout
    while True:
        now = Counts.now(collect)
        if now.within(base) or time.monotonic() > deadline:
            return now
        time.sleep(0.01)


def check_no_leak(body: Callable[[], object], n: int = N, timeout: float = 10.0) -> None:
    """Run ``body`` once to warm up, then ``n`` times, and assert nothing it made is left, also before
    Python's cyclic garbage collector ran."""
    body()
    base = settled(Counts.now())
    gc.disable()
    try:
        for _ in range(n):
            body()
        held = settled(base, collect=False, timeout=timeout)
    finally:
        gc.enable()
    after = settled(base, timeout=timeout)
    assert after.within(base), f"leaked: before {base}, after {n} runs {after}"
    assert held.within(base), f"held by a reference cycle: before {base}, after {n} runs {held} until gc.collect()"


def small_kjt(rows: dict[str, int], batch: int = 16, seed: int = 0) -> recgo.KeyedJaggedTensor:
    """A batch of 0–3 IDs per bag, key ``k``'s in ``[0, rows[k])``."""
    g = torch.Generator().manual_seed(seed)
    lengths = [torch.randint(0, 4, (batch,), generator=g) for _ in rows]
    values = [torch.randint(0, n, (int(ln.sum()),), generator=g) for n, ln in zip(rows.values(), lengths)]
    return recgo.KeyedJaggedTensor(list(rows), torch.cat(values), lengths=torch.cat(lengths))


def small_ids(dynamic: bool) -> dict[str, int]:
    return {"a": 1000 if dynamic else 64, "b": 32}


def small_ebc(dynamic: bool) -> recgo.EmbeddingBagCollection:
    dyn = recgo.DynamicConfig(min_count=1) if dynamic else None
    cfg = [recgo.EmbeddingBagConfig(num_embeddings=64, embedding_dim=8, name="t0", feature_names=["a"], dynamic=dyn),
           recgo.EmbeddingBagConfig(num_embeddings=32, embedding_dim=4, name="t1", feature_names=["b"])]
    return recgo.EmbeddingBagCollection(cfg, optimizer=optim.Adam(lr=0.01), seed=0)
