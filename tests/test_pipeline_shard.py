"""The input pipeline's FORMAT stage partitions a sharded collection's IDs by owner (issue 12):
training steps of a :class:`ShardedEmbeddingBagCollection` from batches prepared with ``shard=``
equal, bit for bit, the same batches through the collection's own dedup and partition (outputs,
gradients, updated weights and optimizer state, traffic counters), for hash and table-wise
sharding, row-wise tables split unevenly and a hash-sharded dynamic-ID table; a batch partitioned for
a collection laid out otherwise (row-wise tables split otherwise included),
or modified after preparation, trains as a plain batch would; TrainPipeline wires ``shard=`` itself. One spawned gloo world of two ranks runs every
case (see test_distributed.spawn)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import recgo
from recgo.data import SyntheticField, SyntheticSource
from recgo.data import _prepared
from recgo.distributed import ShardedEmbeddingBagCollection
from recgo.errors import InvalidInputError
from recgo.feature import Feature
from recgo.modules import optim
from spawned import spawn

SOURCE = SyntheticSource(1200, [SyntheticField("u", 300, 1.1), SyntheticField("h", 800, 0.9, 0.8, 4.0),
                                SyntheticField("i", 500, 1.0, 0.9)], dense=2, seed=11)
FEATURES = [Feature("u").hash().mod(200), Feature("h").truncate(6, keep="last").mod(400),
            Feature("i").fill_missing(0).mod(300)]
BATCH, STEPS = 48, 3


def configs(dynamic: bool = False) -> list[recgo.EmbeddingBagConfig]:
    C = recgo.EmbeddingBagConfig
    dyn = recgo.DynamicConfig(min_count=2) if dynamic else None  # t_ui as a dynamic-ID table
    return [C(name="t_ui", embedding_dim=4, num_embeddings=300, feature_names=["u", "i"], dynamic=dyn),
            C(name="t_h", embedding_dim=8, num_embeddings=400, feature_names=["h"], pooling="mean")]


SPLITS = {"t_ui": [260, 40], "t_h": [0, 400]}  # row_wise splits of the tables' rows over the 2 ranks


def collection(sharding: str, fused: bool, dynamic: bool = False,
               row_splits: dict[str, list[int]] | None = None) -> ShardedEmbeddingBagCollection:
    return ShardedEmbeddingBagCollection(configs(dynamic), sharding, optimizer=optim.Adagrad(lr=0.1) if fused else None,
                                         seed=3, row_splits=row_splits)


def plain_copy(kjt: recgo.KeyedJaggedTensor) -> recgo.KeyedJaggedTensor:
    """The same batch in fresh memory: the collection does not recognise it as prepared."""
    return recgo.KeyedJaggedTensor(kjt.keys(), kjt.values().clone(), lengths=kjt.lengths().clone())


def train_step(ebc: ShardedEmbeddingBagCollection, kjt: recgo.KeyedJaggedTensor, opt: Any,
               g: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Forward, backward of Σ out·g, the torch optimizer's step (non-fused); the output and grads."""
    out = ebc(kjt).values()
    (out * g).sum().backward()
    grads = [s.weight.grad.clone() for s in ebc.embedding_bags.values() if s.weight.grad is not None]
    if opt is not None:
        opt.step()
        opt.zero_grad(set_to_none=True)
    return out.detach(), grads


def same_state(a: nn.Module, b: nn.Module, what: str) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), f"{what}: {k} differs"


