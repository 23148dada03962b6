"""Access profiles of a data sample: counted in Go from KJT batches, or synthetic."""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import torch

from .. import _lib
from .._cache import KeyCache
from .._textfiles import read_regular
from ..errors import InvalidInputError, NotFoundError, RecgoIOError
from ..sparse import KeyedJaggedTensor, as_kjt
from ..tensors import ptr
from ._json import bytes_arg

#: A table whose profile rests on fewer sampled lookups than this draws a warning.
MIN_LOOKUPS = 1000


class ThinProfileWarning(UserWarning):
    """A table's profile rests on too few sampled lookups to trust its access CDF."""


class Profile:
    """Per-table access profile of a data sample (held in Go; see :func:`profile`)."""

    def __init__(self, handle: _lib.Handle, sampled: tuple[int, int] | None = None) -> None:
        self._h = handle
        self._summary: dict[str, Any] | None = None
        self._sampled = sampled

    @property
    def handle(self) -> _lib.Handle:
        """The Go profile's handle."""
        return self._h

    @property
    def sampled(self) -> tuple[int, int] | None:
        """(rows offered, rows kept by sampling) when the profile was counted here, else None."""
        return self._sampled

    def to_dict(self, ranked: bool = False) -> dict[str, Any]:
        """The profile as JSON data (``ranked`` includes the base64 ranked rows)."""
        if not ranked and self._summary is not None:
            return self._summary
        d = _lib.call_json("recgo_profile_json", self._h.value, 1 if ranked else 0)
        if not ranked:
            self._summary = d
        return d

    @property
    def tables(self) -> list[dict[str, Any]]:
        """Per-table facts: name, rows, dim, samples, lookups, coverage, pooling, touched, cdf, ..."""
        return self.to_dict()["tables"]

    def table(self, name: str) -> dict[str, Any]:
        """One table's facts; raises NotFoundError."""
        for t in self.tables:
            if t["name"] == name:
                return t
        raise NotFoundError(f"profile: no table {name!r}")

    def thin_tables(self, min_lookups: int = MIN_LOOKUPS) -> dict[str, int]:
        """Tables whose profile rests on fewer than ``min_lookups`` sampled lookups: ``{name: lookups}``.

        A synthetic profile (built analytically, ``lookups`` 0 everywhere) has none; one counted here
        (:attr:`sampled`) from batches with no IDs has every table thin (it had none either)."""
        tabs = self.tables
        if self._sampled is None and all(t.get("lookups", 0) == 0 for t in tabs):
            return {}
        return {t["name"]: int(t["lookups"]) for t in tabs if t["lookups"] < min_lookups}

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the profile (with ranked rows) as JSON; RecgoIOError when the file cannot be written."""
        try:
            Path(path).write_text(json.dumps(self.to_dict(ranked=True)))
        except OSError as exc:
            raise RecgoIOError(f"profile: cannot write {path}: {exc.strerror or exc}") from exc

    @staticmethod
    def load(path: str | os.PathLike[str]) -> "Profile":
        """Read a profile written by :meth:`save` (or by ``python -m recgo profile``)."""
        data = read_regular(path, "profile")
        buf = ctypes.create_string_buffer(data, len(data))
        return Profile(_lib.new_handle("recgo_profile_parse", buf, len(data)))

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "Profile":
        """Build from JSON data (the format of :meth:`to_dict`)."""
        buf, n = bytes_arg(d, "profile")
        return Profile(_lib.new_handle("recgo_profile_parse", buf, n))

    @staticmethod
    def synthetic(spec: Mapping[str, Any]) -> "Profile":
        """A synthetic RecShard-style profile from a Go ``planner.SyntheticSpec`` (snake_case fields:
        tables, dim, elem_bytes, total_bytes, min_rows, max_rows, alphas, coverages, poolings,
        touched_min, steps, seed)."""
        buf, n = bytes_arg(spec, "synthetic spec")
        return Profile(_lib.new_handle("recgo_profile_synthetic", buf, n))

    def __repr__(self) -> str:
        return f"Profile({len(self.tables)} tables)"


@dataclass
class TableSpec:
    """A table to profile: its name, row count, dim and bytes per element."""

    name: str
    rows: int
    dim: int = 64
    elem_bytes: int = 4


class Profiler:
    """Counts table accesses from KJT batches (recgo's or TorchRec's) in Go, one call per batch.

    ``feature_to_table`` maps KJT keys to table names. By default a key feeds the table whose config
    lists it in ``feature_names`` (recgo's or TorchRec's ``EmbeddingBagConfig``), else the table of the
    same name; explicit entries win. Keys mapping to no profiled table are skipped, but a profile in
    which no key ever matched a table raises instead of planning on zero lookups.
    """

    def __init__(self, tables: Sequence[TableSpec | Any], sample_rate: float = 0.01, seed: int = 0,
                 steps: int = 16, feature_to_table: Mapping[str, str] | None = None) -> None:
        specs = [_spec(t) for t in tables]
        buf, n = bytes_arg([asdict(s) for s in specs], "profiler tables")
        self._h = _lib.new_handle("recgo_profiler_new",
                                  buf, n, float(sample_rate), int(seed), int(steps))
        self._sample_rate = sample_rate
        self._index = {s.name: i for i, s in enumerate(specs)}
        unknown = {k: v for k, v in dict(feature_to_table or {}).items() if v not in self._index}
        if unknown:  # a typo: the key's lookups would go uncounted and its table planned on none
            raise NotFoundError(f"feature_to_table maps {unknown} to no profiled table (tables: {list(self._index)})")
        # key → every table that reads it (a key several configs list feeds each, as the EBC looks it up
        # in each); an explicit feature_to_table entry names the one table its key feeds
        self._f2t = {**_feature_tables(tables), **{k: [v] for k, v in dict(feature_to_table or {}).items()}}
        self._key_cache: dict[tuple[str, ...], tuple[torch.Tensor, torch.Tensor | None]] = KeyCache()
        self._matched = False
        self._unmatched: list[str] = []  # keys seen that feed no profiled table, in first-seen order

    def _tables_for(self, keys: list[str]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(table index per counted key, the batch key each counted key copies): the second is None
        when every key feeds at most one table; otherwise a key several tables read is counted once
        per table."""
        k = tuple(keys)
        hit = self._key_cache.get(k)
        if hit is None:
            pairs = [(j, self._index.get(name, -1)) for j, key in enumerate(keys)
                     for name in self._f2t.get(key, [key])]
            t = torch.tensor([i for _, i in pairs], dtype=torch.int64)
            src = torch.tensor([j for j, _ in pairs], dtype=torch.int64) if len(pairs) > len(keys) else None
            hit = (t, src)
            self._key_cache[k] = hit
            fed = {keys[j] for j, i in pairs if i >= 0}
            self._unmatched += [key for key in keys if key not in fed and key not in self._unmatched]
        self._matched = self._matched or bool((hit[0] >= 0).any())
        return hit

    def add(self, batch: Any) -> None:
        """Count one batch: a KeyedJaggedTensor, or ``{table: ids}`` with one ID per sample."""
        if isinstance(batch, Mapping):
            names = list(batch)
            ids = [torch.as_tensor(batch[n], dtype=torch.int64).reshape(-1) for n in names]
            sizes = {x.numel() for x in ids}
            if len(sizes) > 1:
                raise InvalidInputError(f"per-table id arrays differ in length: {sorted(sizes)}")
            b = sizes.pop() if sizes else 0
            kjt = KeyedJaggedTensor(names, torch.cat(ids) if ids else torch.empty(0, dtype=torch.int64),
                                    lengths=torch.ones(len(names) * b, dtype=torch.int64))
        else:
            kjt = as_kjt(batch)
        keys = kjt.keys()
        tables, src = self._tables_for(keys)
        values, lengths = kjt.values(), kjt.lengths()
        if src is not None:  # a key several tables read: its lengths and values once per table
            if lengths.numel() != len(keys) * kjt.stride():
                raise InvalidInputError(f"profile: the batch has {lengths.numel()} lengths, expected {len(keys)} keys × "
                                        f"{kjt.stride()} samples (a variable-batch KJT cannot be profiled)")
            per_key = lengths.reshape(len(keys), kjt.stride())
            ends = torch.cumsum(per_key.sum(1), 0).tolist()
            bounds = list(zip([0, *ends[:-1]], ends))
            lengths = per_key[src].reshape(-1)
            values = torch.cat([values[bounds[j][0]:bounds[j][1]] for j in src.tolist()])
        f = _lib.fn("recgo_profiler_add")
        _lib.call(f, self._h.value, tables.data_ptr(), len(tables), kjt.stride(),
                  ptr(lengths), lengths.numel(), ptr(values), values.numel())

    def samples(self) -> tuple[int, int]:
        """(samples offered, samples kept by sampling)."""
        out = torch.zeros(2, dtype=torch.int64)
        _lib.call(_lib.fn("recgo_profiler_samples"), self._h.value, out.data_ptr())
        return int(out[0]), int(out[1])

    def profile(self) -> Profile:
        """Freeze the counts into a :class:`Profile` (raises InvalidInputError when nothing was kept, or
        when batches came but none of their keys feeds a profiled table)."""
        if not self._matched and self._unmatched:
            shown = ", ".join(self._unmatched[:8]) + (", ..." if len(self._unmatched) > 8 else "")
            raise InvalidInputError(
                f"profile: no batch key feeds a profiled table (keys seen: {shown}; tables: "
                f"{', '.join(list(self._index)[:8])}{', ...' if len(self._index) > 8 else ''}): list the keys in the "
                "tables' feature_names or pass feature_to_table={key: table}")
        offered, kept = self.samples()
        if offered and not kept:  # the engine's "empty profile" would not name the sample rate
            raise InvalidInputError(
                f"profile: sample_rate={self._sample_rate:g} kept none of the {offered} samples offered: profile more "
                "batches, or raise sample_rate (RecShard's 0.01 is for large data; 1.0 keeps every sample)")
        return Profile(_lib.new_handle("recgo_profiler_profile", self._h.value), self.samples())


