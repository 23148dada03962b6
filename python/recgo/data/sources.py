"""Data sources: descriptions of where training samples come from, read by recgo's Go readers.

A source object is only a description (sent to Go as JSON when a pipeline starts); the reading,
parsing, sharding by rank and resuming happen in Go. Every source takes ``skip_bad`` (drop malformed
rows and count them instead of raising; a file all of whose rows are malformed still raises, naming it
and its first bad row, and a pass that skipped more than half its rows warns) and is sharded by the
pipeline's ``rank``/``world_size``.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

from .. import _lib
from .._lib import I64
from .._json import strict_json
from .._textfiles import expand_paths
from ..errors import InvalidInputError

PathLike = str | os.PathLike[str]


def spec_json(spec: dict[str, Any], what: str) -> bytes:
    """``spec`` as strict JSON for Go (:func:`recgo._json.strict_json`)."""
    return strict_json(spec, what).encode()


def _paths(paths: PathLike | Sequence[PathLike], what: str) -> list[str]:
    """``paths`` (a path or a list of them) as a list of strings, glob patterns expanded
    (:func:`recgo._textfiles.expand_paths`); anything else raises InvalidInputError naming ``what``."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if isinstance(paths, bytes) or not isinstance(paths, Iterable):
        raise InvalidInputError(f"{what}: paths must be a file path or a list of them, got {type(paths).__name__}")
    paths = list(paths)
    bad = [p for p in paths if not isinstance(p, (str, os.PathLike))]
    if bad:
        raise InvalidInputError(f"{what}: paths must be file paths (str or os.PathLike), got {bad[0]!r}")
    out = [os.fspath(p) for p in paths]
    if not out:
        raise InvalidInputError("a source needs at least one file")
    return expand_paths(out, what)


@dataclass(frozen=True)
class Schema:
    """What a source's batches hold: sparse ``fields`` ``(name, kind)``, ``dense`` column names, and
    whether there is a label (labels are 0 otherwise)."""

    fields: tuple[tuple[str, str], ...]
    dense: tuple[str, ...]
    has_label: bool


class Source:
    """Base class of the sources: :meth:`spec` is the JSON description the Go reader opens."""

    kind = ""

    def __init__(self, skip_bad: bool = False) -> None:
        self.skip_bad = bool(skip_bad)

    def _options(self) -> dict[str, Any]:
        return {}

    def spec(self, rank: int = 0, world_size: int = 1) -> dict[str, Any]:
        """The source's JSON spec for shard ``rank`` of ``world_size``."""
        d = {"kind": self.kind, "rank": int(rank), "world_size": int(world_size), **self._options()}
        if self.skip_bad:
            d["skip_bad"] = True
        return d

    def _spec_buf(self, rank: int = 0, world_size: int = 1) -> tuple[ctypes.Array, int]:
        data = spec_json(self.spec(rank, world_size), f"{type(self).__name__} spec")
        return ctypes.create_string_buffer(data, len(data)), len(data)

    def schema(self) -> Schema:
        """Open the source in Go (validating it: files, header, columns) and return its schema."""
        buf, n = self._spec_buf()
        info = _lib.call_json("recgo_source_info", ctypes.addressof(buf), n)
        return Schema(tuple((f["name"], f["kind"]) for f in info["fields"]), tuple(info["dense"] or ()),
                      bool(info["has_label"]))

    def fit(self, max_rows: int = 100_000, samples: int | None = None, seed: int = 1) -> "SyntheticSource":
        """A :class:`SyntheticSource` with this source's statistics (per field: distinct IDs, coverage,
        mean bag length (at most the generator's 512), power-law exponent), measured on its first ``max_rows`` samples, and a
        planted label model; ``samples`` sets its length (default: the rows measured)."""
        buf, n = self._spec_buf()
        cfg = _lib.call_json("recgo_source_fit", ctypes.addressof(buf), n, int(max_rows))
        fields = [SyntheticField(**f) for f in cfg["fields"]]
        label = cfg.get("label")
        return SyntheticSource(samples or cfg["samples"], fields, dense=cfg["dense"], seed=seed,
                               label=PlantedLabel(**label) if label else None)

    def write_criteo(self, path: PathLike, samples: int) -> int:
        """Write up to ``samples`` of this source's samples to ``path`` as Criteo TSV (the source must
        have int64 fields I1..I13 and C1..C26, e.g. one fitted to a Criteo file); returns the count."""
        buf, n = self._spec_buf()
        written = I64(0)
        _lib.call(_lib.fn("recgo_source_write_criteo"),
                  ctypes.addressof(buf), n, _lib.c_path(path), int(samples), ctypes.byref(written))
        return written.value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._options()})"


