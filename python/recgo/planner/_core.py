"""Profiles, topologies, plans and remaps: thin wrappers over the Go planner (planner/ in Go)."""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import torch

from .. import _lib
from ..errors import InvalidInputError, NotFoundError
from ..sparse import KeyedJaggedTensor, as_kjt

GB = 1e9

#: Strategies :func:`plan` accepts, the paper's whole-table baselines first.
STRATEGIES = ("greedy_size", "greedy_lookups", "greedy_size_lookups", "row_greedy", "milp")
#: Cost models, from the CDF alone to the full model (the paper's ablation).
COST_MODELS = ("cdf", "cdf+coverage", "cdf+coverage+pooling", "full")


def _doc(export: str, argtypes: list[Any], *args: Any) -> Any:
    """Call an export that fills (buf, buflen, needed) with JSON and return the parsed document."""
    f = _lib.fn(export, [*argtypes, _lib.P, _lib.I64, ctypes.POINTER(_lib.I64)])
    needed = _lib.I64(0)
    size = 1 << 16
    while True:
        buf = ctypes.create_string_buffer(size)
        _lib.call(f, *args, buf, size, ctypes.byref(needed))
        if needed.value <= size:
            return json.loads(buf.raw[: needed.value])
        size = int(needed.value)


def _bytes_arg(doc: Any) -> tuple[ctypes.Array, int]:
    data = json.dumps(doc).encode()
    return ctypes.create_string_buffer(data, len(data)), len(data)