def _feature_tables(tables: Sequence[Any]) -> dict[str, list[str]]:
    """{feature: [table, ...]} from the configs' ``feature_names``: a feature several tables list feeds
    each of them, in config order."""
    out: dict[str, list[str]] = {}
    for t in tables:
        for f in getattr(t, "feature_names", None) or ():
            names = out.setdefault(str(f), [])
            if str(t.name) not in names:
                names.append(str(t.name))
    return out


#: Bytes per element of an embedding config's ``data_type`` (TorchRec's DataType names, torch dtypes,
#: strings); sub-byte types (INT4, INT2) have no whole number and are refused.
ELEM_BYTES = {"fp32": 4, "float32": 4, "float": 4, "fp16": 2, "float16": 2, "half": 2, "bf16": 2, "bfloat16": 2,
              "int8": 1, "uint8": 1, "nfp8": 1, "int32": 4, "int64": 8}


def elem_bytes(data_type: Any, table: str = "") -> int:
    """Bytes per element of ``data_type`` (a TorchRec ``DataType``, a torch dtype or a name; None is
    FP32); InvalidInputError naming the table for an unknown type or one with no whole byte count."""
    if data_type is None:
        return 4
    value = getattr(data_type, "value", None)  # a TorchRec DataType's name
    name = str(value if isinstance(value, str) else data_type).replace("torch.", "").lower()
    if name not in ELEM_BYTES:
        raise InvalidInputError(f"table {table!r}: data_type {data_type!r} has no whole number of bytes per element "
                                f"the planner can price (it takes {sorted(ELEM_BYTES)}); profile it with "
                                "TableSpec(name, rows, dim, elem_bytes)")
    return ELEM_BYTES[name]


