"""recgo's command line: ``python -m recgo plan ...`` and ``python -m recgo profile ...``.

    python -m recgo profile --criteo train.txt --rows 100000 --sample-rate 0.01 --out profile.json
    python -m recgo profile --synthetic rm3 --out rm3.json
    python -m recgo plan --profile profile.json --out plan/ [--strategy milp] [--nodes 2 --gpus-per-node 8
        --hbm-gb 24 --host-gb 1500 --hbm-bw-gbs 850 --uvm-bw-gbs 22 --batch-size 16384] [--time-limit 60]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from .errors import RecgoError


def _profile(args: argparse.Namespace) -> int:
    from . import planner as P

    if args.criteo:
        from .planner.criteo import criteo_batches, criteo_tables

        prof = P.profile(criteo_batches(args.criteo, args.rows, args.batch_size), criteo_tables(args.rows, args.dim),
                         sample_rate=args.sample_rate, seed=args.seed, steps=args.steps, progress=True)
    else:
        from .planner.synthetic import rm_profile

        prof = rm_profile(args.synthetic, tables=args.tables, seed=args.seed)
    prof.save(args.out)
    tabs = prof.tables
    print(f"profiled {len(tabs)} tables -> {args.out}")
    return 0


def _plan(args: argparse.Namespace) -> int:
    from . import planner as P

    prof = P.Profile.load(args.profile)
    topo = P.Topology(nodes=args.nodes, gpus_per_node=args.gpus_per_node, hbm_bytes=int(args.hbm_gb * 1e9),
                      host_bytes=int(args.host_gb * 1e9), hbm_bandwidth=args.hbm_bw_gbs * 1e9,
                      uvm_bandwidth=args.uvm_bw_gbs * 1e9, batch_size=args.batch_size)
    strategies = P.STRATEGIES if args.strategy == "all" else (args.strategy,)
    plans = {}
    for s in strategies:
        plans[s] = P.plan(prof, topo, s, cost_model=args.cost_model, time_limit=args.time_limit,
                          mip_rel_gap=args.gap, threads=args.threads)
        print(plans[s])
        if plans[s].warning:
            print(f"warning: {plans[s].warning}", file=sys.stderr)
    main = plans[strategies[-1]]
    out = main.save(args.out, plots=not args.no_plots)
    if len(plans) > 1 and not args.no_plots:
        P.plot_gpu_costs(plans, out / "gpu_costs.png")
    print(json.dumps(main.summary(), indent=1))
    print(f"wrote {out}/plan.json, report.md" + (", remap.bin" if (out / "remap.bin").exists() else ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m recgo``."""
    ap = argparse.ArgumentParser(prog="python -m recgo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    pp = sub.add_parser("profile", help="profile table accesses of a data sample")
    src = pp.add_mutually_exclusive_group(required=True)
    src.add_argument("--criteo", help="Criteo DAC TSV file (C1..C26 become tables)")
    src.add_argument("--synthetic", choices=["rm1", "rm2", "rm3"], help="a RecShard-shaped synthetic model")
    pp.add_argument("--out", required=True)
    pp.add_argument("--rows", type=int, default=100_000, help="hash buckets per Criteo table")
    pp.add_argument("--dim", type=int, default=64)
    pp.add_argument("--tables", type=int, default=397, help="tables of a synthetic model")
    pp.add_argument("--sample-rate", type=float, default=0.01)
    pp.add_argument("--batch-size", type=int, default=1024)
    pp.add_argument("--steps", type=int, default=16, help="CDF quantile steps")
    pp.add_argument("--seed", type=int, default=0)
    pp.set_defaults(func=_profile)
    pl = sub.add_parser("plan", help="place profiled tables on a cluster")
    pl.add_argument("--profile", required=True, help="profile JSON (python -m recgo profile)")
    pl.add_argument("--out", required=True, help="output folder for plan.json, report.md, remap.bin, plots")
    pl.add_argument("--strategy", default="milp",
                    choices=["all", "greedy_size", "greedy_lookups", "greedy_size_lookups", "row_greedy", "milp"])
    pl.add_argument("--cost-model", default="full", choices=["cdf", "cdf+coverage", "cdf+coverage+pooling", "full"])
    pl.add_argument("--nodes", type=int, default=2)
    pl.add_argument("--gpus-per-node", type=int, default=8)
    pl.add_argument("--hbm-gb", type=float, default=24.0, help="HBM budget per GPU (GB)")
    pl.add_argument("--host-gb", type=float, default=1500.0, help="host memory budget per node (GB)")
    pl.add_argument("--hbm-bw-gbs", type=float, default=850.0)
    pl.add_argument("--uvm-bw-gbs", type=float, default=22.0)
    pl.add_argument("--batch-size", type=int, default=16384, help="global batch size")
    pl.add_argument("--time-limit", type=float, default=60.0, help="MILP time limit (s)")
    pl.add_argument("--gap", type=float, default=0.01, help="MILP target relative gap")
    pl.add_argument("--threads", type=int, default=0)
    pl.add_argument("--no-plots", action="store_true")
    pl.set_defaults(func=_plan)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; recgo errors print as one line and exit with status 2."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except RecgoError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
