"""``train()``: run the configured model on each requested backend and write the side-by-side report."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any, Sequence

from ..errors import InvalidInputError
from .backends import BACKENDS
from .loop import History, TrainConfig, Trainer, make_source
from .report import summarize, write


def _progress(total: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="step", leave=True)


def train(cfg: TrainConfig, backends: Sequence[str] = ("recgo",), out: str | Path | None = None,
          resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train ``cfg.model`` on every backend in ``backends`` (same data, same initial weights) and return the
    report (also written to ``out`` when given). With ``resume``, each backend continues from its
    checkpoint ``<cfg.checkpoint>.<backend>`` if it exists."""
    cfg.validate()
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        raise InvalidInputError(f"backend {unknown or backends}: choose from {BACKENDS} or 'all'")
    if resume and not cfg.checkpoint:
        raise InvalidInputError("resume needs a checkpoint path (--checkpoint)")
    source = make_source(cfg)
    runs: dict[str, History] = {}
    for backend in backends:
        per_backend = TrainConfig(**{**cfg.__dict__, "checkpoint": f"{cfg.checkpoint}.{backend}" if cfg.checkpoint else None})
        trainer = Trainer(per_backend, source, backend)
        if resume and per_backend.checkpoint and Path(per_backend.checkpoint).exists():
            trainer.load(per_backend.checkpoint)
        bar = _progress(cfg.steps, backend, progress)
        if bar is not None:
            bar.update(trainer.step)
        runs[backend] = trainer.run(progress=bar)
        if bar is not None:
            bar.close()
        if per_backend.checkpoint:
            trainer.save(per_backend.checkpoint)
        trainer.close()
        del trainer
        gc.collect()
    report = summarize(cfg, runs)
    if out is not None:
        write(out, report)
    return report
