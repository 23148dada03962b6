"""Training data for the main job: deterministic, indexable batches of (dense, sparse KJT, labels).

Three sources, all returning :class:`Batch` for a batch index, so a run can stop and resume at any
step and every backend sees the same batches in the same order:

* :class:`SyntheticCriteo` — the default (no files needed): 13 dense and 26 categorical features
  shaped like Criteo's (per-column cardinality, power-law ID popularity, missing values), with labels
  drawn from a *planted* model (hidden per-ID effects, a dense linear term and one pairwise
  interaction, through a sigmoid), so the loss falls and the AUC means something; its Bayes AUC is
  known (:attr:`SyntheticCriteo.oracle_auc`).
* :class:`CriteoFile` — a Criteo display-advertising TSV (label, I1..I13, C1..C26), categorical values
  hashed and reduced modulo the table size by recgo's FeatureEngine; a fixed train/validation split.
* :class:`TaobaoSequences` — Taobao UserBehavior CSV (user, item, category, behaviour, timestamp):
  for each event, the user's previous ``max_len`` events as the history, the event's item as a positive
  target and a uniformly sampled item as a negative; each user's last event is held out.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import InvalidInputError, RecgoIOError
from ..sparse import KeyedJaggedTensor

# Per-column cardinalities of the Criteo Kaggle (DAC) training set, as published with DLRM.
CRITEO_CARDINALITIES = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27,
                        14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)
# Fraction of samples in which each categorical column is empty (measured on the DAC sample).
CRITEO_MISSING = (0.0, 0.0, 0.03, 0.03, 0.0, 0.12, 0.0, 0.0, 0.0, 0.03, 0.0, 0.03, 0.0, 0.0, 0.0, 0.03, 0.0, 0.0,
                  0.44, 0.44, 0.03, 0.76, 0.0, 0.03, 0.44, 0.44)
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


class Source:
    """Indexable training data: ``train_batch(i)`` for step i (cycling over epochs) and a fixed
    validation set ``validation()``; ``tables`` names each sparse key's table and size."""

    batch_size: int
    dense_in: int
    keys: tuple[str, ...]
    table_rows: dict[str, int]
    feature_table: dict[str, str]

    def train_batch(self, i: int) -> Batch:  # pragma: no cover - interface
        raise NotImplementedError

    def validation(self) -> list[Batch]:  # pragma: no cover - interface
        raise NotImplementedError

    def batches_per_epoch(self) -> int:
        """Steps in one pass over the training split (large for the endless synthetic source)."""
        return 1 << 62


def _power_law(n: int, rows: int, alpha: float, gen: torch.Generator) -> torch.Tensor:
    """``n`` IDs in [0, rows) with P(id) ∝ (id+1)^-alpha (approximately; inverse-CDF of the continuous law)."""
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    if abs(alpha - 1.0) < 1e-9:
        x = torch.exp(u * math.log(rows + 1.0))
    else:
        a = 1.0 - alpha
        x = (1.0 + u * ((rows + 1.0) ** a - 1.0)) ** (1.0 / a)
    return (x.floor().to(torch.int64) - 1).clamp(0, rows - 1)


