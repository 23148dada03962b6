"""``torch.distributed.checkpoint`` across world sizes and shardings, as TorchRec users reshard with
it: a world of 2 ranks saves a model with every sharding kind and a dynamic-ID table, then loads it
(``recgo.distributed.DCPLoadPlanner``) under other shardings on the same world and on one rank, and
a checkpoint of an unsharded collection (recgo's through DCP, TorchRec's state dict directly) loads
into the sharded one (a dynamic table's too), and so does TorchRec's DistributedModelParallel's. Every table's rows, optimizer state and step arrive bit for bit, the reloaded
collection trains on as the single-process collection with the saved state does, and an incomplete
set of shards is refused by name. Before, only the saving world and sharding loaded a DCP checkpoint;
other ranks' entries were refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

import recgo
from recgo.modules import optim
from sharded_batches import configs
from sharded_checks import check_steps
from spawned import one_rank, spawn

DYN = recgo.EmbeddingBagConfig(80, 4, "dy", ["y1"], dynamic=recgo.DynamicConfig())
SHARDING = {"th": "hash", "tt": "table_wise", "tr": "row_wise", "td": "data_parallel", "tp": "row_wise"}
OTHER = {"th": "row_wise", "tt": "hash", "tr": "table_wise", "td": "hash", "tp": "data_parallel"}


def _opt() -> Any:
    return optim.Adagrad(lr=0.2)


def _pooled(sharding: dict[str, str], seed: int, row_splits: dict[str, list[int]] | None = None) -> Any:
    from recgo.distributed import ShardedEmbeddingBagCollection

    return ShardedEmbeddingBagCollection(configs(), sharding, optimizer=_opt(), seed=seed, row_splits=row_splits,
                                         timeout=60)


def _dynamic(sharding: str) -> Any:
    from recgo.distributed import ShardedEmbeddingBagCollection

    return ShardedEmbeddingBagCollection([DYN], {"dy": sharding}, optimizer=_opt(), seed=0, timeout=60)


NAMES = ("ebc", "dyn", "seq")
SEQ = [recgo.EmbeddingConfig(33, 3, "sq", ["s1"])]


def _model(sharding: dict[str, str], dyn: str, seed: int) -> torch.nn.ModuleDict:
    """A pooled collection with every sharding kind, a dynamic-ID table and a sequence collection
    (table-wise where the pooled one's tables keep ``sharding``, row-wise otherwise)."""
    from recgo.distributed import ShardedEmbeddingCollection

    seq = ShardedEmbeddingCollection(SEQ, "table_wise" if sharding == SHARDING else "row_wise", optimizer=_opt(), seed=seed,
                                     timeout=60)
    return torch.nn.ModuleDict({"ebc": _pooled(sharding, seed), "dyn": _dynamic(dyn), "seq": seq})


def tables(coll: Any) -> dict[str, tuple[torch.Tensor, ...]]:
    """Every table of a sharded collection as (IDs sorted, their rows, optimizer state, step), from
    every rank's shard (a collective; the same on every rank)."""
    out = {}
    for c in coll._configs:
        shard = coll.embedding_bags[c.name]
        ids = coll.local_ids(c.name)
        at = coll.locate(c.name, ids)  # a dynamic shard's rows in use need not be its first
        mine = (ids, shard.weight.detach()[at].clone(), shard.optimizer_state[at].clone())
        parts: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(parts, mine)
        ids = torch.cat([p[0] for p in parts])
        order = torch.argsort(ids)
        ids, first = ids[order], torch.ones(len(ids), dtype=torch.bool)
        first[1:] = ids[1:] != ids[:-1]  # a replicated table's rows come once per rank: keep one
        out[c.name] = (ids[first], torch.cat([p[1] for p in parts])[order][first],
                       torch.cat([p[2] for p in parts])[order][first], shard.optimizer_step.clone())
    return out


def _train(model: torch.nn.ModuleDict, rank: int, world: int, steps: int = 2) -> None:
    from sharded_batches import global_batch, local_batch

    for step in range(steps):
        kjt = local_batch(global_batch(step, world, cfgs=configs()), rank)
        dyn = recgo.KeyedJaggedTensor(["y1"], torch.randint(0, 10_000, (12,), generator=torch.Generator().manual_seed(step)),
                                      lengths=torch.full((4,), 3))
        seq = model["seq"](recgo.KeyedJaggedTensor(["s1"], dyn.values() % 33, lengths=dyn.lengths()))["s1"].values()
        (model["ebc"](kjt).values().sum() + model["dyn"](dyn).values().square().sum() + seq.square().sum()).backward()


def _load(model: torch.nn.Module, path: str, **kw: Any) -> None:
    import torch.distributed.checkpoint as dcp

    from recgo.distributed import DCPLoadPlanner

    sd = {"model": model.state_dict()}
    dcp.load(sd, checkpoint_id=path, planner=DCPLoadPlanner(**kw))
    model.load_state_dict(sd["model"])


def _same(got: dict[str, tuple[torch.Tensor, ...]], want: dict[str, tuple[torch.Tensor, ...]], what: str) -> None:
    assert got.keys() == want.keys(), what
    for name in want:
        for i, (a, b) in enumerate(zip(got[name], want[name])):
            assert a.shape == b.shape and torch.equal(a, b), f"{what}: table {name!r}, entry {i}"


def _world(rank: int, world: int, folder: str) -> dict[str, Any]:
    import torch.distributed.checkpoint as dcp

    from recgo.distributed import DCPLoadPlanner, ShardedEmbeddingBagCollection
    from recgo.errors import InvalidInputError

    out: dict[str, Any] = {}
    saved_model = _model(SHARDING, "hash", seed=3)
    _train(saved_model, rank, world)
    saved = {n: tables(saved_model[n]) for n in NAMES}
    dcp.save({"model": saved_model.state_dict()}, checkpoint_id=f"{folder}/dcp2")
    dcp.save({"model": saved_model["ebc"].state_dict()}, checkpoint_id=f"{folder}/dcp2-ebc")
    dcp.save(saved_model["ebc"].state_dict(), checkpoint_id=f"{folder}/dcp2-flat")
    torch.save(saved_model.state_dict(), f"{folder}/sd-{rank}.pt")
    dist.barrier()

    # other shardings on this world: the fixed tables' shard sizes change, so the planner reads every
    # rank's entries of each; the dynamic table's entries (its rows in use) show no change of layout:
    # its own rows are read and one rank at least refuses them, naming all_shards=True, which reads all
    try:
        _load(_model(OTHER, "table_wise", seed=9), f"{folder}/dcp2")
        out["dynamic re-sharded"] = "accepted"
    except InvalidInputError as exc:
        out["dynamic re-sharded"] = str(exc)
    moved = _model(OTHER, "table_wise", seed=9)
    _load(moved, f"{folder}/dcp2", all_shards=True)
    _same(tables(moved["ebc"]), saved["ebc"], "other shardings")
    _same(tables(moved["dyn"]), saved["dyn"], "dynamic, table-wise")
    _same(tables(moved["seq"]), saved["seq"], "sequence, row-wise")
    # a fixed table re-sharded into shards of the same sizes shows no change to the planner: its own
    # rows are read and refused by name, and all_shards=True reads them all
    counts = torch.bincount(saved_model["ebc"].owners("th", torch.arange(61)), minlength=world).tolist()
    same_sizes = {"sharding": {**SHARDING, "th": "row_wise"}, "row_splits": {"th": counts}}
    try:
        _load(_pooled(**same_sizes, seed=9), f"{folder}/dcp2-ebc")
        out["same sizes"] = "accepted"
    except InvalidInputError as exc:
        out["same sizes"] = str(exc)
    resplit = _pooled(**same_sizes, seed=9)
    _load(resplit, f"{folder}/dcp2-ebc", all_shards=True)
    _same(tables(resplit), saved["ebc"], "same sizes, all_shards")
    # a flat state dict cannot take in other ranks' entries (DCP hands back the keys it was given)
    try:
        dcp.load(_pooled(OTHER, seed=9).state_dict(), checkpoint_id=f"{folder}/dcp2-flat",
                 planner=DCPLoadPlanner())
        out["flat"] = "accepted"
    except BaseException as exc:  # (DCP wraps the planner's error in its CheckpointException)
        out["flat"] = str(exc)
    # the same world and sharding reads its own entries only, as the default planner would
    again = _model(SHARDING, "hash", seed=5)
    _load(again, f"{folder}/dcp2")
    _same(tables(again["ebc"]), saved["ebc"], "the same sharding")
    _same(tables(again["dyn"]), saved["dyn"], "dynamic, the same sharding")

    # it trains on as the single-process collection holding the saved state does
    ref = recgo.EmbeddingBagCollection(configs(), optimizer=_opt(), seed=0)
    with torch.no_grad():
        for name, (ids, w, s, step) in saved["ebc"].items():
            ref.embedding_bags[name].weight[ids] = w
            ref.embedding_bags[name].optimizer_state[ids] = s
            ref.embedding_bags[name].optimizer_step.copy_(step)
    check_steps(moved["ebc"], ref, configs(), rank, world, "reloaded under other shardings", steps=2)

    # every rank's plain state dicts, merged, load without DCP; one rank's alone is refused
    merged: dict[str, Any] = {}
    for r in range(world):
        merged |= torch.load(f"{folder}/sd-{r}.pt")
    plain = _model(OTHER, "table_wise", seed=9)
    plain.load_state_dict(merged)
    _same(tables(plain["ebc"]), saved["ebc"], "merged state dicts")
    _same(tables(plain["dyn"]), saved["dyn"], "merged state dicts, dynamic")
    _same(tables(plain["seq"]), saved["seq"], "merged state dicts, sequence")
    try:
        _model(OTHER, "table_wise", seed=9).load_state_dict(torch.load(f"{folder}/sd-{rank}.pt"))
        out["one rank's"] = "accepted"
    except InvalidInputError as exc:
        out["one rank's"] = str(exc)

    # an unsharded collection's DCP checkpoint (written by the parent) and its plain state dict
    unsharded = recgo.EmbeddingBagCollection(configs(), optimizer=_opt(), seed=21)
    for how in ("dcp", "state dict"):
        sh = _pooled(OTHER, seed=9)
        if how == "dcp":
            _load(sh, f"{folder}/dcp-unsharded")
        else:
            sh.load_state_dict(unsharded.state_dict())
        for c in configs():
            ids = sh.local_ids(c.name)
            got, want = sh.embedding_bags[c.name], unsharded.embedding_bags[c.name]
            assert torch.equal(got.weight.detach(), want.weight.detach()[ids]), f"unsharded {how}: {c.name}"
            assert torch.equal(got.optimizer_state, want.optimizer_state[ids]), f"unsharded {how}: {c.name} state"
    # a smaller table's plain state dict, whose shape is this rank's shard's, is refused (it loaded
    # the other table's rows 0..29 into rank 1's rows 30..59, silently)
    small = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(30, 4, "w", ["fw"])], optimizer=_opt(), seed=2)
    wide = ShardedEmbeddingBagCollection([recgo.EmbeddingBagConfig(60, 4, "w", ["fw"])], "row_wise", optimizer=_opt(),
                                         timeout=60)
    try:
        wide.load_state_dict(small.state_dict())
        out["smaller table"] = "accepted"
    except InvalidInputError as exc:
        out["smaller table"] = str(exc)
    # optimizer state this collection has no place for is reported unexpected, as torch reports it
    sgd = ShardedEmbeddingBagCollection(configs(), OTHER, optimizer=optim.SGD(lr=0.1), timeout=60)
    res = sgd.load_state_dict({k[4:]: v for k, v in merged.items() if k.startswith("ebc.")}, strict=False)
    out["unexpected"] = sorted(res.unexpected_keys)
    # an unsharded dynamic table's checkpoint: each rank admits the IDs it owns, rows and state as saved
    want = _dynamic_rows(_unsharded_dynamic())
    for how in ("dcp", "state dict"):
        sh = _dynamic("hash")
        if how == "dcp":
            _load(sh, f"{folder}/dcp-unsharded-dyn")
        else:
            sh.load_state_dict(torch.load(f"{folder}/sd-unsharded-dyn.pt"))
        got = tables(sh)["dy"]
        for i in range(3):
            assert torch.equal(got[i], want[i]), f"unsharded dynamic, {how}: entry {i}"
        assert len(sh.local_ids("dy")) < len(want[0]), "each rank holds only the IDs it owns"
    out["torchrec"] = _torchrec_dmp(folder)
    out["saved"] = {n: {k: v for k, v in t.items()} for n, t in saved.items()} if rank == 0 else {}
    return out


