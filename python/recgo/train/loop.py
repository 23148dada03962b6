"""The training loop: one backend, one model, evaluation every N steps, checkpoint and resume.

A step is timed in four parts: ``prep`` (building the batch and converting it to the backend's input
type), ``sparse`` (embedding forward), ``dense`` (dense forward, loss and the whole backward — fused
embedding updates of recgo and TorchRec run inside it) and ``update`` (the dense optimizer, plus the
sparse optimizer of the plain-torch backend).
"""

from __future__ import annotations

import copy
import math
import os
import time
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import InvalidInputError, RecgoIOError
from .backends import OPTIMIZERS, SparseArch, SparseOptim, TableSpec, initial_weights
from .criteo_files import CriteoFiles
from .data import Batch, CriteoFile, Source, SyntheticCriteo
from .taobao import TaobaoSequences
from .metrics import auc, log_loss, one_class_note
from .models import ACTIVATIONS, BST, BST_HEADS, DCNv2, DLRM, bst_inputs

MODELS = ("dlrm", "dcnv2", "bst")
LR_DECAYS = ("none", "linear")
STAGES = ("prep", "sparse", "dense", "update")
# The longest BST history: the model learns a position embedding row (and Adam state) for each of max_len
# events, so 10^9 would allocate hundreds of GB; a million is past any user's UserBehavior history.
MAX_LEN = 1_000_000
MAX_DIM = 1 << 20  # the engine's widest table (engine/embedding.MaxDim)
# The most ranks one job spawns on this machine (each a process with its own torch); a count past what
# the spawner can index failed inside torch.multiprocessing with an OverflowError.
MAX_NPROC = 1024