@dataclass
class Topology:
    """The cluster a plan is for. Budgets in bytes, bandwidths in bytes per second.

    ``hbm_bytes`` is each GPU's HBM budget for embeddings, ``host_bytes`` each node's host-memory
    budget for the rows reached over UVM; ``batch_size`` is the global batch.
    """

    nodes: int = 2
    gpus_per_node: int = 8
    hbm_bytes: int = int(24 * GB)
    host_bytes: int = int(1500 * GB)
    hbm_bandwidth: float = 850 * GB
    uvm_bandwidth: float = 22 * GB
    batch_size: int = 16384

    @property
    def num_gpus(self) -> int:
        """Nodes × GPUs per node."""
        return self.nodes * self.gpus_per_node

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the Go planner reads."""
        return asdict(self)

    @staticmethod
    def local(hbm_share: float = 0.8, **overrides: Any) -> "Topology":
        """This machine's GPUs (count and memory from NVML, loaded at run time by librecgo.so, else
        torch.cuda), one node, ``hbm_share`` of the smallest GPU's memory as the embedding budget,
        and RecShard defaults for the rest. Without a GPU the defaults stand; ``overrides`` set any
        field explicitly."""
        facts: dict[str, Any] = {}
        try:
            gpus = local_gpus()
        except NotFoundError:
            gpus = []
            if torch.cuda.is_available():
                gpus = [{"name": torch.cuda.get_device_name(i),
                         "memory_bytes": torch.cuda.get_device_properties(i).total_memory}
                        for i in range(torch.cuda.device_count())]
        if gpus:
            facts = {"nodes": 1, "gpus_per_node": len(gpus),
                     "hbm_bytes": int(min(g["memory_bytes"] for g in gpus) * hbm_share)}
        facts.update(overrides)
        return Topology(**facts)


def local_gpus() -> list[dict[str, Any]]:
    """The local GPUs as ``[{"name", "memory_bytes"}]`` via NVML; NotFoundError without a driver."""
    return _doc("recgo_gpu_info", [])


class Profile:
    """Per-table access profile of a data sample (held in Go; see :func:`profile`)."""

    def __init__(self, handle: _lib.Handle) -> None:
        self._h = handle
        self._summary: dict[str, Any] | None = None

    @property
    def handle(self) -> _lib.Handle:
        """The Go profile's handle."""
        return self._h

    def to_dict(self, ranked: bool = False) -> dict[str, Any]:
        """The profile as JSON data (``ranked`` includes the base64 ranked rows)."""
        if not ranked and self._summary is not None:
            return self._summary
        doc = _doc("recgo_profile_json", [_lib.H, _lib.I32], self._h.value, 1 if ranked else 0)
        if not ranked:
            self._summary = doc
        return doc

    @property
    def tables(self) -> list[dict[str, Any]]:
        """Per-table facts: name, rows, dim, coverage, pooling, touched, cdf points, ..."""
        return self.to_dict()["tables"]

    def table(self, name: str) -> dict[str, Any]:
        """One table's facts; raises NotFoundError."""
        for t in self.tables:
            if t["name"] == name:
                return t
        raise NotFoundError(f"profile: no table {name!r}")

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the profile (with ranked rows) as JSON."""
        Path(path).write_text(json.dumps(self.to_dict(ranked=True)))

    @staticmethod
    def load(path: str | os.PathLike[str]) -> "Profile":
        """Read a profile written by :meth:`save` (or by ``python -m recgo profile``)."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            from ..errors import RecgoIOError

            raise RecgoIOError(f"profile: {exc}") from exc
        buf = ctypes.create_string_buffer(data, len(data))
        return Profile(_lib.new_handle("recgo_profile_parse", [_lib.P, _lib.I64], buf, len(data)))

    @staticmethod
    def from_dict(doc: Mapping[str, Any]) -> "Profile":
        """Build from JSON data (the format of :meth:`to_dict`)."""
        buf, n = _bytes_arg(doc)
        return Profile(_lib.new_handle("recgo_profile_parse", [_lib.P, _lib.I64], buf, n))

    @staticmethod
    def synthetic(spec: Mapping[str, Any]) -> "Profile":
        """A synthetic RecShard-style profile from a Go ``planner.SyntheticSpec`` (JSON field names)."""
        buf, n = _bytes_arg(spec)
        return Profile(_lib.new_handle("recgo_profile_synthetic", [_lib.P, _lib.I64], buf, n))

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

    ``feature_to_table`` maps KJT keys to table names (default: a key feeds the table of the same
    name); keys mapping to no profiled table are skipped.
    """

    def __init__(self, tables: Sequence[TableSpec | Any], sample_rate: float = 0.01, seed: int = 0,
                 steps: int = 16, feature_to_table: Mapping[str, str] | None = None) -> None:
        specs = [_spec(t) for t in tables]
        buf, n = _bytes_arg([asdict(s) for s in specs])
        self._h = _lib.new_handle("recgo_profiler_new", [_lib.P, _lib.I64, _lib.D, _lib.U64, _lib.I64],
                                  buf, n, float(sample_rate), int(seed), int(steps))
        self._index = {s.name: i for i, s in enumerate(specs)}
        self._f2t = dict(feature_to_table or {})
        self._key_cache: dict[tuple[str, ...], torch.Tensor] = {}

    def _tables_for(self, keys: list[str]) -> torch.Tensor:
        k = tuple(keys)
        t = self._key_cache.get(k)
        if t is None:
            t = torch.tensor([self._index.get(self._f2t.get(key, key), -1) for key in keys], dtype=torch.int64)
            self._key_cache[k] = t
        return t

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
        tables = self._tables_for(keys)
        values, lengths = kjt.values(), kjt.lengths()
        f = _lib.fn("recgo_profiler_add", [_lib.H, _lib.P, _lib.I64, _lib.I64, _lib.P, _lib.I64, _lib.P, _lib.I64])
        _lib.call(f, self._h.value, tables.data_ptr(), len(keys), kjt.stride(),
                  lengths.data_ptr() if lengths.numel() else None, lengths.numel(),
                  values.data_ptr() if values.numel() else None, values.numel())

    def samples(self) -> tuple[int, int]:
        """(samples offered, samples kept by sampling)."""
        out = torch.zeros(2, dtype=torch.int64)
        _lib.call(_lib.fn("recgo_profiler_samples", [_lib.H, _lib.P]), self._h.value, out.data_ptr())
        return int(out[0]), int(out[1])

    def profile(self) -> Profile:
        """Freeze the counts into a :class:`Profile` (raises InvalidInputError when nothing was kept)."""
        return Profile(_lib.new_handle("recgo_profiler_profile", [_lib.H], self._h.value))


def _spec(t: Any) -> TableSpec:
    if isinstance(t, TableSpec):
        return t
    if hasattr(t, "num_embeddings") and hasattr(t, "embedding_dim"):  # recgo/TorchRec EmbeddingBagConfig
        return TableSpec(str(t.name), int(t.num_embeddings), int(t.embedding_dim), 4)
    if isinstance(t, Mapping):
        return TableSpec(**t)
    raise InvalidInputError(f"tables: expected TableSpec, EmbeddingBagConfig or dict, got {type(t).__name__}")


def profile(batches: Iterable[Any], tables: Sequence[TableSpec | Any], sample_rate: float = 0.01, seed: int = 0,
            steps: int = 16, feature_to_table: Mapping[str, str] | None = None,
            progress: bool | float = False) -> Profile:
    """Profile ``tables`` over ``batches`` (KJTs from any source, e.g. ``recgo.FeatureEngine``).

    ``sample_rate`` keeps that share of samples (RecShard profiles ~1 %). With ``progress`` (or a
    number of seconds between reports) a line per interval reports batches and samples per second on
    stderr.
    """
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
    return p.profile()


def _config(topology: Topology, strategy: str, cost_model: str, tables: Sequence[str] | None,
            time_limit: float, mip_rel_gap: float, threads: int, symmetry: bool,
            warm_start: bool = True) -> dict[str, Any]:
    if strategy not in STRATEGIES and strategy != "external" and not strategy.startswith("torchrec"):
        raise InvalidInputError(f"strategy {strategy!r}: expected one of {STRATEGIES}")
    if cost_model not in COST_MODELS:
        raise InvalidInputError(f"cost_model {cost_model!r}: expected one of {COST_MODELS}")
    return {"topology": topology.to_dict(), "strategy": strategy, "cost_model": cost_model,
            "tables": list(tables) if tables is not None else None, "time_limit": time_limit,
            "mip_rel_gap": mip_rel_gap, "threads": threads, "symmetry": symmetry, "warm_start": warm_start}


class Plan:
    """A placement of every table: its GPU rank and hot-row count, with predicted costs."""

    def __init__(self, handle: _lib.Handle, profile: Profile | None = None) -> None:
        self._h = handle
        self._profile = profile
        self._doc: dict[str, Any] = _doc("recgo_plan_json", [_lib.H], handle.value)

    @property
    def handle(self) -> _lib.Handle:
        """The Go plan's handle."""
        return self._h

    @property
    def strategy(self) -> str:
        """The strategy that made the plan (or "torchrec"/"external" for priced outside plans)."""
        return self._doc["strategy"]

    @property
    def tables(self) -> list[dict[str, Any]]:
        """Per table: name, rank, node, rows, hot_rows, hot/cold bytes, hbm_access_share, predicted_seconds."""
        return self._doc["tables"]

    @property
    def predicted(self) -> dict[str, Any]:
        """The full model's figures: gpu_seconds, max_seconds, spread, hbm_access_share, uvm_row_share, ..."""
        return self._doc["predicted"]

    @property
    def solver(self) -> dict[str, Any] | None:
        """MILP status, gap, dual bound and warm start (None for heuristics)."""
        return self._doc.get("solver")

    @property
    def warning(self) -> str:
        """Why the MILP fell back to the row-level greedy ("" when it did not)."""
        return self._doc.get("warning", "")

    @property
    def topology(self) -> Topology:
        """The topology the plan is for."""
        return Topology(**self._doc["topology"])

    @property
    def solve_seconds(self) -> float:
        """Wall time of the strategy (model build and solve)."""
        return float(self._doc["solve_seconds"])

    def to_dict(self) -> dict[str, Any]:
        """The plan.json document."""
        return self._doc

    def table(self, name: str) -> dict[str, Any]:
        """One table's placement; raises NotFoundError."""
        for t in self.tables:
            if t["name"] == name:
                return t
        raise NotFoundError(f"plan: no table {name!r}")

    def summary(self) -> dict[str, float]:
        """Headline figures: slowest GPU (ms), spread, HBM access share, UVM row share, solve s, gap."""
        p = self.predicted
        out = {"max_ms": p["max_seconds"] * 1e3, "spread": p["spread"], "hbm_access_share": p["hbm_access_share"],
               "uvm_row_share": p["uvm_row_share"], "solve_seconds": self.solve_seconds}
        if self.solver:
            out["mip_gap"] = self.solver["mip_gap"]
        return out

    def save(self, directory: str | os.PathLike[str], plots: bool = True) -> Path:
        """Write plan.json, report.md, remap.bin (when the profile has ranked rows) and PNG plots."""
        d = Path(directory)
        f = _lib.fn("recgo_plan_save", [_lib.H, _lib.H, _lib.S])
        _lib.call(f, self._h.value, self._profile.handle.value if self._profile else 0, str(d).encode())
        if plots:
            from ._plots import plot_cdfs, plot_gpu_costs

            plot_gpu_costs({self.strategy: self}, d / "gpu_costs.png")
            if self._profile is not None:
                plot_cdfs(self._profile, d / "cdfs.png")
        return d

    @staticmethod
    def load(path: str | os.PathLike[str]) -> "Plan":
        """Read a plan.json (or a directory holding one)."""
        p = Path(path)
        if p.is_dir():
            p = p / "plan.json"
        try:
            data = p.read_bytes()
        except OSError as exc:
            from ..errors import RecgoIOError

            raise RecgoIOError(f"plan: {exc}") from exc
        buf = ctypes.create_string_buffer(data, len(data))
        return Plan(_lib.new_handle("recgo_plan_parse", [_lib.P, _lib.I64], buf, len(data)))

    def remap(self, profile: Profile | None = None) -> "Remap":
        """The hot-rows-first remap (needs a profile counted from data, not a synthetic one)."""
        prof = profile or self._profile
        if prof is None:
            raise InvalidInputError("remap: this plan has no profile; pass the one it was made from")
        return Remap(_lib.new_handle("recgo_remap_new", [_lib.H, _lib.H], self._h.value, prof.handle.value))

    def plot(self, path: str | os.PathLike[str]) -> None:
        """Bar chart of the predicted per-GPU time."""
        from ._plots import plot_gpu_costs

        plot_gpu_costs({self.strategy: self}, path)

    def __repr__(self) -> str:
        s = self.summary()
        return (f"Plan({self.strategy}: slowest GPU {s['max_ms']:.4f} ms, {100 * s['hbm_access_share']:.2f}% "
                f"lookups in HBM, {100 * s['uvm_row_share']:.1f}% rows in UVM)")


