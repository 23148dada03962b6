"""Sharded embeddings over torch.distributed (issue 13): equality with the single-process collection
in both exchange modes and every sharding type, Eq. 3 on the counters, resharding checkpoints, and a
killed rank. Ranks are processes started with the spawn method (never fork after loading recgo); each
spawned world runs many cases so that the suite pays the start-up once per world. The misuse phases
(mismatched ranks, a skipped backward, a dead or silent rank) live in world_failures.py."""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

import recgo
from recgo.modules import optim
from sharded_batches import B_LOCAL, SHARDING, configs, global_batch, local_batch
from sharded_checks import check_update, close
from spawned import ok, spawn
from sharded_weight_grads import pooled_partials, weight_grad_cases
from test_distributed_odd_batches import hierarchical_cases
from world_failures import FAIL_TIMEOUT, fail_phase, mismatch_phase, optimizer_drift, skipped_backward

NODES, PER_NODE, WORLD, STEPS = 2, 2, 4, 3
OPTS: list[Any] = [None, optim.SGD(lr=0.3), optim.Adagrad(lr=0.2), optim.RowWiseAdagrad(lr=0.2),
                   optim.Adam(lr=0.05), optim.AdamW(lr=0.05, weight_decay=0.1)]


# -- world 4: equality, Eq. 3, checkpoint --------------------------------------------------------------

