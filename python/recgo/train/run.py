"""``train()``: run the configured model on each requested backend and write the side-by-side report."""

from __future__ import annotations

import gc
import os
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Sequence

from ..errors import InvalidInputError
from .. import _extras
from .backends import BACKENDS
from .data import Source
from .loop import History, TrainConfig, Trainer, make_source, read_checkpoint
from ._progress import progress_bar
from .report import prepare, summarize, write


# Steps each backend trains in its turn of an interleaved run.
TURN_STEPS = 20


def train(cfg: TrainConfig, backends: Sequence[str] = ("recgo",), out: str | Path | None = None,
          resume: bool = False, progress: bool = True, source: Source | None = None,
          interleave: bool = True) -> dict[str, Any]:
    """Train ``cfg.model`` on every backend in ``backends`` (same data, same initial weights) and return the
    report (also written to ``out`` when given). With ``resume``, each backend continues from its
    checkpoint ``<cfg.checkpoint>.<backend>`` if it exists. ``source``: the data source ``make_source(cfg)``
    already built (single process only; the ranks of ``cfg.nproc > 1`` build their own).

    ``interleave`` (default; single process): the backends' models are built together and train in turns
    of :data:`TURN_STEPS` steps each, so that their throughputs are measured over the same stretch of
    time (a machine whose load changes during the run slows them alike; one after another, the backend
    that ran during a busy minute looked slower); the report's ``turn_steps`` says so. ``False`` trains
    one backend after the other, holding one model in memory at a time. Each backend's training and
    results are the same either way (its own model, batches and evaluations)."""
    cfg.validate()
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        raise InvalidInputError(f"backend {unknown or backends}: choose from {BACKENDS} or 'all'")
    if resume and not cfg.checkpoint:
        raise InvalidInputError("resume needs a checkpoint path (--checkpoint)")
    if "torchrec" in backends:  # before any data is read or rank started
        _extras.require("torchrec", "the torchrec backend")
    if cfg.checkpoint:  # before the last report is cleared and before any backend trains
        _check_checkpoints(cfg, backends, resume)
    if out is not None:  # a report that cannot be written fails now, not after the training
        prepare(out, clear=True)
    if cfg.nproc > 1:
        from .distributed import launch

        return launch(cfg, backends, cfg.nproc, out=out, progress=progress, resume=resume)
    if source is None:
        source = make_source(cfg, progress=progress)
    runs: dict[str, History] = {}
    # Interleaved (default): every backend's model at once, trained in turns of TURN_STEPS steps, so that
    # a machine whose load changes during the run slows them alike; sequential: one model at a time.
    for group in ([list(backends)] if interleave else [[b] for b in backends]):
        runs.update(_train_group(cfg, group, source, resume, progress))
    report = summarize(cfg, runs)
    report["turn_steps"] = TURN_STEPS if interleave and len(backends) > 1 else None
    if out is not None:
        write(out, report)
    return report


def _train_group(cfg: TrainConfig, backends: Sequence[str], source: Source, resume: bool,
                 progress: bool) -> dict[str, History]:
    """Train ``backends`` together (in turns of :data:`TURN_STEPS` steps while more than one is left),
    each saving its checkpoint when it ends; returns their histories. A failure closes every trainer
    of the group (their pipeline threads stop here, not at exit) and every bar."""
    trainers: dict[str, Trainer] = {}
    bars: dict[str, Any] = {}
    runs: dict[str, History] = {}
    try:
        for i, backend in enumerate(backends):
            per_backend = _per_backend(cfg, backend)
            trainers[backend] = trainer = Trainer(per_backend, source, backend)
            if resumable(resume, per_backend.checkpoint, lambda p: Path(p).exists(), backend):
                trainer.load(per_backend.checkpoint)
            bars[backend] = bar = progress_bar(cfg.steps, backend, progress, position=i)
            if bar is not None:
                bar.update(trainer.step)
        while trainers:
            for backend in list(trainers):
                trainer = trainers[backend]
                turn = trainer.step + TURN_STEPS if len(trainers) > 1 else None
                history = trainer.run(progress=bars[backend], pause_at=turn)
                if turn is not None and trainer.step < cfg.steps:
                    continue
                runs[backend] = history
                if trainer.cfg.checkpoint:
                    trainer.save(trainer.cfg.checkpoint)
                trainers.pop(backend).close()
                del trainer
                gc.collect()
    finally:
        for trainer in trainers.values():
            trainer.close()
        for bar in bars.values():
            if bar is not None:
                bar.close()  # a failure's message then starts on a line of its own
    return {b: runs[b] for b in backends}  # the report's rows in the order asked for