class SyntheticCriteo(Source):
    """Criteo-shaped synthetic data with a planted logistic model (see the module docstring).

    ``max_rows`` caps each table (Criteo's largest columns have 10M values); ``alpha`` is the power-law
    exponent of ID popularity; ``effect`` the standard deviation of the hidden per-ID effects.
    """

    def __init__(self, batch_size: int = 1024, max_rows: int = 100_000, alpha: float = 1.05, effect: float = 0.6,
                 seed: int = 0, validation_batches: int = 8) -> None:
        if batch_size <= 0 or max_rows <= 0:
            raise InvalidInputError("SyntheticCriteo: batch_size and max_rows must be positive")
        self.batch_size, self.seed, self.alpha = batch_size, seed, alpha
        self.dense_in = 13
        self.keys = SPARSE_KEYS
        self.rows = [min(c, max_rows) for c in CRITEO_CARDINALITIES]
        self.table_rows = {k: r for k, r in zip(self.keys, self.rows)}
        self.feature_table = {k: k for k in self.keys}
        gen = torch.Generator().manual_seed(seed)
        # Hidden model: per-ID effects, a dense linear term, one interaction of two columns' effects.
        self._effects = [torch.randn(r, generator=gen) * effect for r in self.rows]
        self._dense_w = torch.randn(self.dense_in, generator=gen) * 0.3
        self._bias = -1.2
        self._validation_batches = validation_batches
        self._val: list[Batch] | None = None
        self.oracle_auc = float("nan")

    def _make(self, stream: int, i: int) -> tuple[Batch, torch.Tensor]:
        gen = torch.Generator().manual_seed((self.seed * 1_000_003 + stream) * 1_000_033 + i)
        b = self.batch_size
        dense_raw = torch.exp(torch.randn(b, self.dense_in, generator=gen) * 1.5)
        dense = torch.log1p(dense_raw)
        vals, lens = [], []
        logit = torch.full((b,), self._bias) + (dense - dense.mean(0)) @ self._dense_w
        picked: list[torch.Tensor] = []
        for t, rows in enumerate(self.rows):
            present = torch.rand(b, generator=gen) >= CRITEO_MISSING[t]
            ids = _power_law(b, rows, self.alpha, gen)
            eff = torch.where(present, self._effects[t][ids], torch.zeros(()))
            logit += eff
            picked.append(eff)
            vals.append(ids[present])
            lens.append(present.to(torch.int64))
        logit += picked[0] * picked[1] * 2.0
        labels = torch.bernoulli(torch.sigmoid(logit), generator=gen)
        kjt = KeyedJaggedTensor(list(self.keys), torch.cat(vals), torch.cat(lens))
        return Batch(dense.to(torch.float32), kjt, labels.to(torch.float32)), logit

    def train_batch(self, i: int) -> Batch:
        """Batch ``i`` of the endless training stream (a pure function of the seed and i)."""
        return self._make(0, i)[0]

    def validation(self) -> list[Batch]:
        """The held-out batches (a separate stream); also sets :attr:`oracle_auc`, the AUC of the planted
        model's own logits on them (the best any model can reach)."""
        if self._val is None:
            from .metrics import auc

            made = [self._make(1, i) for i in range(self._validation_batches)]
            self._val = [m[0] for m in made]
            self.oracle_auc = auc(torch.cat([m[1] for m in made]), torch.cat([m[0].labels for m in made]))
        return self._val


def _read_lines(path: Path) -> list[str]:
    try:
        with path.open("r", encoding="ascii", errors="strict") as fh:
            return fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise RecgoIOError(f"{path}: {exc}") from exc


class CriteoFile(Source):
    """A labelled Criteo TSV file, split by line order: the last ``validation_fraction`` is held out.

    Dense ``I1..I13``: empty → 0, negative → 0, then log(1 + x) (DLRM's preprocessing). Categorical
    ``C1..C26``: hashed and reduced modulo ``rows`` by the FeatureEngine; an empty value is an empty bag.
    Batches of an epoch come in file order; a short last batch is dropped so every step has B samples.
    """

    def __init__(self, path: str | os.PathLike[str], batch_size: int = 1024, rows: int = 100_000,
                 validation_fraction: float = 0.1) -> None:
        from ..feature import Feature, FeatureEngine, encode_strings

        self.path = Path(path)
        self.batch_size, self.dense_in, self.keys = batch_size, 13, SPARSE_KEYS
        self.table_rows = {k: rows for k in self.keys}
        self.feature_table = {k: k for k in self.keys}
        lines = _read_lines(self.path)
        labels, dense, cats = [], [], [[] for _ in self.keys]
        for n, line in enumerate(lines, 1):
            f = line.split("\t")
            if len(f) != 40:
                raise RecgoIOError(f"{self.path}:{n}: {len(f)} tab-separated fields, a labelled Criteo line has 40")
            try:
                labels.append(float(int(f[0])))
                dense.append([max(0, int(x)) if x else 0 for x in f[1:14]])
            except ValueError as exc:
                raise RecgoIOError(f"{self.path}:{n}: {exc}") from exc
            for j, v in enumerate(f[14:40]):
                cats[j].append([v] if v else [])
        engine = FeatureEngine([Feature(k, dtype="bytes").hash().mod(rows) for k in self.keys])
        self._sparse = engine({k: encode_strings(bags) for k, bags in zip(self.keys, cats)})
        self._dense = torch.log1p(torch.tensor(dense, dtype=torch.float32))
        self._labels = torch.tensor(labels, dtype=torch.float32)
        total = len(labels)
        self._n_val = max(1, int(total * validation_fraction))
        self._n_train = total - self._n_val
        if self._n_train < batch_size:
            raise InvalidInputError(f"{self.path}: {self._n_train} training lines, fewer than one batch of {batch_size}")
        self._offsets = self._sparse.offsets()

    def _slice(self, lo: int, hi: int) -> Batch:
        n = self._labels.numel()
        lengths = self._sparse.lengths().view(len(self.keys), n)
        off = self._offsets.view(-1)[:-1].view(len(self.keys), n)
        vals = [self._sparse.values()[int(off[k, lo]):int(off[k, lo]) + int(lengths[k, lo:hi].sum())]
                for k in range(len(self.keys))]
        kjt = KeyedJaggedTensor(list(self.keys), torch.cat(vals), lengths[:, lo:hi].reshape(-1).clone())
        return Batch(self._dense[lo:hi], kjt, self._labels[lo:hi])

    def batches_per_epoch(self) -> int:
        return self._n_train // self.batch_size

    def train_batch(self, i: int) -> Batch:
        lo = (i % self.batches_per_epoch()) * self.batch_size
        return self._slice(lo, lo + self.batch_size)

    def validation(self) -> list[Batch]:
        start, total = self._n_train, self._labels.numel()
        return [self._slice(lo, min(lo + self.batch_size, total)) for lo in range(start, total, self.batch_size)]