def _torchrec_dmp(folder: str) -> bool:
    """A TorchRec DistributedModelParallel model's DCP checkpoint (table-wise and column-wise
    ShardedTensors) loads into recgo's row-wise collection: each rank's rows are the DMP tables'."""
    import torch.distributed.checkpoint as dcp
    import torchrec
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.planner.types import ParameterConstraints

    from recgo.distributed import DCPLoadPlanner, ShardedEmbeddingBagCollection

    kinds = {"a": "table_wise", "b": "column_wise", "c": "table_wise"}
    tables = [torchrec.EmbeddingBagConfig(num_embeddings=50, embedding_dim=4, name=n, feature_names=[f"f{n}"])
              for n in kinds]
    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"ebc": torchrec.EmbeddingBagCollection(tables=tables, device=torch.device("meta"))})
    planner = EmbeddingShardingPlanner(topology=Topology(world_size=dist.get_world_size(), compute_device="cpu"),
                                       constraints={n: ParameterConstraints(sharding_types=[k]) for n, k in kinds.items()})
    plan = planner.collective_plan(model, [EmbeddingBagCollectionSharder()], dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(model, device=torch.device("cpu"), plan=plan)
    sd = dmp.state_dict()
    dcp.save({"model": sd}, checkpoint_id=f"{folder}/dmp")
    whole = {}
    for n in kinds:  # the DMP tables, assembled from every rank's shards
        t = torch.zeros(50, 4)
        for shard in sd[f"ebc.embedding_bags.{n}.weight"].local_shards():
            (r, c), (h, w) = shard.metadata.shard_offsets, shard.tensor.shape
            t[r:r + h, c:c + w] = shard.tensor
        dist.all_reduce(t)
        whole[n] = t
    mine = torch.nn.ModuleDict({"ebc": ShardedEmbeddingBagCollection(
        [recgo.EmbeddingBagConfig(50, 4, n, [f"f{n}"]) for n in kinds], "row_wise", optimizer=_opt(), timeout=60)})
    dcp.load({"model": mine}, checkpoint_id=f"{folder}/dmp", planner=DCPLoadPlanner())
    return all(torch.equal(mine["ebc"].embedding_bags[n].weight.detach(), whole[n][mine["ebc"].local_ids(n)])
               and bool(whole[n].abs().sum() > 0) for n in kinds)


def _unsharded_dynamic() -> Any:
    """An unsharded dynamic-ID collection after a few steps (the same on every call)."""
    coll = recgo.EmbeddingBagCollection([DYN], optimizer=_opt(), seed=4)
    for step in range(3):
        ids = torch.randint(0, 10_000, (40,), generator=torch.Generator().manual_seed(100 + step))
        coll(recgo.KeyedJaggedTensor(["y1"], ids, lengths=torch.full((8,), 5))).values().square().sum().backward()
    return coll


def _dynamic_rows(coll: Any) -> tuple[torch.Tensor, ...]:
    """An unsharded dynamic table's IDs in use (sorted) with their rows and optimizer state."""
    from recgo import dynamic

    e = dynamic.export_state(coll, "dy")
    ids = torch.sort(e["dynamic_ids"][e["dynamic_counts"] > 0]).values
    at = dynamic.lookup(coll, "dy", ids)
    holder = coll.embedding_bags["dy"]
    return ids, holder.weight.detach()[at], holder.optimizer_state[at]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Path]:
    import torch.distributed.checkpoint as dcp

    tmp: Path = tmp_path_factory.mktemp("dcp")
    unsharded = recgo.EmbeddingBagCollection(configs(), optimizer=_opt(), seed=21)
    dcp.save({"model": unsharded.state_dict()}, checkpoint_id=tmp / "dcp-unsharded", no_dist=True)
    dyn = _unsharded_dynamic()
    dcp.save({"model": dyn.state_dict()}, checkpoint_id=tmp / "dcp-unsharded-dyn", no_dist=True)
    torch.save(dyn.state_dict(), tmp / "sd-unsharded-dyn.pt")
    res = spawn(_world, 2, tmp, str(tmp), wait=300)
    for r, x in enumerate(res):
        assert "error" not in x, f"rank {r}: {x['error']}"
    return res, tmp