def _check_checkpoints(cfg: TrainConfig, backends: Sequence[str], resume: bool = False) -> None:
    """Before training: the checkpoints' folder can be written, no backend's checkpoint path is of the
    other kind (one process writes a file, N ranks a folder of per-rank files), a run without
    ``resume`` would not overwrite a checkpoint already there, and with ``resume`` every backend's
    checkpoint loads for it (readable, same settings, data and a step within ``steps``): a backend
    whose checkpoint is refused then stops the run before the backends before it train and overwrite
    theirs."""
    prepare(Path(cfg.checkpoint).parent, "--checkpoint folder")  # type: ignore[arg-type]
    for backend in backends:
        path = Path(_per_backend(cfg, backend).checkpoint)  # type: ignore[arg-type]
        if cfg.nproc > 1 and path.is_file():
            raise InvalidInputError(f"--checkpoint: {path} is a single-process checkpoint (a file); --nproc "
                                    f"{cfg.nproc} writes a folder of per-rank files: give another --checkpoint")
        if cfg.nproc == 1 and path.is_dir():
            raise InvalidInputError(f"--checkpoint: {path} is a folder (an --nproc run's checkpoint); one process "
                                    "writes a file: run with the --nproc it was written with, or give another "
                                    "--checkpoint")
    for backend in backends:
        per_backend = _per_backend(cfg, backend)
        path = Path(per_backend.checkpoint)  # type: ignore[arg-type]
        if not _holds_checkpoint(cfg, path):
            continue
        if not resume:
            step = _saved_step(cfg, path)
            at = f" (step {step})" if step is not None else ""
            raise InvalidInputError(f"--checkpoint {cfg.checkpoint}: {path} already holds a checkpoint{at}: add "
                                    "--resume to continue it, or remove it / give another --checkpoint")
        _verify_resumable(per_backend, backend, path)


def _holds_checkpoint(cfg: TrainConfig, path: Path) -> bool:
    """Whether a backend's checkpoint ``path`` holds a checkpoint a run would load (``--resume``) or
    overwrite: a file; with ``nproc`` > 1 a folder with a complete step."""
    if cfg.nproc > 1:
        from .nproc_checkpoint import exists

        return exists(path)
    return path.is_file()


def _saved_step(cfg: TrainConfig, path: Path) -> int | None:
    """The step of the checkpoint at ``path``, read without verifying (or loading) the whole file;
    None when it cannot be read so."""
    if cfg.nproc > 1:
        from .nproc_checkpoint import saved_step

        return saved_step(path)
    from ..modules._checkpoint import peek_state

    step = peek_state(path, "step")
    return step if isinstance(step, int) else None


def _verify_resumable(cfg: TrainConfig, backend: str, path: Path) -> None:
    """The checks a resume of ``backend`` from ``path`` makes before it restores (:func:`read_checkpoint`:
    its file(s) read and verified, the backend, settings, data file and step compared), without building
    a model: its ``InvalidInputError`` or ``RecgoIOError`` comes now, not when the backend's turn comes.
    With ``nproc`` > 1 every rank's file is checked, under torchrun too (the ranks share the folder):
    each rank then reaches the same verdict, and none is left waiting for a peer that stopped here."""
    worlds: list[Any] = [None]
    if cfg.nproc > 1:
        worlds = [SimpleNamespace(rank=r, size=cfg.nproc) for r in range(cfg.nproc)]
    for world in worlds:
        read_checkpoint(cfg, backend, world, path)


def resumable(resume: bool, path: str | None, found: Callable[[str], bool], backend: str, say: bool = True) -> bool:
    """Whether a ``--resume`` run of ``backend`` loads its checkpoint ``path``; one that finds none
    starts from step 0, and says so (a mistyped --checkpoint would otherwise retrain in silence)."""
    if not resume or not path:
        return False
    if found(path):
        return True
    if say:
        warnings.warn(f"--resume: {backend} has no checkpoint at {path}; it starts from step 0", stacklevel=2)
    return False


def _per_backend(cfg: TrainConfig, backend: str) -> TrainConfig:
    """``cfg`` with the backend's own checkpoint path ``<checkpoint>.<backend>`` (a file; a folder of
    per-rank files with ``nproc`` > 1)."""
    return TrainConfig(**{**cfg.__dict__, "checkpoint": f"{cfg.checkpoint}.{backend}" if cfg.checkpoint else None})