@dataclass
class TrainConfig:
    """Everything a run needs; the CLI fills it from flags and a YAML file."""

    model: str = "dlrm"
    # a Criteo TSV or Taobao CSV, or several Criteo files (a list, in natural order after validate; see
    # recgo.train.criteo_files); None: synthetic (Criteo-shaped; Taobao-shaped for bst)
    data: str | list[str] | None = None
    steps: int = 300
    batch_size: int = 1024
    dim: int = 16
    max_rows: int = 100_000
    max_len: int = 50
    holdout_events: int = 1  # bst: each user's last N events form the validation split
    catalog: bool = False  # bst: tables sized to the whole UserBehavior dataset's vocabulary (TaobaoSequences)
    sparse_optimizer: str = "adagrad"
    sparse_lr: float = 0.05
    dense_lr: float = 1e-3
    # The dense optimizer's learning-rate schedule, a pure function of the step (so a resumed run follows it
    # too): linear warmup from dense_lr/warmup_steps over the first warmup_steps steps, then constant
    # ("none") or falling linearly to 0 at the last step ("linear"). The sparse learning rate stays constant.
    warmup_steps: int = 0
    lr_decay: str = "none"
    activation: str = "relu"  # bst: the Transformer feed-forward's and the top MLP's (relu or gelu)
    eval_every: int = 100
    seed: int = 0
    checkpoint: str | None = None
    checkpoint_every: int = 0
    depth: int = 2  # batches the input pipeline prepares ahead (0: serial)
    # --nproc N (see recgo.train.distributed): batch_size is per rank, the global batch N × batch_size.
    nproc: int = 1
    sharding: str = "hash"  # recgo backend's table sharding: hash, table_wise or row_wise
    exchange: str = "flat"  # recgo backend's exchange: flat or hierarchical
    nodes: int = 1  # how many nodes the ranks form for the hierarchical exchange (ranks per node = nproc / nodes)
    dist_timeout: float = 120.0  # seconds any collective may wait for a peer
    # Rows of the training data's shuffle window (recgo.DataPipeline's shuffle; 0: file order), a new
    # order every epoch drawn from seed and the epoch. Every backend reads the same order.
    shuffle: int = 0

    def validate(self) -> None:
        """Raise InvalidInputError naming the first bad field."""
        for name, options in (("model", MODELS), ("sparse_optimizer", OPTIMIZERS), ("lr_decay", LR_DECAYS),
                              ("activation", tuple(ACTIVATIONS))):
            if not isinstance(getattr(self, name), str):  # a YAML list or mapping raised TypeError (unhashable)
                raise InvalidInputError(f"{name} must be one of {options} (a string), got {getattr(self, name)!r}")
        if self.model not in MODELS:
            raise InvalidInputError(f"model {self.model!r}: choose one of {MODELS}")
        for name in ("steps", "batch_size", "dim", "max_rows", "max_len", "eval_every", "holdout_events"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise InvalidInputError(f"{name} must be a positive integer, got {v!r}")
        if self.dim > MAX_DIM:
            raise InvalidInputError(f"dim must be at most {MAX_DIM} (the engine's widest table), got {self.dim}")
        if self.model == "bst" and self.dim % BST_HEADS:  # torch asserted it mid-run, in its own words
            raise InvalidInputError(f"dim must be a multiple of {BST_HEADS} for --model bst (its attention has "
                                    f"{BST_HEADS} heads of dim/{BST_HEADS} each), got {self.dim}")
        if self.model == "bst" and self.max_len > MAX_LEN:
            raise InvalidInputError(f"max_len must be at most {MAX_LEN} events (the BST learns a position "
                                    f"embedding for each), got {self.max_len}")
        for name in ("warmup_steps", "checkpoint_every", "depth", "shuffle"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InvalidInputError(f"{name} must be a non-negative integer, got {v!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise InvalidInputError(f"seed must be an integer in [0, 2^63), got {self.seed!r}")
        for name in ("sparse_lr", "dense_lr"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
                raise InvalidInputError(f"{name} must be a finite number ≥ 0, got {v!r}")
        if not isinstance(self.catalog, bool):
            raise InvalidInputError(f"catalog must be true or false, got {self.catalog!r}")
        if self.sparse_optimizer not in OPTIMIZERS:
            raise InvalidInputError(f"sparse_optimizer {self.sparse_optimizer!r}: choose one of {OPTIMIZERS}")
        if self.lr_decay not in LR_DECAYS:
            raise InvalidInputError(f"lr_decay {self.lr_decay!r}: choose one of {LR_DECAYS}")
        if self.activation not in ACTIVATIONS:
            raise InvalidInputError(f"activation {self.activation!r}: choose one of {tuple(ACTIVATIONS)}")
        for name in ("data", "checkpoint"):
            v = getattr(self, name)
            many = name == "data" and isinstance(v, (list, tuple)) and v and all(isinstance(x, (str, Path)) for x in v)
            if v is not None and not isinstance(v, (str, Path)) and not many:
                raise InvalidInputError(f"{name} must be a path{' or a list of paths' if name == 'data' else ''}, "
                                        f"got {v!r}")
        if self.checkpoint is not None and (not str(self.checkpoint) or str(self.checkpoint).endswith(("/", os.sep))):
            raise InvalidInputError(f"checkpoint {self.checkpoint!r} names a folder: give a file path (each backend "
                                    "writes <checkpoint>.<backend>)")
        if self.data is not None:
            self.data = _data(self.data, self.model)
        if isinstance(self.nproc, bool) or not isinstance(self.nproc, int) or not 0 < self.nproc <= MAX_NPROC:
            raise InvalidInputError(f"nproc must be an integer in [1, {MAX_NPROC}], got {self.nproc!r}")
        from .distributed import EXCHANGES, SHARDINGS

        if self.sharding not in SHARDINGS:
            raise InvalidInputError(f"sharding {self.sharding!r}: choose one of {SHARDINGS}")
        if self.exchange not in EXCHANGES:
            raise InvalidInputError(f"exchange {self.exchange!r}: choose one of {EXCHANGES}")
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or self.nodes <= 0 or self.nproc % self.nodes:
            raise InvalidInputError(f"nodes must be a positive divisor of nproc ({self.nproc}), got {self.nodes!r}")
        from ..pipeline import MAX_SHUFFLE

        if self.shuffle > MAX_SHUFFLE:
            raise InvalidInputError(f"shuffle must be 0..{MAX_SHUFFLE} rows (a window held in memory), got {self.shuffle}")
        if isinstance(self.dist_timeout, bool) or not isinstance(self.dist_timeout, (int, float)) \
                or not 0 < self.dist_timeout < float("inf"):
            raise InvalidInputError(f"dist_timeout must be positive, finite seconds, got {self.dist_timeout!r}")


def _data(data: str | Path | list[Any] | tuple[Any, ...], model: str) -> str | list[str]:
    """The training job's data: one file as its path (a glob pattern replaced by the file it matches),
    several (patterns, or a list) as their paths in natural order (:func:`recgo.train.criteo_files.data_files`,
    which names a missing or repeated file). Several Criteo files train as one stream, the last one's
    tail held out; the sequence model reads one UserBehavior CSV, so several raise."""
    from .criteo_files import data_files

    given = [os.fspath(d) for d in data] if isinstance(data, (list, tuple)) else [os.fspath(data)]
    found = data_files(given)
    if len(found) == 1:
        return found[0]
    if model == "bst":
        raise InvalidInputError(f"data: {len(found)} files ({found[0]}, {found[1]}{', ...' if len(found) > 2 else ''}"
                                "): --model bst reads one UserBehavior CSV (join them into one, or give one)")
    return found


def lr_factor(cfg: TrainConfig, step: int) -> float:
    """The factor on the dense learning rate for 0-based ``step`` under the config's warmup and decay."""
    w = cfg.warmup_steps
    if step < w:
        return (step + 1) / w
    if cfg.lr_decay == "linear":
        return max(0.0, (cfg.steps - step) / max(1, cfg.steps - w))
    return 1.0


def _file_stamp(path: str | list[str] | None) -> list[Any] | None:
    """The data file as a checkpoint identifies it: resolved path, size and modification time (several
    files: the list of theirs)."""
    if path is None:
        return None
    if isinstance(path, list):
        return [_file_stamp(p) for p in path]
    p = Path(path).resolve()
    st = p.stat()
    return [str(p), st.st_size, st.st_mtime_ns]


def taobao_data(cfg: TrainConfig) -> Any:
    """The UserBehavior CSV the sequence model trains on: ``cfg.data``, else the synthetic one."""
    from .synthetic_taobao import userbehavior_file

    return userbehavior_file(seed=cfg.seed) if cfg.data is None else cfg.data


def make_source(cfg: TrainConfig, progress: bool = False) -> Source:
    """The data source the config names (the model decides the format of a file), shuffled as
    ``cfg.shuffle`` says: the one builder of the main run's and the ablation's source. ``progress``: a bar
    while a large file is split (Criteo) or its samples written (Taobao)."""
    source: TaobaoSequences | SyntheticCriteo | CriteoFile
    if cfg.model == "bst":
        source = TaobaoSequences(taobao_data(cfg), batch_size=cfg.batch_size, max_len=cfg.max_len, seed=cfg.seed,
                                 holdout=cfg.holdout_events, catalog=cfg.catalog, progress=progress)
    elif cfg.data is None:
        source = SyntheticCriteo(batch_size=cfg.batch_size, max_rows=cfg.max_rows, seed=cfg.seed)
    else:
        source = CriteoFile(cfg.data, batch_size=cfg.batch_size, rows=cfg.max_rows, progress=progress) \
            if isinstance(cfg.data, (str, Path)) else \
            CriteoFiles(cfg.data, batch_size=cfg.batch_size, rows=cfg.max_rows, progress=progress)
    return source.shuffled(cfg.shuffle, cfg.seed)


def _tables(source: Source) -> list[TableSpec]:
    by_table: dict[str, list[str]] = {}
    for k in source.keys:
        by_table.setdefault(source.feature_table[k], []).append(k)
    return [TableSpec(t, source.table_rows[t], tuple(fs)) for t, fs in by_table.items()]


class RankingModel(nn.Module):
    """Sparse half (one backend) + dense half (plain torch) → one logit per sample."""

    def __init__(self, cfg: TrainConfig, source: Source, backend: str, world: Any = None) -> None:
        super().__init__()
        tables = _tables(source)
        weights = initial_weights(tables, cfg.dim, cfg.seed)
        self.kind = cfg.model
        optim = SparseOptim(cfg.sparse_optimizer, cfg.sparse_lr)
        self.sparse = SparseArch(backend, tables, cfg.dim, optim, weights, pooled=cfg.model != "bst", world=world,
                                 seed=cfg.seed)
        torch.manual_seed(cfg.seed)  # the same dense initial weights on every backend
        if cfg.model == "dlrm":
            self.dense: nn.Module = DLRM(source.dense_in, len(source.keys), cfg.dim)
        elif cfg.model == "dcnv2":
            self.dense = DCNv2(source.dense_in, len(source.keys), cfg.dim)
        else:
            self.dense = BST(cfg.dim, cfg.max_len, user_width=cfg.dim, activation=cfg.activation)
        if world is not None and world.size > 1:
            self.dense = nn.parallel.DistributedDataParallel(self.dense)  # gradients averaged over the ranks
        self.max_len = cfg.max_len

    def forward_sparse(self, prepared: Any) -> Any:
        """Embedding lookups of a prepared batch."""
        return self.sparse.pooled(prepared) if self.kind != "bst" else self.sparse.sequences(prepared)

    def forward_dense(self, dense: torch.Tensor, emb: Any) -> torch.Tensor:
        """Logits from the dense features and the lookups."""
        if self.kind != "bst":
            return self.dense(dense, emb)
        return self.dense(*bst_inputs(emb, self.max_len))


@dataclass
class History:
    """What a run measured: per-step losses, evaluations and per-stage seconds."""

    backend: str
    train_loss: list[float] = field(default_factory=list)
    evals: list[dict[str, float]] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=lambda: {s: 0.0 for s in STAGES})
    timed_steps: int = 0
    samples: int = 0

    def samples_per_second(self) -> float:
        """Training throughput over the timed steps."""
        total = sum(self.stage_seconds.values())
        return self.samples / total if total > 0 else float("nan")


class Trainer:
    """Trains one backend's model on a source; ``run()`` returns its :class:`History`."""

    def __init__(self, cfg: TrainConfig, source: Source, backend: str, world: Any = None) -> None:
        """``world`` (a :class:`recgo.train.distributed.World`): this process is one of ``world.size``
        ranks; ``source`` must already be sharded to it (:meth:`Source.shard`)."""
        cfg.validate()
        self.cfg, self.source, self.backend = cfg, source, backend
        self.world = world if world is not None and world.size > 1 else None
        self.model = RankingModel(cfg, source, backend, self.world)
        self.opt = torch.optim.Adam(self.model.dense.parameters(), lr=cfg.dense_lr)
        self.history = History(backend)
        self.step = 0
        self._val = source.validation()
        if not self._val:  # evaluate() would have nothing to score, after the whole run
            raise InvalidInputError(f"{type(source).__name__}: the validation split is empty; the run evaluates on "
                                    "held-out samples: hold some out (more data, a larger validation share)")
        self._stream: Any = None
        self._stream_state: dict[str, Any] | None = None
        self._diverged = False  # the non-finite loss was reported (once per trainer)
        self._one_class_warned = False  # a one-class validation split was reported (once per trainer)

    def _tables(self) -> list[dict[str, Any]] | None:
        """The recgo collection's dedup groups, so the pipeline deduplicates for it (recgo backend)."""
        if self.backend != "recgo" or self.model.kind == "bst":
            return None
        from ..pipeline import tables_of

        return tables_of(self.model) or None

    def _shard(self) -> Any:
        """The recgo sharded collection, so the pipeline partitions its IDs by owner too (``--nproc``)."""
        if self._tables() is None:
            return None
        from ..pipeline import sharded_of

        return sharded_of(self.model)

    def close(self) -> None:
        """Stop the input stream."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    # -- one step --------------------------------------------------------------------------------

    def train_step(self, batch: Batch, timed: bool = True) -> float:
        """Forward, backward and update on one batch; returns the loss."""
        self._set_lr()
        t0 = time.perf_counter()
        prepared = self.model.sparse.prepare(batch.sparse)
        t1 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        self.model.sparse.zero_grad_sparse()
        emb = self.model.forward_sparse(prepared)
        t2 = time.perf_counter()
        logits = self.model.forward_dense(batch.dense, emb)
        loss = nn.functional.binary_cross_entropy_with_logits(logits, batch.labels)
        loss.backward()
        t3 = time.perf_counter()
        self.opt.step()
        self.model.sparse.step()
        t4 = time.perf_counter()
        if timed:
            h = self.history
            for s, dt in zip(STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                h.stage_seconds[s] += dt
            h.timed_steps += 1
            h.samples += batch.size
        return loss.item()

    def _set_lr(self) -> None:
        """Set the dense optimizer's learning rate for this step (every step: a loaded Adam state carries
        the rate of the step it was saved at)."""
        lr = self.cfg.dense_lr * lr_factor(self.cfg, self.step)
        for g in self.opt.param_groups:
            g["lr"] = lr

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """AUC and log loss on the validation split."""
        self.model.eval()
        logits, labels = [], []
        for b in self._val:
            if self.world is not None:
                b, real = self._my_slice(b)
            else:
                real = b.size
            emb = self.model.forward_sparse(self.model.sparse.prepare(b.sparse))
            logits.append(self.model.forward_dense(b.dense, emb)[:real])
            labels.append(b.labels[:real])
        self.model.train()
        lg, lb = torch.cat(logits), torch.cat(labels)
        if self.world is not None:  # every rank's scores: the metrics of the whole held-out split
            parts = self.world.gather((lg, lb))
            lg, lb = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        out: dict[str, Any] = {"step": self.step, "auc": auc(lg, lb), "log_loss": log_loss(lg, lb)}
        note = one_class_note(lb)
        if note:  # AUC is undefined, not a number to compare: say why, once
            out["auc_note"] = note
            if not self._one_class_warned:
                self._one_class_warned = True
                warnings.warn(f"{note}; its AUC is reported as n/a", stacklevel=2)
        return out

    def _my_slice(self, b: Batch) -> tuple[Batch, int]:
        """This rank's equal share of a validation batch and how many of its samples count."""
        from .distributed import eval_slice, take

        idx, real = eval_slice(b.size, self.world.rank, self.world.size)
        return Batch(b.dense[idx], take(b.sparse, idx), b.labels[idx]), real

    # -- the run ---------------------------------------------------------------------------------

    def run(self, steps: int | None = None, progress: Any = None, warmup: int = 3,
            pause_at: int | None = None) -> History:
        """Train until ``steps`` (default: the config's) steps are done, evaluating every ``eval_every``.
        The first ``warmup`` steps are not timed (at least the last step is, so a short run still has a
        throughput). ``pause_at``: return at that step instead (a turn of an interleaved run, which a
        later call continues); the run's last evaluation still comes at its end only."""
        end = self.cfg.steps if steps is None else steps
        warmup = min(warmup, max(0, end - 1))
        stop = end if pause_at is None else min(end, pause_at)
        if self._stream is None:
            self._stream = self.source.stream(self._stream_state, depth=self.cfg.depth, tables=self._tables(),
                                              shard=self._shard())
        while self.step < stop:
            batch_t0 = time.perf_counter()
            batch = next(self._stream)
            prep_extra = time.perf_counter() - batch_t0
            timed = self.step >= warmup
            loss = self.train_step(batch, timed=timed)
            if timed:
                self.history.stage_seconds["prep"] += prep_extra
            self.history.train_loss.append(loss)
            self.step += 1
            if not math.isfinite(loss):
                self._warn_diverged(loss)
            if progress is not None:
                progress.update(1)
                progress.set_postfix(backend=self.backend, loss=f"{loss:.4f}")
            if self.step % self.cfg.eval_every == 0 or self.step == end:
                self.history.evals.append(self.evaluate())
            if self.cfg.checkpoint and self.cfg.checkpoint_every and self.step % self.cfg.checkpoint_every == 0:
                self.save(self.cfg.checkpoint)
        evals = self.history.evals
        if self.step == end and self.step and (not evals or evals[-1]["step"] != self.step):
            evals.append(self.evaluate())  # resumed at its last step: load() dropped the run's final one
        return self.history

    def _warn_diverged(self, loss: float) -> None:
        """Warn (once per trainer, on rank 0) that the training loss is no longer finite: the run goes
        on and reports it, but its metrics mean nothing."""
        if self._diverged:
            return
        self._diverged = True
        if self.world is None or self.world.rank == 0:
            warnings.warn(f"backend {self.backend}: the training loss is {loss} at step {self.step}: training "
                          "diverged (lower sparse_lr / dense_lr); the run goes on and reports it", stacklevel=2)

    # -- checkpoints -----------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Everything a resumed run needs: model, both optimizers, the data position and the history."""
        stream = self._stream.state_dict() if self._stream is not None else self._stream_state
        return {"step": self.step, "backend": self.backend, "config": asdict(self.cfg), "data": stream,
                "data_file": _file_stamp(self.cfg.data),
                "model": self.model.state_dict(), "dense_optimizer": self.opt.state_dict(),
                "sparse_optimizer": self.model.sparse.optimizer_state(), "history": asdict(self.history)}

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`state` atomically, with recgo's checksums. On ``N`` ranks ``path`` is a folder
        every rank writes its part to (a collective; see :mod:`recgo.train.nproc_checkpoint`)."""
        if self.world is not None:
            from .nproc_checkpoint import save_ranks

            save_ranks(self, path)
            return
        from ..modules import save_state

        save_state(self.state(), path)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Resume from a checkpoint written by :meth:`save` for the same backend and config (on ``N``
        ranks: the same ``N``; a collective)."""
        state = read_checkpoint(self.cfg, self.backend, self.world, path)
        if self.world is not None:
            from .nproc_checkpoint import restore_model

            restore_model(self, state, path)
        else:
            self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["dense_optimizer"])
        self.model.sparse.load_optimizer_state(state["sparse_optimizer"])
        self.step = int(state["step"])
        self.close()
        self._stream_state = state.get("data")
        h = state["history"]
        self.history = History(**{k: copy.deepcopy(v) for k, v in h.items()})
        # The run that wrote the checkpoint ended at its step with an evaluation that is off this run's
        # eval_every grid: the uninterrupted run does not have it (the resumed report equals its report).
        # This run's grid, not the checkpoint's: a checkpoint may hold another eval_every (before the fix,
        # the CLI stored min(eval_every, steps), so a 3-step run's step-3 evaluation looked on its grid).
        ev = self.history.evals
        if ev and int(ev[-1]["step"]) == self.step and self.step % self.cfg.eval_every:
            ev.pop()


_HISTORY = frozenset(f.name for f in fields(History))


def _check_form(state: dict[str, Any], path: str | os.PathLike[str], ranks: bool) -> None:
    """Refuse a checkpoint whose entries a resume reads are missing or of another type, before any is
    restored (a step of "7" or 2.7, or a history that is not History's fields, raised or was truncated
    after the weights were loaded; a missing entry raised KeyError). A rank's file of an ``--nproc``
    checkpoint (``ranks``) holds the dense weights only (its sparse half is beside it)."""
    need = ("step", "config", "dense" if ranks else "model", "dense_optimizer", "sparse_optimizer", "history")
    lacks = [k for k in need if k not in state]
    if lacks:
        raise RecgoIOError(f"{path}: the checkpoint lacks {lacks} (a damaged or foreign checkpoint)")
    step, history = state["step"], state["history"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise RecgoIOError(f"{path}: the checkpoint's step {step!r} is not a non-negative integer")
    if not isinstance(state["config"], dict):
        raise RecgoIOError(f"{path}: the checkpoint's config is a {type(state['config']).__name__}, not a dict")
    if not isinstance(history, dict) or "backend" not in history or not set(history) <= _HISTORY:
        raise RecgoIOError(f"{path}: the checkpoint's history is not a dict of {sorted(_HISTORY)}")


def read_checkpoint(cfg: TrainConfig, backend: str, world: Any, path: str | os.PathLike[str]) -> dict[str, Any]:
    """The state of the checkpoint at ``path`` for ``backend`` trained with ``cfg`` (on ``world``'s rank
    of its size, or one process for None), after every check a resume makes before it restores: the
    file(s) read and verified, the backend, the settings, the data file and the step. Raises
    ``InvalidInputError`` or ``RecgoIOError`` naming the problem."""
    if world is not None:
        from .nproc_checkpoint import load_rank_state

        state = load_rank_state(world, path)
    else:
        from ..modules import load_state

        state = load_state(path)  # RecgoIOError for a missing, truncated or damaged file
    if not isinstance(state, dict):
        raise RecgoIOError(f"{path}: not a recgo train checkpoint (a {type(state).__name__}, not a dict)")
    if state.get("backend") != backend:
        raise InvalidInputError(f"{path}: a checkpoint of backend {state.get('backend')!r}, not {backend!r}")
    _check_form(state, path, world is not None)
    mine = asdict(cfg)
    theirs = dict(state["config"])
    if theirs.get("lr_decay") == "linear" and theirs.get("steps") != mine["steps"]:
        raise InvalidInputError(
            f"{path}: the checkpoint decays the learning rate linearly over steps={theirs.get('steps')}; "
            f"resuming with steps={mine['steps']} would switch to another schedule midway: resume with the same steps")
    stamp = state.get("data_file")
    if stamp is not None:  # the same file, by any path, unchanged since (checkpoints since session 28)
        if _file_stamp(cfg.data) != stamp:
            was = (f"{stamp[0]} (size {stamp[1]}, modified {stamp[2]} ns)" if isinstance(stamp[0], str) else
                   f"{len(stamp)} files ({', '.join(s[0] for s in stamp[:3])}{', ...' if len(stamp) > 3 else ''})")
            raise InvalidInputError(
                f"{path}: the checkpoint trained on {was}; "
                f"data {cfg.data} is another file or changed since, so its reader position and "
                "validation split would not be the checkpoint's")
        theirs["data"] = mine["data"]
    for k in ("steps", "checkpoint", "checkpoint_every", "eval_every", "depth", "dist_timeout"):
        theirs.pop(k, None)
        mine.pop(k, None)
    # checkpoints written before these fields existed
    for k in ("nproc", "sharding", "exchange", "nodes", "warmup_steps", "lr_decay", "holdout_events",
              "activation", "catalog"):
        theirs.setdefault(k, mine.get(k))
    theirs.setdefault("shuffle", 0)  # checkpoints before --shuffle read in file order
    if mine != theirs:
        diff = sorted(k for k in mine if mine[k] != theirs.get(k))
        raise InvalidInputError(f"{path}: the checkpoint was trained with other settings: {diff}")
    if int(state["step"]) > cfg.steps:
        raise InvalidInputError(f"{path}: the checkpoint is at step {int(state['step'])}, past steps "
                                f"{cfg.steps}: resume with steps ≥ {int(state['step'])}")
    return state