def _eq3_rhs(sh: Any, kjt: recgo.KeyedJaggedTensor, world: int) -> int:
    """Σ_n Σ_x (G_n(x) − 1) over the (table, ID) pairs x owned off node n, from the global batch."""
    total = 0
    for cfg in configs():
        per_rank = []
        for r in range(world):
            d = local_batch(kjt, r).to_dict()
            per_rank.append(torch.unique(torch.cat([d[f].values() for f in cfg.feature_names])))
        for n in range(NODES):
            ids = [per_rank[n * PER_NODE + l] for l in range(PER_NODE)]
            allx = torch.cat(ids)
            if allx.numel() == 0:
                continue
            off = (sh.owners(cfg.name, allx) // PER_NODE) != n
            if sh.sharding_types()[cfg.name] == "data_parallel":
                off[:] = False
            ux, counts = torch.unique(allx[off], return_counts=True)
            total += int((counts - 1).sum())
    return total


def _world4(rank: int, world: int, plan_path: str, ckpt: str) -> dict:
    """Every case of the equality and Eq. 3 tests and the checkpoint save; then the silent-rank phase
    (the cases' outcome is saved first, since the last rank is killed once the others report)."""
    try:
        res: dict = {"inter": _world4_cases(rank, world, plan_path, ckpt), "pooled": _pooled_cases(rank, world),
                     "weight_grads": weight_grad_cases(rank, world, [("hierarchical", NODES, PER_NODE)], plan_path),
                     "odd": hierarchical_cases(rank, world)}
    except BaseException as exc:
        res = {"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"}
    torch.save(res, os.path.join(os.environ["RECGO_TEST_OUT"], f"cases-{rank}.pt"))
    if "error" in res:
        return res
    return {"hang": fail_phase(rank, world, "hang")}


def _world4_cases(rank: int, world: int, plan_path: str, ckpt: str) -> dict:
    from recgo.distributed import ShardedEmbeddingBagCollection
    from recgo.planner import Plan

    plan = Plan.load(plan_path)
    cfgs = configs()
    inter: dict[str, list] = {}
    # "flat" returns rows; "hierarchical" forces pooling at its intra-node stop (the inter-node leg
    # still moves rows merged per node, so Eq. 3 holds for its vectors too); "flat-pooled" has owners
    # pool wherever they may (auto for the row-wise table), and must give the same IDs and results.
    for mode in ("flat", "hierarchical", "flat-pooled"):
        for oi, opt in enumerate(OPTS):
            if mode == "flat-pooled" and oi not in POOLED_OPTS:
                continue
            ref = recgo.EmbeddingBagCollection(cfgs, optimizer=opt, seed=7)
            returns = {"flat": "rows", "hierarchical": "pooled", "flat-pooled": POOLED_RETURNS}[mode]
            sh = ShardedEmbeddingBagCollection(cfgs, SHARDING, mode=mode.split("-")[0], nodes=NODES,
                                               ranks_per_node=PER_NODE, optimizer=opt, plan=plan, seed=7, timeout=60,
                                               owner_pooling=returns)
            assert sh.sharding_types()["tp"] == "plan"
            ids = {c.name: sh.local_ids(c.name) for c in cfgs}
            for c in cfgs:  # the same initial weights as the single-process collection's
                assert torch.equal(sh.embedding_bags[c.name].weight, ref.embedding_bags[c.name].weight.detach()[ids[c.name]])
            torch_opts = None
            if opt is None:
                torch_opts = (torch.optim.Adagrad(ref.parameters(), lr=0.2), torch.optim.Adagrad(sh.parameters(), lr=0.2))
            for step in range(STEPS):
                kjt = global_batch(step, world)
                pooled_ref = ref(kjt).values()
                pooled = sh(local_batch(kjt, rank)).values()
                close(pooled, pooled_ref[rank * B_LOCAL:(rank + 1) * B_LOCAL].detach(), f"{mode} {opt} step {step} pooled")
                R = torch.randn(pooled_ref.shape, generator=torch.Generator().manual_seed(step))
                (pooled_ref * R).sum().backward()
                (pooled * R[rank * B_LOCAL:(rank + 1) * B_LOCAL]).sum().backward()
                check_update(sh.embedding_bags, ref.embedding_bags, cfgs, ids, torch_opts, f"{mode} {opt} step {step}")
                t = sh.traffic()
                gathered: list[Any] = [None] * world
                dist.all_gather_object(gathered, (t["ids_inter"], t["vecs_inter"], t["grads_inter"],
                                                  t["pooled_vecs"], t["pooled_grads"]))
                inter.setdefault(f"{oi}-{step}", []).append(
                    (mode, *[sum(g[i] for g in gathered) for i in range(5)], _eq3_rhs(sh, kjt, world)))
            if mode == "flat" and isinstance(opt, optim.Adam) and not isinstance(opt, optim.AdamW):
                _checkpoint_run(sh, ref, ckpt, rank, world)
    return inter


POOLED_OPTS = (0, 1, 4)  # the torch optimizer (owner gradients), SGD, Adam
POOLED_RETURNS = {"th": "pooled", "tt": "pooled", "tr": "auto", "td": "pooled", "tp": "pooled"}


def _pooled_cases(rank: int, world: int) -> list[int]:
    """Owner pooling on weighted bags (mixed SUM/MEAN, empty bags, bags up to 9 long) on this world,
    forced and auto, against the single-process weighted collection; returns the partial sums the
    world returned per case (so the caller can check that owners did pool)."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    cfgs, local = configs(), WORLD * B_LOCAL // world
    out = []
    for ci, (returns, opt) in enumerate((("pooled", optim.Adagrad(lr=0.2)), ("auto", optim.SGD(lr=0.3)),
                                         ("pooled", None))):
        if ci == 0:  # from_ebc: rows and fused optimizer taken from a collection initialised otherwise
            ref = recgo.EmbeddingBagCollection(cfgs, optimizer=opt, seed=4, is_weighted=True)
            sh = ShardedEmbeddingBagCollection.from_ebc(ref, {**SHARDING, "tp": "table_wise"}, seed=3, timeout=60,
                                                        is_weighted=True, owner_pooling=returns)
        else:
            ref = recgo.EmbeddingBagCollection(cfgs, optimizer=opt, seed=3, is_weighted=True)
            sh = ShardedEmbeddingBagCollection(cfgs, {**SHARDING, "tp": "table_wise"}, optimizer=opt, seed=3,
                                               timeout=60, is_weighted=True, owner_pooling=returns)
        ids = {c.name: sh.local_ids(c.name) for c in cfgs}
        torch_opts = None
        if opt is None:
            torch_opts = (torch.optim.SGD(ref.parameters(), lr=0.3), torch.optim.SGD(sh.parameters(), lr=0.3))
        pooled = 0
        for step in range(STEPS):
            kjt = global_batch(step, WORLD, weighted=True, max_len=10)
            pooled_ref = ref(kjt).values()
            got = sh(local_batch(kjt, rank, local)).values()
            what = f"world {world} owner_pooling={returns} {opt} step {step}"
            close(got, pooled_ref[rank * local:(rank + 1) * local].detach(), f"{what} pooled")
            R = step_grad(kjt, step, 0, 1, WORLD * B_LOCAL)
            (pooled_ref * R).sum().backward()
            (got * R[rank * local:(rank + 1) * local]).sum().backward()
            check_update(sh.embedding_bags, ref.embedding_bags, cfgs, ids, torch_opts, what)
            t = sh.traffic()
            gathered: list[Any] = [None] * world
            dist.all_gather_object(gathered, (t["pooled_vecs"], t["pooled_grads"]))
            assert sum(g[0] for g in gathered) == sum(g[1] for g in gathered), f"{what}: {gathered}"
            pooled += sum(g[0] for g in gathered)
        out.append(pooled)
    return out


def _division_case(rank: int, world: int) -> dict:
    """The same step with and without gradient_division, dense gradients (optimizer=None): each
    shard's gradient with division, and world × it, next to the summed one."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    local = WORLD * B_LOCAL // world
    kjt = global_batch(0, WORLD)
    R = step_grad(kjt, 0, rank, world, local)
    grads = {}
    for div in (False, True):
        sh = ShardedEmbeddingBagCollection(configs(), SHARDING | {"tp": "hash"}, seed=5, timeout=60,
                                           gradient_division=div)
        (sh(local_batch(kjt, rank, local)).values() * R).sum().backward()
        grads[div] = {c.name: sh.embedding_bags[c.name].weight.grad.clone() for c in configs()}
    return {"sum": grads[False], "divided": grads[True], "world": world}


def _fp16_case(rank: int, world: int) -> dict:
    """The opt-in lossy float16 wire next to the exact one on the same steps: the bytes both sent
    and how far the fp16 run's outputs and weights drifted from the single-process collection's."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    cfgs, local = configs(), WORLD * B_LOCAL // world
    ref = recgo.EmbeddingBagCollection(cfgs, optimizer=optim.SGD(lr=0.3), seed=5)
    runs = {w: ShardedEmbeddingBagCollection(cfgs, {**SHARDING, "tp": "table_wise"}, optimizer=optim.SGD(lr=0.3),
                                             seed=5, timeout=60, wire_dtype=w) for w in ("fp32", "fp16")}
    out: dict = {"bytes": dict.fromkeys(runs, 0), "err": 0.0}
    for step in range(STEPS):
        kjt = global_batch(step, WORLD, max_len=10)
        pooled_ref = ref(kjt).values()
        R = step_grad(kjt, step, 0, 1, WORLD * B_LOCAL)
        (pooled_ref * R).sum().backward()
        for w, sh in runs.items():
            got = sh(local_batch(kjt, rank, local)).values()
            (got * R[rank * local:(rank + 1) * local]).sum().backward()
            out["bytes"][w] += sh.traffic()["bytes"]
            if w == "fp16":
                want = pooled_ref[rank * local:(rank + 1) * local].detach()
                out["err"] = max(out["err"], float((got.detach() - want).abs().max() / want.abs().max()))
    for c in cfgs:
        want = ref.embedding_bags[c.name].weight.detach()[runs["fp16"].local_ids(c.name)]
        got = runs["fp16"].embedding_bags[c.name].weight.detach()
        if got.numel() == 0:  # a table-wise table on the other rank
            continue
        out["err"] = max(out["err"], float((got - want).abs().max() / want.abs().max()))
    return out


RESHARD_SAVE, RESHARD_MORE = STEPS, 2


def _checkpoint_run(sh: Any, ref: Any, ckpt: str, rank: int, world: int) -> None:
    """Save after STEPS steps, then train on (the uninterrupted run, whose final tables are saved too)."""
    sh.save(ckpt)
    for step in range(RESHARD_SAVE, RESHARD_SAVE + RESHARD_MORE):
        kjt = global_batch(step, world)
        (sh(local_batch(kjt, rank)).values() * step_grad(kjt, step, rank, world)).sum().backward()
    final = {c.name: (sh.local_ids(c.name), sh.embedding_bags[c.name].weight.detach().clone()) for c in configs()}
    torch.save(final, os.path.join(ckpt, f"final-{rank}.pt"))


def step_grad(kjt: recgo.KeyedJaggedTensor, step: int, rank: int, world: int, local: int = B_LOCAL) -> torch.Tensor:
    """The output gradient of global batch `step` on rank's samples (the same global tensor everywhere)."""
    width = sum(c.embedding_dim * len(c.feature_names) for c in configs())
    R = torch.randn(WORLD * B_LOCAL, width, generator=torch.Generator().manual_seed(500 + step))
    return R[rank * local:(rank + 1) * local]


def _reshard(rank: int, world: int, ckpt: str, out: str) -> dict:
    """Load the world-4 checkpoint here and train the remaining steps on the same global batches;
    then, with more than one rank, the last rank is killed in the middle of a step."""
    torch.save(_reshard_run(rank, world, ckpt), os.path.join(out, f"reshard-{rank}.pt"))
    if world == 1:
        return {}
    try:
        pooled: dict = {"pooled": _pooled_cases(rank, world), "fp16": _fp16_case(rank, world),
                        "division": _division_case(rank, world), "meta": _meta_case(rank, world),
                        "weight_grads": weight_grad_cases(rank, world, [("flat", None, None)]),
                        "partials": pooled_partials(rank, world)}
    except BaseException as exc:
        pooled = {"pooled_error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"}
    return {**pooled, "mismatch": mismatch_phase(rank, world), "skipped": skipped_backward(rank, world),
            "drift": optimizer_drift(rank, world),
            "kill": fail_phase(rank, world, "kill")}


def _meta_case(rank: int, world: int) -> dict:
    """Collections built on the meta device, then sharded: per table whether this rank's rows equal the
    seeded unsharded collection's; and with init_fn configs (each shard draws its own rows) under
    global generators seeded differently per rank, every rank's data-parallel replica and a few
    values of its hash shard."""
    from recgo.distributed import ShardedEmbeddingBagCollection, ShardedEmbeddingCollection

    cfgs, opt = configs(), optim.Adagrad(lr=0.2)
    sharding = {**SHARDING, "tp": "table_wise"}
    with torch.device("meta"):
        ebc = recgo.EmbeddingBagCollection(cfgs, optimizer=opt, seed=9)
        ec = recgo.EmbeddingCollection([recgo.EmbeddingConfig(c.num_embeddings, c.embedding_dim, c.name,
                                                              list(c.feature_names)) for c in cfgs], optimizer=opt, seed=9)
    ref = recgo.EmbeddingBagCollection(cfgs, optimizer=opt, seed=9)
    equal = {}
    for what, sh in (("bags", ShardedEmbeddingBagCollection.from_ebc(ebc, sharding, timeout=60)),
                     ("sequence", ShardedEmbeddingCollection.from_ec(ec, sharding, timeout=60))):
        for c in cfgs:
            want = ref.embedding_bags[c.name].weight.detach()[sh.local_ids(c.name)]
            equal[f"{what} {c.name}"] = torch.equal(sh.embedding_bags[c.name].weight.detach(), want)
    torch.manual_seed(100 + rank)
    C = recgo.EmbeddingBagConfig
    fn = ShardedEmbeddingBagCollection([C(61, 4, "th", ["h1"], init_fn=torch.nn.init.normal_),
                                        C(12, 5, "td", ["d1"], init_fn=torch.nn.init.normal_)],
                                       {"th": "hash", "td": "data_parallel"}, timeout=60)
    got: list[Any] = [None] * world
    dist.all_gather_object(got, (fn.embedding_bags["td"].weight.detach().clone(),
                                 fn.embedding_bags["th"].weight.detach()[:3].clone()))
    return {"equal": equal, "replicas": [g[0] for g in got], "hash_rows": [g[1] for g in got]}


def _reshard_run(rank: int, world: int, ckpt: str) -> dict:
    from recgo.distributed import ShardedEmbeddingBagCollection

    local = WORLD * B_LOCAL // world
    # The plan was made for four ranks: here its table is placed table-wise (the layout may change
    # freely between save and load).
    sh = ShardedEmbeddingBagCollection(configs(), {**SHARDING, "tp": "table_wise"}, optimizer=optim.Adam(lr=0.05),
                                       timeout=60)
    sh.load(ckpt)
    for step in range(RESHARD_SAVE, RESHARD_SAVE + RESHARD_MORE):
        kjt = global_batch(step, WORLD)
        (sh(local_batch(kjt, rank, local)).values() * step_grad(kjt, step, rank, world, local)).sum().backward()
    from recgo.distributed import gather_state_dict

    return {**{c.name: (sh.local_ids(c.name), sh.embedding_bags[c.name].weight.detach().clone()) for c in configs()},
            "gathered": gather_state_dict(sh)}


def _assemble(parts: list[dict]) -> dict[str, torch.Tensor]:
    out = {}
    for c in configs():
        full = torch.full((c.num_embeddings, c.embedding_dim), float("nan"))
        for p in parts:
            ids, w = p[c.name]
            full[ids] = w
        out[c.name] = full
    return out


@pytest.fixture(scope="module")
def world4(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], Path]:
    from recgo import planner as P

    tmp = tmp_path_factory.mktemp("dist")
    batches = [global_batch(s, WORLD) for s in range(3)]
    specs = [P.TableSpec(c.name, c.num_embeddings, c.embedding_dim) for c in configs()]
    f2t = {f: c.name for c in configs() for f in c.feature_names}
    renamed = []
    for b in batches:  # the profiler reads one feature per table: drop the second feature of "th"
        d = b.to_dict()
        renamed.append(recgo.KeyedJaggedTensor([f2t[k] for k in b.keys() if k != "h2"],
                                               torch.cat([d[k].values() for k in b.keys() if k != "h2"]),
                                               lengths=torch.cat([d[k].lengths() for k in b.keys() if k != "h2"])))
    prof = P.profile(renamed, specs, sample_rate=1.0)
    plan = P.plan(prof, P.Topology(nodes=NODES, gpus_per_node=PER_NODE, hbm_bytes=2000, host_bytes=1 << 20,
                                   batch_size=WORLD * B_LOCAL), strategy="greedy_size")
    plan_dir = plan.save(tmp / "plan", plots=False)
    ckpt = tmp / "ckpt"
    res = spawn(_world4, WORLD, tmp, str(plan_dir), str(ckpt), expect=list(range(WORLD - 1)))
    out = tmp / f"out-_world4-{WORLD}"
    cases = [torch.load(out / f"cases-{r}.pt", weights_only=False) if (out / f"cases-{r}.pt").exists()
             else {"error": "no result"} for r in range(WORLD)]
    # the last rank never reports its own result: it is killed while it plays the silent rank
    return [{**c, **h} if r < WORLD - 1 else c for r, (c, h) in enumerate(zip(cases, res))], ckpt


