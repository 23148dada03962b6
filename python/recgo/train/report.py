"""The run report: ``report.json`` (all numbers), ``report.md`` (the table a reader wants) and PNG plots
(loss and validation AUC over steps per backend; throughput per backend)."""

from __future__ import annotations

import json
import math
import platform
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from .loop import STAGES, History, TrainConfig


def _smooth(xs: list[float], k: int = 20) -> list[float]:
    out, acc = [], 0.0
    for i, x in enumerate(xs):
        acc += x
        if i >= k:
            acc -= xs[i - k]
        out.append(acc / min(i + 1, k))
    return out


def summarize(cfg: TrainConfig, runs: dict[str, History], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report's JSON object: config, machine, per-backend results and a ``summary`` of headline ratios."""
    per: dict[str, Any] = {}
    for name, h in runs.items():
        last = h.evals[-1] if h.evals else {}
        steps = max(h.timed_steps, 1)
        per[name] = {
            "samples_per_second": h.samples_per_second(),
            "step_ms": {s: 1e3 * h.stage_seconds[s] / steps for s in STAGES},
            "final_auc": _finite(last.get("auc")), "final_log_loss": _finite(last.get("log_loss")),
            "evals": h.evals, "train_loss": h.train_loss,
        }
    summary: dict[str, Any] = {}
    if "recgo" in per:
        for other in ("torchrec", "torch"):
            if other in per:
                summary[f"throughput_vs_{other}"] = per["recgo"]["samples_per_second"] / per[other]["samples_per_second"]
                a, b = per["recgo"]["final_auc"], per[other]["final_auc"]
                if a is not None and b is not None:
                    summary[f"auc_gap_vs_{other}"] = abs(a - b)
    for name, p in per.items():
        summary[f"auc_{name}"] = p["final_auc"]
    if extra:
        summary.update(extra)
    notes = sorted({f"val AUC of {name} is n/a: {h.evals[-1]['auc_note']}" for name, h in runs.items()
                    if h.evals and h.evals[-1].get("auc_note")})
    return {"config": asdict(cfg), "summary": summary, "backends": per, **({"notes": notes} if notes else {}),
            "machine": {"platform": platform.platform(), "cpus": torch.get_num_threads(),
                        "torch": torch.__version__}}


def _placement(placement: dict[str, dict[str, str]]) -> list[str]:
    """One line per sharded backend: how many tables each sharding kind (TorchRec: kind@ranks) got."""
    lines = []
    for backend, tables in placement.items():
        if tables:
            counts: dict[str, int] = {}
            for kind in tables.values():
                counts[kind] = counts.get(kind, 0) + 1
            lines.append(f"- {backend} tables: " + ", ".join(f"{n} × {k}" for k, n in sorted(counts.items())))
    return [""] + lines if lines else []


#: The files :func:`write` writes (a report folder's; a new run removes the last run's first).
REPORT_FILES = ("report.json", "report.md", "curves.png", "ablation.png")


def prepare(out: str | Path, what: str = "report folder", clear: bool = False) -> Path:
    """Create the folder ``out`` and check that a file can be written there, so that a run whose report
    or checkpoint could not be saved fails before it trains, not after (RecgoIOError naming ``what``).
    ``clear``: remove the report files a run before left there (:data:`REPORT_FILES`), so a run that
    ends without its report (interrupted, failed) leaves none that looks like its own."""
    import tempfile

    from ..errors import RecgoIOError

    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
        for name in REPORT_FILES if clear else ():
            (out / name).unlink(missing_ok=True)
    except OSError as exc:
        raise RecgoIOError(f"{what} {out}: cannot write there ({exc.strerror or exc})") from exc
    return out


def _finite(x: Any) -> Any:
    """``x`` with every non-finite float (or one-element tensor) replaced by None."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, float) or (isinstance(x, torch.Tensor) and x.numel() == 1 and x.is_floating_point()):
        v = float(x)
        return v if math.isfinite(v) else None
    return x


def _data_name(data: str | list[str] | None) -> str | None:
    """The data as the report's title names it: the file, or the first and last of several."""
    if isinstance(data, list):
        return f"{data[0]} .. {data[-1]} ({len(data)} files)"
    return data


def write(out: str | Path, report: dict[str, Any]) -> list[Path]:
    """Write report.json, report.md and the plots (when matplotlib is installed) into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # NaN and ±inf (a one-class validation set's AUC, a diverged loss) as null: JSON has no NaN
    (out / "report.json").write_text(json.dumps(_finite(report), indent=1, default=float, allow_nan=False) + "\n")
    cfg, per = report["config"], report["backends"]
    nproc = int(cfg.get("nproc", 1) or 1)
    batch = (f"batch {cfg['batch_size']} per rank on {nproc} gloo ranks (global batch {nproc * cfg['batch_size']}, "
             "samples/s over all ranks)" if nproc > 1 else f"batch {cfg['batch_size']}")
    synthetic = "synthetic Taobao-shaped data" if cfg["model"] == "bst" else "synthetic Criteo-shaped data"
    lines = [f"# recgo train: {cfg['model']} on {_data_name(cfg['data']) or synthetic}", "",
             f"{cfg['steps']} steps of {batch}, embedding dim {cfg['dim']}, sparse optimizer "
             f"{cfg['sparse_optimizer']} (lr {cfg['sparse_lr']}), dense Adam (lr {cfg['dense_lr']}), seed {cfg['seed']}; "
             "every backend starts from the same weights and sees the same batches"
             + (f"; the backends train in turns of {report['turn_steps']} steps (interleaved), so that their "
                "samples/s come from the same stretch of time." if report.get("turn_steps") else "."), "",
             *(f"Note: {n}." for n in report.get("notes", ())), *([""] if report.get("notes") else []),
             "| backend | samples/s | prep ms | sparse ms | dense+backward ms | update ms | val AUC | val log loss |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, p in per.items():
        ms = p["step_ms"]
        auc_s = "n/a" if p["final_auc"] is None else f"{p['final_auc']:.4f}"
        ll_s = "n/a" if p["final_log_loss"] is None else f"{p['final_log_loss']:.4f}"
        lines.append(f"| {name} | {p['samples_per_second']:.0f} | {ms['prep']:.1f} | {ms['sparse']:.1f} | "
                     f"{ms['dense']:.1f} | {ms['update']:.1f} | {auc_s} | {ll_s} |")
    lines += _placement(report.get("placement", {}))
    lines += ["", "Summary: " + ", ".join(f"`{k}` = {v:.4g}" if isinstance(v, float) else f"`{k}` = {v}"
                                          for k, v in report["summary"].items() if v is not None), ""]
    written = [out / "report.json", out / "report.md"]
    if report.get("ablation"):
        from . import ablation

        lines += ablation.markdown(report["ablation"])
        if ablation.plot(report["ablation"], out / "ablation.png"):
            lines += ["![ablation](ablation.png)", ""]
            written.append(out / "ablation.png")
    (out / "report.md").write_text("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return written
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4))
    for name, p in per.items():
        ax1.plot(_smooth(p["train_loss"]), label=name, alpha=0.8)
        ax2.plot([e["step"] for e in p["evals"]], [e["auc"] for e in p["evals"]], marker="o", label=name, alpha=0.8)
    ax1.set(title="training loss (moving mean of 20 steps)", xlabel="step")
    ax2.set(title="validation AUC", xlabel="step")
    names = list(per)
    ax3.bar(names, [per[n]["samples_per_second"] for n in names], color=["C0", "C1", "C2"][: len(names)])
    ax3.set(title="throughput", ylabel="samples / s")
    for ax in (ax1, ax2):
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=90)
    plt.close(fig)
    return written + [out / "curves.png"]