def _equal_steps(rank: int, sharding: str, fused: bool, dynamic: bool = False,
                 row_splits: dict[str, list[int]] | None = None) -> dict[str, int]:
    """STEPS training steps of a twin pair: prepared batches to one, plain copies to the other."""
    plain, prep = (collection(sharding, fused, dynamic, row_splits) for _ in range(2))
    opts = [None, None] if fused else [torch.optim.SGD(c.parameters(), lr=0.2) for c in (plain, prep)]
    pipe = recgo.DataPipeline(SOURCE, FEATURES, BATCH, depth=2, shard=prep)
    gen = torch.Generator().manual_seed(rank)
    requested = 0
    for step, batch in zip(range(STEPS), pipe):
        kjt = batch.sparse
        assert _prepared.prepared_handle(kjt.values(), kjt.lengths()) is not None
        g = torch.randn(BATCH, 16, generator=gen)  # width: u, i (4 each), h (8)
        out_a, grads_a = train_step(plain, plain_copy(kjt), opts[0], g)
        out_b, grads_b = train_step(prep, kjt, opts[1], g)
        assert torch.equal(out_a, out_b), f"{sharding} fused={fused} step {step}: outputs differ"
        assert len(grads_a) == len(grads_b) == (0 if fused else 2)
        for ga, gb in zip(grads_a, grads_b):
            assert torch.equal(ga, gb), f"{sharding} fused={fused} step {step}: gradients differ"
        assert plain.last_traffic == prep.last_traffic, f"{sharding} fused={fused} step {step}: counters differ"
        same_state(plain, prep, f"{sharding} fused={fused} step {step}")
        requested += prep.traffic()["requested"]
    pipe.close()
    return {"requested": requested, "ids_sent": prep.traffic(total=True)["ids_intra"]}


def _fallbacks(rank: int) -> dict[str, Any]:
    """A prepared batch given to collections laid out otherwise than the one it was partitioned for,
    and one changed in place after preparation: each collection deduplicates and partitions it
    itself, so a training step equals the step on a plain copy of the batch (outputs, updated state)."""
    out: dict[str, Any] = {}
    mine, twin = collection("hash", True), collection("hash", True)
    pipe = recgo.DataPipeline(SOURCE, FEATURES, BATCH, depth=1, shard=mine)
    batch = next(pipe)
    g = torch.randn(BATCH, 16, generator=torch.Generator().manual_seed(rank))
    hier = lambda: ShardedEmbeddingBagCollection(configs(), "hash", mode="hierarchical", seed=3,  # noqa: E731
                                                 optimizer=optim.Adagrad(lr=0.1))
    pairs = {"row_wise": (collection("row_wise", True), collection("row_wise", True)), "mode": (hier(), hier())}
    batch.sparse.values()[0] = (batch.sparse.values()[0] + 1) % 200  # changed after preparation
    pairs["modified"] = (twin, mine)
    for name, (a, b) in pairs.items():
        want, _ = train_step(a, plain_copy(batch.sparse), None, g)
        got, _ = train_step(b, batch.sparse, None, g)
        assert torch.equal(want, got), f"{name}: outputs differ"
        same_state(a, b, name)
        out[name] = "equal"
    # partitioned for row-wise tables split unevenly, given to evenly split ones (whose owners differ)
    split_pipe = recgo.DataPipeline(SOURCE, FEATURES, BATCH, depth=1, shard=collection("row_wise", True,
                                                                                        row_splits=SPLITS))
    split_batch = next(split_pipe)
    a, b = collection("row_wise", True), collection("row_wise", True)
    want, _ = train_step(a, plain_copy(split_batch.sparse), None, g)
    got, _ = train_step(b, split_batch.sparse, None, g)
    assert torch.equal(want, got), "split: outputs differ"
    same_state(a, b, "split")
    out["split"] = "equal"
    split_pipe.close()
    try:
        recgo.DataPipeline(SOURCE, FEATURES, BATCH, shard=mine, tables=[{"name": "t_ui", "keys": ["u", "i"]}])
        out["tables"] = "accepted"
    except InvalidInputError as e:
        out["tables"] = str(e)
    pipe.close()
    # A pipeline without shard= gives batches with a dedup but no partition: the collection's own path.
    a, b = collection("hash", True), collection("hash", True)
    batch = next(recgo.DataPipeline(SOURCE, FEATURES, BATCH, depth=0, tables=recgo.pipeline.tables_of(b)))
    assert torch.equal(a(plain_copy(batch.sparse)).values(), b(batch.sparse).values())
    return out


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ebc = collection("table_wise", True)

    def forward(self, sparse: recgo.KeyedJaggedTensor, dense: torch.Tensor) -> torch.Tensor:
        return self.ebc(sparse).values().sum(1) + dense.sum(1)