SEQUENCE_KEYS = ("hist_item", "hist_cat", "target_item", "target_cat", "user_id")


class TaobaoSequences(Source):
    """Next-interaction prediction on Taobao UserBehavior rows (see the module docstring).

    Sparse keys: ``hist_item``/``hist_cat`` (the last ``max_len`` earlier events, oldest first) and
    ``target_item``/``target_cat``/``user_id`` (one ID each). Items share the ``item`` table between the
    history and the target, categories the ``cat`` table. IDs are renumbered densely from 0 in order of
    first appearance. Training samples are shuffled once with ``seed``.
    """

    def __init__(self, path: str | os.PathLike[str], batch_size: int = 256, max_len: int = 50, seed: int = 0) -> None:
        self.path = Path(path)
        self.batch_size, self.max_len, self.dense_in, self.keys = batch_size, max_len, 0, SEQUENCE_KEYS
        users, items, cats = [], [], []
        try:
            with self.path.open(newline="") as fh:
                for row in csv.reader(fh):
                    if len(row) < 5:
                        continue  # the sample's last line is cut short
                    users.append(int(row[0]))
                    items.append(int(row[1]))
                    cats.append(int(row[2]))
        except (OSError, ValueError) as exc:
            raise RecgoIOError(f"{self.path}: {exc}") from exc
        if not users:
            raise RecgoIOError(f"{self.path}: no complete rows")
        u, it, ct = (torch.unique(torch.tensor(x), return_inverse=True)[1] for x in (users, items, cats))
        n_items, n_cats, n_users = int(it.max()) + 1, int(ct.max()) + 1, int(u.max()) + 1
        self.table_rows = {"item": n_items, "cat": n_cats, "user": n_users}
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
        events = idx[idx > starts]
        gen = torch.Generator().manual_seed(seed)
        neg_items = torch.randint(0, n_items, (events.numel(),), generator=gen)
        self._data = dict(items=it, cats=ct, users=u, starts=starts, item_cat=item_cat)
        # Each event is two samples: (event, its item, label 1) and (event, a random item, label 0).
        pos = torch.stack([events, it[events], torch.ones_like(events)], 1)
        neg = torch.stack([events, neg_items, torch.zeros_like(events)], 1)
        samples = torch.cat([pos, neg])
        held = is_last[samples[:, 0]]
        train, val = samples[~held], samples[held]
        self._train = train[torch.randperm(train.shape[0], generator=gen)]
        self._val = val
        if self._train.shape[0] < batch_size:
            raise InvalidInputError(f"{self.path}: {self._train.shape[0]} training samples, fewer than a batch")

    def _batch(self, s: torch.Tensor) -> Batch:
        d = self._data
        ev, tgt, lab = s[:, 0], s[:, 1], s[:, 2]
        first = torch.maximum(d["starts"][ev], ev - self.max_len)
        hist_len = ev - first
        hist_idx = torch.repeat_interleave(first, hist_len) + (
            torch.arange(int(hist_len.sum())) - torch.repeat_interleave(torch.cumsum(hist_len, 0) - hist_len, hist_len))
        b = ev.numel()
        ones = torch.ones(b, dtype=torch.int64)
        values = torch.cat([d["items"][hist_idx], d["cats"][hist_idx], tgt, d["item_cat"][tgt], d["users"][ev]])
        lengths = torch.cat([hist_len, hist_len, ones, ones, ones])
        return Batch(torch.zeros(b, 0), KeyedJaggedTensor(list(self.keys), values, lengths), lab.to(torch.float32))

    def batches_per_epoch(self) -> int:
        return self._train.shape[0] // self.batch_size

    def train_batch(self, i: int) -> Batch:
        lo = (i % self.batches_per_epoch()) * self.batch_size
        return self._batch(self._train[lo:lo + self.batch_size])

    def validation(self) -> list[Batch]:
        return [self._batch(self._val[lo:lo + self.batch_size]) for lo in range(0, self._val.shape[0], self.batch_size)]