class CriteoSource(Source):
    """Criteo display-advertising TSV files (plain or gzip): a label, integer fields ``I1..I13`` and
    hex categorical fields ``C1..C26``, empty = missing. Sparse fields ``I*`` (the integers, for
    ``bucketize``) and ``C*`` (each hex value as an int64; hash/mod them) are empty bags when missing;
    the dense tensor holds ``I1..I13`` as ``log(1 + max(x, 0))`` (``log_dense=False``: raw), 0 when
    missing. ``labels=False`` reads label-less files (the challenge's test set); a malformed line with the
    other layout's field count (39 read with labels, 40 without) says so and names the ``labels=`` to give.
    ``needs_labels=True`` is for a caller that trains on the clicks: a label-less line then asks for a
    labelled file instead (``labels=False`` would read it, with nothing to train on)."""

    kind = "criteo"

    def __init__(self, paths: PathLike | Sequence[PathLike], *, labels: bool = True, log_dense: bool = True,
                 skip_bad: bool = False, needs_labels: bool = False) -> None:
        super().__init__(skip_bad)
        self.paths = _paths(paths, "CriteoSource")
        self.labels = bool(labels)
        self.log_dense = bool(log_dense)
        self.needs_labels = bool(needs_labels)
        if self.needs_labels and not self.labels:
            raise InvalidInputError("CriteoSource: needs_labels=True (the caller trains on the labels) contradicts "
                                    "labels=False (files without them)")

    def _options(self) -> dict[str, Any]:
        d: dict[str, Any] = {"paths": self.paths}
        if not self.labels:
            d["no_label"] = True
        if self.needs_labels:
            d["needs_labels"] = True
        if not self.log_dense:
            d["raw_dense"] = True
        return d


_ROLES = ("label", "dense", "sparse", "sequence", "skip")


@dataclass(frozen=True)
class Column:
    """One declared column: ``role`` is ``label``, ``dense``, ``sparse``, ``sequence`` or ``skip``;
    ``type`` (sparse and sequence) is ``int``, ``hex``, ``string`` or ``float``; ``sep`` separates a
    CSV sequence's values."""

    name: str
    role: str = "sparse"
    type: str = "int"
    sep: str = "|"

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            raise InvalidInputError(f"column {self.name!r}: role {self.role!r} is not one of {_ROLES}")
        if not isinstance(self.sep, str) or not self.sep:  # "" was read as the default "|"
            raise InvalidInputError(f"column {self.name!r}: the sequence separator must be a non-empty string, "
                                    f"got {self.sep!r}")

    def to_dict(self) -> dict[str, str]:
        """The Go reader's column description."""
        d = {"name": self.name, "role": self.role}
        if self.role in ("sparse", "sequence"):
            d["type"] = self.type
        if self.role == "sequence":
            d["sep"] = self.sep
        return d


def _columns(columns: Sequence[Column | tuple | dict]) -> list[Column]:
    """``columns`` as :class:`Column` s (each given as one, a ``(name, role, type, sep)`` tuple or a dict
    of those keys), or InvalidInputError naming the entry that is none of these."""
    if isinstance(columns, (str, bytes)) or not isinstance(columns, Iterable):
        raise InvalidInputError(f"columns must be a list of Column(name, role, type), got {type(columns).__name__}")
    out = []
    for i, c in enumerate(columns):
        if isinstance(c, Column):
            out.append(c)
        elif isinstance(c, dict):
            out.append(Column(**c))
        elif isinstance(c, (tuple, list)) and 1 <= len(c) <= 4:
            out.append(Column(*c))
        else:
            hint = f" (write Column({c!r}, role) with role one of {_ROLES})" if isinstance(c, str) else ""
            raise InvalidInputError(f"columns[{i}]: expected a Column, a (name, role, type, sep) tuple or a dict, "
                                    f"got {c!r}{hint}")
    if not out:
        raise InvalidInputError("a source needs at least one declared column")
    return out