def plan(profile: Profile, topology: Topology | None = None, strategy: str = "milp", *,
         cost_model: str = "full", tables: Sequence[str] | None = None, time_limit: float = 60.0,
         mip_rel_gap: float = 0.01, threads: int = 0, symmetry: bool = True, warm_start: bool = True) -> Plan:
    """Place the profiled tables on ``topology`` with ``strategy`` (default: the MILP).

    The MILP is warm-started from the row-level greedy and stops at ``time_limit`` seconds or
    ``mip_rel_gap``, returning its incumbent with gap and bound; if HiGHS fails the plan falls back
    to the row-level greedy and says so in :attr:`Plan.warning` (``warm_start=False`` solves cold,
    to measure what the start is worth). Raises CapacityError (with the
    shortfall) when the tables cannot fit, NotFoundError for tables missing from the profile.
    """
    cfg = _config(topology or Topology(), strategy, cost_model, tables, time_limit, mip_rel_gap, threads, symmetry,
                  warm_start)
    buf, n = _bytes_arg(cfg)
    h = _lib.new_handle("recgo_plan_make", [_lib.H, _lib.P, _lib.I64], profile.handle.value, buf, n)
    return Plan(h, profile)


def evaluate(profile: Profile, topology: Topology, placement: Mapping[str, tuple[int, int]],
             name: str = "external") -> Plan:
    """Price an outside placement ``{table: (rank, hot_rows)}`` with recgo's full cost model."""
    names = list(placement)
    cfg = _config(topology, name, "full", names, 0, 0, 0, True)
    buf, n = _bytes_arg(cfg)
    gpus = torch.tensor([int(placement[k][0]) for k in names], dtype=torch.int64)
    hots = torch.tensor([int(placement[k][1]) for k in names], dtype=torch.int64)
    h = _lib.new_handle("recgo_plan_evaluate", [_lib.H, _lib.P, _lib.I64, _lib.P, _lib.P, _lib.I64],
                        profile.handle.value, buf, n, gpus.data_ptr(), hots.data_ptr(), len(names))
    return Plan(h, profile)