def _spec(t: Any) -> TableSpec:
    if isinstance(t, TableSpec):
        return t
    if hasattr(t, "num_embeddings") and hasattr(t, "embedding_dim"):  # recgo/TorchRec EmbeddingBagConfig
        return TableSpec(str(t.name), int(t.num_embeddings), int(t.embedding_dim),
                         elem_bytes(getattr(t, "data_type", None), str(t.name)))
    if isinstance(t, Mapping):
        missing, unknown = sorted({"name", "rows"} - set(t)), sorted(set(t) - {"name", "rows", "dim", "elem_bytes"})
        if missing or unknown:
            why = " and ".join(([f"lacks {missing}"] if missing else []) + ([f"has unknown keys {unknown}"] if unknown
                                                                            else []))
            raise InvalidInputError(f"tables: the dict {dict(t)!r} {why} (a TableSpec dict has name and rows, and "
                                    "optionally dim and elem_bytes)")
        return TableSpec(**t)
    raise InvalidInputError(f"tables: expected TableSpec, EmbeddingBagConfig or dict, got {type(t).__name__}")


def _is_kjt(x: Any) -> bool:
    """Whether ``x`` is one KeyedJaggedTensor (recgo's or TorchRec's), not an iterable of batches."""
    return all(callable(getattr(x, a, None)) for a in ("keys", "values", "lengths", "stride"))


