"""Training data for the main job: streams of (dense, sparse KJT, labels) batches.

* :class:`SyntheticCriteo` — the default (no files needed): recgo's Go synthetic source shaped like
  Criteo (26 power-law categorical fields with varied cardinality and coverage, 13 dense columns) with
  a *planted* label model (hidden per-ID weights and dense weights through a sigmoid), so the loss
  falls and the AUC means something. Validation samples come from the same generator after the
  training range.
* :class:`CriteoFile` — a Criteo display-advertising TSV (label, I1..I13, C1..C26; plain or gzip) read
  by recgo's Go reader; categorical values hashed and reduced modulo the table size by the
  FeatureEngine; the last ``validation_fraction`` of the lines is held out.
* :class:`~recgo.train.taobao.TaobaoSequences` (in :mod:`recgo.train.taobao`) — Taobao UserBehavior CSV (user, item, category, behaviour, timestamp; plain
  or gzip; a header line, which the dataset lacks, is skipped; events in any order, sorted by user and
  time): for each event, the user's previous ``max_len`` events as the history, the event's item as a positive
  target and a uniformly sampled item as a negative; each user's last event (or last ``holdout``
  events) is held out.
  Without a file, :func:`recgo.train.synthetic_taobao.userbehavior_file` writes one from a planted
  model (users with preferred categories, Zipf item popularity) so the sequence model runs with no data.

All three run through :class:`recgo.DataPipeline` (READ → TRANSFORM → FORMAT in Go, ``depth``
batches ahead of the training step; the Taobao samples from a cached CSV written once); every backend gets the same batches in the same order, and a
stream's position goes into checkpoints so a resumed run continues where it stopped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import InvalidInputError, RecgoError
from ..sparse import KeyedJaggedTensor
from ._inputs import split_file as _split_file

SPARSE_KEYS = tuple(f"C{i}" for i in range(1, 27))


@dataclass
class Batch:
    """One step's input: ``dense`` ``[B, n_dense]`` float32, ``sparse`` KJT, ``labels`` ``[B]`` float32."""

    dense: torch.Tensor
    sparse: KeyedJaggedTensor
    labels: torch.Tensor

    @property
    def size(self) -> int:
        """Batch size B."""
        return int(self.labels.numel())


class Stream:
    """An endless iterator of training batches (epoch after epoch) whose position can be saved."""

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> Batch:  # pragma: no cover - interface
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:  # pragma: no cover - interface
        """The stream's position (epoch and reader position), from which :meth:`Source.stream` resumes."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the stream's resources (goroutines, files)."""


class Source:
    """Training data: :meth:`stream` gives the training batches, :meth:`validation` a fixed held-out
    set; ``keys``/``feature_table``/``table_rows`` describe the sparse features and their tables."""

    batch_size: int
    dense_in: int
    keys: tuple[str, ...]
    table_rows: dict[str, int]
    feature_table: dict[str, str]

    def stream(self, state: dict[str, Any] | None = None, depth: int = 2,
               tables: list[dict[str, Any]] | None = None, shard: Any = None) -> Stream:  # pragma: no cover
        """Training batches from the start, or from a :meth:`Stream.state_dict`. ``tables`` (the
        collection's dedup groups) lets the pipeline deduplicate for a recgo collection, and ``shard``
        (a :class:`recgo.distributed.ShardedEmbeddingBagCollection`) partition its IDs by owner too."""
        raise NotImplementedError

    def validation(self) -> list[Batch]:  # pragma: no cover - interface
        """The held-out batches, the same on every call (the evaluation's data)."""
        raise NotImplementedError

    def batches_per_epoch(self, world_size: int = 1) -> int:
        """Steps in one pass over the training split, on ``world_size`` ranks of ``batch_size`` rows each."""
        raise NotImplementedError


