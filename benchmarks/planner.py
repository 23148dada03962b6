"""RecShard planner benchmark: RM1/RM2/RM3-like models, every strategy and TorchRec's planner.

For each model: the modeled slowest-GPU time, per-GPU spread, share of lookups on HBM, share of rows
on UVM and solve time of the whole-table greedy baselines (by size, by lookups, combined), the
row-level greedy, the MILP (HiGHS, warm-started from the row-level greedy) and TorchRec's
EmbeddingShardingPlanner (table-wise, on meta-device tables, priced in recgo's cost model; mapping
in recgo/planner/_torchrec.py). Then the paper's cost-model ablation on RM3 and a generalisation
check on Criteo (profile the train head, replay the next-day test head through the remap).

    python benchmarks/planner.py            # full: 397 tables, MILP time limit 55 s
    python benchmarks/planner.py --quick    # 80 tables on a proportionally smaller cluster, < 1 min
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import DATA, Bench  # noqa: E402

from recgo import planner as P  # noqa: E402
from recgo.planner._torchrec import torchrec_placement  # noqa: E402
from recgo.planner.criteo import criteo_batches, criteo_tables  # noqa: E402
from recgo.planner.synthetic import fit_real_samples, rm_profile  # noqa: E402


bench = Bench("planner", description=__doc__)
QUICK = bench.quick
TABLES = 80 if QUICK else 397
SCALE = TABLES / 397
TIME_LIMIT = 3.0 if QUICK else 55.0
GAP = 0.005
TOPO = P.Topology(hbm_bytes=int(24e9 * SCALE), host_bytes=int(1500e9 * SCALE))
if QUICK:  # keep TorchRec's per-rank KJT reservation proportional to the smaller model
    TOPO.batch_size = 16384


def row(name: str, plan: P.Plan) -> dict:
    s = plan.summary()
    pred = plan.predicted
    return {"strategy": name, "max_ms": s["max_ms"], "spread": s["spread"],
            "hbm_access_share": s["hbm_access_share"], "uvm_row_share": s["uvm_row_share"],
            "solve_seconds": s["solve_seconds"], "mip_gap": s.get("mip_gap"),
            "gpu_ms": [x * 1e3 for x in pred["gpu_seconds"]], "violation": pred.get("violation", "")}


def run_model(model: str, fitted, topo: P.Topology | None = None) -> tuple[dict, dict]:
    topo = topo or TOPO
    prof = rm_profile(model.split("_")[0], fitted, tables=TABLES, size_scale=SCALE)
    total = sum(t["rows"] * t["dim"] * t["elem_bytes"] for t in prof.tables)
    print(f"== {model}: {len(prof.tables)} tables, {total / 1e9:.0f} GB", flush=True)
    plans: dict[str, P.Plan] = {}
    for s in P.STRATEGIES:
        plans[s] = P.plan(prof, topo, s, time_limit=TIME_LIMIT, mip_rel_gap=GAP)
        print(f"  {plans[s]}", flush=True)
    t0 = time.perf_counter()
    placement, kernels = torchrec_placement(prof, topo)
    tr_secs = time.perf_counter() - t0
    plans["torchrec"] = P.evaluate(prof, topo, placement, "torchrec")
    print(f"  {plans['torchrec']} (planned in {tr_secs:.1f} s)", flush=True)
    rows = {k: row(k, v) for k, v in plans.items()}
    rows["torchrec"]["solve_seconds"] = tr_secs
    rows["torchrec"]["kernels"] = {k: sum(1 for x in kernels.values() if x == k) for k in set(kernels.values())}
    m = plans["milp"]
    rows["milp"]["solver"] = m.solver
    rows["milp"]["warning"] = m.warning
    return rows, {"total_gb": total / 1e9, "plans": plans, "profile": prof}


def ablation(prof: P.Profile) -> list[dict]:
    out = []
    for cm in P.COST_MODELS:
        p = P.plan(prof, TOPO, "milp", cost_model=cm, time_limit=TIME_LIMIT / 2, mip_rel_gap=GAP)
        uvm = p.predicted["gpu_uvm_accesses"]
        out.append({"cost_model": cm, "uvm_accesses_max_per_gpu": max(uvm),
                    "uvm_accesses_mean_per_gpu": sum(uvm) / len(uvm), "max_ms": p.summary()["max_ms"],
                    "hbm_access_share": p.summary()["hbm_access_share"]})
        print(f"  ablation {cm}: max UVM lookups/GPU {max(uvm):,.0f}, slowest GPU {out[-1]['max_ms']:.3f} ms", flush=True)
    return out


def criteo_generalisation() -> dict | None:
    train = DATA / "criteo" / "criteo_dac_train_head10109.txt"
    test = DATA / "criteo" / "criteo_dac_test_head10000.txt"
    if not (train.exists() and test.exists()):
        return None
    rows = 100_000
    prof = P.profile(criteo_batches(train, rows), criteo_tables(rows), sample_rate=1.0)
    touched = sum(t["touched"] for t in prof.tables) * 64 * 4
    topo = P.Topology(nodes=1, gpus_per_node=2, hbm_bytes=int(touched * 0.15), host_bytes=int(2e9),
                      batch_size=4096)
    plans = {s: P.plan(prof, topo, s, time_limit=10, mip_rel_gap=1e-3) for s in P.STRATEGIES}
    plan = plans["milp"]
    remap = plan.remap()
    hits = {t["name"]: [0, 0] for t in plan.tables}
    for kjt in criteo_batches(test, rows):
        mapped = remap.apply_kjt(kjt)
        vals, lens = mapped.values(), mapped.lengths().view(len(mapped.keys()), -1).sum(1)
        for key, part in zip(mapped.keys(), torch.split(vals, lens.tolist())):
            hits[key][0] += int((part < remap.hot_rows(key)).sum())
            hits[key][1] += part.numel()
    per_table = []
    tot_pred = tot_meas = tot_n = 0.0
    for t in plan.tables:
        n = hits[t["name"]][1]
        lookups = t["coverage"] * t["pooling"]
        per_table.append({"table": t["name"], "hot_rows": t["hot_rows"], "predicted": t["hbm_access_share"],
                          "measured": hits[t["name"]][0] / n if n else 0.0})
        tot_pred += lookups * t["hbm_access_share"]
        tot_n += lookups
        tot_meas += hits[t["name"]][0]
    total_lookups = sum(h[1] for h in hits.values())
    res = {"strategies": {k: row(k, v) for k, v in plans.items()}, "hbm_budget_bytes": topo.hbm_bytes * topo.num_gpus, "predicted_hbm_hit_rate": tot_pred / tot_n,
           "measured_hbm_hit_rate": tot_meas / total_lookups, "per_table": per_table,
           "test_lookups": total_lookups}
    print(f"== criteo: predicted HBM hit rate {res['predicted_hbm_hit_rate']:.4f}, measured on the next day "
          f"{res['measured_hbm_hit_rate']:.4f}", flush=True)
    return res


def table(rows: dict[str, dict]) -> str:
    lines = ["| strategy | slowest GPU ms | spread | lookups on HBM | rows on UVM | solve s | gap |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows.values():
        gap = f"{r['mip_gap']:.4f}" if r.get("mip_gap") is not None else ""
        lines.append(f"| {r['strategy']} | {r['max_ms']:.4f} | {r['spread']:.3f} | {100 * r['hbm_access_share']:.2f} % "
                     f"| {100 * r['uvm_row_share']:.1f} % | {r['solve_seconds']:.2f} | {gap} |")
    return "\n".join(lines)


def main() -> None:
    fitted = fit_real_samples(DATA)
    bench.data["fitted_from"] = fitted.sources
    bench.data["topology"] = TOPO.to_dict()
    md = [f"Topology: {TOPO.nodes}×{TOPO.gpus_per_node} GPUs, {TOPO.hbm_bytes / 1e9:.1f} GB HBM each, "
          f"{TOPO.host_bytes / 1e9:.0f} GB host per node, batch {TOPO.batch_size}; {TABLES} tables of dim 64. "
          f"Skew/coverage/pooling fitted to: {', '.join(fitted.sources)}.", ""]
    results = {}
    keep = {}
    for model in ("rm1", "rm2", "rm3"):
        rows, extra = run_model(model, fitted)
        results[model] = rows
        keep[model] = extra
        md += [f"## {model.upper()} ({extra['total_gb']:.0f} GB)", "", table(rows), ""]
    # The same RM3 with a third of the HBM: the regime where the MILP's bound is weak.
    tight = P.Topology(**{**TOPO.to_dict(), "hbm_bytes": TOPO.hbm_bytes // 3})
    rows, extra = run_model("rm3_hbm8", fitted, tight)
    results["rm3_hbm8"] = rows
    md += [f"## RM3 with {tight.hbm_bytes / 1e9:.0f} GB HBM per GPU", "", table(rows), ""]
    # Symmetry rows (GPUs of a node ordered by load) on and off, RM3.
    nosym = P.plan(keep["rm3"]["profile"], TOPO, "milp", time_limit=TIME_LIMIT, mip_rel_gap=GAP, symmetry=False)
    bench.data["rm3_milp_without_symmetry"] = row("milp_nosym", nosym)
    cold = P.plan(keep["rm3"]["profile"], TOPO, "milp", time_limit=TIME_LIMIT, mip_rel_gap=GAP, warm_start=False)
    bench.data["rm3_milp_cold"] = row("milp_cold", cold)
    bench.data["rm3_milp_cold"]["solver"] = cold.solver
    bench.data["rm3_milp_cold"]["warning"] = cold.warning
    if cold.solver:
        cold_text = (f"{cold.summary()['max_ms']:.4f} ms after {cold.solve_seconds:.1f} s ({cold.solver['status']}, "
                     f"gap {cold.solver['mip_gap']:.4f})")
    else:  # HiGHS found no incumbent in the time limit; the plan is the row-level greedy's fallback
        cold_text = f"no incumbent within {TIME_LIMIT:.0f} s ({cold.warning})"
    md += [f"RM3 MILP without a warm start: {cold_text}; warm-started: {results['rm3']['milp']['max_ms']:.4f} ms "
           f"in {results['rm3']['milp']['solve_seconds']:.1f} s.", ""]
    md += ["RM3 MILP without the symmetry rows: "
           f"{nosym.summary()['max_ms']:.4f} ms, solve {nosym.solve_seconds:.1f} s, gap {nosym.solver['mip_gap']:.4f} "
           f"(with them: {results['rm3']['milp']['solve_seconds']:.1f} s, gap {results['rm3']['milp']['mip_gap']:.4f}).", ""]
    bench.data["models"] = results
    summary = {}
    for model, rows in results.items():
        if model not in ("rm1", "rm2", "rm3"):
            continue
        best = min(rows[s]["max_ms"] for s in ("greedy_size", "greedy_lookups", "greedy_size_lookups"))
        summary[f"milp_vs_best_greedy_{model}"] = best / rows["milp"]["max_ms"]
    r3 = results["rm3"]
    summary.update(milp_vs_torchrec_rm3=r3["torchrec"]["max_ms"] / r3["milp"]["max_ms"],
                   milp_vs_row_greedy_rm3=r3["row_greedy"]["max_ms"] / r3["milp"]["max_ms"],
                   hbm_access_share_rm3=r3["milp"]["hbm_access_share"], uvm_row_share_rm3=r3["milp"]["uvm_row_share"],
                   solve_seconds_rm3=r3["milp"]["solve_seconds"], mip_gap_rm3=r3["milp"]["mip_gap"],
                   solve_seconds_rm3_without_symmetry=nosym.solve_seconds,
                   milp_cold_found_incumbent_rm3=cold.solver is not None,
                   milp_vs_best_greedy_rm3_hbm8=min(results["rm3_hbm8"][s]["max_ms"] for s in (
                       "greedy_size", "greedy_lookups", "greedy_size_lookups")) / results["rm3_hbm8"]["milp"]["max_ms"],
                   mip_gap_rm3_hbm8=results["rm3_hbm8"]["milp"]["mip_gap"])
    print("== ablation (RM3)", flush=True)
    abl = ablation(keep["rm3"]["profile"])
    bench.data["ablation_rm3"] = abl
    md += ["## Cost-model ablation (RM3, MILP under each model, evaluated with the full model)", "",
           "| cost model | max UVM lookups per GPU per step | mean | slowest GPU ms (full model) | lookups on HBM |",
           "|---|---:|---:|---:|---:|"]
    md += [f"| {a['cost_model']} | {a['uvm_accesses_max_per_gpu']:,.0f} | {a['uvm_accesses_mean_per_gpu']:,.0f} | "
           f"{a['max_ms']:.4f} | {100 * a['hbm_access_share']:.3f} % |" for a in abl]
    summary["ablation_uvm_max_cdf_over_full_rm3"] = abl[0]["uvm_accesses_max_per_gpu"] / max(1e-9, abl[-1]["uvm_accesses_max_per_gpu"])
    gen = criteo_generalisation()
    if gen:
        bench.data["criteo_generalisation"] = gen
        summary["criteo_predicted_hbm_hit_rate"] = gen["predicted_hbm_hit_rate"]
        summary["criteo_measured_hbm_hit_rate"] = gen["measured_hbm_hit_rate"]
        summary["criteo_milp_vs_row_greedy"] = (gen["strategies"]["row_greedy"]["max_ms"]
                                                / gen["strategies"]["milp"]["max_ms"])
        md += ["", "## Generalisation (Criteo: profile the train head, replay the next-day test head)", "",
               f"HBM budget {gen['hbm_budget_bytes'] / 1e6:.1f} MB; predicted HBM hit rate "
               f"{100 * gen['predicted_hbm_hit_rate']:.2f} %, measured on the test day "
               f"{100 * gen['measured_hbm_hit_rate']:.2f} % over {gen['test_lookups']:,} lookups.", "",
               "Strategies on this 2-GPU topology:", "", table(gen["strategies"]), "",
               "| table | hot rows | predicted | measured |", "|---|---:|---:|---:|"]
        md += [f"| {t['table']} | {t['hot_rows']} | {t['predicted']:.3f} | {t['measured']:.3f} |" for t in gen["per_table"]]
    bench.summary(**summary)
    out = bench.args.out
    out.mkdir(parents=True, exist_ok=True)
    suffix = "_quick" if QUICK else ""
    plans = keep["rm3"]["plans"]
    P.plot_gpu_costs({k: plans[k] for k in ("greedy_size", "greedy_lookups", "greedy_size_lookups", "row_greedy",
                                            "milp", "torchrec")}, out / f"planner_rm3_gpu_costs{suffix}.png",
                     title="RM3: modeled per-GPU embedding time by strategy")
    P.plot_cdfs(keep["rm3"]["profile"], out / f"planner_rm3_cdfs{suffix}.png")
    md += ["", f"Plots: `planner_rm3_gpu_costs{suffix}.png` (per-GPU cost by strategy), "
               f"`planner_rm3_cdfs{suffix}.png` (access CDFs of the heaviest tables)."]
    bench.note("TorchRec: EmbeddingShardingPlanner, table-wise only, kernels fused / fused_uvm / fused_uvm_caching; "
               "priced in recgo's model with fused = all rows hot, fused_uvm = none, caching = load factor × rows "
               "holding the hottest rows (an ideal cache).")
    bench.note("Ablation: cdf = UVM share only, +coverage, +pooling (UVM lookups/step), full = both tiers' bytes "
               "priced by their bandwidths. With every table at dim 64 the full model differs from +pooling only by "
               "pricing HBM traffic.")
    bench.write("\n".join(md))


if __name__ == "__main__":
    main()
