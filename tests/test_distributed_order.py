"""Sharded collections share their process groups, so two of them called in another order on one
rank than on the others (rank-dependent control flow, a collection one rank skips for a batch) had
their exchanges paired at the same step number: rows of the other collection's table came back, with
no error; with another number of tables, gloo aborted both processes on the unequal sizes. Every
step header now carries the collection's identity, every collection's first ops are sized for the
most tables of any collection built, and both ranks raise, naming the mismatch."""

from __future__ import annotations

from pathlib import Path

import torch

import recgo
from recgo.modules import optim
from spawned import spawn


def _swapped(rank: int, world: int, other: str) -> dict:
    from recgo.distributed import ShardedEmbeddingBagCollection, ShardedEmbeddingCollection

    C = recgo.EmbeddingBagConfig
    A = ShardedEmbeddingBagCollection([C(20, 4, "ua", ["fa"])], "hash", optimizer=optim.SGD(lr=0.1), seed=1,
                                      timeout=20)
    if other == "sequence":  # a sequence collection of the same shape: told apart too
        B = ShardedEmbeddingCollection([recgo.EmbeddingConfig(20, 4, "ua", ["fa"])], "hash",
                                       optimizer=optim.SGD(lr=0.1), seed=1, timeout=20)
    else:  # "pooled": one table as A; "wider": two (unequal first ops before the padding)
        B = ShardedEmbeddingBagCollection([C(20, 4, "ub", ["fb"]), *([C(9, 8, "uc", ["fc"])] if other == "wider" else [])],
                                          "hash", optimizer=optim.SGD(lr=0.1), seed=2, timeout=20)
    kjt = recgo.KeyedJaggedTensor(["fa", "fb", "fc"], torch.arange(12) % 9, lengths=torch.ones(12, dtype=torch.int64))
    try:
        with torch.no_grad():  # an evaluation loop: no backward would catch it later
            for m in ((A, B) if rank == 0 else (B, A)):
                m(kjt)
        return {"raised": None}
    except Exception as exc:  # noqa: BLE001 - the result is the error
        return {"raised": f"{type(exc).__name__}: {exc}"}


def test_collections_called_in_another_order_raise_on_every_rank(tmp_path: Path) -> None:
    for other in ("pooled", "sequence", "wider"):
        (tmp_path / other).mkdir()
        for r in spawn(_swapped, 2, tmp_path / other, other, wait=120):
            assert r.get("raised") and r["raised"].startswith("InvalidInputError: exchange: rank "), r
            assert "is running another sharded collection's step" in r["raised"], r


def _padded_steps(rank: int, world: int) -> dict:
    """A one-table collection built beside a three-table one (its first ops padded for three) trains
    as the unsharded collection does."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    C = recgo.EmbeddingBagConfig
    small = ShardedEmbeddingBagCollection([C(20, 4, "ua", ["fa"], pooling="mean")], "row_wise",
                                          optimizer=optim.Adagrad(lr=0.1), seed=1, timeout=20)
    ShardedEmbeddingBagCollection([C(9, 4, f"w{i}", [f"w{i}"]) for i in range(3)], "hash", timeout=20)
    ref = recgo.EmbeddingBagCollection([C(20, 4, "ua", ["fa"], pooling="mean")], optimizer=optim.Adagrad(lr=0.1), seed=1)
    g = torch.Generator().manual_seed(5)
    diff = 0.0
    for _ in range(3):
        lengths = torch.randint(0, 4, (2 * world,), generator=g)
        ids = torch.randint(0, 20, (int(lengths.sum()),), generator=g)
        full = recgo.KeyedJaggedTensor(["fa"], ids, lengths=lengths)
        lo, hi = int(lengths[: 2 * rank].sum()), int(lengths[: 2 * rank + 2].sum())
        mine = recgo.KeyedJaggedTensor(["fa"], ids[lo:hi], lengths=lengths[2 * rank: 2 * rank + 2])
        out, whole = small(mine).values(), ref(full).values()
        diff = max(diff, float((out - whole[2 * rank: 2 * rank + 2]).abs().max()))
        out.sum().backward()
        whole.sum().backward()
    rows = small.local_ids("ua")
    diff = max(diff, float((small.embedding_bags["ua"].weight.detach() - ref.embedding_bags["ua"].weight.detach()[rows]).abs().max()))
    return {"diff": diff}


def test_a_padded_collection_trains_as_one_process(tmp_path: Path) -> None:
    for r in spawn(_padded_steps, 2, tmp_path, wait=120):
        assert r.get("diff") is not None and r["diff"] < 1e-6, r