def test_world4_matches_single_process_collection(world4: tuple[list[dict], Path]) -> None:
    """Both modes × every sharding type × every optimizer (hierarchical with pooling forced at its
    intra-node stop), and the flat exchange with owner pooling for three of them: pooled outputs, gradients (torch optimizer), weights and optimizer state
    equal the single-process collection's (asserted in the ranks; any failure comes back with its
    traceback)."""
    ok(world4[0])


@pytest.mark.parametrize("world", [4, 2])
def test_owner_pooling_matches_single_process_weighted(world4: tuple[list[dict], Path],
                                                       world2: tuple[list[dict], Path], world: int) -> None:
    """Owner pooling on weighted, mixed SUM/MEAN bags with empty ones, forced and auto, on worlds 4
    and 2: outputs, gradients and weights equal the weighted single-process collection's, and the
    owners did return partial sums in every case."""
    res = world4[0][0] if world == 4 else world2[0][0]
    assert "error" not in res and "pooled_error" not in res, res.get("error") or res.get("pooled_error")
    assert len(res["pooled"]) == 3 and all(p > 0 for p in res["pooled"]), res["pooled"]


@pytest.mark.parametrize("world", [4, 2])
def test_trained_per_id_weights_match_single_process(world4: tuple[list[dict], Path],
                                                     world2: tuple[list[dict], Path], world: int) -> None:
    """Per-ID weights that require grad (a learned position-weight vector) through the sharded collection,
    every sharding type, mixed SUM/MEAN tables, owner pooling forced and auto, fused and torch optimizers:
    outputs, per-ID weight gradients, table updates and the position weights after SGD steps equal the
    single-process collection's, hierarchical (2 × 2, a planner plan) on world 4, flat on world 2
    (asserted in the ranks). On world 2 plain weights keep owner pooling and trained ones bring rows back."""
    res = world4[0][0] if world == 4 else world2[0][0]
    assert "error" not in res and "pooled_error" not in res, res.get("error") or res.get("pooled_error")
    assert res["weight_grads"] == 2
    if world == 2:
        plain, trained = res["partials"]
        assert plain > 0 and trained == 0, res["partials"]


