"""``python -m recgo train``: flags, an optional YAML file for the rest, and the printed summary."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any

from .. import _extras
from .backends import BACKENDS
from .data import Source
from .loop import MODELS, TrainConfig
from .report import prepare
from .run import TURN_STEPS


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register the ``train`` subcommand on an ``argparse`` subparsers object."""
    p = sub.add_parser("train", help="train a ranking model with recgo (and TorchRec / torch side by side)",
                       description="Train DLRM, DCNv2 (Criteo-format or synthetic data) or BST (Taobao sequences) "
                                   "on one or more embedding backends and write a side-by-side report.")
    p.add_argument("--model", choices=MODELS, default=None, help="model (default dlrm)")
    p.add_argument("--data", default=None, nargs="+", metavar="FILE",
                   help="Criteo TSV (dlrm, dcnv2; several files or a glob: trained on in natural order, the last "
                        "file's tail held out) or Taobao UserBehavior CSV (bst); default: synthetic data with a "
                        "planted model (Criteo-shaped; Taobao-shaped for bst)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default 300)")
    p.add_argument("--epochs", type=float, default=None, help="passes over a data file (instead of --steps)")
    p.add_argument("--batch-size", type=int, default=None, help="samples per step (per rank with --nproc; default 1024)")
    p.add_argument("--backend", default="recgo",
                   help=f"one of {', '.join(BACKENDS)} or 'all' (comma-separated list ok; default recgo)")
    p.add_argument("--nproc", type=int, default=None,
                   help="ranks (default 1, or torchrun's world size under torchrun): spawns them, or runs as one "
                        "rank of torchrun's world; --batch-size is per rank")
    p.add_argument("--sharding", default=None, help="recgo's table sharding with --nproc > 1: hash (default), "
                                                    "table_wise or row_wise")
    p.add_argument("--config", default=None,
                   help="YAML file with any TrainConfig field (flags win; --epochs, --backend, --out and the "
                        "run-control flags are flags only)")
    p.add_argument("--out", default="train-report", help="folder for report.json, report.md and plots")
    p.add_argument("--checkpoint", default=None, help="checkpoint path prefix (one file per backend)")
    p.add_argument("--checkpoint-every", type=int, default=None, help="steps between checkpoints (default 0: only at the end)")
    p.add_argument("--resume", action="store_true", help="continue each backend from its checkpoint")
    p.add_argument("--eval-every", type=int, default=None, help="steps between validation passes (default 100)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the data split, initial weights and synthetic data (default 0)")
    p.add_argument("--shuffle", type=int, default=None, metavar="ROWS",
                   help="read the training data in windows of ROWS rows, each in a random order, a new one every "
                        "epoch (default 0: file order; the same order on every backend)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--sequential", action="store_true",
                   help="train the backends one after another, one model in memory at a time (default: all "
                        f"built together and trained in interleaved turns of {TURN_STEPS} steps, so that a "
                        "change in the machine's load slows them alike)")
    p.add_argument("--ablation", action="store_true",
                   help="bst only: also measure samples/s with the pipeline, fused transforms and dedup switched "
                        "off one after the other (RecIS Fig. 7) and add the table and plot to the report")
    p.add_argument("--ablation-steps", type=int, default=None,
                   help=f"timed steps per ablation round (default {ABLATION_STEPS}; with --ablation)")
    p.add_argument("--ablation-repeats", type=int, default=None,
                   help=f"interleaved ablation rounds (default {ABLATION_REPEATS}; with --ablation)")
    p.set_defaults(func=run_cli)
    return p


ABLATION_STEPS, ABLATION_REPEATS = 20, 3  # --ablation-steps, --ablation-repeats when not given
_BST_ONLY = ("max_len", "holdout_events", "catalog", "activation")  # the sequence model's fields
_CRITEO_ONLY = ("max_rows",)  # the Criteo models' (a cap on the rows read)


