"""Plans made for another world are refused on a world of 2: a recgo planner Plan for 1 or 8 GPUs (or
for other nodes / GPUs per node than the collection is given), and a TorchRec ShardingPlan for world
4 whose row-wise and data-parallel tables span ranks 0..3. Before, both were applied: every table
went to rank 0, or row-wise rows were split as if for 2 ranks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import recgo
from recgo import planner as P
from spawned import ok, spawn


def _tables() -> list[recgo.EmbeddingBagConfig]:
    return [recgo.EmbeddingBagConfig(20, 4, f"t{i}", [f"f{i}"]) for i in range(3)]


def _plan(nodes: int, gpus_per_node: int) -> P.Plan:
    torch.manual_seed(0)
    batches = [{t.name: torch.randint(0, t.num_embeddings, (32,)) for t in _tables()} for _ in range(3)]
    prof = P.profile(batches, [P.TableSpec(t.name, t.num_embeddings, t.embedding_dim) for t in _tables()],
                     sample_rate=1.0, min_lookups=0)
    return P.plan(prof, P.Topology(nodes=nodes, gpus_per_node=gpus_per_node), "greedy_size")


def _torchrec_plan(per_param: dict[str, Any], world: int) -> Any:
    import torchrec
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan
    from torchrec.distributed.types import ShardingPlan

    ebc = torchrec.EmbeddingBagCollection(tables=[torchrec.EmbeddingBagConfig(
        name=t.name, embedding_dim=4, num_embeddings=20, feature_names=list(t.feature_names)) for t in _tables()],
        device=torch.device("meta"))
    return ShardingPlan({"ebc": construct_module_sharding_plan(ebc, per_param, local_size=world, world_size=world,
                                                               device_type="cpu")})


def _refusals(rank: int, world: int) -> dict[str, Any]:
    from torchrec.distributed.sharding_plan import data_parallel, row_wise, table_wise

    from recgo.distributed import ShardedEmbeddingBagCollection, shard_model

    out: dict[str, Any] = {}

    def refused(name: str, fn: Any) -> None:
        try:
            fn()
            out[name] = "accepted"
        except recgo.InvalidInputError as exc:
            out[name] = str(exc)

    def model() -> torch.nn.Module:
        return torch.nn.ModuleDict({"ebc": recgo.EmbeddingBagCollection(_tables(), seed=0)})

    for nodes, per in ((1, 1), (2, 4)):
        refused(f"plan {nodes}x{per}", lambda: ShardedEmbeddingBagCollection(_tables(), "plan", plan=_plan(nodes, per),
                                                                             timeout=30))
    refused("plan 2x1 given 1 node", lambda: ShardedEmbeddingBagCollection(
        _tables(), "plan", plan=_plan(2, 1), nodes=1, ranks_per_node=2, timeout=30))
    good = ShardedEmbeddingBagCollection(_tables(), "plan", plan=_plan(1, 2), nodes=1, timeout=30)
    out["good plan ranks"] = [r for _, r in good._kinds]
    out["plan ranks"] = [_plan(1, 2).table(t.name)["rank"] for t in _tables()]
    refused("torchrec row-wise world 4", lambda: shard_model(
        model(), plan=_torchrec_plan({"t0": row_wise(), "t1": row_wise(), "t2": row_wise()}, 4), timeout=30, ddp=False))
    refused("torchrec data-parallel world 4", lambda: shard_model(
        model(), plan=_torchrec_plan({"t0": data_parallel(), "t1": table_wise(rank=0), "t2": table_wise(rank=1)}, 4),
        timeout=30, ddp=False))
    import warnings

    with warnings.catch_warnings(record=True) as even:
        warnings.simplefilter("always")
        sm = shard_model(model(), plan=_torchrec_plan({"t0": row_wise(), "t1": table_wise(rank=1),
                                                       "t2": data_parallel()}, 2), timeout=30, ddp=False)
    out["world-2 plan rows of t0"] = sm["ebc"].local_ids("t0").tolist()
    out["world-2 plan kinds"] = sm["ebc"]._sharding_names
    out["even split warnings"] = [str(w.message) for w in even if "splits row-wise" in str(w.message)]
    with warnings.catch_warnings(record=True) as uneven:  # TorchRec's sizes_placement: 15 rows and 5
        warnings.simplefilter("always")
        sm = shard_model(model(), plan=_torchrec_plan({"t0": row_wise(([15, 5], "cpu")), "t1": row_wise(),
                                                       "t2": row_wise()}, 2), timeout=30, ddp=False)
    out["uneven split warnings"] = [str(w.message) for w in uneven if "splits row-wise" in str(w.message)]
    out["uneven plan rows of t0"] = sm["ebc"].local_ids("t0").tolist()
    return out


def test_plans_for_another_world_are_refused(tmp_path: Path) -> None:
    pytest.importorskip("torchrec")
    res = spawn(_refusals, 2, tmp_path)
    ok(res)
    for rank, r in enumerate(res):
        assert r["plan 1x1"].startswith("plan: the plan was made for 1 node(s) × 1 GPU(s) = 1 GPUs, but the world "
                                        "has 2 ranks")
        assert "2 node(s) × 4 GPU(s) = 8 GPUs, but the world has 2 ranks" in r["plan 2x4"]
        assert r["plan 2x1 given 1 node"].startswith("plan: the plan was made for 2 node(s) × 1 GPU(s), but the "
                                                     "collection is given nodes=1")
        assert r["good plan ranks"] == r["plan ranks"]
        assert ("the TorchRec plan shards table 't0' row_wise over ranks [0, 1, 2, 3], but recgo's row_wise tables "
                "span ranks [0, 1]") in r["torchrec row-wise world 4"]
        assert "table 't0' data_parallel over ranks [0, 1, 2, 3]" in r["torchrec data-parallel world 4"]
        assert r["world-2 plan rows of t0"] == list(range(10 * rank, 10 * rank + 10))
        assert r["world-2 plan kinds"] == ["row_wise", "table_wise", "data_parallel"]
        # a row-wise split other than recgo's (and TorchRec's default) even one is applied evenly, with a warning
        assert r["even split warnings"] == []
        assert len(r["uneven split warnings"]) == 1, r
        assert "splits row-wise table 't0' as (rank, first row, rows)" in r["uneven split warnings"][0]
        assert "recgo splits row-wise tables evenly, [(0, 0, 10), (1, 10, 10)]" in r["uneven split warnings"][0]
        assert r["uneven plan rows of t0"] == list(range(10 * rank, 10 * rank + 10))
