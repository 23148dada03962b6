"""recgo's command line (`recgo ...` once installed, or `python -m recgo ...`): ``train``, ``profile`` and ``plan``.

    python -m recgo train [--model dlrm|dcnv2|bst] [--data FILE] [--backend recgo|torchrec|torch|all]
        [--steps N | --epochs E] [--batch-size B] [--config train.yaml] [--out train-report/]

    python -m recgo profile --criteo train.txt --sample-rate 0.01 --out profile.json [--rows BUCKETS]
    python -m recgo profile --synthetic rm3 [--fit-data DIR] --out rm3.json
    python -m recgo plan --profile profile.json --out plan/ [--strategy milp] [--nodes 2 --gpus-per-node 8
        --hbm-gb 24 --host-gb 1500 --hbm-bw-gbs 850 --uvm-bw-gbs 22 --batch-size 16384] [--time-limit 60]

Each subcommand is one ``_add_<name>`` function (its arguments) and one ``_<name>`` function (its
work). Errors print as one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

from .errors import CapacityError, InvalidInputError, RecgoError, RecgoIOError

#: Defaults of the plan topology flags (RecShard's cluster: 2 nodes × 8 GPUs × 24 GB).
TOPOLOGY_FLAGS: dict[str, tuple[str, float, str]] = {
    "nodes": ("nodes", 2, "nodes"),
    "gpus_per_node": ("gpus_per_node", 8, "GPUs per node"),
    "hbm_gb": ("hbm_bytes", 24.0, "HBM budget per GPU (GB)"),
    "host_gb": ("host_bytes", 1500.0, "host memory budget per node (GB)"),
    "hbm_bw_gbs": ("hbm_bandwidth", 850.0, "HBM row-read bandwidth (GB/s)"),
    "uvm_bw_gbs": ("uvm_bandwidth", 22.0, "UVM row-read bandwidth (GB/s)"),
    "batch_size": ("batch_size", 16384, "global batch size"),
}


def _writable_dir(path: str) -> Path:
    """Check that folder ``path`` can be written, or created, before any long work. Nothing is
    created here (the save does that), so a run refused later leaves no empty folder behind."""
    d = Path(path)
    if os.path.lexists(d):
        if not d.is_dir():  # a file, or a link to nothing
            raise RecgoIOError(f"--out {path}: not a folder")
        if not os.access(d, os.W_OK | os.X_OK):
            raise RecgoIOError(f"--out {path}: the folder is not writable")
        return d
    base = d.absolute().parent
    while not os.path.lexists(base) and base != base.parent:  # the nearest ancestor that exists
        base = base.parent
    if not base.is_dir() or not os.access(base, os.W_OK | os.X_OK):
        raise RecgoIOError(f"--out {path}: cannot create the folder ({base} is not a writable folder)")
    return d


def _writable_file(path: str) -> Path:
    """Check that file ``path`` can be created, before any long work."""
    p = Path(path)
    if p.is_dir():  # the save would fail only after the whole profiling run
        raise RecgoIOError(f"--out {path}: is a folder; name the file to write (e.g. {p / 'profile.json'})")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise RecgoIOError(f"--out {path}: cannot write there (missing or read-only folder, or read-only file)")
    return p


def _add_profile(sub: Any) -> None:
    pp = sub.add_parser("profile", help="profile table accesses of a data sample")
    src = pp.add_mutually_exclusive_group(required=True)
    src.add_argument("--criteo", help="Criteo DAC TSV file, or a glob pattern of several (C1..C26 become tables)")
    src.add_argument("--synthetic", choices=["rm1", "rm2", "rm3"], help="a RecShard-shaped synthetic model")
    pp.add_argument("--out", required=True, help="the profile JSON file to write (python -m recgo plan --profile)")
    pp.add_argument("--rows", type=int, default=None, help="hash buckets per Criteo table (default 100000)")
    pp.add_argument("--dim", type=int, default=None, help="embedding dimension of the Criteo tables (default 64)")
    pp.add_argument("--tables", type=int, default=None, help="tables of a synthetic model (default 397)")
    pp.add_argument("--fit-data", help="folder of real samples to fit a synthetic model's skew, coverage and "
                                       "pooling to (default: the paper's typical spread)")
    pp.add_argument("--sample-rate", type=float, default=None, help="share of Criteo rows sampled (default 0.01)")
    pp.add_argument("--min-lookups", type=int, default=None,
                    help="warn for tables whose profile rests on fewer sampled lookups (default 1000)")
    pp.add_argument("--batch-size", type=int, default=None, help="rows per Criteo batch read (default 1024)")
    pp.add_argument("--steps", type=int, default=None, help="CDF quantile steps of a Criteo profile (default 16)")
    pp.add_argument("--seed", type=int, default=0, help="seed of the row sample or the synthetic model (default 0)")
    pp.set_defaults(func=_profile)


def _profile(args: argparse.Namespace) -> int:
    from . import planner as P

    only = (("rows", 100_000), ("dim", 64), ("sample_rate", 0.01), ("min_lookups", 1000), ("batch_size", 1024),
            ("steps", 16)) if args.criteo else (("tables", 397),)
    other = ("tables", "fit_data") if args.criteo else ("rows", "dim", "sample_rate", "min_lookups", "batch_size",
                                                        "steps")
    given = ["--" + k.replace("_", "-") for k in other if getattr(args, k) is not None]
    if given:  # a flag of the other source would be silently ignored
        raise InvalidInputError(f"{', '.join(given)} only applies to {'--synthetic' if args.criteo else '--criteo'} "
                                "profiles")
    for k, default in only:
        if getattr(args, k) is None:
            setattr(args, k, default)
    out = _writable_file(args.out)
    if args.criteo:
        from .planner.criteo import criteo_batches, criteo_tables

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", P.ThinProfileWarning)
            prof = P.profile(criteo_batches(args.criteo, args.rows, args.batch_size),
                             criteo_tables(args.rows, args.dim), sample_rate=args.sample_rate, seed=args.seed,
                             steps=args.steps, progress=True, min_lookups=args.min_lookups)
        offered, kept = prof.sampled or (0, 0)
        print(f"sampled {kept:,} of {offered:,} rows ({100 * args.sample_rate:g} % sample rate)")
        for w in caught:
            print(f"warning: {w.message}", file=sys.stderr)
    else:
        from .planner.synthetic import PAPER_DEFAULTS, fit_real_samples, rm_profile

        fitted = fit_real_samples(args.fit_data) if args.fit_data else PAPER_DEFAULTS
        prof = rm_profile(args.synthetic, fitted, tables=args.tables, seed=args.seed)
        print(f"synthetic {args.synthetic}: facts from {', '.join(fitted.sources)}")
    prof.save(out)
    print(f"profiled {len(prof.tables)} tables -> {out}")
    return 0


def _add_plan(sub: Any) -> None:
    pl = sub.add_parser("plan", help="place profiled tables on a cluster")
    pl.add_argument("--profile", required=True, help="profile JSON (python -m recgo profile)")
    pl.add_argument("--out", required=True, help="output folder for plan.json, report.md, remap.bin, plots")
    pl.add_argument("--strategy", default="milp",
                    choices=["all", "greedy_size", "greedy_lookups", "greedy_size_lookups", "row_greedy", "milp"],
                    help="placement strategy (default milp); all runs every one, compares them in gpu_costs.png "
                         "and writes the last (milp); a baseline that cannot place the tables is reported and left "
                         "out of the comparison")
    pl.add_argument("--cost-model", default="full", choices=["cdf", "cdf+coverage", "cdf+coverage+pooling", "full"],
                    help="what the cost model prices (default full)")
    for flag, (_, default, text) in TOPOLOGY_FLAGS.items():
        pl.add_argument("--" + flag.replace("_", "-"), type=type(default), default=None,
                        help=f"{text} (default {default:g})")
    pl.add_argument("--time-limit", type=float, default=60.0,
                    help="bound on each planning call (s, > 0; default 60; past about 292 years: none)")
    pl.add_argument("--gap", type=float, default=0.01, help="MILP target relative gap (default 0.01)")
    pl.add_argument("--threads", type=int, default=0,
                    help="HiGHS threads (default 0: recgo's worker count; at most 1024)")
    pl.add_argument("--memory-limit-gb", type=float, default=None, help="cap on the planner's model (GB; default 8 GiB)")
    pl.add_argument("--no-plots", action="store_true", help="write no PNG plots (they need recgo[plots])")
    pl.add_argument("--no-progress", action="store_true", help="no progress line on stderr while a plan is solved")
    pl.set_defaults(func=_plan)


def _topology(args: argparse.Namespace) -> tuple[Any, list[str]]:
    """The topology from the flags, and the names of the flags left at their defaults."""
    from . import planner as P

    facts: dict[str, Any] = {}
    defaulted = []
    for flag, (field, default, _) in TOPOLOGY_FLAGS.items():
        value = getattr(args, flag)
        if value is None:
            value = default
            defaulted.append("--" + flag.replace("_", "-"))
        facts[field] = value * 1e9 if flag.endswith(("_gb", "_gbs")) else value
        if not isinstance(facts[field], (int, float)) or not math.isfinite(facts[field]):
            raise InvalidInputError(f"--{flag.replace('_', '-')} must be a finite number, got {value!r}")
    for k in ("hbm_bytes", "host_bytes"):
        facts[k] = int(facts[k])
    return P.Topology(**facts), defaulted


def _plan(args: argparse.Namespace) -> int:
    from . import planner as P
    from .planner._plan import PLOT_FILES
    from .planner._plots import require_matplotlib

    if not args.no_plots:
        require_matplotlib()
    out = _writable_dir(args.out)
    prof = P.Profile.load(args.profile)
    topo, defaulted = _topology(args)
    note = ""
    if defaulted:
        note = f" [defaults: {', '.join(defaulted)}; set them for your cluster]"
    print(f"topology: {topo.describe()}{note}", flush=True)
    limit = None
    if args.memory_limit_gb is not None:
        if not args.memory_limit_gb * 1e9 >= 1:  # 0 bytes is HiGHS's "default", NaN compares false
            raise InvalidInputError(f"--memory-limit-gb must be a positive size, got {args.memory_limit_gb}")
        limit = int(args.memory_limit_gb * 1e9)
    strategies = P.STRATEGIES if args.strategy == "all" else (args.strategy,)
    plans, unplaced = {}, []
    for s in strategies:
        try:
            plans[s] = P.plan(prof, topo, s, cost_model=args.cost_model, time_limit=args.time_limit,
                              mip_rel_gap=args.gap, threads=args.threads, memory_limit=limit,
                              progress=not args.no_progress and sys.stderr.isatty())
        except CapacityError as exc:
            if s == strategies[-1]:  # the plan to write: its failure is the run's
                raise
            # a baseline that cannot pack the tables is a result of the comparison, not the run's end
            unplaced.append(s)
            print(f"{s}: no placement (CapacityError)")
            print(f"warning: {s} could not place the tables and is left out of the comparison: {exc}",
                  file=sys.stderr)
            continue
        print(plans[s])
        if plans[s].warning:
            print(f"warning: {plans[s].warning}", file=sys.stderr)
    main = plans[strategies[-1]]
    main.save(out, plots=not args.no_plots)
    if len(strategies) > 1 and not args.no_plots:
        missing = f" ({', '.join(unplaced)}: no placement)" if unplaced else ""
        P.plot_gpu_costs(plans, out / "gpu_costs.png", title=f"Per-GPU modeled cost by strategy{missing}")
    print(json.dumps(main.summary(), indent=1))
    if unplaced:
        print(f"compared {', '.join(plans)}; {', '.join(unplaced)} could not place the tables")
    # Plan.save removes an earlier plan's remap.bin and plots it does not rewrite: what is there is this run's
    written = [f for f in ("plan.json", "report.md", "remap.bin", *PLOT_FILES) if (out / f).exists()]
    print(f"wrote {out}/{', '.join(written)}")
    return 0


#: Subcommands: name → the function adding its parser (a later ``train`` adds one line here).
def _add_train(sub: Any) -> None:
    from .train.cli import add_parser

    add_parser(sub)


SUBCOMMANDS: dict[str, Callable[[Any], None]] = {"train": _add_train, "profile": _add_profile, "plan": _add_plan}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m recgo``."""
    prog = "recgo" if Path(sys.argv[0]).name == "recgo" else "python -m recgo"  # the console script, or -m
    ap = argparse.ArgumentParser(prog=prog, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS.values():
        add(sub)
    for p in sub.choices.values():  # a subcommand's unknown flag is reported with its own usage (main)
        p.set_defaults(parser=p)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; recgo errors and file errors print as one line and exit with status 2, recgo's
    warnings as one line each, Ctrl-C prints one line and exits with 130 (the shell's code for SIGINT)."""
    from ._cli_warnings import one_line_warnings
    from ._signals import terminate_as_interrupt

    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # argparse would show the top-level usage, which lists no subcommand's flags
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        with terminate_as_interrupt(), one_line_warnings():  # a scheduler's stop cleans up as Ctrl-C does
            return args.func(args)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM
        return _interrupted(args)
    except Exception as exc:
        if _caused_by_interrupt(exc):  # e.g. torch's zip writer failing as a Ctrl-C unwinds a checkpoint save
            return _interrupted(args)
        if not isinstance(exc, (RecgoError, OSError)):
            raise
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


def _caused_by_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while a KeyboardInterrupt was being handled or unwound."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def _interrupted(args: argparse.Namespace) -> int:
    """Say the job was interrupted (and how to resume it); the shell's status for SIGINT."""
    # train's effective config (flags over the YAML) once it is built; the flags before that
    cfg = getattr(args, "effective_config", None) or args
    every = getattr(cfg, "checkpoint_every", None)
    checkpoint = getattr(cfg, "checkpoint", None)
    hint = (f"; --resume continues from the last checkpoint ({checkpoint}, every {every} steps)"
            if checkpoint and every else "")
    out = getattr(args, "out", None)
    note = f"; no report was written to {out}" if out and getattr(args, "command", None) == "train" else ""
    print(f"interrupted{note}{hint}", file=sys.stderr)
    return 130


if __name__ == "__main__":
    sys.exit(main())
