"""Sharded collections share their process groups, so two of them called in another order on one
rank than on the others (rank-dependent control flow, a collection one rank skips for a batch) had
their exchanges paired at the same step number: rows of the other collection's table came back, with
no error. Every step header now carries the collection's identity, and both ranks raise, naming the
collection. (Collections whose first ops differ in size still meet gloo's own size check, which
aborts the process: see docs/distributed.md.)"""

from __future__ import annotations

from pathlib import Path

import torch

import recgo
from recgo.modules import optim
from spawned import spawn


def _swapped(rank: int, world: int, sequence: bool) -> dict:
    from recgo.distributed import ShardedEmbeddingBagCollection, ShardedEmbeddingCollection

    C = recgo.EmbeddingBagConfig
    A = ShardedEmbeddingBagCollection([C(20, 4, "ua", ["fa"])], "hash", optimizer=optim.SGD(lr=0.1), seed=1,
                                      timeout=20)
    if sequence:  # a sequence collection of the same shape: told apart too
        B = ShardedEmbeddingCollection([recgo.EmbeddingConfig(20, 4, "ua", ["fa"])], "hash",
                                       optimizer=optim.SGD(lr=0.1), seed=1, timeout=20)
    else:
        B = ShardedEmbeddingBagCollection([C(20, 4, "ub", ["fb"])], "hash", optimizer=optim.SGD(lr=0.1), seed=2,
                                          timeout=20)
    kjt = recgo.KeyedJaggedTensor(["fa", "fb"], torch.arange(8) % 20, lengths=torch.ones(8, dtype=torch.int64))
    try:
        with torch.no_grad():  # an evaluation loop: no backward would catch it later
            for m in ((A, B) if rank == 0 else (B, A)):
                m(kjt)
        return {"raised": None}
    except Exception as exc:  # noqa: BLE001 - the result is the error
        return {"raised": f"{type(exc).__name__}: {exc}"}


def test_collections_called_in_another_order_raise_on_every_rank(tmp_path: Path) -> None:
    for sequence in (False, True):
        (tmp_path / str(sequence)).mkdir()
        for r in spawn(_swapped, 2, tmp_path / str(sequence), sequence, wait=120):
            assert r.get("raised") and r["raised"].startswith("InvalidInputError: exchange: rank "), r
            assert "is running another sharded collection's step" in r["raised"], r
