"""Freezing some tables of a fused collection (``weight.requires_grad_(False)``, a pretrained table):
the fused update leaves them out (no row, optimizer state or step moves, as torch's optimizers skip a
parameter without a gradient and TorchRec's in-backward ones skip a frozen table) and trains the
others exactly as it would with none frozen. Before session 32 the unsharded collections refused it
(and ``from_torchrec`` refused such a TorchRec model), and a sharded fused collection ignored
``requires_grad_(False)`` altogether: frozen shards trained on silently."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
import torch

import recgo
from recgo.modules import optim
from spawned import one_rank, spawn
from test_eager_path import _PassThrough

OPTIMIZERS = [optim.SGD(lr=0.3), optim.AdamW(lr=0.05, weight_decay=0.2), optim.RowWiseAdagrad(lr=0.2)]
IDS = ["sgd", "adamw", "rowwise_adagrad"]


def _pooled(opt: Any) -> recgo.EmbeddingBagCollection:
    C = recgo.EmbeddingBagConfig
    return recgo.EmbeddingBagCollection([C(30, 4, "t0", ["a"]), C(20, 8, "t1", ["b"], pooling="mean"),
                                         C(25, 4, "t2", ["c"])], optimizer=opt, seed=4)


def _sequence(opt: Any) -> recgo.EmbeddingCollection:
    C = recgo.EmbeddingConfig
    return recgo.EmbeddingCollection([C(30, 4, "t0", ["a"]), C(20, 8, "t1", ["b"]), C(25, 4, "t2", ["c"])],
                                     optimizer=opt, seed=4)


def _batch(step: int, samples: int = 5) -> recgo.KeyedJaggedTensor:
    g = torch.Generator().manual_seed(step)
    lengths = torch.randint(0, 4, (3 * samples,), generator=g)
    return recgo.KeyedJaggedTensor(["a", "b", "c"], torch.randint(0, 20, (int(lengths.sum()),), generator=g),
                                   lengths=lengths)


def _loss(m: torch.nn.Module, kjt: recgo.KeyedJaggedTensor) -> torch.Tensor:
    """A loss over every output whose gradient differs per row (a sum of squares)."""
    out = m(kjt)
    if isinstance(out, dict):
        return sum(out[k].values().pow(2).sum() for k in out)  # type: ignore[return-value]
    return out.values().pow(2).sum()


def _tables(m: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=IDS)
@pytest.mark.parametrize("make", [_pooled, _sequence], ids=["pooled", "sequence"])
@pytest.mark.parametrize("ops", [False, True], ids=["eager", "custom_ops"])
def test_a_frozen_table_takes_no_step_and_the_others_train_as_ever(opt: Any, make: Callable, ops: bool) -> None:
    """Per table, the frozen one keeps its rows, optimizer state and step bit for bit; the others end
    bit for bit where a collection with nothing frozen ends (tables are independent within a step),
    on the eager path and the custom ops' (under a dispatch mode, as under torch.compile). Unfrozen,
    the table trains on from its own step count."""
    frozen, ref = make(opt), make(opt)
    frozen.load_state_dict(ref.state_dict())
    attr = "embeddings" if isinstance(frozen, recgo.EmbeddingCollection) else "embedding_bags"
    getattr(frozen, attr)["t1"].weight.requires_grad_(False)
    before = _tables(frozen)
    for step in range(3):
        if ops:
            with _PassThrough():
                loss = _loss(frozen, _batch(step))
        else:
            loss = _loss(frozen, _batch(step))
        loss.backward()
        _loss(ref, _batch(step)).backward()
    got, want = _tables(frozen), _tables(ref)
    for k in got:
        if ".t1." in k:
            assert torch.equal(got[k], before[k]), f"frozen {k} moved"
        else:
            assert torch.equal(got[k], want[k]), k
    assert int(got[f"{attr}.t2.optimizer_step"]) == 3 and int(got[f"{attr}.t1.optimizer_step"]) == 0
    assert not torch.equal(want[f"{attr}.t1.weight"], before[f"{attr}.t1.weight"])  # the reference trains it
    getattr(frozen, attr)["t1"].weight.requires_grad_(True)
    _loss(frozen, _batch(3)).backward()
    assert int(frozen.state_dict()[f"{attr}.t1.optimizer_step"]) == 1
    assert not torch.equal(frozen.state_dict()[f"{attr}.t1.weight"], before[f"{attr}.t1.weight"])


def test_a_frozen_shared_table_stays_in_a_merged_update() -> None:
    """A table a pooled and a sequence collection share (``share=``), frozen: neither backward, nor
    the merged-update scope's end, steps it; the other table takes its one merged step."""
    C = recgo.EmbeddingBagConfig
    ebc = recgo.EmbeddingBagCollection([C(30, 4, "t0", ["a"]), C(20, 4, "t1", ["b"])], optimizer=optim.Adagrad(lr=0.1),
                                       seed=2)
    ec = recgo.EmbeddingCollection([recgo.EmbeddingConfig(30, 4, "t0", ["a"]), recgo.EmbeddingConfig(20, 4, "t1", ["b"])],
                                   share=ebc)
    ebc.embedding_bags["t0"].weight.requires_grad_(False)
    before = _tables(ebc)
    kjt = recgo.KeyedJaggedTensor(["a", "b"], torch.tensor([1, 2, 3, 4, 5, 6]), lengths=torch.tensor([2, 1, 2, 1]))
    with ec.merged_update():
        ebc(kjt).values().sum().backward()
        sum(v.values().sum() for v in ec(kjt).values()).backward()
    after = _tables(ebc)
    assert all(torch.equal(after[k], before[k]) for k in after if ".t0." in k)
    assert int(after["embedding_bags.t1.optimizer_step"]) == 1
    assert not torch.equal(after["embedding_bags.t1.weight"], before["embedding_bags.t1.weight"])


