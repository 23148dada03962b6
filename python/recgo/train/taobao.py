"""Taobao UserBehavior sequences for the main job's behaviour-sequence model (:class:`TaobaoSequences`;
see :mod:`recgo.train.data` for the other sources and what they share)."""

from __future__ import annotations

import copy
import hashlib
import os
from pathlib import Path
from typing import Any

import torch

from ..errors import InvalidInputError, RecgoIOError
from ..sparse import KeyedJaggedTensor
from ._files import derived_path, write_once
from ._inputs import userbehavior_events
from ._progress import progress_bar
from .data import Batch, Stream, _PipelineSource


def _userbehavior_columns(path: Path) -> tuple[list[int], list[int], list[int]]:
    """The user, item and category columns of a UserBehavior CSV (plain or gzip), in file order; see
    :func:`recgo.train._inputs.userbehavior_events` for what it accepts and what raises."""
    users, items, cats, _ = userbehavior_events(Path(path))
    return users.tolist(), items.tolist(), cats.tolist()


class _IndexStream(Stream):
    """Batches ``i, i+1, ...`` of an indexable source (``batch(i)`` cycles over epochs)."""

    def __init__(self, batch: Any, state: dict[str, Any] | None) -> None:
        self._batch, self.index = batch, int(state["index"]) if state else 0

    def __next__(self) -> Batch:
        self.index += 1
        return self._batch(self.index - 1)

    def state_dict(self) -> dict[str, Any]:
        return {"index": self.index}


SEQUENCE_KEYS = ("hist_item", "hist_cat", "target_item", "target_cat", "user_id")

# The whole Tianchi UserBehavior dataset's vocabulary (its description: 987,994 users, 4,162,024 items
# and 9,439 categories in 100,150,807 events), the table sizes of a model trained on all of it.
USERBEHAVIOR_VOCABULARY = {"item": 4_162_024, "cat": 9_439, "user": 987_994}