def _merge(parts: list[dict[str, Any]]) -> History:
    """One History from every rank's: the global loss (mean of the ranks' equal-sized batch means), rank
    0's evaluations (computed on every rank from the gathered scores), all ranks' samples over the time
    of the slowest rank."""
    slowest = max(parts, key=lambda h: sum(h["stage_seconds"].values()))
    losses = [sum(xs) / len(xs) for xs in zip(*(h["train_loss"] for h in parts))]
    return History(backend=parts[0]["backend"], train_loss=losses, evals=parts[0]["evals"],
                   stage_seconds=dict(slowest["stage_seconds"]), timed_steps=slowest["timed_steps"],
                   samples=sum(h["samples"] for h in parts))


def _fail_at(trainer: Trainer, step: int, how: str = "raise") -> None:
    """Make ``trainer`` raise when it reaches ``step`` (the failure tests' injected fault); ``how``
    "abort": the process aborts there instead (a crash in native code, leaving no Python error)."""
    inner = trainer.train_step

    def failing(batch: Any, timed: bool = True) -> float:
        if trainer.step == step:
            if how == "abort":
                os.abort()
            raise RuntimeError(f"injected failure on rank {trainer.world.rank} at step {step}")
        return inner(batch, timed)

    trainer.train_step = failing  # type: ignore[method-assign]


def nproc_report(cfg: TrainConfig, runs: dict[str, History], placement: dict[str, dict[str, str]],
                 out: str | Path | None = None) -> dict[str, Any]:
    """The report of a ``--nproc`` run from the merged histories (written to ``out`` when given)."""
    report = summarize(cfg, runs, extra={"nproc": cfg.nproc, "global_batch": cfg.nproc * cfg.batch_size})
    report["placement"] = placement
    if out is not None:
        write(out, report)
    return report


def train_ranks(cfg: TrainConfig, backends: Sequence[str], world: Any, progress: bool = False,
                weights_dir: str | None = None, fail_at: tuple[Any, ...] | None = None,
                resume: bool = False) -> tuple[dict[str, History], dict[str, dict[str, str]]]:
    """One rank's part of a ``--nproc`` run (every rank calls it, inside an initialised process group):
    train each backend on this rank's data shard and return the histories merged over the ranks and
    each backend's table placement. With ``cfg.checkpoint`` each backend saves to the folder
    ``<checkpoint>.<backend>`` (every ``checkpoint_every`` steps and at the end) and, with ``resume``,
    continues from it when it holds a complete checkpoint. ``weights_dir``: write each backend's final
    global tables and dense weights there (rank 0); ``fail_at`` ``(rank, step)`` or ``(rank, step,
    "abort")``: that rank raises (aborts) at that step (failure tests)."""
    from dataclasses import asdict

    import torch

    from .distributed import global_weights

    source = make_source(cfg)
    if not hasattr(source, "shard"):
        raise InvalidInputError(f"model {cfg.model}: its data source cannot be sharded over ranks")
    source.shard(world.rank, world.size)
    runs: dict[str, History] = {}
    placement: dict[str, dict[str, str]] = {}
    from .nproc_checkpoint import exists

    for backend in backends:
        per_backend = _per_backend(cfg, backend)
        trainer = Trainer(per_backend, source, backend, world)
        if resumable(resume, per_backend.checkpoint, exists, backend, say=world.rank == 0):
            trainer.load(per_backend.checkpoint)
        bar = progress_bar(cfg.steps, f"{backend} ×{world.size}", progress)
        if bar is not None:
            bar.update(trainer.step)
        if fail_at is not None and world.rank == fail_at[0]:
            _fail_at(trainer, *fail_at[1:])
        try:
            history = trainer.run(progress=bar)
        except BaseException:
            trainer.close()
            raise
        finally:
            if bar is not None:
                bar.close()
        if per_backend.checkpoint:
            trainer.save(per_backend.checkpoint)
        runs[backend] = _merge(world.gather(asdict(history)))
        placement[backend] = trainer.model.sparse.plan
        if weights_dir is not None:
            tables = global_weights(trainer.model.sparse, world)
            dense = trainer.model.dense.module.state_dict()
            if world.rank == 0:
                Path(weights_dir).mkdir(parents=True, exist_ok=True)
                torch.save({"tables": tables, "dense": dense}, Path(weights_dir) / f"{backend}.pt")
        trainer.close()
        del trainer
        gc.collect()
    return runs, placement