class _PipelineStream(Stream):
    """Epochs of a :class:`recgo.DataPipeline` over one source, each of ``per_epoch`` batches (``None``:
    until the pipeline ends). Of ``rows`` training rows shared by ``world_size`` ranks (row g is rank
    g mod world_size's), every rank takes ``rows // (world_size × batch_size)`` batches per epoch, so
    that the ranks stay in step and each step's global batch is the single-process one of
    ``world_size × batch_size`` rows. ``make(position, epoch)`` opens an epoch's pipeline (at
    ``position``, or its start for ``None``); ``check(batch, k)`` inspects the epoch's k-th batch."""

    def __init__(self, make: Any, state: dict[str, Any] | None,
                 relabel: Callable[[RecgoError], RecgoError] = lambda e: e, per_epoch: int | None = None,
                 rank: int = 0, world_size: int = 1, batch_size: int = 1,
                 check: Callable[[Batch, int], None] | None = None) -> None:
        self._make, self._relabel, self._per_epoch, self._check = make, relabel, per_epoch, check
        self.epoch = int(state["epoch"]) if state else 0
        self._pipe = make(state["position"] if state else None, self.epoch)
        # batches of this epoch handed out: this rank's rows before the position's global row (where
        # its shuffle window began, inside one) and those taken of that window, in batches
        pos = state["position"] if state else {}
        g, taken = int(pos.get("global", 0)), int(pos.get("taken", 0))
        self._k = (max(0, g - rank + world_size - 1) // world_size + taken) // batch_size

    def _next_epoch(self) -> None:
        self._pipe.close()
        self.epoch += 1
        self._k = 0
        self._pipe = self._make(None, self.epoch)

    def __next__(self) -> Batch:
        for _ in range(2):
            if self._per_epoch is not None and self._k >= self._per_epoch:
                if self._per_epoch == 0:
                    break
                self._next_epoch()
            try:
                b = next(self._pipe)
            except StopIteration:
                self._next_epoch()
                continue
            except RecgoError as exc:
                new = self._relabel(exc)
                if new is exc:
                    raise
                raise new from exc
            batch = Batch(b.dense, b.sparse, b.labels)
            if self._check is not None:
                self._check(batch, self._k)
            self._k += 1
            return batch
        raise InvalidInputError("the training data holds less than one batch (with --nproc N each rank reads "
                                "1/N of it and --batch-size is per rank): lower --batch-size or give more data")

    def state_dict(self) -> dict[str, Any]:
        """The epoch and the pipeline's position (:meth:`Stream.state_dict`)."""
        return {"epoch": self.epoch, "position": self._pipe.position()}

    def close(self) -> None:
        self._pipe.close()


def _collect(pipe: Any) -> list[Batch]:
    """Every batch of a finite pipeline, copied out of its pooled memory."""
    out = [Batch(b.dense.clone(), KeyedJaggedTensor(b.sparse.keys(), b.sparse.values().clone(),
                                                    lengths=b.sparse.lengths().clone()), b.labels.clone())
           for b in pipe]
    pipe.close()
    return out


class _PipelineSource(Source):
    """A source read through recgo's Go pipeline (shared by the synthetic and Criteo sources)."""

    def __init__(self, batch_size: int, features: list[Any], fuse: bool = True) -> None:
        from ..feature import FeatureEngine

        self.batch_size = batch_size
        self._engine = FeatureEngine(features, fuse=fuse)
        self._val: list[Batch] | None = None
        self.rank, self.world_size = 0, 1
        self.shuffle_rows, self.shuffle_seed = 0, 0

    def shard(self, rank: int, world_size: int) -> "_PipelineSource":
        """Make :meth:`stream` read only rows ``g`` with ``g mod world_size == rank`` (the Go readers'
        sharding), so ``world_size`` ranks of ``batch_size`` together see the single-process batches of
        ``world_size × batch_size``. Validation stays whole. Returns ``self``."""
        if not 0 <= rank < world_size:
            raise InvalidInputError(f"shard: rank {rank} outside a world of {world_size}")
        self.rank, self.world_size = int(rank), int(world_size)
        return self

    def shuffled(self, rows: int, seed: int = 0) -> "_PipelineSource":
        """Make :meth:`stream` read the training split in windows of ``rows`` rows, each handed out in a
        random order (:class:`recgo.DataPipeline`'s ``shuffle``), a new order every epoch (drawn from
        ``seed`` and the epoch); ``rows=0`` reads in file order. Validation keeps its order. Returns
        ``self``."""
        from ..pipeline import MAX_SHUFFLE

        if isinstance(rows, bool) or not isinstance(rows, int) or not 0 <= rows <= MAX_SHUFFLE:
            raise InvalidInputError(f"shuffle must be 0..{MAX_SHUFFLE} rows (a window held in memory), got {rows!r}")
        self.shuffle_rows, self.shuffle_seed = rows, int(seed)
        return self

    def epoch_seed(self, epoch: int) -> int:
        """The shuffle seed of training epoch ``epoch`` (a 64-bit mix of the seed and the epoch, so epochs
        and seeds draw unrelated orders)."""
        x = (self.shuffle_seed * 0x9E3779B97F4A7C15 + epoch + 1) % 2**64
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % 2**64
        return x ^ (x >> 31)

    def _train_source(self) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def _pipeline(self, source: Any, position: Any = None, depth: int = 0, tables: Any = None,
                  rank: int = 0, world_size: int = 1, shard: Any = None, drop_last: bool = True,
                  shuffle: int = 0, seed: int = 0) -> Any:
        from ..pipeline import DataPipeline

        return DataPipeline(source, self._engine, self.batch_size, depth=depth, tables=tables, drop_last=drop_last,
                            rank=rank, world_size=world_size, position=position, shard=shard, shuffle=shuffle,
                            seed=seed)

    def stream(self, state: dict[str, Any] | None = None, depth: int = 2,
               tables: list[dict[str, Any]] | None = None, shard: Any = None) -> Stream:
        per_epoch = self.batches_per_epoch(self.world_size)

        def make(pos: Any, epoch: int) -> Any:
            return self._pipeline(self._train_source(), pos, depth, tables, self.rank, self.world_size, shard,
                                  shuffle=self.shuffle_rows, seed=self.epoch_seed(epoch) if self.shuffle_rows else 0)

        return _PipelineStream(make, state, self._relabel, per_epoch, self.rank, self.world_size, self.batch_size,
                               self._check_train)

    def batches_per_epoch(self, world_size: int = 1) -> int:
        return self._train_rows() // (self.batch_size * world_size)

    def _train_rows(self) -> int:  # pragma: no cover - interface
        """Rows of the training split (all ranks' together)."""
        raise NotImplementedError

    def _check_train(self, batch: Batch, k: int) -> None:
        """Inspect this rank's k-th training batch of an epoch (nothing to check by default)."""

    def _relabel(self, exc: RecgoError) -> RecgoError:
        """The error a reader raised, in the terms of the user's input (the source's own files as is)."""
        return exc


class SyntheticCriteo(_PipelineSource):
    """Criteo-shaped synthetic data with a planted label model (see the module docstring). ``samples``
    training samples, then ``validation_samples`` held out; ``max_rows`` caps each table."""

    def __init__(self, batch_size: int = 1024, max_rows: int = 100_000, seed: int = 0, samples: int = 1 << 20,
                 validation_samples: int = 8192) -> None:
        from ..data import default_criteo_like
        from ..feature import Feature

        if batch_size <= 0 or max_rows <= 0 or samples < batch_size:
            raise InvalidInputError(f"SyntheticCriteo: batch_size ({batch_size}) must be positive and at most the "
                                    f"{samples} synthetic training samples, max_rows ({max_rows}) positive")
        if isinstance(validation_samples, bool) or not isinstance(validation_samples, int) or validation_samples < 1:
            raise InvalidInputError(f"SyntheticCriteo: validation_samples must be a positive integer (the run "
                                    f"evaluates on them), got {validation_samples!r}")
        template = default_criteo_like(samples + validation_samples, seed=seed)
        for f in template.fields:
            f.rows = min(f.rows, max_rows)
        self._template, self._samples, self._n_val = template, samples, validation_samples
        self.dense_in, self.keys = template.dense, tuple(f.name for f in template.fields)
        self.table_rows = {f.name: f.rows for f in template.fields}
        self.feature_table = {k: k for k in self.keys}
        super().__init__(batch_size, [Feature(f.name).mod(f.rows) for f in template.fields])

    def _train_source(self) -> Any:
        from dataclasses import replace

        return replace(self._template, samples=self._samples)

    def _train_rows(self) -> int:
        return self._samples

    def validation(self) -> list[Batch]:
        if self._val is None:
            n = self._samples
            start = {"file": 0, "row": n, "offset": -1, "global": n, "skipped": 0}
            # every held-out sample, the last batch short (drop_last scored a multiple of the batch
            # size, none when the batch was larger than the held-out set)
            self._val = _collect(self._pipeline(self._template, start, drop_last=False))
        return self._val


def _label_check(labels: torch.Tensor, path: Path, line_of: Callable[[int], int | str]) -> None:
    """Raise naming ``path`` and the line (``line_of(j)`` for sample j: a line number, or words that
    say where it is) of the first label not 0 or 1."""
    bad = ~((labels == 0) | (labels == 1))
    if bool(bad.any()):
        j = int(bad.nonzero()[0, 0])
        v = float(labels[j])
        shown = int(v) if v.is_integer() else v
        where = line_of(j)
        raise InvalidInputError(f"{path} {where if isinstance(where, str) else f'line {where}'} column 1 (label): label {shown} is not 0 or 1 (the "
                                "models are trained for a binary click label)")


class CriteoFile(_PipelineSource):
    """A labelled Criteo TSV file (plain or gzip); the last ``validation_fraction`` of its lines is held
    out (blank lines at the file's very end are not lines). Dense ``I1..I13`` as log(1 + max(x, 0)) (0
    when missing); ``C1..C26`` hashed, reduced modulo ``rows``; an empty value is an empty bag. A label
    other than 0 or 1 raises, naming the file's line. A short last batch of each epoch is dropped (on
    ``world_size`` ranks: whatever is left after ``n_train // (world_size × batch_size)`` steps)."""

    def __init__(self, path: str | os.PathLike[str], batch_size: int = 1024, rows: int = 100_000,
                 validation_fraction: float = 0.1, progress: bool = False) -> None:
        from ..feature import Feature

        self.path = Path(path)
        if isinstance(validation_fraction, bool) or not isinstance(validation_fraction, (int, float)) \
                or not 0 <= validation_fraction < 1:
            raise InvalidInputError(f"CriteoFile: validation_fraction must be a number in [0, 1) (at least one line "
                                    f"is held out), got {validation_fraction!r}")
        self._train, self._valpath, n_train = _split_file(self.path, validation_fraction, progress=progress)
        if n_train + self._before < batch_size:
            raise InvalidInputError(f"{self._data_name()}: {n_train + self._before} training lines, fewer than one "
                                    f"batch of {batch_size}")
        self._n_train = n_train
        self.dense_in, self.keys = 13, SPARSE_KEYS
        self.table_rows = {k: rows for k in self.keys}
        self.feature_table = {k: k for k in self.keys}
        super().__init__(batch_size, [Feature(k).hash().mod(rows) for k in self.keys])

    _before = 0  # training rows of the files before this one (recgo.train.criteo_files.CriteoFiles)

    def _data_name(self) -> str:
        """The data as error messages name it."""
        return str(self.path)

    def _train_source(self) -> Any:
        from ..data import CriteoSource

        return CriteoSource(self._train, needs_labels=True)  # a test file's error asks for a labelled one

    def _train_rows(self) -> int:
        return self._n_train

    def _check_train(self, batch: Batch, k: int) -> None:
        # this rank's k-th batch holds its share's rows k·B + j, j < B (training row (k·B + j)·N + rank,
        # line one more); shuffled, row k·B + j is one of its window's, (k·B + j) // W
        b, n, r, w = self.batch_size, self.world_size, self.rank, self.shuffle_rows
        if not w:
            _label_check(batch.labels, self.path, lambda j: (k * b + j) * n + r + 1)
            return

        def lines(j: int) -> str:
            first = (k * b + j) // w * w
            last = min(first + w, (self._n_train - r + n - 1) // n) - 1  # the rank's share ends the last window
            return f"lines {first * n + r + 1}..{last * n + r + 1} (one of these; shuffled in windows of {w} rows)"

        _label_check(batch.labels, self.path, lines)

    def validation(self) -> list[Batch]:
        if self._val is None:
            from ..data import CriteoSource
            from ..pipeline import DataPipeline

            try:
                pipe = DataPipeline(CriteoSource(self._valpath, needs_labels=True), self._engine, self.batch_size, depth=0, rank=0,
                                    world_size=1)
                val = _collect(pipe)
            except RecgoError as exc:
                raise self._relabel(exc) from exc
            start = self._n_train + 1
            for batch in val:
                _label_check(batch.labels, self.path, lambda j, start=start: start + j)
                start += batch.size
            self._val = val
        return self._val

    def _relabel(self, exc: RecgoError) -> RecgoError:
        """A reader's error about the cached training or validation split, naming the user's file and
        its line instead (the validation split's line k is the file's line n_train + k)."""
        msg = str(exc)
        for split, base in ((self._train, 0), (self._valpath, self._n_train)):
            msg = re.sub(re.escape(str(split)) + r"(?: line (\d+))?",
                         lambda m, base=base: f"{self.path}" + (f" line {int(m[1]) + base}" if m[1] else ""), msg)
        return exc if msg == str(exc) else type(exc)(msg)


_MOVED = ("TaobaoSequences", "SEQUENCE_KEYS", "USERBEHAVIOR_VOCABULARY")


def __getattr__(name: str) -> Any:
    """The Taobao sequence source's names, at home in :mod:`recgo.train.taobao` since session 36, by
    their old module too (imported on first use: that module builds on this one's classes)."""
    if name in _MOVED:
        from . import taobao

        return getattr(taobao, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