@pytest.mark.parametrize("sequence", [False, True], ids=["pooled", "sequence"])
def test_a_frozen_shard_takes_no_step_on_one_rank(tmp_path: Path, sequence: bool) -> None:
    """A sharded fused collection trained shards frozen with requires_grad_(False), whole or in part
    (its weights did not require grad, so freezing changed nothing): now a frozen shard stays, the
    others train as the unsharded collection with the same table frozen."""
    from recgo.distributed import ShardedEmbeddingBagCollection, ShardedEmbeddingCollection

    make = _sequence if sequence else _pooled
    cls = ShardedEmbeddingCollection if sequence else ShardedEmbeddingBagCollection
    attr = "embeddings" if sequence else "embedding_bags"
    with one_rank(tmp_path):
        ref = make(optim.AdamW(lr=0.05, weight_decay=0.2))
        sharded = (cls.from_ec if sequence else cls.from_ebc)(ref, "hash", timeout=30)
        assert all(p.requires_grad for p in sharded.parameters())  # as the unsharded collection's
        sharded.requires_grad_(False)
        before = _tables(sharded)
        assert not _loss(sharded, _batch(0)).requires_grad  # nothing to train: no graph
        assert all(torch.equal(v, before[k]) for k, v in sharded.state_dict().items())
        sharded.requires_grad_(True)
        for m in (sharded, ref):
            getattr(m, attr)["t1"].weight.requires_grad_(False)
        for step in range(2):
            for m in (sharded, ref):
                _loss(m, _batch(step)).backward()
        got = {k.replace(".rank0_of_1", ""): v for k, v in sharded.state_dict().items()}
        for name in ("t0", "t1", "t2"):
            rows = sharded.local_ids(name)
            w, want = got[f"{attr}.{name}.weight"], ref.state_dict()[f"{attr}.{name}.weight"][rows]
            torch.testing.assert_close(w, want, rtol=1e-5, atol=1e-6)
        assert torch.equal(got[f"{attr}.t1.weight"], before[f"{attr}.t1.rank0_of_1.weight"])
        assert int(got[f"{attr}.t1.optimizer_step"]) == 0 and int(got[f"{attr}.t0.optimizer_step"]) == 2


def _two_ranks(rank: int, world: int) -> dict:
    """Two ranks freeze table t1 of a sharded fused collection: it stays on both, the others train as
    the unsharded collection on the global batch. Then rank 1 freezes t2 as well: both ranks raise,
    naming it, before any row moves."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    ref = _pooled(optim.Adagrad(lr=0.1))
    sharded = ShardedEmbeddingBagCollection.from_ebc(ref, "hash", timeout=30)
    for m in (sharded, ref):
        m.embedding_bags["t1"].weight.requires_grad_(False)
    frozen_before = sharded.embedding_bags["t1"].weight.detach().clone()
    diff = 0.0
    for step in range(2):
        full = _batch(step, 3 * world)
        b = full.stride() // world
        mine = recgo.KeyedJaggedTensor.from_jt_dict({k: _rows(full[k], rank * b, (rank + 1) * b) for k in full.keys()})
        out, whole = sharded(mine).values(), ref(full).values()
        diff = max(diff, float((out - whole[rank * b:(rank + 1) * b]).abs().max()))
        out.pow(2).sum().backward()
        whole.pow(2).sum().backward()
    for name in ("t0", "t2"):
        rows = sharded.local_ids(name)
        got = sharded.embedding_bags[name].weight.detach()
        diff = max(diff, float((got - ref.embedding_bags[name].weight.detach()[rows]).abs().max()))
    still = torch.equal(sharded.embedding_bags["t1"].weight, frozen_before)
    if rank == 1:
        sharded.embedding_bags["t2"].weight.requires_grad_(False)
    t2 = sharded.embedding_bags["t2"].weight.detach().clone()
    try:
        sharded(_batch(5)).values().sum().backward()
        raised = None
    except Exception as exc:  # noqa: BLE001 - the result is the error
        raised = f"{type(exc).__name__}: {exc}"
    return {"diff": diff, "still": still, "raised": raised, "t2_kept": torch.equal(sharded.embedding_bags["t2"].weight, t2)}


def _rows(jt: Any, lo: int, hi: int) -> recgo.JaggedTensor:
    lengths = jt.lengths()
    start, end = int(lengths[:lo].sum()), int(lengths[:hi].sum())
    return recgo.JaggedTensor(values=jt.values()[start:end], lengths=lengths[lo:hi])


def test_ranks_agree_on_frozen_tables_or_raise(tmp_path: Path) -> None:
    for r in spawn(_two_ranks, 2, tmp_path, wait=150):
        assert r.get("diff") is not None and r["diff"] < 1e-5, r
        assert r["still"], r
        assert r["raised"] and r["raised"].startswith("InvalidInputError: exchange: table \"t2\" is frozen "
                                                      "(requires_grad=False) on rank 1 but not on rank 0"), r
        assert r["t2_kept"], r