def _train_pipeline(rank: int) -> dict[str, Any]:
    """TrainPipeline finds the sharded collection and partitions for it; it trains like a plain loop."""
    tp = recgo.TrainPipeline(_Model(), None, SOURCE, FEATURES, BATCH, depth=2)
    wired = tp.data._shard is tp.model.ebc  # noqa: SLF001
    losses = tp.run(STEPS, progress=False)
    ref = _Model()
    ref_losses = []
    for _, batch in zip(range(STEPS), recgo.DataPipeline(SOURCE, FEATURES, BATCH, depth=0)):
        loss = recgo.pipeline.bce_loss(ref(plain_copy(batch.sparse), batch.dense), batch.labels)
        loss.backward()
        ref_losses.append(float(loss))
    same_state(ref, tp.model, "TrainPipeline")
    tp.close()
    return {"wired": wired, "losses": losses, "ref_losses": ref_losses}


UNEVEN = SyntheticSource(1201, [SyntheticField("u", 300, 1.1), SyntheticField("h", 800, 0.9, 0.8, 4.0),
                                SyntheticField("i", 500, 1.0, 0.9)], dense=2, seed=12)


def _uneven_end(rank: int) -> dict[str, Any]:
    """1201 rows over 2 ranks in batches of 50: rank 0 has 13 batches (the last of 1 row), rank 1 has
    12. Without the per-step agreement rank 0's 13th step waited in its all-to-all until the timeout."""
    import warnings

    tp = recgo.TrainPipeline(_Model(), None, UNEVEN, FEATURES, 50, depth=2)
    counts = [len(list(recgo.DataPipeline(UNEVEN, FEATURES, 50, depth=0, rank=r, world_size=2))) for r in range(2)]
    t0 = time.monotonic()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        losses = tp.run(progress=False)
    tp.close()
    return {"counts": counts, "steps": len(losses), "unused": tp.unused_batches, "seconds": time.monotonic() - t0,
            "warnings": [str(w.message) for w in seen]}


def _own_sources(rank: int) -> dict[str, Any]:
    """Each rank reads a source of its own (rank=0, world_size=1: 300 and 150 rows) into one sharded
    collection: the ranks still agree on each step on the collection's world, so both stop at 3 steps
    (rank 1 returned after 3 while rank 0 waited in its 4th until the timeout), and rank 0 counts all
    3 batches it did not train on (as skip_bad can leave a rank; it counted only the one in hand)."""
    import warnings

    source = SyntheticSource(300 if rank == 0 else 150, [SyntheticField("u", 300, 1.1), SyntheticField("h", 800, 0.9),
                                                          SyntheticField("i", 500, 1.0)], dense=2, seed=20 + rank)
    tp = recgo.TrainPipeline(_Model(), None, source, FEATURES, 50, depth=1, rank=0, world_size=1)
    t0 = time.monotonic()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        losses = tp.run(progress=False)
    tp.close()
    return {"steps": len(losses), "unused": tp.unused_batches, "seconds": time.monotonic() - t0,
            "warnings": [str(w.message) for w in seen]}


class _DenseFirst(nn.Module):
    """A model called as TorchRec's DLRM is, forward(dense_features, sparse_features)."""

    def __init__(self) -> None:
        super().__init__()
        self.ebc = recgo.EmbeddingBagCollection(configs(), seed=3)
        self.proj = nn.Linear(2, 1)

    def forward(self, dense_features: torch.Tensor, sparse_features: Any) -> torch.Tensor:
        return self.ebc(sparse_features).values().sum(1) + self.proj(dense_features).squeeze(1)