def test_hierarchical_steps_with_ranks_or_a_node_without_samples(world4: tuple[list[dict], Path]) -> None:
    """2 nodes × 2 ranks with some ranks, or a whole node, holding no samples (every kind of owner
    return), and IDs all owned by rank 0: outputs, rows and state equal the single-process
    collection's (test_distributed_odd_batches.hierarchical_cases)."""
    for r, res in enumerate(world4[0]):
        assert "error" not in res, res.get("error")
        assert len(res["odd"]) == 10, res["odd"]
        for name, got in res["odd"].items():
            assert got == "ok", f"rank {r}, {name}: {got}"


def test_eq3_holds_exactly_on_the_counters(world4: tuple[list[dict], Path]) -> None:
    res = world4[0]
    ok(res)
    inter = res[0]["inter"]
    assert len(inter) == len(OPTS) * STEPS
    saw_reduction = False
    for key, (flat, hier, *pooled) in inter.items():
        assert flat[0] == "flat" and hier[0] == "hierarchical"
        rhs = flat[6]
        assert rhs == hier[6]  # the right-hand side depends on the batch and layout only
        assert flat[1] - hier[1] == rhs, f"IDs, case {key}: {flat} vs {hier}"
        assert flat[2] - hier[2] == rhs, f"vectors, case {key}: {flat} vs {hier}"
        assert flat[3] - hier[3] == rhs, f"gradients, case {key}: {flat} vs {hier}"
        assert flat[4] == flat[5] == 0, f"rows were asked for, case {key}"
        # the hierarchical run forces pooling: its intra-node stop pools, the inter-node leg keeps rows
        assert hier[4] > 0 and hier[4] == hier[5], f"no pooling at the intra-node stop, case {key}: {hier}"
        for p in pooled:  # owner pooling changes what comes back, not which IDs travel
            assert p[0] == "flat-pooled" and p[6] == rhs
            assert p[1] - hier[1] == rhs, f"IDs with owner pooling, case {key}: {p} vs {hier}"
            assert p[4] > 0 and p[4] == p[5], f"owners did not pool, case {key}: {p}"
        saw_reduction |= rhs > 0
    assert saw_reduction, "the batches never shared IDs within a node: the test would not see a difference"
    assert sum(len(v) == 3 for v in inter.values()) == len(POOLED_OPTS) * STEPS