def _config(args: argparse.Namespace) -> tuple[TrainConfig, Source | None]:
    """The run's config from --config and the flags, and the data source when --epochs needed one to
    count its batches (so a single-process run reads the file once, not twice)."""
    from ..errors import InvalidInputError

    fields: dict[str, Any] = {}
    if args.config:
        from .._config_text import load_yaml
        from .._textfiles import read_regular

        loaded = load_yaml(read_regular(args.config, "config"), str(args.config)) or {}  # a repeated key refused
        if not isinstance(loaded, dict):
            raise InvalidInputError(f"{args.config}: expected a mapping of TrainConfig fields")
        known = {f.name for f in dataclasses.fields(TrainConfig)}
        bad = sorted(set(loaded) - known)
        if bad:
            raise InvalidInputError(f"{args.config}: unknown fields {bad} (known: {sorted(known)})")
        for name in ("sparse_lr", "dense_lr", "dist_timeout"):  # YAML 1.1 reads 1e-3 (no dot) as a string
            v = loaded.get(name)
            if isinstance(v, str):
                try:
                    loaded[name] = float(v)
                except ValueError:
                    pass  # validate names it
        fields.update(loaded)
    for name in ("model", "data", "steps", "batch_size", "checkpoint", "checkpoint_every", "eval_every", "seed",
                 "nproc", "sharding", "shuffle"):
        v = getattr(args, name)
        if name == "data" and v is not None and len(v) == 1:  # one file (or pattern): a path, as before
            v = v[0]
        if v is not None:
            fields[name] = v
    if "nproc" not in fields:
        from .distributed import env_world

        started = env_world()  # under torchrun: one rank of its world
        if started is not None:
            fields["nproc"] = started[1]
    cfg = TrainConfig(**fields)
    cfg.validate()  # before the arithmetic below uses its numbers
    multi = [k for k in ("sharding", "exchange", "nodes") if k in fields and fields[k] is not None]
    if multi and cfg.nproc == 1:  # from a flag or the YAML (the YAML's were ignored in silence)
        warnings.warn(f"{', '.join(multi)} appl{'ies' if len(multi) == 1 else 'y'} with --nproc > 1; one process "
                      "holds every table whole and exchanges nothing", stacklevel=2)
    if cfg.checkpoint_every and not cfg.checkpoint:  # from a flag or the YAML: it did nothing in silence
        warnings.warn("--checkpoint-every applies with --checkpoint; no checkpoint is written", stacklevel=2)
    _check_ablation(args, cfg)
    unused = sorted(k for k in fields if k in (_CRITEO_ONLY if cfg.model == "bst" else _BST_ONLY))
    if unused:  # the report records them as set: say they did nothing
        warnings.warn(f"{unused} do not apply to --model {cfg.model} and are ignored", stacklevel=2)
    source = None
    if args.epochs is not None:
        from .loop import make_source

        if not 0 < args.epochs < float("inf"):  # also NaN
            raise InvalidInputError(f"--epochs must be a positive number, got {args.epochs} (a finite count of passes)")
        if args.steps is not None:
            raise InvalidInputError("give --steps or --epochs, not both")

        source = make_source(cfg, progress=not args.no_progress)
        # exactly, from the number as written (0.29 × 100 batches is 29 steps; the float product was 28.99...)
        per_pass = source.batches_per_epoch(cfg.nproc)
        steps = max(1, int(Fraction(repr(args.epochs)) * per_pass))
        if steps >= 2**63:  # (1e308 overflowed the float product with a traceback)
            raise InvalidInputError(f"--epochs {args.epochs} of {per_pass} steps each is more than 2^63 - 1 steps")
        cfg.steps = steps  # steps of nproc × batch_size
    # eval_every stays as set, even above steps (the run evaluates its last step anyway): a checkpoint
    # then keeps the user's grid, and a resumed run with more steps evaluates where the uninterrupted one does.
    return cfg, source


def _check_ablation(args: argparse.Namespace, cfg: TrainConfig) -> None:
    """--ablation's settings, before any training (a bad --ablation-steps was refused after the whole run,
    whose report was then lost); its flags without --ablation warn that they do nothing."""
    from ..errors import InvalidInputError

    given = [f for f, v in (("--ablation-steps", args.ablation_steps), ("--ablation-repeats", args.ablation_repeats))
             if v is not None]
    if not args.ablation:
        if given:
            warnings.warn(f"{' and '.join(given)} apply with --ablation; no ablation runs", stacklevel=3)
        return
    if cfg.model != "bst":
        raise InvalidInputError("--ablation runs on the sequence model: add --model bst")
    if cfg.nproc > 1:  # it ran unsharded in one process, under the main run's "per rank" heading
        raise InvalidInputError("--ablation times one process (unsharded); run it without --nproc (or torchrun)")
    from .ablation import check

    check(_ablation_steps(args), _ablation_repeats(args))


def _ablation_steps(args: argparse.Namespace) -> int:
    return ABLATION_STEPS if args.ablation_steps is None else args.ablation_steps


def _ablation_repeats(args: argparse.Namespace) -> int:
    return ABLATION_REPEATS if args.ablation_repeats is None else args.ablation_repeats


def run_cli(args: argparse.Namespace) -> int:
    """Run the subcommand; returns the exit status."""
    from .run import train

    backends = list(BACKENDS) if args.backend == "all" else list(dict.fromkeys(  # each once, in the order given
        b.strip() for b in args.backend.split(",") if b.strip()))
    why = _extras.why_not("torchrec") if args.backend == "all" else ""
    if why:  # every backend there is: run the others
        backends.remove("torchrec")
        hint = ("pip install 'recgo[compare]' adds TorchRec" if why.endswith("not installed") else
                "its fbgemm-gpu must be the release built for this torch")
        print(f"note: {why}, so --backend all runs recgo and torch ({hint})", file=sys.stderr)
    cfg, source = _config(args)
    args.effective_config = cfg
    if args.ablation:  # train() checks its own out; this report is written after the ablation
        prepare(args.out, clear=True)
    report = train(cfg, backends, out=None if args.ablation else args.out, resume=args.resume,
                   progress=not args.no_progress, source=source, interleave=not args.sequential)
    if report is None:  # the ranks > 0 of a torchrun world
        return 0
    if why:  # the report says which backend --backend all left out, and why
        report["notes"] = [f"{why}, so --backend all ran recgo and torch", *report.get("notes", ())]
    if args.ablation:
        from .ablation import run_ablation

        report["ablation"] = run_ablation(cfg, steps=_ablation_steps(args), repeats=_ablation_repeats(args),
                                          progress=not args.no_progress)
    if why or args.ablation:
        from .report import write

        write(args.out, report)
    print((Path(args.out) / "report.md").read_text())
    return 0
