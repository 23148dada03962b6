"""A TorchRec DistributedModelParallel's state dict loads into the recgo model where this rank holds a
table whole (its ShardedTensor made plain), and names the entry and the way to gather it where other
ranks hold shards: torch's copy raised a bare RuntimeError ("torch function 'is_complex' ... not
supported for ShardedTensor"), and ``from_torchrec`` of the DMP model says it is sharded. World of 2: table ``a`` table-wise on rank 1, ``b`` row-wise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import recgo
from spawned import ok, spawn


def _load_dmp_state(rank: int, world: int) -> dict[str, Any]:
    import torchrec
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan, row_wise, table_wise
    from torchrec.distributed.types import ShardingPlan

    cfgs = [torchrec.EmbeddingBagConfig(name=n, embedding_dim=4, num_embeddings=10, feature_names=[f"f{n}"])
            for n in ("a", "b")]
    model = torch.nn.ModuleDict({"ebc": torchrec.EmbeddingBagCollection(tables=cfgs, device=torch.device("meta"))})
    plan = ShardingPlan({"ebc": construct_module_sharding_plan(
        model["ebc"], {"a": table_wise(rank=1), "b": row_wise()}, local_size=world, world_size=world,
        device_type="cpu")})
    dmp = DistributedModelParallel(model, device=torch.device("cpu"), plan=plan)
    state = {k.removeprefix("module."): v for k, v in dmp.state_dict().items()}
    out: dict[str, Any] = {"kinds": sorted({type(v).__name__ for v in state.values()})}

    def into_recgo(keys: list[str]) -> Any:
        mine = torch.nn.ModuleDict({"ebc": recgo.EmbeddingBagCollection(
            [recgo.EmbeddingBagConfig(10, 4, n, [f"f{n}"]) for n in ("a", "b")])})
        before = mine["ebc"].embedding_bags["a"].weight.detach().clone()
        try:
            mine.load_state_dict({k: state[k] for k in keys}, strict=False)
        except recgo.InvalidInputError as exc:
            return str(exc), torch.equal(before, mine["ebc"].embedding_bags["a"].weight.detach())
        return mine["ebc"].embedding_bags["a"].weight.detach().clone()

    out["a"] = into_recgo(["ebc.embedding_bags.a.weight"])
    out["a local"] = [s.tensor.clone() for s in state["ebc.embedding_bags.a.weight"].local_shards()]
    out["b"] = into_recgo(["ebc.embedding_bags.b.weight"])
    try:
        recgo.from_torchrec(dmp)
    except recgo.InvalidInputError as exc:
        out["convert"] = str(exc)
    return out


def test_a_dmp_state_dict_loads_where_whole_and_names_the_shards_where_not(tmp_path: Path) -> None:
    pytest.importorskip("torchrec")
    res = spawn(_load_dmp_state, 2, tmp_path)
    ok(res)
    for r in res:  # every rank: b's rows are split over both
        assert r["kinds"] == ["ShardedTensor"]
        assert isinstance(r["b"], tuple) and "'ebc.embedding_bags.b.weight' is a ShardedTensor" in r["b"][0]
        assert "1 of its shards on other ranks" in r["b"][0] and r["b"][1]  # nothing loaded
        assert "sharded by DistributedModelParallel: convert the unsharded model" in r["convert"]
    assert isinstance(res[0]["a"], tuple) and "1 of its shards on other ranks" in res[0]["a"][0]
    torch.testing.assert_close(res[1]["a"], res[1]["a local"][0], rtol=0, atol=0)  # rank 1 holds it whole