class TaobaoSequences(_PipelineSource):
    """Next-interaction prediction on Taobao UserBehavior rows (see the module docstring).

    Sparse keys: ``hist_item``/``hist_cat`` (the last ``max_len`` earlier events, oldest first) and
    ``target_item``/``target_cat``/``user_id`` (one ID each). Items share the ``item`` table between the
    history and the target, categories the ``cat`` table. IDs are renumbered densely from 0 in increasing
    order of the raw ID. Training samples are shuffled once with ``seed``. Each user's last ``holdout``
    events (and their negatives) are the validation split; their histories are the events before them.

    With ``pipeline`` (the default) the training batches come through :class:`recgo.DataPipeline`: the
    shuffled samples are written once to a cached CSV (label, the two histories as ``|``-separated
    sequence columns, the three single IDs; keyed by the file, ``max_len`` and ``seed``) that recgo's Go
    CSV reader reads ``depth`` batches ahead, and the :class:`recgo.FeatureEngine` truncates each
    history to its newest ``max_len`` events and bounds every ID by its table (``fuse=False``: field by
    field). The batches equal :meth:`train_batch`'s, which builds them in Python (``pipeline=False``).
    """

    def __init__(self, path: str | os.PathLike[str], batch_size: int = 256, max_len: int = 50, seed: int = 0,
                 pipeline: bool = True, fuse: bool = True, holdout: int = 1, catalog: bool = False,
                 progress: bool = False) -> None:
        from ..feature import Feature

        if isinstance(holdout, bool) or not isinstance(holdout, int) or holdout <= 0:
            raise InvalidInputError(f"holdout must be a positive number of events per user, got {holdout!r}")
        self.path = Path(path)
        self.holdout = holdout
        self.batch_size, self.max_len, self.dense_in, self.keys = batch_size, max_len, 0, SEQUENCE_KEYS
        self.seed, self.pipeline, self.catalog = seed, bool(pipeline), bool(catalog)
        self.progress = bool(progress)  # a bar while the samples' CSV is written (a large file's takes minutes)
        users, items, cats, times = userbehavior_events(self.path)
        if not users.numel():
            raise RecgoIOError(f"{self.path}: no complete rows")
        # The events by user (ascending ID) and time, whatever the file's order; a stable sort, so one
        # user's events of the same timestamp keep their order in the file.
        order = torch.argsort(times, stable=True)
        order = order[torch.argsort(users[order], stable=True)]
        u, it, ct = (torch.unique(x[order], return_inverse=True)[1] for x in (users, items, cats))
        n_items, n_cats, n_users = int(it.max()) + 1, int(ct.max()) + 1, int(u.max()) + 1
        counts = {"item": n_items, "cat": n_cats, "user": n_users}
        self.table_rows = dict(USERBEHAVIOR_VOCABULARY) if self.catalog else counts
        # The row of each renumbered ID: itself, or (catalog) a distinct row of the catalog-sized table.
        ids = {}
        for i, (t, n) in enumerate(counts.items()):
            if n > self.table_rows[t]:
                raise InvalidInputError(f"{self.path}: {n} distinct {t} IDs, more than the {self.table_rows[t]} "
                                        "rows of the whole dataset's table")
            g = torch.Generator().manual_seed(seed * 3 + i)
            ids[t] = torch.randperm(self.table_rows[t], generator=g)[:n] if self.catalog else torch.arange(n)
        self.feature_table = {"hist_item": "item", "target_item": "item", "hist_cat": "cat", "target_cat": "cat",
                              "user_id": "user"}
        item_cat = torch.zeros(n_items, dtype=torch.int64)
        item_cat[it] = ct
        # Events with at least one earlier event of the same user become samples.
        n = u.numel()
        idx = torch.arange(n)
        block_start = torch.ones(n, dtype=torch.bool)
        block_start[1:] = u[1:] != u[:-1]
        starts = torch.cummax(torch.where(block_start, idx, torch.zeros_like(idx)), 0)[0]
        is_last = torch.ones(n, dtype=torch.bool)
        is_last[:-1] = block_start[1:]
        # Events among their user's last ``holdout`` are held out: count positions from each block's end.
        block_end = torch.flip(torch.cummin(torch.flip(torch.where(is_last, idx, torch.full_like(idx, n)), [0]), 0)[0],
                               [0])
        is_held = block_end - idx < holdout
        events = idx[idx > starts]
        gen = torch.Generator().manual_seed(seed)
        neg_items = torch.randint(0, n_items, (events.numel(),), generator=gen)
        # per event its rows, and per (renumbered) item its row and its category's row
        self._data = dict(items=ids["item"][it], cats=ids["cat"][ct], users=ids["user"][u], starts=starts,
                          item_row=ids["item"], item_cat=ids["cat"][item_cat])
        # Each event is two samples: (event, its item, label 1) and (event, a random item, label 0).
        pos = torch.stack([events, it[events], torch.ones_like(events)], 1)
        neg = torch.stack([events, neg_items, torch.zeros_like(events)], 1)
        samples = torch.cat([pos, neg])
        held = is_held[samples[:, 0]]
        train, val = samples[~held], samples[held]
        self._train = train[torch.randperm(train.shape[0], generator=gen)]
        self._val_samples = val
        if self._train.shape[0] < batch_size:
            raise InvalidInputError(f"{self.path}: {self._train.shape[0]} training samples, fewer than a batch")
        rows = {k: self.table_rows[t] for k, t in self.feature_table.items()}
        features = [Feature(k).truncate(max_len, keep="last").mod(rows[k]) if k.startswith("hist")
                    else Feature(k).mod(rows[k]) for k in SEQUENCE_KEYS]
        super().__init__(batch_size, features, fuse=fuse)
        self._val_batches: list[Batch] | None = None
        self._csv: Path | None = None

    def _batch(self, s: torch.Tensor) -> Batch:
        d = self._data
        ev, tgt, lab = s[:, 0], s[:, 1], s[:, 2]
        first = torch.maximum(d["starts"][ev], ev - self.max_len)
        hist_len = ev - first
        hist_idx = torch.repeat_interleave(first, hist_len) + (
            torch.arange(int(hist_len.sum())) - torch.repeat_interleave(torch.cumsum(hist_len, 0) - hist_len, hist_len))
        b = ev.numel()
        ones = torch.ones(b, dtype=torch.int64)
        values = torch.cat([d["items"][hist_idx], d["cats"][hist_idx], d["item_row"][tgt], d["item_cat"][tgt],
                            d["users"][ev]])
        lengths = torch.cat([hist_len, hist_len, ones, ones, ones])
        return Batch(torch.zeros(b, 0), KeyedJaggedTensor(list(self.keys), values, lengths=lengths), lab.to(torch.float32))

    def _train_rows(self) -> int:
        return int(self._train.shape[0])

    def stream(self, state: dict[str, Any] | None = None, depth: int = 2,
               tables: list[dict[str, Any]] | None = None, shard: Any = None) -> Stream:
        if not self.pipeline:
            if self.shuffle_rows:
                raise InvalidInputError("TaobaoSequences(pipeline=False) reads its samples in their stored (already "
                                        "shuffled) order; shuffle windows apply through the pipeline (the default)")
            if self.world_size > 1:
                raise InvalidInputError("TaobaoSequences(pipeline=False) reads every batch whole; shard it over "
                                        "ranks with the pipeline (the default)")
            return _IndexStream(self.train_batch, state)
        return super().stream(state, depth, None)  # the sequence collection deduplicates by itself

    def with_fusion(self, fuse: bool) -> "TaobaoSequences":
        """The same samples (shared, not copied) with a FeatureEngine that runs fused or field by field."""
        from ..feature import FeatureEngine

        other = copy.copy(self)
        other._engine = FeatureEngine(self._engine.features, fuse=fuse)
        return other

    def train_batch(self, i: int) -> Batch:
        """Training batch ``i`` (cycling over epochs), built in Python."""
        lo = (i % self.batches_per_epoch()) * self.batch_size
        return self._batch(self._train[lo:lo + self.batch_size])

    def validation(self) -> list[Batch]:
        if self._val_batches is None:
            self._val_batches = [self._batch(self._val_samples[lo:lo + self.batch_size])
                                 for lo in range(0, self._val_samples.shape[0], self.batch_size)]
        return self._val_batches

    # -- the pipeline's input ----------------------------------------------------------------------

    def _train_source(self) -> Any:
        from ..data import Column, CSVSource

        cols = [Column("label", "label"), Column("hist_item", "sequence"), Column("hist_cat", "sequence"),
                Column("target_item"), Column("target_cat"), Column("user_id")]
        return CSVSource(self.samples_csv(), cols, header=True)

    def samples_csv(self) -> Path:
        """The shuffled training samples as a CSV file (written on first use, cached across runs)."""
        if self._csv is not None and self._csv.exists():
            return self._csv
        st = self.path.stat()
        held = f"|{self.holdout}" if self.holdout != 1 else ""  # keys of runs holding out one event kept
        held += "|catalog" if self.catalog else ""
        key = hashlib.sha256(f"taobao-v2|{self.path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{self.max_len}|"
                             f"{self.seed}{held}".encode()).hexdigest()[:16]
        self._csv = write_once(derived_path(f"recgo-taobao-{key}", "train.csv"), self._write_samples)
        return self._csv

    def _write_samples(self, path: Path) -> None:
        d = self._data
        items, cats, item_cat = d["items"].tolist(), d["cats"].tolist(), d["item_cat"].tolist()
        users, starts, item_row = d["users"].tolist(), d["starts"].tolist(), d["item_row"].tolist()
        bar = progress_bar(int(self._train.shape[0]), f"{self.path.name}: samples", self.progress, unit="sample",
                           delay=2.0)
        try:
            with path.open("w") as fh:
                fh.write("label,hist_item,hist_cat,target_item,target_cat,user_id\n")
                lines = []
                for ev, tgt, lab in self._train.tolist():
                    lo = max(starts[ev], ev - self.max_len)
                    lines.append(f"{lab},{'|'.join(map(str, items[lo:ev]))},{'|'.join(map(str, cats[lo:ev]))},"
                                 f"{item_row[tgt]},{item_cat[tgt]},{users[ev]}\n")
                    if len(lines) >= 4096:
                        fh.writelines(lines)
                        if bar is not None:
                            bar.update(len(lines))
                        lines.clear()
                fh.writelines(lines)
                if bar is not None:
                    bar.update(len(lines))
        finally:
            if bar is not None:
                bar.close()