@pytest.fixture(scope="module")
def world2(world4: tuple[list[dict], Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], Path]:
    tmp = tmp_path_factory.mktemp("dist2")
    res = spawn(_reshard, 2, tmp, str(world4[1]), str(tmp), expect=[0], wait=180)
    return res, tmp


def _in_process_world1(ckpt: Path, out: Path) -> None:
    """World 1 needs no other process: this pytest process joins a one-rank gloo group."""
    dist.init_process_group("gloo", init_method=f"file://{out / 'store1'}", rank=0, world_size=1)
    try:
        _reshard(0, 1, str(ckpt), str(out))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 1])
def test_reshard_checkpoint_continues_identically(world4: tuple[list[dict], Path], world2: tuple[list[dict], Path],
                                                  world: int, tmp_path: Path) -> None:
    """Saved on world 4, loaded on 2 and on 1, trained on: the tables equal the uninterrupted run's."""
    ok(world4[0])
    ckpt = world4[1]
    if world == 2:
        out = world2[1]
    else:
        out = tmp_path
        _in_process_world1(ckpt, out)
    if world == 2:
        assert "error" not in world2[0][0], world2[0][0].get("error")
    res = [torch.load(out / f"reshard-{r}.pt", weights_only=False) for r in range(world)]
    got = _assemble(res)
    want = _assemble([torch.load(ckpt / f"final-{r}.pt", weights_only=False) for r in range(WORLD)])
    for name in got:
        assert not torch.isnan(got[name]).any() and not torch.isnan(want[name]).any()
        close(got[name], want[name], f"resharded to world {world}: table {name}")
        # gather_state_dict assembles the same tables on rank 0 (the others get nothing), under the
        # unsharded collection's names
        assert torch.equal(res[0]["gathered"][f"embedding_bags.{name}.weight"], got[name]), name
    assert all(r["gathered"] == {} for r in res[1:])
    unsharded = recgo.EmbeddingBagCollection(configs(), optimizer=optim.Adam(lr=0.05))
    unsharded.load_state_dict(res[0]["gathered"], strict=False)  # loads: weights only, no per-rank keys
    for name in got:
        assert torch.equal(unsharded.embedding_bags[name].weight.detach(), got[name])