class Remap:
    """Per-table renumbering with the hot rows first; apply it to incoming IDs in the data loader."""

    def __init__(self, handle: _lib.Handle) -> None:
        self._h = handle
        self._tables: list[dict[str, Any]] = _doc("recgo_remap_tables", [_lib.H], handle.value)
        self._index = {t["name"]: i for i, t in enumerate(self._tables)}

    @staticmethod
    def load(path: str | os.PathLike[str]) -> "Remap":
        """Read a remap.bin written with a plan."""
        return Remap(_lib.new_handle("recgo_remap_load", [_lib.S], str(path).encode()))

    @property
    def tables(self) -> list[dict[str, Any]]:
        """Per table: name, rows, hot (rows in HBM, new IDs below it), ranked (profiled rows)."""
        return self._tables

    def hot_rows(self, table: str) -> int:
        """Rows of ``table`` in HBM: new IDs below this are hot."""
        return int(self._tables[self._position(table)]["hot"])

    def _position(self, table: str) -> int:
        try:
            return self._index[table]
        except KeyError:
            raise NotFoundError(f"remap: no table {table!r} in the plan") from None

    def apply(self, table: str, ids: torch.Tensor) -> torch.Tensor:
        """New IDs of ``ids`` (int64) in ``table``; out-of-range IDs raise InvalidInputError."""
        from ..tensors import check_tensor

        ids = check_tensor(ids, "ids", (torch.int64, torch.int32), convert_to=torch.int64)
        flat = ids.reshape(-1)
        out = torch.empty_like(flat)
        f = _lib.fn("recgo_remap_apply", [_lib.H, _lib.I64, _lib.P, _lib.I64, _lib.P])
        _lib.call(f, self._h.value, self._position(table), flat.data_ptr() if flat.numel() else None, flat.numel(),
                  out.data_ptr() if out.numel() else None)
        return out.reshape(ids.shape)

    def apply_kjt(self, features: Any, feature_to_table: Mapping[str, str] | None = None) -> KeyedJaggedTensor:
        """Remap a whole KJT in one Go call; keys of no planned table pass through unchanged."""
        kjt = as_kjt(features)
        f2t = feature_to_table or {}
        tables = torch.tensor([self._index.get(f2t.get(k, k), -1) for k in kjt.keys()], dtype=torch.int64)
        values, lengths = kjt.values(), kjt.lengths()
        out = torch.empty_like(values)
        f = _lib.fn("recgo_remap_apply_kjt", [_lib.H, _lib.P, _lib.I64, _lib.I64, _lib.P, _lib.P, _lib.I64, _lib.P])
        _lib.call(f, self._h.value, tables.data_ptr() if tables.numel() else None, len(kjt.keys()), kjt.stride(),
                  lengths.data_ptr() if lengths.numel() else None, values.data_ptr() if values.numel() else None,
                  values.numel(), out.data_ptr() if out.numel() else None)
        return KeyedJaggedTensor(kjt.keys(), out, lengths=lengths, weights=kjt.weights_or_none())