def test_dcp_checkpoints_load_under_other_shardings(world: tuple[list[dict[str, Any]], Path]) -> None:
    """(Rows, state and steps are compared in the ranks, and the reloaded collection's training.)"""
    res, _ = world
    for r in res:
        assert "all_shards=True" in r["same sizes"], r["same sizes"]
        assert r["torchrec"] is True
        assert "pass the model's state nested" in r["flat"], r["flat"][-300:]
        assert "under the plain names with shape (30, 4), the table's is (60, 4)" in r["smaller table"], r["smaller table"]
        assert r["unexpected"] == sorted(f"embedding_bags.{c.name}.optimizer_state" for c in configs()), r["unexpected"]
        assert "holds table" in r["one rank's"] and "not every rank's of one world" in r["one rank's"], r["one rank's"]
    assert any("all_shards=True" in r["dynamic re-sharded"] for r in res), [r["dynamic re-sharded"] for r in res]


def test_dcp_checkpoint_of_two_ranks_loads_on_one(world: tuple[list[dict[str, Any]], Path]) -> None:
    res, tmp = world
    saved = res[0]["saved"]
    with one_rank(tmp):
        one = _model({n: "hash" for n in SHARDING}, "hash", seed=1)
        _load(one, str(tmp / "dcp2"))
        for n in NAMES:
            for name, want in saved[n].items():
                got = tables(one[n])[name]
                for i, (a, b) in enumerate(zip(got, want)):
                    assert torch.equal(a, b), f"{n} {name} entry {i}"