def test_fp16_wire_is_opt_in_lossy_and_smaller(world2: tuple[list[dict], Path]) -> None:
    """wire_dtype="fp16" sends fewer bytes than the exact wire and stays near (not equal to) the
    single-process collection: float16 keeps 11 significant bits of every vector it moves."""
    res = world2[0][0]
    assert "pooled_error" not in res, res.get("pooled_error")
    fp16 = res["fp16"]
    assert fp16["bytes"]["fp16"] < 0.8 * fp16["bytes"]["fp32"], fp16
    assert 0 < fp16["err"] < 5e-3, fp16


def test_gradient_division_divides_each_ranks_gradient_by_the_world(world2: tuple[list[dict], Path]) -> None:
    """gradient_division=True (TorchRec's default): the owners apply the ranks' gradients divided by
    the world size, so every shard's gradient is the summed one over the world size (rank 0's: the
    last rank is killed in the failure phase that follows)."""
    res = world2[0][0]
    assert "pooled_error" not in res, res.get("pooled_error")
    got = res["division"]
    assert got["world"] == 2
    for name, summed in got["sum"].items():
        assert summed.numel() == 0 or summed.abs().sum() > 0, name
        torch.testing.assert_close(got["divided"][name] * 2, summed, rtol=1e-6, atol=1e-7)


