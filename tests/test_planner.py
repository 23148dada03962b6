"""recgo.planner end to end: profiling vs direct counts, strategies vs brute force, plan files,
remap, bad input, TorchRec bridges and the CLI."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

import recgo
from recgo import CapacityError, InvalidInputError, NotFoundError
from recgo import planner as P

from planner_data import TABLES, batches

ROOT = Path(__file__).resolve().parents[1]


def _batches(seed: int = 0, n: int = 6, batch: int = 64) -> list[recgo.KeyedJaggedTensor]:
    return batches(seed, n, batch)


def _direct(batches: list[recgo.KeyedJaggedTensor]) -> dict[str, dict]:
    """Coverage, pooling and per-row counts computed in Python."""
    res = {t.name: {"counts": Counter(), "covered": 0, "lookups": 0, "samples": 0} for t in TABLES}
    for kjt in batches:
        b = kjt.stride()
        lens = kjt.lengths().view(len(kjt.keys()), b)
        parts = torch.split(kjt.values(), lens.sum(1).tolist())
        for i, key in enumerate(kjt.keys()):
            r = res[key]
            r["samples"] += b
            r["covered"] += int((lens[i] > 0).sum())
            r["lookups"] += int(lens[i].sum())
            r["counts"].update(parts[i].tolist())
    return res


@pytest.fixture(scope="module")
def prof() -> P.Profile:
    return P.profile(_batches(), TABLES, sample_rate=1.0, steps=8)


def small_topo(**kw) -> P.Topology:
    base = dict(nodes=1, gpus_per_node=2, hbm_bytes=30_000, host_bytes=1 << 20, batch_size=512)
    base.update(kw)
    return P.Topology(**base)


def test_profile_matches_direct_counts(prof: P.Profile) -> None:
    want = _direct(_batches())
    for t in prof.tables:
        w = want[t["name"]]
        assert t["coverage"] == pytest.approx(w["covered"] / w["samples"])
        assert t["pooling"] == pytest.approx(w["lookups"] / w["covered"])
        assert t["touched"] == len(w["counts"])
        counts = sorted(w["counts"].values(), reverse=True)
        for pt in t["cdf"]:
            assert pt["frac"] == pytest.approx(sum(counts[: pt["rows"]]) / w["lookups"])


def test_torchrec_kjt_and_dict_inputs_profile_the_same() -> None:
    pytest.importorskip("torchrec")
    batches = _batches(seed=3, n=2)
    a = P.profile(batches, TABLES, sample_rate=1.0)
    b = P.profile([k.to_torchrec() for k in batches], TABLES, sample_rate=1.0)
    assert a.to_dict(ranked=True) == b.to_dict(ranked=True)
    d = P.profile([{"a": torch.tensor([1, 1, 2]), "c": torch.tensor([5, 5, 5])}], TABLES, sample_rate=1.0)
    assert d.table("a")["touched"] == 2 and d.table("c")["cdf"][-1] == {"rows": 1, "frac": 1}
    assert d.table("b")["coverage"] == 0  # not fed


def test_sampling_rate_keeps_a_share() -> None:
    p = P.Profiler(TABLES, sample_rate=0.25, seed=7)
    for kjt in _batches(n=20):
        p.add(kjt)
    offered, kept = p.samples()
    assert offered == 20 * 64
    assert abs(kept - offered / 4) < 0.06 * offered


@pytest.mark.parametrize("bad, err, match", [
    (dict(sample_rate=0.0), InvalidInputError, r"sample rate"),
    (dict(steps=0), InvalidInputError, r"steps"),
])
def test_profiler_bad_arguments(bad, err, match) -> None:
    with pytest.raises(err, match=match):
        P.Profiler(TABLES, **bad)


def test_profiler_rejects_out_of_range_ids_and_empty_profile() -> None:
    p = P.Profiler(TABLES, sample_rate=1.0)
    with pytest.raises(InvalidInputError, match=r"id 40 outside \[0, 40\)"):
        p.add({"c": torch.tensor([40])})
    with pytest.raises(InvalidInputError, match="empty profile"):
        p.profile()


def test_configs_feature_names_route_keys_to_their_tables() -> None:
    # the same batches under feature keys, profiled with EmbeddingBagConfigs that list those keys
    configs = [recgo.EmbeddingBagConfig(t.rows, t.dim, t.name, [f"{t.name}_id"]) for t in TABLES]
    renamed = [recgo.KeyedJaggedTensor([f"{k}_id" for k in b.keys()], b.values(), lengths=b.lengths())
               for b in _batches(seed=5, n=2)]
    by_config = P.profile(renamed, configs, sample_rate=1.0)
    by_name = P.profile(_batches(seed=5, n=2), TABLES, sample_rate=1.0)
    assert by_config.to_dict(ranked=True) == by_name.to_dict(ranked=True)
    assert all(t["lookups"] > 0 for t in by_config.tables)


def test_a_profile_no_key_fed_raises_naming_keys_and_tables() -> None:
    configs = [recgo.EmbeddingBagConfig(t.rows, t.dim, t.name, [f"{t.name}_id"]) for t in TABLES]
    p = P.Profiler(configs, sample_rate=1.0)
    p.add(recgo.KeyedJaggedTensor(["user", "item"], torch.tensor([1, 2]), lengths=torch.tensor([1, 1])))
    with pytest.raises(InvalidInputError, match=r"no batch key feeds a profiled table \(keys seen: user, item; "
                                                r"tables: a, b, c\).*feature_to_table"):
        p.profile()
    # the explicit mapping makes the same batch count
    q = P.Profiler(configs, sample_rate=1.0, feature_to_table={"user": "a", "item": "c"})
    q.add(recgo.KeyedJaggedTensor(["user", "item"], torch.tensor([1, 2]), lengths=torch.tensor([1, 1])))
    prof = q.profile()
    assert prof.table("a")["lookups"] == 1 and prof.table("c")["lookups"] == 1 and prof.table("b")["lookups"] == 0
    # a typo in a mapped table was accepted, and the table planned on no lookups
    with pytest.raises(NotFoundError, match=r"feature_to_table maps \{'item': 'z'\} to no profiled table "
                                            r"\(tables: \['a', 'b', 'c'\]\)"):
        P.Profiler(configs, sample_rate=1.0, feature_to_table={"user": "a", "item": "z"})


def test_plots_skip_a_table_no_lookup_reached(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    prof = P.profile([{"a": torch.tensor([1, 1, 2])}], TABLES, sample_rate=1.0)
    assert prof.table("b")["cdf"] in (None, [])
    P.plan(prof, small_topo(), "greedy_lookups").save(tmp_path / "plan")
    assert (tmp_path / "plan" / "cdfs.png").stat().st_size > 0


def _brute_force(prof: P.Profile, topo: P.Topology) -> float:
    """The least slowest-GPU time over every placement of the tables on the CDF-step options."""
    names = [t["name"] for t in prof.tables]
    options = []
    for t in prof.tables:
        hots = sorted({0, t["rows"], *(p["rows"] for p in t["cdf"])})
        row_bytes = t["dim"] * t["elem_bytes"]
        options.append([(g, h) for g in range(topo.num_gpus) for h in hots
                        if h * row_bytes <= topo.hbm_bytes and (t["rows"] - h) * row_bytes <= topo.host_bytes])
    best = float("inf")
    for combo in itertools.product(*options):
        ev = P.evaluate(prof, topo, dict(zip(names, combo)))
        if not ev.predicted.get("violation"):
            best = min(best, ev.predicted["max_seconds"])
    return best


def test_milp_equals_brute_force() -> None:
    prof = P.profile(_batches(seed=1, n=2), TABLES, sample_rate=1.0, steps=2)
    topo = small_topo(hbm_bytes=12_000)
    want = _brute_force(prof, topo)
    plan = P.plan(prof, topo, "milp", mip_rel_gap=1e-9, time_limit=20)
    assert plan.solver["status"] == "optimal"
    assert plan.predicted["max_seconds"] == pytest.approx(want, rel=1e-6)
    for s in P.STRATEGIES[:-1]:
        assert P.plan(prof, topo, s).predicted["max_seconds"] >= want * (1 - 1e-9)


def test_strategies_and_plan_files(prof: P.Profile, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    topo = small_topo()
    plans = {s: P.plan(prof, topo, s, time_limit=10) for s in P.STRATEGIES}
    milp = plans["milp"]
    for s, p in plans.items():
        assert not p.predicted.get("violation")
        assert milp.predicted["max_seconds"] <= p.predicted["max_seconds"] * (1 + 1e-9), s
        assert sum(t["predicted_seconds"] for t in p.tables) == pytest.approx(sum(p.predicted["gpu_seconds"]))
    for t in plans["greedy_size"].tables:
        assert t["hot_rows"] in (0, t["rows"])
    assert milp.solver["start_accepted"]
    assert milp.solver["dual_bound"] <= milp.predicted["max_seconds"] * (1 + 1e-9)
    assert set(milp.summary()) >= {"max_ms", "spread", "hbm_access_share", "uvm_row_share", "solve_seconds", "mip_gap"}
    out = milp.save(tmp_path / "plan")
    for f in ("plan.json", "report.md", "remap.bin", "gpu_costs.png", "cdfs.png"):
        assert (out / f).stat().st_size > 0, f
    doc = json.loads((out / "plan.json").read_text())
    assert doc["version"] == 2 and doc["strategy"] == "milp"
    back = P.Plan.load(out)
    assert back.tables == milp.tables
    assert "slowest GPU" in (out / "report.md").read_text()


def test_remap_hot_rows_first(prof: P.Profile, tmp_path: Path) -> None:
    plan = P.plan(prof, small_topo(), "row_greedy")
    remap = plan.remap()
    for t in prof.to_dict(ranked=True)["tables"]:
        rows = t["rows"]
        new = remap.apply(t["name"], torch.arange(rows))
        assert sorted(new.tolist()) == list(range(rows))  # a bijection
        counts = _direct(_batches())[t["name"]]["counts"]
        hot = remap.hot_rows(t["name"])
        assert hot == plan.table(t["name"])["hot_rows"]
        # every row mapped below the split is at least as hot as every row above it
        inside = [counts.get(i, 0) for i in range(rows) if new[i] < min(hot, t["touched"])]
        outside = [counts.get(i, 0) for i in range(rows) if new[i] >= min(hot, t["touched"])]
        if inside and outside:
            assert min(inside) >= max(outside)
    kjt = _batches(seed=9, n=1)[0]
    mapped = remap.apply_kjt(kjt)
    parts = torch.split(kjt.values(), kjt.lengths().view(3, -1).sum(1).tolist())
    want = torch.cat([remap.apply(k, p) for k, p in zip(kjt.keys(), parts)])
    assert torch.equal(mapped.values(), want) and torch.equal(mapped.lengths(), kjt.lengths())
    plan.save(tmp_path / "p", plots=False)
    loaded = P.Remap.load(tmp_path / "p" / "remap.bin")
    assert torch.equal(loaded.apply("b", torch.arange(2000)), remap.apply("b", torch.arange(2000)))
    with pytest.raises(InvalidInputError, match="outside"):
        remap.apply("a", torch.tensor([300]))
    with pytest.raises(NotFoundError):
        remap.apply("zz", torch.tensor([1]))


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(0, 29), min_size=1, max_size=60), st.integers(0, 30))
def test_remap_is_a_bijection_property(ids: list[int], hbm_rows: int) -> None:
    prof = P.profile([{"x": torch.tensor(ids)}], [P.TableSpec("x", 30, 4)], sample_rate=1.0, steps=4)
    plan = P.plan(prof, P.Topology(nodes=1, gpus_per_node=1, hbm_bytes=hbm_rows * 16, host_bytes=1000,
                                   batch_size=8), "row_greedy")
    new = plan.remap().apply("x", torch.arange(30))
    assert sorted(new.tolist()) == list(range(30))
    freq = Counter(ids)
    ranked = sorted(freq, key=lambda i: (-freq[i], i))
    assert [int(new[i]) for i in ranked] == list(range(len(ranked)))


def test_bad_input_named_errors(prof: P.Profile) -> None:
    with pytest.raises(CapacityError, match=r"more needed"):
        P.plan(prof, small_topo(hbm_bytes=10, host_bytes=1000))
    with pytest.raises(NotFoundError, match="missing from the profile"):
        P.plan(prof, small_topo(), tables=["a", "nope"])
    with pytest.raises(InvalidInputError, match="negative budget"):
        P.plan(prof, small_topo(hbm_bytes=-1))
    with pytest.raises(InvalidInputError, match="strategy"):
        P.plan(prof, small_topo(), "fastest")
    with pytest.raises(InvalidInputError, match="empty profile"):
        P.Profile.from_dict({"version": 1, "tables": []})
    with pytest.raises(recgo.RecgoIOError):
        P.Profile.load("/nonexistent/profile.json")


def test_torchrec_bridges(prof: P.Profile) -> None:
    pytest.importorskip("torchrec")
    from recgo.planner._torchrec import torchrec_constraints, torchrec_placement, torchrec_sharding_plan

    topo = P.Topology(nodes=1, gpus_per_node=2, hbm_bytes=int(8e9), host_bytes=int(64e9), batch_size=512)
    placement, kernels = torchrec_placement(prof, topo)
    assert set(placement) == {"a", "b", "c"} and all(0 <= r < 2 for r, _ in placement.values())
    assert all(k == "fused" for k in kernels.values())  # tiny tables fit HBM
    assert all(h == prof.table(n)["rows"] for n, (_, h) in placement.items())
    plan = P.plan(prof, small_topo(), "milp", time_limit=10)
    sp = torchrec_sharding_plan(plan)
    cons = torchrec_constraints(plan)
    for t in plan.tables:
        ps = sp[t["name"]]
        assert ps.sharding_type == "table_wise" and ps.ranks == [t["rank"]]
        want = "fused" if t["hot_rows"] == t["rows"] else "fused_uvm" if t["hot_rows"] == 0 else "fused_uvm_caching"
        assert ps.compute_kernel == want and cons[t["name"]].compute_kernels == [want]
        if want == "fused_uvm_caching":
            assert ps.cache_params.load_factor == pytest.approx(t["hot_rows"] / t["rows"])


def test_cli_profile_and_plan(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    data = ROOT.parent / "shared" / "data" / "criteo" / "criteo_dac_train_head10109.txt"
    if not data.exists():
        pytest.skip("Criteo sample not present")
    env_py = sys.executable
    prof = tmp_path / "p.json"
    r = subprocess.run([env_py, "-m", "recgo", "profile", "--criteo", str(data), "--rows", "5000",
                        "--sample-rate", "0.5", "--out", str(prof)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([env_py, "-m", "recgo", "plan", "--profile", str(prof), "--out", str(tmp_path / "plan"),
                        "--nodes", "1", "--gpus-per-node", "2", "--hbm-gb", "0.002", "--host-gb", "1",
                        "--time-limit", "2", "--no-plots"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert len(doc["tables"]) == 26 and doc["solver"]["start_accepted"]
    assert (tmp_path / "plan" / "remap.bin").exists()
    r = subprocess.run([env_py, "-m", "recgo", "plan", "--profile", str(prof), "--out", str(tmp_path / "x"),
                        "--hbm-gb", "0", "--host-gb", "0.0001", "--nodes", "1", "--gpus-per-node", "1"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "CapacityError" in r.stderr and "more needed" in r.stderr


def test_planned_ebc_matches_the_original(prof: P.Profile) -> None:
    from recgo.modules.embedding import EmbeddingBagCollection, EmbeddingBagConfig

    cfgs = [EmbeddingBagConfig(num_embeddings=t.rows, embedding_dim=t.dim, name=t.name, feature_names=[t.name],
                               pooling="mean" if t.name == "b" else "sum") for t in TABLES]
    cfgs.append(EmbeddingBagConfig(num_embeddings=10, embedding_dim=4, name="free", feature_names=["free"]))
    plan = P.plan(prof, small_topo(), "milp", time_limit=10)
    ref = EmbeddingBagCollection(cfgs, seed=0)
    planned = P.PlannedEmbeddingBagCollection.from_ebc(ref, plan)
    for t in TABLES:
        hot = plan.table(t.name)["hot_rows"]
        assert planned.hot_region(t.name).shape[0] == hot
        assert planned.cold_region(t.name).shape[0] == t.rows - hot
        assert torch.equal(planned.original_weight(t.name), ref.embedding_bags[t.name].weight.detach())
    # the hottest profiled row of each table is the first row of its hot region
    for t in prof.tables:
        counts = _direct(_batches())[t["name"]]["counts"]
        hottest = min(counts, key=lambda i: (-counts[i], i))
        assert torch.equal(planned.ebc.embedding_bags[t["name"]].weight[0],
                           ref.embedding_bags[t["name"]].weight[hottest])
    kjt = _batches(seed=5, n=1)[0]
    g = torch.Generator().manual_seed(1)
    free_len = torch.randint(0, 3, (kjt.stride(),), generator=g)
    free = recgo.KeyedJaggedTensor(["free"], torch.randint(0, 10, (int(free_len.sum()),), generator=g), lengths=free_len)
    both = recgo.KeyedJaggedTensor(kjt.keys() + ["free"], torch.cat([kjt.values(), free.values()]),
                                   lengths=torch.cat([kjt.lengths(), free.lengths()]))
    with torch.no_grad():
        want, got = ref(both), planned(both)
    assert got.keys() == want.keys()
    torch.testing.assert_close(got.values(), want.values())
    wrong = [EmbeddingBagConfig(num_embeddings=5 if t.name == "a" else t.rows, embedding_dim=4, name=t.name,
                                feature_names=[t.name]) for t in TABLES]
    with pytest.raises(InvalidInputError, match="rows but the plan has"):
        P.PlannedEmbeddingBagCollection(wrong, plan)


def test_planned_ebc_from_torchrec_matches_torchrec(prof: P.Profile) -> None:
    torchrec = pytest.importorskip("torchrec")
    cfgs = [torchrec.EmbeddingBagConfig(num_embeddings=t.rows, embedding_dim=t.dim, name=t.name,
                                        feature_names=[t.name]) for t in TABLES]
    ref = torchrec.EmbeddingBagCollection(tables=cfgs)
    planned = P.PlannedEmbeddingBagCollection.from_ebc(ref, P.plan(prof, small_topo(), "row_greedy"))
    kjt = _batches(seed=8, n=1)[0]
    with torch.no_grad():
        want = ref(kjt.to_torchrec())
        got = planned(kjt.to_torchrec())
    assert type(got) is type(want)  # a torchrec.KeyedTensor for TorchRec input, like TorchRec's module
    assert got.keys() == want.keys() and got.length_per_key() == want.length_per_key()
    torch.testing.assert_close(got.values(), want.values())
    assert isinstance(planned(kjt), recgo.KeyedTensor)


def test_local_topology_without_a_driver_keeps_defaults() -> None:
    try:
        gpus = P.local_gpus()
    except NotFoundError as exc:
        assert "libnvidia-ml" in str(exc)
        gpus = []
    topo = P.Topology.local(batch_size=1024)
    assert topo.batch_size == 1024
    if not gpus and not torch.cuda.is_available():
        assert topo == P.Topology(batch_size=1024)
    elif gpus:
        assert topo.gpus_per_node == len(gpus) and topo.nodes == 1


@pytest.mark.parametrize("alpha", [0.7, 1.0, 1.3])
def test_power_law_exponent_recovers_zipf(alpha: float) -> None:
    from recgo.planner.synthetic import power_law_exponent

    counts = [int(1e6 * (r + 1) ** -alpha) for r in range(2000)]
    assert power_law_exponent(counts) == pytest.approx(alpha, abs=0.02)
    assert power_law_exponent([3, 2]) is None


def test_rm_models_double_in_size() -> None:
    from recgo.planner.synthetic import Fitted, rm_profile

    fitted = Fitted(alphas=[0.9, 1.1], coverages=[0.5, 1.0], poolings=[1.0, 8.0])
    sizes = []
    for name in ("rm1", "rm2", "rm3"):
        prof = rm_profile(name, fitted, tables=40)
        assert len(prof.tables) == 40
        sizes.append(sum(t["rows"] * t["dim"] * t["elem_bytes"] for t in prof.tables))
        for t in prof.tables:
            assert t["dim"] == 64 and 0 < t["touched"] <= t["rows"] and t["cdf"][-1]["frac"] == 1
    assert sizes[0] == pytest.approx(318e9, rel=1e-3)
    assert sizes[1] == pytest.approx(2 * sizes[0], rel=1e-3) and sizes[2] == pytest.approx(4 * sizes[0], rel=1e-3)
    with pytest.raises(InvalidInputError, match="rm9"):
        rm_profile("rm9", fitted)


def test_profile_reports_progress(capsys: pytest.CaptureFixture[str]) -> None:
    P.profile(_batches(n=3), TABLES, sample_rate=1.0, progress=1e-9)
    err = capsys.readouterr().err
    assert err.count("[recgo profile]") == 3 and "192 samples" in err


def test_planned_collections_refuse_dynamic_tables_by_name(prof: P.Profile) -> None:
    plan = P.plan(prof, small_topo(), "greedy_lookups")
    dyn = recgo.DynamicConfig(min_count=1)
    cfgs = [recgo.EmbeddingBagConfig(t.rows, t.dim, t.name, [t.name], dynamic=dyn if t.name == "b" else None)
            for t in TABLES]
    with pytest.raises(InvalidInputError, match=r"the plan covers dynamic-ID tables \['b'\].*plan the fixed tables only"):
        P.PlannedEmbeddingBagCollection(cfgs, plan)
    with pytest.raises(InvalidInputError, match=r"from_ebc: tables \['b'\] are dynamic-ID tables"):
        P.PlannedEmbeddingBagCollection.from_ebc(recgo.EmbeddingBagCollection(cfgs, seed=0), plan)


# A profile on which the row greedy's local search overflowed the node's host memory (found by a random
# brute-force sweep, 1 case in 120): re-splitting a GPU restarted its tables from their all-UVM options in
# index order and placed one that found no host memory left anyway, while MILP and every greedy fit.
_OVERFLOWED = {"version": 1, "sample_rate": 1.0, "tables": [{"name": "t0", "rows": 100, "dim": 4, "elem_bytes": 4, "samples": 1000, "lookups": 1000, "coverage": 0.5839586148109814, "pooling": 2.258565798121886, "touched": 44, "cdf": [{"rows": 0, "frac": 0.0}, {"rows": 2, "frac": 0.46443128136208256}, {"rows": 7, "frac": 0.7046824748521638}, {"rows": 17, "frac": 0.8108713748589025}, {"rows": 44, "frac": 1.0}]}, {"name": "t1", "rows": 50, "dim": 16, "elem_bytes": 4, "samples": 1000, "lookups": 1000, "coverage": 0.26114744848182736, "pooling": 3.4808149604214442, "touched": 46, "cdf": [{"rows": 0, "frac": 0.0}, {"rows": 28, "frac": 0.9072464418329662}, {"rows": 46, "frac": 1.0}]}, {"name": "t2", "rows": 50, "dim": 4, "elem_bytes": 4, "samples": 1000, "lookups": 1000, "coverage": 0.9422041458196628, "pooling": 3.7608116966193674, "touched": 46, "cdf": [{"rows": 0, "frac": 0.0}, {"rows": 11, "frac": 0.4274251776610529}, {"rows": 12, "frac": 0.5131182686750813}, {"rows": 25, "frac": 0.5853527487931638}, {"rows": 46, "frac": 1.0}]}]}


def test_row_greedy_plans_stay_within_capacity() -> None:
    prof = P.Profile.from_dict(_OVERFLOWED)
    topo = P.Topology(1, 2, 1715, 3496, batch_size=1024)
    for strategy in ("row_greedy", "milp"):
        plan = P.plan(prof, topo, strategy)
        assert not plan.predicted.get("violation"), (strategy, plan.predicted.get("violation"))


def test_planned_ebc_from_a_fused_collection_keeps_its_optimizer_and_state(prof: P.Profile) -> None:
    """from_ebc dropped the fused optimizer (the planned collection stopped training, silently) and its
    per-row state and step; they now come along, permuted hot-first with the rows."""
    from recgo.modules import optim
    from recgo.modules.embedding import EmbeddingBagCollection, EmbeddingBagConfig

    cfgs = [EmbeddingBagConfig(num_embeddings=t.rows, embedding_dim=t.dim, name=t.name, feature_names=[t.name])
            for t in TABLES]
    ref = EmbeddingBagCollection(cfgs, seed=0, optimizer=optim.Adagrad(lr=0.3))
    batches = _batches(seed=9, n=5)
    for kjt in batches[:2]:
        ref(kjt).values().sum().backward()
    planned = P.PlannedEmbeddingBagCollection.from_ebc(ref, P.plan(prof, small_topo(), "row_greedy"))
    assert isinstance(planned.ebc.fused_optimizer, optim.Adagrad)
    for kjt in batches[2:]:  # the two go on alike
        torch.testing.assert_close(planned(kjt).values(), ref(kjt).values())
        planned(kjt).values().sum().backward()
        ref(kjt).values().sum().backward()
    for t in TABLES:
        torch.testing.assert_close(planned.original_weight(t.name), ref.embedding_bags[t.name].weight.detach())
        assert int(planned.ebc.embedding_bags[t.name].optimizer_step) == int(ref.embedding_bags[t.name].optimizer_step)


def test_planned_ebc_refuses_copies_and_a_remap_without_tables(prof: P.Profile) -> None:
    """copy.deepcopy raised a bare TypeError telling the user to copy the module that owns the handle
    (which the planned collection is); DataPipeline(remap=) without tables renumbered nothing, silently."""
    import copy
    import pickle

    from recgo.data import SyntheticField, SyntheticSource
    from recgo.feature import Feature
    from recgo.modules.embedding import EmbeddingBagConfig

    cfgs = [EmbeddingBagConfig(num_embeddings=t.rows, embedding_dim=t.dim, name=t.name, feature_names=[t.name])
            for t in TABLES]
    plan = P.plan(prof, small_topo(), "row_greedy")
    planned = P.PlannedEmbeddingBagCollection(cfgs, plan)
    for copier in (copy.deepcopy, pickle.dumps):
        with pytest.raises(InvalidInputError, match="cannot be copied"):
            copier(planned)
    source = SyntheticSource(100, [SyntheticField(t.name, t.rows, 1.0) for t in TABLES], seed=1)
    with pytest.raises(InvalidInputError, match="renumbers the IDs of the tables given in tables="):
        recgo.DataPipeline(source, [Feature(t.name) for t in TABLES], 10, remap=planned.remap)