def test_torchrec_state_dict_loads_into_a_sharded_collection(tmp_path: Path) -> None:
    """TorchRec's EmbeddingBagCollection holds the weights alone: they are spread by ID, and the fused
    optimizer's state stays as it was, as the unsharded collection loads such a state dict."""
    torchrec = pytest.importorskip("torchrec")
    from recgo.distributed import ShardedEmbeddingBagCollection

    tr = torchrec.EmbeddingBagCollection(tables=[torchrec.EmbeddingBagConfig(
        num_embeddings=c.num_embeddings, embedding_dim=c.embedding_dim, name=c.name, feature_names=c.feature_names)
        for c in configs()])
    with one_rank(tmp_path):
        sh = ShardedEmbeddingBagCollection(configs(), {"th": "table_wise", "tt": "hash", "tr": "row_wise", "td": "hash",
                                                       "tp": "table_wise"}, optimizer=_opt(), seed=1)
        state = {c.name: sh.embedding_bags[c.name].optimizer_state.clone() for c in configs()}
        sh.load_state_dict(tr.state_dict())
        for c in configs():
            ids = sh.local_ids(c.name)
            assert torch.equal(sh.embedding_bags[c.name].weight.detach(), tr.embedding_bags[c.name].weight.detach()[ids])
            assert torch.equal(sh.embedding_bags[c.name].optimizer_state, state[c.name])
        half = {k: v for k, v in tr.state_dict().items() if ".th." not in k}
        res = sh.load_state_dict(half, strict=False)
        weights = [k for k in res.missing_keys if k.endswith(".weight")]
        assert weights == ["embedding_bags.th.weight"] and not res.unexpected_keys, res  # (and, as unsharded, the optimizer's)


def test_torch_state_dict_utilities_walk_the_rank_tagged_names(tmp_path: Path) -> None:
    """torch.distributed.checkpoint.state_dict's get_model_state_dict / set_model_state_dict (the state
    dict API of DCP's docs) walk every key's names as attributes; the rank tag and the entries made at
    save time raised AttributeError."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    with one_rank(tmp_path):
        model = _model(SHARDING, "hash", seed=3)
        _train(model, 0, 1)
        sd = get_model_state_dict(model)
        assert sd.keys() == model.state_dict().keys()
        other = _model(SHARDING, "hash", seed=8)
        set_model_state_dict(other, sd)
        for n in NAMES:
            _same(tables(other[n]), tables(model[n]), n)