def profile(batches: Iterable[Any], tables: Sequence[TableSpec | Any], sample_rate: float = 0.01, seed: int = 0,
            steps: int = 16, feature_to_table: Mapping[str, str] | None = None,
            progress: bool | float = False, min_lookups: int = MIN_LOOKUPS) -> Profile:
    """Profile ``tables`` over ``batches`` (KJTs from any source, e.g. ``recgo.FeatureEngine``).

    ``sample_rate`` keeps that share of samples (RecShard profiles ~1 %; :attr:`Profile.sampled`
    says how many were kept). Tables whose profile rests on fewer than ``min_lookups`` sampled
    lookups draw one :class:`ThinProfileWarning` naming them. With ``progress`` (or a number of
    seconds between reports) a line per interval reports batches and samples per second on stderr.
    One KeyedJaggedTensor passed as ``batches`` is profiled as a list of that one batch.
    """
    if _is_kjt(batches):  # one batch passed as the batches: iterating it would read its keys as batches
        batches = [batches]
    p = Profiler(tables, sample_rate, seed, steps, feature_to_table)
    every = 5.0 if progress is True else float(progress or 0)
    t0 = last = time.perf_counter()
    nb = 0
    for batch in batches:
        p.add(batch)
        nb += 1
        now = time.perf_counter()
        if every and now - last >= every:
            offered, kept = p.samples()
            print(f"[recgo profile] {nb} batches, {offered} samples ({offered / (now - t0):,.0f}/s), {kept} kept",
                  file=sys.stderr, flush=True)
            last = now
    prof = p.profile()
    thin = prof.thin_tables(min_lookups)
    if thin:
        offered, kept = prof.sampled or (0, 0)
        shown = ", ".join(f"{k} ({v})" for k, v in list(thin.items())[:8]) + (", ..." if len(thin) > 8 else "")
        warnings.warn(f"profile: {len(thin)} of {len(prof.tables)} tables rest on fewer than {min_lookups} sampled "
                      f"lookups: {shown}; {kept} of {offered} rows were kept at sample rate {sample_rate:g}: raise "
                      "the sample rate or profile more data", ThinProfileWarning, stacklevel=2)
    return prof