def _dense_first_under_ddp(rank: int) -> int:
    """shard_model's DDP wrapper hides the forward's parameter names behind forward(*inputs): the
    pipeline called the model (sparse, dense) and torch raised inside it."""
    from recgo.distributed import shard_model

    model = shard_model(_DenseFirst(), "hash", optimizer=optim.SGD(lr=0.1), timeout=30)
    tp = recgo.TrainPipeline(model, torch.optim.SGD(model.parameters(), lr=0.1), SOURCE, FEATURES, BATCH, depth=1)
    steps = len(tp.run(2, progress=False))
    tp.close()
    return steps


def _world(rank: int, world: int) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for sharding in ("hash", "table_wise"):
        for fused in (True, False):
            res[f"{sharding}/{fused}"] = _equal_steps(rank, sharding, fused)
    res["dynamic/True"] = _equal_steps(rank, "hash", True, dynamic=True)
    res["row_wise/split"] = _equal_steps(rank, "row_wise", True, row_splits=SPLITS)
    res["fallbacks"] = _fallbacks(rank)
    res["train"] = _train_pipeline(rank)
    res["uneven"] = _uneven_end(rank)
    res["own_sources"] = _own_sources(rank)
    res["dense_first"] = _dense_first_under_ddp(rank)
    return res


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    tmp: Path = tmp_path_factory.mktemp("pipeline_shard")
    res = spawn(_world, 2, tmp, wait=180)
    for r, x in enumerate(res):
        assert "error" not in x, f"rank {r}: {x['error']}"
    return res


def test_prepared_partition_trains_bit_identically(world: list[dict[str, Any]]) -> None:
    for rank in world:
        for case in ("hash/True", "hash/False", "table_wise/True", "table_wise/False", "dynamic/True", "row_wise/split"):
            assert rank[case]["requested"] > 0, case  # the steps looked IDs up
    # the ranks exchanged IDs with each other (the partition sent some to the other rank)
    assert sum(r["hash/True"]["ids_sent"] for r in world) > 0


def test_batch_prepared_for_another_collection_or_changed_still_trains(world: list[dict[str, Any]]) -> None:
    for rank in world:
        fb = rank["fallbacks"]
        assert fb["row_wise"] == fb["mode"] == fb["modified"] == fb["split"] == "equal"
        assert "table \"t_h\" is not one of the tables to deduplicate" in fb["tables"]


def test_train_pipeline_partitions_for_its_sharded_collection(world: list[dict[str, Any]]) -> None:
    for rank in world:
        t = rank["train"]
        assert t["wired"]
        assert len(t["losses"]) == STEPS
        assert t["losses"] == t["ref_losses"]


def test_train_pipeline_ranks_stop_together_when_their_shares_differ(world: list[dict[str, Any]]) -> None:
    for rank, res in enumerate(world):
        u = res["uneven"]
        assert u["counts"] == [13, 12], u  # the shares really differ by a batch
        assert u["steps"] == 12 and u["seconds"] < 30, u  # both stopped at rank 1's end, no timeout
        assert u["unused"] == (1 if rank == 0 else 0), u
        assert any("another rank ran out of batches at step 12" in w for w in u["warnings"]) == (rank == 0), u


def test_ranks_reading_their_own_sources_still_stop_together(world: list[dict[str, Any]]) -> None:
    for rank, res in enumerate(world):
        own = res["own_sources"]
        assert own["steps"] == 3 and own["seconds"] < 30, own
        assert own["unused"] == (3 if rank == 0 else 0), own
        assert any("3 batch(es) of 150 samples unused" in w for w in own["warnings"]) == (rank == 0), own


def test_a_dense_first_model_under_shard_models_ddp_trains(world: list[dict[str, Any]]) -> None:
    assert [res["dense_first"] for res in world] == [2, 2]
