"""The ablation of RecIS Fig. 7 on the sequence model: what each of recgo's input-side optimisations is
worth in whole training steps.

Training samples per second of the BST model with the recgo backend, each row switching one more thing
off (cumulative, as in the paper):

1. everything on: the Go input pipeline prepares batches ``depth`` steps ahead, the
   :class:`recgo.FeatureEngine` runs its transforms fused across fields, the
   :class:`recgo.EmbeddingCollection` deduplicates each table's IDs before the lookup and the update;
2. pipeline off: the same input prepared serially inside each step (``depth=0``);
3. fusion off: the FeatureEngine runs one call per op, field by field (``fuse=False``);
4. dedup off: the collection looks up and updates every ID occurrence (``dedup=False``), when the
   installed :class:`recgo.EmbeddingCollection` offers the switch (the row says so otherwise).

TorchRec's samples/s on the same steps is the last row, for scale. Variants run interleaved, ``repeats``
rounds of ``steps`` timed steps each from fresh models, and each row reports the median round.
"""

from __future__ import annotations

import gc
import inspect
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError
from ._progress import progress_bar
from .backends import SparseOptim
from .taobao import TaobaoSequences
from .loop import TrainConfig, Trainer, make_source


@dataclass(frozen=True)
class Variant:
    """One row of the ablation: the backend and which optimisations are on."""

    name: str
    backend: str = "recgo"
    pipeline: bool = True
    fuse: bool = True
    dedup: bool = True


VARIANTS = (
    Variant("everything on"),
    Variant("pipeline off", pipeline=False),
    Variant("fusion off", pipeline=False, fuse=False),
    Variant("dedup off", pipeline=False, fuse=False, dedup=False),
    Variant("TorchRec (reference)", backend="torchrec"),
)


def dedup_switch_available() -> bool:
    """Whether :class:`recgo.EmbeddingCollection` takes ``dedup=``."""
    from ..modules import EmbeddingCollection

    return "dedup" in inspect.signature(EmbeddingCollection.__init__).parameters


def _without_dedup(trainer: Trainer, cfg: TrainConfig) -> None:
    """Swap the trainer's recgo collection for one with ``dedup=False`` and the same weights."""
    from ..modules import EmbeddingCollection

    arch = trainer.model.sparse
    old = arch.module
    new = EmbeddingCollection(old.embedding_configs(), optimizer=SparseOptim(cfg.sparse_optimizer, cfg.sparse_lr).recgo(),
                              dedup=False, seed=0)  # seed=: its weights are loaded next
    new.load_state_dict(old.state_dict())
    arch.module = new


