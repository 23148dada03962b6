"""The concurrency contract of docs/threads.md for sequence collections and recgo.dynamic.lookup, as
for pooled collections: training forwards over dynamic-ID tables are exclusive (admissions and
evictions move rows) and fused steps atomic. EmbeddingCollection took only shared locks, and
dynamic.lookup(train=True) none: other threads' forwards got rows another ID had taken over.
(The engine-level test of the fused steps is engine/embedding/sequence_locks_test.go.)"""

from __future__ import annotations

import threading

import torch

import recgo
from recgo import DynamicConfig, EmbeddingCollection, EmbeddingConfig, KeyedJaggedTensor
from threaded import run_threads

D, PER = 16, 24


def _dyn() -> DynamicConfig:
    return DynamicConfig(seed=7, evict_fraction=0.25, init_min=-0.1, init_max=0.1)


def _batch(i: int, s: int, steps: int) -> KeyedJaggedTensor:
    ids = torch.arange(PER) + (i * steps + s) * PER + 1  # fresh, distinct IDs
    return KeyedJaggedTensor(["a"], ids, lengths=torch.ones(PER, dtype=torch.int64))


def test_sequence_training_forwards_over_dynamic_tables_are_exclusive() -> None:
    """4 threads run training forwards of fresh IDs through a 64-row table (evicting all along) and
    nothing trains: each ID's output is its first vector, which depends on seed and ID only."""
    n, steps = 4, 300
    big = EmbeddingCollection([EmbeddingConfig(1 << 16, D, "t", ["a"], dynamic=_dyn())])
    with torch.no_grad():
        want = {(i, s): big(_batch(i, s, steps))["a"].values().clone() for i in range(n) for s in range(steps)}
    small = EmbeddingCollection([EmbeddingConfig(64, D, "t", ["a"], dynamic=_dyn())])
    bad: list[tuple[int, int]] = []

    def body(i: int) -> None:
        for s in range(steps):
            with torch.no_grad():
                out = small(_batch(i, s, steps))["a"].values()
            if not torch.equal(out, want[(i, s)]):
                bad.append((i, s))

    run_threads(n, body)
    assert bad == []


def test_dynamic_lookup_in_training_is_exclusive_with_forwards() -> None:
    """dynamic.lookup(train=True) admits and evicts: an evaluation forward of resident IDs beside it
    sees each ID's row or, once evicted, the zero default row, never another ID's."""
    m = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(64, D, "t", ["a"], dynamic=DynamicConfig(
        seed=7, evict_fraction=0.5, init_min=-0.1, init_max=0.1))])
    b = _batch(0, 0, 1)
    wrong = 0
    for rep in range(200):
        m.train()
        with torch.no_grad():
            m(b)  # admits the batch's IDs
        m.eval()
        with torch.no_grad():
            want = m(b).values().clone()
        stop = threading.Event()

        def churn(k: int = 10**6 + rep * 10**5) -> None:
            while not stop.is_set():
                recgo.dynamic.lookup(m, "t", torch.arange(k, k + 40), train=True)
                k += 40

        t = threading.Thread(target=churn)
        t.start()
        try:
            for _ in range(5):
                with torch.no_grad():
                    out = m(b).values()
                wrong += int(not bool(((out == want).all(1) | (out == 0).all(1)).all()))
        finally:
            stop.set()
            t.join()
    assert wrong == 0