def test_a_meta_collection_shards_into_the_seeded_rows(world2: tuple[list[dict], Path]) -> None:
    """from_ebc / from_ec of collections built on the meta device: every table's rows on the rank equal
    the seeded unsharded collection's (hash, table-wise, row-wise and data-parallel tables; each rank
    drew only its own rows)."""
    res = world2[0][0]
    assert "pooled_error" not in res, res.get("pooled_error")
    equal = res["meta"]["equal"]
    assert len(equal) == 2 * len(configs()) and all(equal.values()), equal


def test_init_fn_draws_each_shard_and_replicas_agree(world2: tuple[list[dict], Path]) -> None:
    """A config's init_fn initialises each rank's shard (as TorchRec's sharded modules apply it), not
    silently the default uniform draw; a data-parallel table's replicas are rank 0's on every rank even
    though the ranks' global generators differ."""
    res = world2[0][0]
    assert "pooled_error" not in res, res.get("pooled_error")
    meta = res["meta"]
    replicas, rows = meta["replicas"], meta["hash_rows"]
    assert torch.equal(replicas[0], replicas[1])
    bound = (1 / 61) ** 0.5  # the default uniform draw's
    assert float(rows[0].abs().max()) > 3 * bound and not torch.equal(rows[0], rows[1])


def test_gradient_division_must_be_a_bool(tmp_path: Path) -> None:
    from recgo.distributed import ShardedEmbeddingBagCollection
    from recgo.errors import InvalidInputError

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        with pytest.raises(InvalidInputError, match="gradient_division: expected True or False, got 2"):
            ShardedEmbeddingBagCollection(configs(), "hash", gradient_division=2)  # type: ignore[arg-type]
    finally:
        dist.destroy_process_group()


