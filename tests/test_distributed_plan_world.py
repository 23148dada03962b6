"""Plans made for another world are refused on a world of 2: a recgo planner Plan for 1 or 8 GPUs (or
for other nodes / GPUs per node than the collection is given), and a TorchRec ShardingPlan for world
4 whose row-wise and data-parallel tables span ranks 0..3. Before, both were applied: every table
went to rank 0, or row-wise rows were split as if for 2 ranks. A world-2 TorchRec plan's uneven
row-wise split (15 rows and 5) is honoured (it was applied evenly, with a warning), and trains as the
single-process collection does; row-wise shards recgo cannot hold are refused naming the table, and
so is a planner Plan made for other table sizes (it was applied)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

import recgo
from recgo import planner as P
from sharded_checks import check_steps
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
    refused("plan of other sizes", lambda: ShardedEmbeddingBagCollection(
        [recgo.EmbeddingBagConfig(40, 4, f"t{i}", [f"f{i}"]) for i in range(3)], "plan", plan=_plan(1, 2), nodes=1,
        timeout=30))
    good = ShardedEmbeddingBagCollection(_tables(), "plan", plan=_plan(1, 2), nodes=1, timeout=30)
    out["good plan ranks"] = [r for _, r in good._kinds]
    out["plan ranks"] = [_plan(1, 2).table(t.name)["rank"] for t in _tables()]
    refused("torchrec row-wise world 4", lambda: shard_model(
        model(), plan=_torchrec_plan({"t0": row_wise(), "t1": row_wise(), "t2": row_wise()}, 4), timeout=30, ddp=False))
    refused("torchrec data-parallel world 4", lambda: shard_model(
        model(), plan=_torchrec_plan({"t0": data_parallel(), "t1": table_wise(rank=0), "t2": table_wise(rank=1)}, 4),
        timeout=30, ddp=False))
    sm = shard_model(model(), plan=_torchrec_plan({"t0": row_wise(), "t1": table_wise(rank=1),
                                                   "t2": data_parallel()}, 2), timeout=30, ddp=False)
    out["world-2 plan rows of t0"] = sm["ebc"].local_ids("t0").tolist()
    out["world-2 plan kinds"] = sm["ebc"]._sharding_names
    out["world-2 plan splits"] = sm["ebc"].row_splits()
    uneven = _torchrec_plan({"t0": row_wise(([15, 5], "cpu")), "t1": row_wise(), "t2": row_wise()}, 2)
    sm = shard_model(model(), plan=uneven, timeout=30, ddp=False, gradient_division=False)
    out["uneven plan rows"] = {t.name: sm["ebc"].local_ids(t.name).tolist() for t in _tables()}
    out["uneven plan splits"] = sm["ebc"].row_splits()
    check_steps(sm["ebc"], model()["ebc"], _tables(), rank, world, "uneven TorchRec plan")
    out["uneven plan trains as one process"] = True
    refused("row_splits with a plan", lambda: shard_model(model(), plan=uneven, row_splits={"t0": [10, 10]},
                                                          timeout=30, ddp=False))
    refused("table_ranks with a plan", lambda: shard_model(model(), plan=uneven, table_ranks={"t1": 1},
                                                           timeout=30, ddp=False))
    for what, edit in (("rows out of rank order", lambda sh: (sh[0].shard_offsets.__setitem__(0, 5),
                                                              sh[1].shard_offsets.__setitem__(0, 0))),
                       ("a gap", lambda sh: sh[1].shard_offsets.__setitem__(0, 16)),
                       ("columns split", lambda sh: sh[0].shard_sizes.__setitem__(1, 2))):
        bad = copy.deepcopy(uneven)
        edit(bad.plan["ebc"]["t0"].sharding_spec.shards)
        refused(f"torchrec {what}", lambda: shard_model(model(), plan=bad, timeout=30, ddp=False))
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
        assert r["plan of other sizes"] == ("table 't0' has 40 rows of dim 4, but the plan was made for 20 rows of "
                                            "dim 4: plan these tables")
        assert r["good plan ranks"] == r["plan ranks"]
        assert ("the TorchRec plan shards table 't0' row_wise over ranks [0, 1, 2, 3], but recgo's row_wise tables "
                "span ranks [0, 1]") in r["torchrec row-wise world 4"]
        assert "table 't0' data_parallel over ranks [0, 1, 2, 3]" in r["torchrec data-parallel world 4"]
        assert r["world-2 plan rows of t0"] == list(range(10 * rank, 10 * rank + 10))
        assert r["world-2 plan kinds"] == ["row_wise", "table_wise", "data_parallel"]
        assert r["world-2 plan splits"] == {"t0": (10, 10)}  # the plan's, which is recgo's even one
        # the plan's uneven split is the one applied: rank 0 holds rows 0..14, rank 1 rows 15..19
        assert r["uneven plan splits"] == {"t0": (15, 5), "t1": (10, 10), "t2": (10, 10)}
        assert r["uneven plan rows"]["t0"] == (list(range(15)) if rank == 0 else list(range(15, 20)))
        assert r["uneven plan rows"]["t1"] == list(range(10 * rank, 10 * rank + 10))
        assert r["uneven plan trains as one process"]
        assert "row_splits= and a TorchRec plan" in r["row_splits with a plan"]
        assert "table_ranks= and a TorchRec plan: the plan puts each table-wise table" in r["table_ranks with a plan"]
        for what in ("rows out of rank order", "a gap"):
            assert ("the TorchRec plan's shards of row-wise table 't0', as (rank, first row, rows)"
                    in r[f"torchrec {what}"]), r[f"torchrec {what}"]
            assert "are not contiguous rows in rank order covering its 20 rows" in r[f"torchrec {what}"]
        assert ("the TorchRec plan shards row-wise table 't0' at offsets [0, 0], sizes [15, 2]: not whole rows of its "
                "4 columns") in r["torchrec columns split"], r["torchrec columns split"]