class CSVSource(Source):
    """Delimited text files (plain or gzip) with declared :class:`Column` s. With ``header=True`` the
    first line names the columns and the declared ones are picked by name (a declared column missing
    from the header raises); without, ``columns`` lists every column in file order. A field that starts
    with ``"`` is quoted, as Python's csv module and pandas write it (delimiters inside it are text,
    ``""`` is one quote) and may span lines, its line endings part of its text (a row is a record, and
    errors name the line it starts on)."""

    kind = "csv"

    def __init__(self, paths: PathLike | Sequence[PathLike], columns: Sequence[Column | tuple | dict], *,
                 header: bool = True, delimiter: str = ",", skip_bad: bool = False) -> None:
        super().__init__(skip_bad)
        if not isinstance(delimiter, str) or len(delimiter.encode()) != 1:
            raise InvalidInputError(f"the delimiter must be one byte, got {delimiter!r}")
        self.paths = _paths(paths, "CSVSource")
        self.columns = _columns(columns)
        for c in self.columns:
            if c.role == "sequence" and delimiter in c.sep:
                raise InvalidInputError(f"column {c.name!r}: the sequence separator {c.sep!r} contains the "
                                        f"delimiter {delimiter!r}")
        self.header = bool(header)
        self.delimiter = delimiter

    def _options(self) -> dict[str, Any]:
        return {"paths": self.paths, "columns": [c.to_dict() for c in self.columns], "header": self.header,
                "delimiter": self.delimiter}


class ParquetSource(Source):
    """Parquet files with columns mapped like :class:`CSVSource` (by name; a ``sequence`` is a
    repeated/LIST column; nulls are missing values: an empty bag, or 0 for dense; a null element
    inside a list is malformed, since dropping it would shift the elements after it)."""

    kind = "parquet"

    def __init__(self, paths: PathLike | Sequence[PathLike], columns: Sequence[Column | tuple | dict], *,
                 skip_bad: bool = False) -> None:
        super().__init__(skip_bad)
        self.paths = _paths(paths, "ParquetSource")
        self.columns = _columns(columns)

    def _options(self) -> dict[str, Any]:
        return {"paths": self.paths, "columns": [c.to_dict() for c in self.columns]}


@dataclass
class SyntheticField:
    """One generated sparse field: IDs in ``[0, rows)`` with popularity ∝ rank^-alpha, present with
    probability ``coverage``, bags of mean length ``pooling`` (1 + geometric)."""

    name: str
    rows: int
    alpha: float = 1.0
    coverage: float = 1.0
    pooling: float = 1.0


@dataclass
class PlantedLabel:
    """The ground-truth label model: hidden per-ID weights ~ N(0, id_scale²) and per-dense-column
    weights ~ N(0, dense_scale²); label ~ Bernoulli(sigmoid(bias + Σ_f mean bag weight + Σ_j v_j d_j))."""

    id_scale: float = 1.0
    dense_scale: float = 0.25
    bias: float = -1.0


@dataclass
class SyntheticSource(Source):
    """recgo's default workload, generated in Go: ``samples`` samples of the given sparse fields and
    ``dense`` standard-normal columns (named ``d0, d1, ...``); sample i depends only on ``(seed, i)``.
    ``label`` plants a label model (None: labels independent, P(1) = 1/4). :meth:`Source.fit` builds
    one from a real sample's statistics."""

    samples: int
    fields: list[SyntheticField] = field(default_factory=list)
    dense: int = 0
    seed: int = 0
    label: PlantedLabel | None = field(default_factory=PlantedLabel)
    skip_bad: bool = False

    kind = "synthetic"

    def _options(self) -> dict[str, Any]:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**64:
            raise InvalidInputError(f"SyntheticSource: seed must be an integer in [0, 2^64), got {self.seed!r}")
        cfg: dict[str, Any] = {"samples": int(self.samples), "seed": int(self.seed), "dense": int(self.dense),
                               "fields": [asdict(f) for f in self.fields]}
        if self.label is not None:
            cfg["label"] = asdict(self.label)
        return {"synthetic": cfg}


def default_criteo_like(samples: int = 1_000_000, seed: int = 0) -> SyntheticSource:
    """A synthetic source shaped like Criteo (26 power-law categorical fields of 10^2..10^6 IDs with
    varied coverage, 13 dense columns) with a planted label model, for when no data is at hand."""
    fields = []
    for i in range(26):
        rows = [100, 1_000, 10_000, 100_000, 1_000_000][i % 5]
        fields.append(SyntheticField(f"C{i + 1}", rows, alpha=0.8 + 0.05 * (i % 7), coverage=[1.0, 0.95, 0.6][i % 3]))
    return SyntheticSource(samples, fields, dense=13, seed=seed)


__all__ = ["CSVSource", "Column", "CriteoSource", "ParquetSource", "PlantedLabel", "Schema", "Source",
           "SyntheticField", "SyntheticSource", "default_criteo_like"]