# -- failures ----------------------------------------------------------------------------------------

def _check_failure(got: dict, rank: int, how: str) -> None:
    assert got["error_type"] == "PeerFailureError", got
    assert got["seconds"] < FAIL_TIMEOUT + 5, got
    assert f"rank {rank}" in got["message"] and "group" in got["message"]
    if how == "hang":
        assert got["seconds"] >= FAIL_TIMEOUT * 0.9, got  # it waited for the configured timeout, no longer


def test_ranks_that_build_different_collections_all_raise_a_named_error(world2: tuple[list[dict], Path]) -> None:
    got = world2[0][0]["mismatch"]
    assert got["error_type"] == "InvalidInputError", got
    assert "rank 1 builds the ShardedEmbeddingBagCollection differently from rank 0" in got["message"], got
    assert "table 1: ('tt', 40, 16, ('t1',), 'mean'," in got["message"] and "('tt', 40, 8," in got["message"], got
    other = got["sharding"]  # the sharding by its names, as the caller gave it, not the engine's codes
    assert other["error_type"] == "InvalidInputError", other
    assert "sharding: ('row_wise', 'table_wise on rank 1'" in other["message"], other
    assert "('hash', 'table_wise on rank 1'" in other["message"], other
    mode = got["mode"]
    assert mode["error_type"] == "InvalidInputError", mode
    assert "rank 1 builds the process groups differently from rank 0" in mode["message"], mode
    assert "mode: 'hierarchical' on rank 1, 'flat' on rank 0" in mode["message"], mode


def test_ranks_whose_schedules_differ_all_raise_and_a_fractional_topology_is_refused(
        world2: tuple[list[dict], Path]) -> None:
    res = world2[0][0]  # rank 0's (rank 1 is killed later in the run)
    assert "rank 1's fused optimizer hyper-parameters differ from rank 0's at step 1" in (res["drift"] or ""), res
    bad = res["mismatch"]["float_topology"]  # 1.5 nodes was read as 1
    assert "topology: nodes must be a whole number of ranks, got 1.5" in (bad.get("message") or ""), bad


def test_a_rank_that_skips_a_backward_makes_every_rank_raise(world2: tuple[list[dict], Path]) -> None:
    got = world2[0][0]["skipped"]
    assert got["error_type"] == "InvalidInputError", got
    assert "rank 1 is at the forward of step 2 while rank 0 is at the backward of step 1" in got["message"], got


def test_a_killed_rank_makes_the_survivor_raise_within_the_timeout(world2: tuple[list[dict], Path]) -> None:
    assert "error" not in world2[0][0], world2[0][0].get("error")
    _check_failure(world2[0][0]["kill"], 0, "kill")


@pytest.mark.parametrize("what, words", [("build", "building the process groups"),
                                         ("load", "loading "), ("save", "saving to "),
                                         ("gather", "gathering table ")])
def test_a_dead_peer_is_named_as_such_by_construction_load_save_and_gather(world2: tuple[list[dict], Path],
                                                                          what: str, words: str) -> None:
    """The agreements of a construction and a load, a save's collectives and gather_state_dict's word a
    dead peer as the exchanges do (gloo's closed connection), not as a peer that did not join in time."""
    got = world2[0][0]["kill"]["after"][what]
    assert got["error_type"] == "PeerFailureError", got
    assert got["message"].startswith(f"rank 0: {words}"), got
    assert "a peer closed the connection" in got["message"], got
    assert "did not join" not in got["message"], got


def test_a_silent_rank_makes_the_others_raise_at_the_timeout(world4: tuple[list[dict], Path]) -> None:
    for r in range(WORLD - 1):
        assert "error" not in world4[0][r], world4[0][r].get("error")
        _check_failure(world4[0][r]["hang"], r, "hang")