def check(steps: Any, repeats: Any, warmup: Any = 0) -> None:
    """Raise InvalidInputError unless ``steps`` and ``repeats`` are positive integers and ``warmup`` a
    non-negative one (the CLI checks ``--ablation-steps``/``--ablation-repeats`` before training)."""
    for name, v, low in (("--ablation-steps", steps, 1), ("--ablation-repeats", repeats, 1),
                         ("ablation warmup", warmup, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            kind = "a positive" if low else "a non-negative"
            raise InvalidInputError(f"{name} must be {kind} integer, got {v!r}")


def _one_round(cfg: TrainConfig, sources: dict[bool, TaobaoSequences], v: Variant, steps: int,
               warmup: int, bar: Any = None) -> tuple[float, float]:
    """(samples/s, input preparation ms per step) of one fresh run of the variant."""
    run_cfg = replace(cfg, depth=cfg.depth if v.pipeline else 0, steps=warmup + steps, eval_every=10 ** 9,
                      checkpoint=None, checkpoint_every=0)
    trainer = Trainer(run_cfg, sources[v.fuse], v.backend)
    if not v.dedup:
        _without_dedup(trainer, cfg)
    try:
        h = trainer.run(warmup=warmup, progress=bar)
    finally:
        trainer.close()
    sps, prep_ms = h.samples_per_second(), 1e3 * h.stage_seconds["prep"] / max(h.timed_steps, 1)
    del trainer
    gc.collect()
    return sps, prep_ms


def _why_not(v: Variant, extras: Any) -> str:
    """Why this installation cannot run variant ``v`` ("" when it can): TorchRec missing or unusable (the
    main run's ``--backend all`` leaves it out; its ablation row raised after the main run, whose
    report was lost), or no dedup switch."""
    if v.backend == "torchrec":
        why = extras.why_not("torchrec")
        return f"{why}: the TorchRec row did not run" if why else ""
    if not v.dedup and not dedup_switch_available():
        return "This recgo.EmbeddingCollection has no dedup switch"
    return ""


def run_ablation(cfg: TrainConfig, steps: int = 20, warmup: int = 3, repeats: int = 3,
                 variants: tuple[Variant, ...] = VARIANTS, progress: bool = False) -> list[dict[str, Any]]:
    """Samples/s of each variant (see the module docstring) on ``cfg``'s BST model and Taobao data:
    ``[{"variant", "backend", "pipeline", "fuse", "dedup", "samples_per_second", "runs", "vs_all_on",
    "prep_ms"}]`` (``prep_ms``: median over rounds of the mean time per step the trainer waited for its input)
    (``samples_per_second`` None and a ``note`` for a variant this installation cannot run). ``progress``:
    a bar over all the rounds' steps."""
    if cfg.model != "bst":
        raise InvalidInputError("the ablation runs the sequence model: --model bst")
    check(steps, repeats, warmup)
    # The source the main run trains on, built by the same function (the ablation built its own and
    # left out holdout_events, catalog and shuffle, so it timed other tables and another split).
    fused = make_source(cfg)
    assert isinstance(fused, TaobaoSequences)
    sources = {True: fused, False: fused.with_fusion(False)}
    from .. import _extras

    why_not = {v.name: _why_not(v, _extras) for v in variants}
    runnable = [v for v in variants if not why_not[v.name]]
    runs: dict[str, list[float]] = {v.name: [] for v in runnable}
    preps: dict[str, list[float]] = {v.name: [] for v in runnable}
    bar = progress_bar(repeats * len(runnable) * (warmup + steps), "ablation", progress)
    try:
        for r in range(repeats):
            for v in runnable:
                if bar is not None:
                    bar.set_description(f"ablation {r + 1}/{repeats}: {v.name}")
                sps, prep_ms = _one_round(cfg, sources, v, steps, warmup, bar)
                runs[v.name].append(sps)
                preps[v.name].append(prep_ms)
    finally:
        if bar is not None:
            bar.close()  # a failure's message then starts on a line of its own
    rows: list[dict[str, Any]] = []
    base = statistics.median(runs[variants[0].name]) if variants[0].name in runs else None
    for v in variants:
        row: dict[str, Any] = {"variant": v.name, "backend": v.backend, "pipeline": v.pipeline, "fuse": v.fuse,
                               "dedup": v.dedup}
        if v.name in runs:
            sps = statistics.median(runs[v.name])
            row |= {"samples_per_second": sps, "runs": runs[v.name], "vs_all_on": sps / base if base else None,
                    "prep_ms": statistics.median(preps[v.name])}
        else:
            row |= {"samples_per_second": None, "runs": [], "vs_all_on": None, "prep_ms": None,
                    "note": why_not[v.name]}
        rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The ablation as markdown lines (a heading, the table, a note)."""
    lines = ["## Ablation (RecIS Fig. 7): BST training samples/s, each row one more optimisation off", "",
             "| variant | backend | pipeline | fused transforms | dedup | samples/s | vs everything on | input ms/step |",
             "|---|---|:-:|:-:|:-:|---:|---:|---:|"]
    for r in rows:
        on = {True: "on", False: "off"}
        sps = "n/a" if r["samples_per_second"] is None else f"{r['samples_per_second']:.0f}"
        rel = "n/a" if r["vs_all_on"] is None else f"{r['vs_all_on']:.2f}x"
        prep = "n/a" if r["prep_ms"] is None else f"{r['prep_ms']:.1f}"
        lines.append(f"| {r['variant']} | {r['backend']} | {on[r['pipeline']]} | {on[r['fuse']]} | {on[r['dedup']]} | "
                     f"{sps} | {rel} | {prep} |")
    notes = sorted({r["note"] for r in rows if r.get("note")})
    lines += ["", "Median of interleaved rounds from fresh models; a step includes preparing its input (input "
              "ms/step: the time the step waited for its batch and converted it to the backend's input)."
              + (" " + "; ".join(notes) + "." if notes else ""), ""]
    return lines


def plot(rows: list[dict[str, Any]], path: str | Path) -> bool:
    """A bar chart of the ablation at ``path`` (False when matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    shown = [r for r in rows if r["samples_per_second"] is not None]
    fig, ax = plt.subplots(figsize=(8, 4))
    colors = ["C0" if r["backend"] == "recgo" else "C1" for r in shown]
    bars = ax.bar([r["variant"] for r in shown], [r["samples_per_second"] for r in shown], color=colors)
    for b, r in zip(bars, shown):
        ax.annotate(f"{r['samples_per_second']:.0f}", (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set(title="BST training throughput, optimisations switched off cumulatively", ylabel="samples / s")
    ax.tick_params(axis="x", labelrotation=15)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True
