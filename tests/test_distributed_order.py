"""Sharded collections share their process groups, so two of them called in another order on one
rank than on the others (rank-dependent control flow, a collection one rank skips for a batch) had
their exchanges paired at the same step number: rows of the other collection's table came back, with
no error; with another number of tables, gloo aborted both processes on the unequal sizes. Every
step header now carries the collection's identity, every collection's first ops are sized for the
most tables of any collection built, and both ranks raise, naming the mismatch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def _without_key(kjt: recgo.KeyedJaggedTensor, drop: str) -> recgo.KeyedJaggedTensor:
    """kjt without feature ``drop``."""
    d = kjt.to_dict()
    keys = [k for k in kjt.keys() if k != drop]
    return recgo.KeyedJaggedTensor(keys, torch.cat([d[k].values() for k in keys]),
                                   lengths=torch.cat([d[k].lengths() for k in keys]))


def _one_refuses(rank: int, world: int, mode: str, kind: str) -> dict:
    """Rank 1's batch is refused locally at steps 1 (an ID out of range), 2 (a missing feature) and 3
    (a negative ID); both ranks catch and go on. Before, rank 1 raised alone before the step's first
    collective, consumed no step number, and rank 0's step 1 trained paired with rank 1's step-2
    batch, silently."""
    from recgo.distributed import ShardedEmbeddingBagCollection, ShardedEmbeddingCollection
    from sharded_batches import configs, global_batch, local_batch

    torch.set_num_threads(1)
    opt = optim.Adagrad(lr=0.1)
    sharding = {"th": "hash", "tt": "table_wise", "tr": "row_wise", "td": "data_parallel", "tp": "hash"}
    if kind == "sequence":
        cfgs = [recgo.EmbeddingConfig(c.num_embeddings, c.embedding_dim, c.name, c.feature_names) for c in configs()]
        ref = recgo.EmbeddingCollection(cfgs, optimizer=opt, seed=3)
        sh = ShardedEmbeddingCollection(cfgs, {**sharding, "td": "hash"}, optimizer=opt, seed=3, timeout=20, mode=mode)

        def loss(out: dict) -> torch.Tensor:
            return sum((jt.values() * jt.values()).sum() for jt in out.values())
    else:
        ref = recgo.EmbeddingBagCollection(configs(), optimizer=opt, seed=3)
        sh = ShardedEmbeddingBagCollection(configs(), sharding, optimizer=opt, seed=3, timeout=20, mode=mode)

        def loss(out: Any) -> torch.Tensor:
            return (out.values() * out.values()).sum()
    raised: dict[int, str | None] = {}
    for step in range(6):
        g = global_batch(step, world)
        mine = local_batch(g, rank)
        if rank == 1 and step in (1, 3):
            v = mine.values().clone()
            v[-1] = 10_000 if step == 1 else -3
            mine = recgo.KeyedJaggedTensor(mine.keys(), v, lengths=mine.lengths())
        if rank == 1 and step == 2:
            mine = _without_key(mine, "t1")
        try:
            loss(sh(mine)).backward()
            raised[step] = None
        except Exception as exc:  # noqa: BLE001 - the result is the error
            raised[step] = f"{type(exc).__name__}: {exc}"
        if step not in (1, 2, 3):  # the reference trains on the good global batches only
            loss(ref(g)).backward()
    diff, clocks = 0.0, {}
    for t, shard in sh.embedding_bags.items() if kind != "sequence" else sh.embeddings.items():
        rows = sh.local_ids(t)
        whole = (ref.embedding_bags if kind != "sequence" else ref.embeddings)[t].weight.detach()
        if rows.numel():
            diff = max(diff, float((shard.weight.detach() - whole[rows]).abs().max()))
        clocks[t] = int(shard.optimizer_step)
    return {"raised": raised, "diff": diff, "clocks": clocks}


_REFUSAL_CASES = (("flat", "pooled"), ("hierarchical", "pooled"), ("flat", "sequence"))


def _every_case_refuses(rank: int, world: int) -> dict:
    """:func:`_one_refuses` for each (mode, kind) in turn, in one world: one process start-up for all."""
    return {case: _one_refuses(rank, world, *case) for case in _REFUSAL_CASES}


def test_a_batch_one_rank_refuses_stops_the_step_on_every_rank(tmp_path: Path) -> None:
    world = spawn(_every_case_refuses, 2, tmp_path, wait=240)
    for r in world:
        assert "error" not in r, r
    for mode, kind in _REFUSAL_CASES:
        res = [r[(mode, kind)] for r in world]
        for r in res:
            raised = r["raised"]
            assert [s for s, e in raised.items() if e] == [1, 2, 3], (mode, kind, raised)
            for step, what in ((1, "out of range"), (2, "lacks features ['t1']"), (3, "out of range")):
                assert raised[step].startswith("InvalidInputError: "), raised[step]
                assert what in raised[step], (step, raised[step])
        for step, n in ((1, 2), (2, 3), (3, 4)):  # the engine numbers steps from 1
            assert res[0]["raised"][step].startswith(f"InvalidInputError: exchange: rank 1 refused its batch of step {n}: ")
        assert res[0]["clocks"] == res[1]["clocks"], res
        assert set(res[0]["clocks"].values()) == {3}, res  # the three good steps, on every rank
        for r in res:
            assert r["diff"] < 1e-6, (mode, kind, r)
