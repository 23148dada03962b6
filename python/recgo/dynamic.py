"""Dynamic-ID embedding tables: arbitrary int64 IDs mapped to rows on demand, under a row bound.

Declare one like any table, with a :class:`DynamicConfig`::

    ebc = recgo.EmbeddingBagCollection([
        recgo.EmbeddingBagConfig(name="user", embedding_dim=64, num_embeddings=1_000_000,
                                 feature_names=["user_id"],
                                 dynamic=recgo.DynamicConfig(min_count=2, eviction="lru")),
    ], optimizer=recgo.modules.Adam(lr=1e-3))
    # state_dict()/load_state_dict() carry the ID map: the collection hooks its dynamic tables itself

``num_embeddings`` is the row bound (the most IDs the table holds at once); the weight parameter
has exactly that many rows (the ``default`` vector is kept apart: it pools, and is never trained),
and storage is committed only as rows are used.

In training mode each forward counts the batch's IDs; an ID gets a row once it has been seen in
``min_count`` batches (until then it pools as zeros and gets no update). When all
``num_embeddings`` rows are taken, an eviction pass frees the stalest (``"lru"``) or least frequent
(``"lfu"``) ``evict_fraction`` of them; ``max_age`` also frees rows unseen for that many steps. In
eval mode unseen IDs pool as zeros (or as ``default``) and nothing is inserted. Storage is reserved
up to the bound and committed as rows are first used, so memory grows to the bound and stays there.

The collection's ``state_dict()`` carries, for each dynamic table, only the rows in use: its
``weight`` and ``optimizer_state`` entries hold the first high-water-mark rows (copies, taken in one
snapshot between two passes: no fused update is half in it, also while other threads train),
beside its ID map (``dynamic_ids``, ``dynamic_counts``, ``dynamic_last_seen``, ``dynamic_free``,
the admission sketch and ``dynamic_meta``), so a checkpoint's size follows the
rows used, not the bound; ``load_state_dict()`` restores it bit-exactly, so training resumes
identically. A checkpoint with none of a table's entries leaves it unchanged and torch reports its
missing keys (``strict=False`` lists them, ``strict=True`` raises); one with some but not all of them
raises ``InvalidInputError``. The engine side is ``engine/dynamic`` (Go).

Train dynamic tables with a fused optimizer (``optimizer=`` of the collection): its state lives
beside the rows and is reset when a row is evicted and given to a new ID. A torch optimizer's own
state is not, so a reused row would inherit the previous ID's moments; the collection warns about it.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import threading
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from . import _lib
from ._compile import eager_under_compile
from .errors import CapacityError, InvalidInputError, NotFoundError
from .tensors import check_tensor, ptr

_POLICIES = {"lru": _lib.const("PolicyLRU"), "lfu": _lib.const("PolicyLFU")}
_META_LEN = _lib.const("DynamicMetaLen")  # the snapshot meta words (capi/dynamic.go)
_M_DIM, _M_STATE, _M_ROWS, _M_SKETCHW, _M_STEP, _M_ADMIT, _M_EVICT, _M_HW, _M_FREE, _M_SKETCH = (
    _lib.const(f"DynamicMeta{n}") for n in ("Dim", "StateWidth", "MaxRows", "SketchWidth", "Step", "Admitted",
                                             "Evicted", "HighWater", "Free", "Sketch"))
# the table's seed (the uint64's bits, as an int64): a meta of checkpoints before session 34 ends before it
_M_SEED = _lib.const("DynamicMetaSeed")
# how the admission sketch's counters were placed (engine/dynamic's SketchIndexing: _SKETCH_V1 until
# session 43, _SKETCH_V2 since): a meta of checkpoints before then ends before it, read as _SKETCH_V1
_M_INDEXING = _lib.const("DynamicMetaSketchIndexing")
_SKETCH_V1, _SKETCH_V2 = _lib.const("DynamicSketchV1"), _lib.const("DynamicSketchV2")
_META_LENS = (_META_LEN, _M_INDEXING, _M_SEED)  # the lengths a checkpoint's dynamic_meta may have
_KEYS = ("dynamic_meta", "dynamic_ids", "dynamic_counts", "dynamic_last_seen", "dynamic_free",
         "dynamic_sketch", "dynamic_sketch_adds")
_SHARDS = _lib.const("DynamicSketchShards")
_SKETCH_DEPTH = _lib.const("DynamicSketchDepth")


def _int(name: str, v: Any, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise InvalidInputError(f"DynamicConfig.{name} must be an int >= {lo}, got {v!r}")
    return v


@dataclass
class DynamicConfig:
    """Makes an :class:`recgo.EmbeddingBagConfig` a dynamic-ID table (pass it as ``dynamic=``).

    Args:
        min_count: training batches an ID must appear in before it gets a row (1: at once; at most 255).
            The sightings stay counted after the ID is evicted (until the sketch's counters halve),
            so an evicted ID gets a row again at its next sighting.
        eviction: ``"lru"`` (evict the stalest rows) or ``"lfu"`` (the least frequent, stalest first).
        max_age: also evict rows unseen for more than this many training steps (0: only when full).
        evict_fraction: share of the row bound one eviction pass frees, in (0, 1].
        default: eval-mode vector (``embedding_dim`` values) for IDs without a row; None pools zeros.
        num_embeddings: the row bound; None takes the table's ``num_embeddings``.
        memory_bytes: a memory bound for the full table (weights, optimizer state, per-row metadata,
            the ID map, the admission sketch and the eviction pass's scratch); the row bound becomes
            the most rows that fit, and at most ``num_embeddings`` when that is set too.
        init_min, init_max: new rows are uniform in [init_min, init_max); None takes the table's
            ``weight_init_min``/``weight_init_max``, else ±√(1/row bound) as TorchRec does.
        seed: seeds the per-ID initial vectors (an ID's first vector depends only on seed and ID).
        manual_step: advance the table's clock only with :func:`advance` (needed when something
            other than one forward per batch resolves the table); otherwise each training forward is a step.
        sketch_width: counters per row of the admission count-min sketch (0: the bound, at least 4096).
    """

    min_count: int = 1
    eviction: str = "lru"
    max_age: int = 0
    evict_fraction: float = 1.0 / 32
    default: Sequence[float] | None = None
    num_embeddings: int | None = None
    memory_bytes: int = 0
    init_min: float | None = None
    init_max: float | None = None
    seed: int = 0
    manual_step: bool = False
    sketch_width: int = 0

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.pop("_builder", None)  # pickles of older versions held a builder handle (always None there)
        self.__dict__.update(state)

    def _check(self) -> None:
        _int("min_count", self.min_count, 0)
        _int("max_age", self.max_age, 0)
        if _int("seed", self.seed, 0) >= 2**64:  # ctypes' uint64 would keep its low 64 bits in silence
            raise InvalidInputError(f"DynamicConfig.seed must be below 2**64, got {self.seed!r}")
        _int("sketch_width", self.sketch_width, 0)
        if self.eviction not in _POLICIES:
            raise InvalidInputError(f"DynamicConfig.eviction must be 'lru' or 'lfu', got {self.eviction!r}")
        if isinstance(self.evict_fraction, bool) or not isinstance(self.evict_fraction, (int, float)):
            raise InvalidInputError(f"DynamicConfig.evict_fraction must be a number, got {self.evict_fraction!r}")
        # Its range is the engine's rule (engine/dynamic/config.go), checked once there.

    def builder(self, table: Any = None) -> _lib.Handle:
        """A new engine builder for this table (called by EmbeddingBagCollection, which keeps it alive
        while it builds the table; ``table`` is the EmbeddingBagConfig, which supplies the bound and
        init range this config leaves unset). One config may serve several tables: each gets its own."""
        self._check()
        memory = _int("memory_bytes", self.memory_bytes, 0)
        bound = self.num_embeddings if self.num_embeddings is not None else getattr(table, "num_embeddings", None)
        if memory and not bound:  # a memory bound alone
            bound = 0
        elif bound is None:
            raise InvalidInputError("DynamicConfig: the row bound is unknown; set num_embeddings or memory_bytes")
        else:
            bound = _int("num_embeddings", bound, 1)
        lo = self.init_min if self.init_min is not None else getattr(table, "weight_init_min", None)
        hi = self.init_max if self.init_max is not None else getattr(table, "weight_init_max", None)
        if lo is None and hi is None:
            lo = hi = math.nan  # the engine uses ±√(1/row bound) once it knows the bound
        elif lo is None or hi is None:
            raise InvalidInputError("DynamicConfig: set both init_min and init_max (or neither)")
        default = None
        if self.default is not None:
            default = torch.as_tensor(self.default, dtype=torch.float32).reshape(-1).contiguous()
        return _lib.new_handle(
            "recgo_dynamic_builder_new",
            bound, memory, self.min_count, _POLICIES[self.eviction], self.max_age, float(self.evict_fraction), lo, hi,
            self.seed, ptr(default), 0 if default is None else default.numel(), int(self.manual_step),
            self.sketch_width)

    def attach(self, ebc: Any, index: int) -> None:
        """Hook table ``index`` of ``ebc`` into ``state_dict``/``load_state_dict`` (see :func:`attach`)."""
        _attach_table(ebc, index)


@dataclass(frozen=True)
class DynamicStats:
    """Occupancy of a dynamic table (see :func:`stats`)."""

    rows: int            # IDs holding a row now
    high_water: int      # rows ever handed out
    num_embeddings: int  # the row bound
    step: int            # training steps so far
    admitted: int        # IDs given a row, ever
    evicted: int         # rows freed by eviction, ever
    reserved_bytes: int  # address space reserved for the storage
    resident_bytes: int  # storage memory actually committed


def _pooled(m: Any) -> Any:
    """The pooled collection holding the tables of ``m``: ``m`` itself, an EmbeddingCollection's (whose
    tables its ``ebc`` holds), or that of a managed-collision module (``from_torchrec`` of TorchRec's)."""
    from .modules.managed import _Managed

    if isinstance(m, _Managed):
        m = getattr(m, m._attr)
    return m if hasattr(m, "embedding_bag_configs") else getattr(m, "ebc", m)


def _index(ebc: Any, table: str | int) -> int:
    cfgs = ebc.embedding_bag_configs()
    if isinstance(table, int) and not isinstance(table, bool):
        if not 0 <= table < len(cfgs):
            raise NotFoundError(f"table index {table} of {len(cfgs)}")
        i = table
    else:
        names = [c.name for c in cfgs]
        if table not in names:
            raise NotFoundError(f"table {table!r} is not in this collection (tables: {names})")
        i = names.index(table)
    if cfgs[i].dynamic is None:
        raise InvalidInputError(f"table {cfgs[i].name!r} is not a dynamic-ID table")
    return i


def _unsharded(ebc: Any, what: str) -> Any:
    """``ebc``, unless it is a sharded collection: one table file holds a whole table, and a shard is
    a part of one (the sharded collection's own save/load re-distribute its shards by ID)."""
    if hasattr(ebc, "groups") and hasattr(ebc, "locate"):
        raise InvalidInputError(f"recgo.dynamic.{what}: {type(ebc).__name__} holds this rank's shard of each table; "
                                f"use its own {what}(directory), which handles every rank's shard")
    return ebc


def stats(ebc: Any, table: str | int) -> DynamicStats:
    """Occupancy and history of dynamic table ``table`` (name or index) of ``ebc`` (of a sharded
    collection: this rank's shard of it)."""
    ebc = _pooled(ebc)
    n = _lib.const("DynamicStatsLen")
    out = torch.zeros(n, dtype=torch.int64)
    _lib.call(_lib.fn("recgo_dynamic_stats"), ebc._handle.value, _index(ebc, table), ptr(out), n)
    return DynamicStats(*out.tolist())


@eager_under_compile
def lookup(ebc: Any, table: str | int, ids: torch.Tensor, train: bool = False) -> torch.Tensor:
    """Rows of ``ids`` in the table's weight (-1 for IDs without one, also in eval mode when the table
    has a ``default`` vector); of a sharded collection, in this rank's shard, which knows only the IDs
    it owns. With ``train=True`` this is a training step: IDs are counted and admitted, like a forward
    pass does (an ID repeated in ``ids`` counts once, as in a batch)."""
    from .modules import _export_sizes

    ebc = _pooled(ebc)
    ids = check_tensor(ids, "ids", (torch.int64, torch.int32), ndim=1, convert_to=torch.int64)
    i = _index(ebc, table)
    if _export_sizes.exporting():  # fake IDs: the exported program makes the call (an op) when it runs
        from .modules import _dynamic_ops

        return _dynamic_ops.dynamic_rows(ebc._handle.value, i, ids, bool(train), ebc._params())
    return _resolve(ebc, i, ids, train)


def _resolve(ebc: Any, table: int, ids: torch.Tensor, train: bool) -> torch.Tensor:
    """:func:`lookup`'s engine call: ``table`` an index of ``ebc``'s tables, ``ids`` int64."""
    # deduplicated in order of first appearance, as a forward deduplicates (admissions in that order)
    uniq, inverse = torch.unique(ids, return_inverse=True)
    first = torch.full((uniq.numel(),), ids.numel()).scatter_reduce_(0, inverse, torch.arange(ids.numel()), "amin")
    order = first.argsort()
    uniq = uniq[order]
    inverse = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel()))[inverse]
    rows = torch.empty_like(uniq)
    _lib.call(_lib.fn("recgo_dynamic_resolve"), ebc._handle.value, table, ptr(uniq), ptr(rows), uniq.numel(),
              int(train))
    return rows[inverse]


def advance(ebc: Any, table: str | int) -> None:
    """Move the table's clock one step (for ``manual_step`` tables; runs a due ``max_age`` sweep)."""
    ebc = _pooled(ebc)
    _lib.call(_lib.fn("recgo_dynamic_advance"), ebc._handle.value, _index(ebc, table))


def save(ebc: Any, table: str | int, path: str | os.PathLike[str]) -> None:
    """Write one dynamic table's checkpoint file: its rows in use (weights, optimizer state), ID map,
    admission state and optimizer step, each part with a CRC-32C, written atomically (a temporary
    file renamed over ``path``). Its size follows the rows in use, not the bound, except for the
    admission sketch a table with ``min_count`` ≥ 2 keeps (4 bytes per row of the bound, rounded up to
    a power of two). Temporary files a killed earlier save left beside ``path`` are removed first."""
    from .modules._checkpoint import remove_orphans

    ebc = _unsharded(_pooled(ebc), "save")
    cpath = _lib.c_path(path)
    remove_orphans(Path(path))
    _lib.call(_lib.fn("recgo_dynamic_save"), ebc._handle.value, _index(ebc, table), cpath)


def load(ebc: Any, table: str | int, path: str | os.PathLike[str]) -> None:
    """Restore one dynamic table from a file written by :func:`save` (bit-exact). The engine verifies
    every checksum and size and the ID map's consistency; a damaged, truncated or foreign file
    raises ``RecgoIOError`` naming the file and the part, a checkpoint of another configuration
    (another shape, or an admission sketch of another ``seed``) ``InvalidInputError``, and the table
    is then unchanged."""
    ebc = _unsharded(_pooled(ebc), "load")
    _lib.call(_lib.fn("recgo_dynamic_load"), ebc._handle.value, _index(ebc, table),
              _lib.c_path(path))


def changes(ebc: Any, table: str | int) -> int:
    """How many times table ``table``'s rows changed owner: rows freed (evictions, max-age sweeps) and
    checkpoints loaded, ever. Unlike :func:`stats`' ``evicted``, which a load restores, a load moves it
    on: while it stands still, a forward's rows are as it left them."""
    ebc = _pooled(ebc)
    out = ctypes.c_int64()
    _lib.call(_lib.fn("recgo_dynamic_changes"), ebc._handle.value, _index(ebc, table), ctypes.byref(out))
    return out.value


def export_state(ebc: Any, table: str | int) -> dict[str, torch.Tensor]:
    """The table's ID map and admission state as tensors (the ``dynamic_*`` state_dict entries):
    per-row arrays have ``dynamic_meta[7]`` entries (the high water mark: the rows handed out so
    far), the free list ``dynamic_meta[8]``; ``dynamic_meta[10]`` is the table's seed (its bits as
    an int64), which a checkpoint with an admission sketch must share to load; ``dynamic_meta[11]``
    how the sketch places an ID's counters (2; 1 in a table restored from a checkpoint saved before
    session 43 with pending counts, whose meta has no such value)."""
    return _export(ebc, table, rows=False)


_pins = threading.local()  # this thread's snapshots taken ahead: (id of the collection, table index) -> Handle


@contextlib.contextmanager
def pinned(ebc: Any, snapshots: dict[int, _lib.Handle]) -> Iterator[None]:
    """Within the block, this thread's reads of ``ebc``'s dynamic tables (``state_dict()``,
    :func:`export_state`) read the given snapshots (table index -> handle) instead of taking new ones:
    ``EmbeddingBagCollection.save`` takes them in one section with the other tables' copies, so a
    file saved while other threads train holds one step of every table."""
    before = getattr(_pins, "map", None)
    _pins.map = {**(before or {}), **{(id(ebc), i): h for i, h in snapshots.items()}}
    try:
        yield
    finally:
        _pins.map = before


def _export(ebc: Any, table: str | int, rows: bool) -> dict[str, torch.Tensor]:
    """export_state, plus with ``rows`` the used rows' ``weight`` ``[hw, dim]`` and ``optimizer_state``
    ``[hw, width]`` (when the optimizer keeps state), from the same snapshot."""
    ebc = _pooled(ebc)
    i = _index(ebc, table)
    held = getattr(_pins, "map", None)
    snap = held.get((id(ebc), i)) if held else None
    own = snap is None
    if own:
        # A sharded collection's owners admit IDs and update rows inside its rank's exchanges, under no
        # engine lock: its snapshot waits for the exchange under way (the lock it names). The engine
        # takes an unsharded collection's lock itself.
        with getattr(ebc, "_snapshot_lock", None) or contextlib.nullcontext():
            snap = _lib.new_handle("recgo_dynamic_snapshot", ebc._handle.value, i)
    try:
        meta = torch.zeros(_META_LEN, dtype=torch.int64)
        _lib.call(_lib.fn("recgo_dynamic_snapshot_meta"), snap.value, ptr(meta), _META_LEN)
        m = meta.tolist()
        hw, dim, width = m[_M_HW], m[_M_DIM], m[_M_STATE]
        ids, counts, last = (torch.zeros(hw, dtype=torch.int64) for _ in range(3))
        free = torch.zeros(m[_M_FREE], dtype=torch.int64)
        sketch = torch.empty(m[_M_SKETCH], dtype=torch.uint8)
        adds = torch.zeros(_SHARDS if m[_M_SKETCH] else 0, dtype=torch.int64)
        weight = torch.empty(hw, dim, dtype=torch.float32) if rows else None
        state = torch.empty(hw, width, dtype=torch.float32) if rows and width else None
        _lib.call(_lib.fn("recgo_dynamic_snapshot_read"), snap.value,
                  ptr(ids), ptr(counts), ptr(last), ptr(free), None if weight is None else ptr(weight),
                  None if state is None else ptr(state), ptr(sketch), ptr(adds), adds.numel())
    finally:
        if own:
            snap.free()
    out = {"dynamic_meta": meta, "dynamic_ids": ids, "dynamic_counts": counts, "dynamic_last_seen": last,
           "dynamic_free": free, "dynamic_sketch": sketch, "dynamic_sketch_adds": adds}
    if weight is not None:
        out["weight"] = weight
    if state is not None:
        out["optimizer_state"] = state
    return out


def _head(t: Any, n: int) -> Any:
    """The first ``n`` rows of tensor ``t`` (a view: nothing is copied), or ``t`` itself if it is not a
    tensor with rows (its check names it)."""
    return t[:n] if isinstance(t, torch.Tensor) and t.dim() >= 1 else t


def import_state(ebc: Any, table: str | int, entries: dict[str, torch.Tensor], weight: torch.Tensor,
                 optimizer_state: torch.Tensor | None, *, check_only: bool = False) -> None:
    """Restore a table from :func:`export_state` entries plus its weight rows (``[rows, dim]``, at least
    the high water mark of them) and optimizer state (``[rows, width]`` or None). The engine checks
    everything (shape, ranges, a consistent ID map) and leaves the table unchanged on error. Without
    ``optimizer_state`` the rows of a table whose fused optimizer keeps state get a fresh optimizer's
    zeros, and a table without a fused optimizer takes the weights of a checkpoint saved with one (its
    optimizer state left out), as a fixed table takes such checkpoints.
    ``check_only``: raise what the import would raise, and change nothing."""
    ebc = _pooled(ebc)
    i = _index(ebc, table)
    name = ebc.embedding_bag_configs()[i].name
    missing = [k for k in _KEYS if k not in entries]
    if missing:
        raise InvalidInputError(f"table {name!r}: the checkpoint lacks the dynamic-table entries {missing} "
                                "(a checkpoint of a fixed table?)")
    meta = check_tensor(_head(entries["dynamic_meta"], _META_LEN + 1), f"{name}.dynamic_meta", (torch.int64,), ndim=1)
    if entries["dynamic_meta"].numel() not in _META_LENS:  # the shorter: older checkpoints'
        raise InvalidInputError(f"table {name!r}: dynamic_meta has {entries['dynamic_meta'].numel()} values, "
                                f"expected {_META_LEN}")
    m = meta.tolist()
    hw, nfree, dim, width = m[_M_HW], m[_M_FREE], m[_M_DIM], m[_M_STATE]
    # Each entry cut to what the meta says is read before it is made contiguous (a forged entry of 2^40
    # values over one stored value, a stride-0 view, was materialised first): the engine checks the rest.
    sketch_n = entries["dynamic_sketch"].numel() if isinstance(entries["dynamic_sketch"], torch.Tensor) else 0
    if sketch_n != m[_M_SKETCH]:
        raise InvalidInputError(f"table {name!r}: dynamic_sketch has {sketch_n} counters, its meta declares "
                                f"{m[_M_SKETCH]}")
    used = {"dynamic_ids": hw, "dynamic_counts": hw, "dynamic_last_seen": hw, "dynamic_free": nfree,
            "dynamic_sketch": m[_M_SKETCH], "dynamic_sketch_adds": _SHARDS + 1}
    t = {"dynamic_meta": meta, **{
        k: check_tensor(_head(entries[k], max(used[k], 0)), f"{name}.{k}",
                        (torch.uint8,) if k == "dynamic_sketch" else (torch.int64,), ndim=1) for k in used}}
    for k in ("dynamic_ids", "dynamic_counts", "dynamic_last_seen", "dynamic_free"):
        need = nfree if k == "dynamic_free" else hw
        if not 0 <= need <= t[k].numel():
            raise InvalidInputError(f"table {name!r}: {k} has {t[k].numel()} entries, fewer than the "
                                    f"{need} its meta declares")
    weight = check_tensor(_head(weight, max(hw, 0)), f"{name}.weight", (torch.float32,), ndim=2)
    if weight.shape[1] != dim or weight.shape[0] < hw:
        raise InvalidInputError(f"table {name!r}: weight of shape {tuple(weight.shape)} cannot hold "
                                f"{hw} rows of dim {dim}")
    w = weight[:hw].contiguous().reshape(-1)
    opt = getattr(ebc, "_optimizer", None)
    own = opt.state_width(dim) if opt is not None else 0
    if optimizer_state is None or not own:
        # the weights without the optimizer state (TorchRec's state dicts, a checkpoint trimmed for serving:
        # the imported rows start from a fresh optimizer's zeros), or the state of a fused table loaded into
        # one without an optimizer (a serving model: the state has no place there, as a fixed table's, which
        # torch reports unexpected)
        if width != own:
            meta = meta.clone()
            meta[_M_STATE] = width = own
        optimizer_state = torch.zeros(max(hw, 0), own, dtype=torch.float32) if own else None
    if width:
        if optimizer_state is None:
            raise InvalidInputError(f"table {name!r}: the checkpoint lacks optimizer_state")
        optimizer_state = check_tensor(_head(optimizer_state, max(hw, 0)), f"{name}.optimizer_state", (torch.float32,))
        shape = tuple(optimizer_state.shape)
        if (len(shape) != 2 or shape[1] != width or shape[0] < hw) and not (width == 1 and len(shape) == 1
                                                                           and shape[0] >= hw):
            raise InvalidInputError(f"table {name!r}: optimizer_state of shape {shape} cannot hold {hw} rows of "
                                    f"the optimizer's {width} values (expected [{hw}, {width}])")
        s = optimizer_state.reshape(shape[0], width)[:hw].contiguous().reshape(-1)
    else:
        s = torch.empty(0, dtype=torch.float32)
    ids, counts, last = (t[k][:hw].contiguous() for k in ("dynamic_ids", "dynamic_counts", "dynamic_last_seen"))
    free, sketch, adds = t["dynamic_free"][:nfree].contiguous(), t["dynamic_sketch"], t["dynamic_sketch_adds"]
    _lib.call(_lib.fn("recgo_dynamic_import"),
              ebc._handle.value, i, ptr(meta), meta.numel(), ptr(ids), ptr(counts), ptr(last), hw,
              ptr(free), nfree, ptr(w), w.numel(), ptr(s), s.numel(), ptr(sketch), sketch.numel(),
              ptr(adds), adds.numel(), int(check_only))


def import_rows(ebc: Any, table: str | int, ids: torch.Tensor, weight: torch.Tensor,
                optimizer_state: torch.Tensor | None = None, *, counts: torch.Tensor | None = None,
                last_seen: torch.Tensor | None = None, check_only: bool = False, **meta: Any) -> None:
    """Replace the table's contents by the given rows: ``ids[i]`` gets row ``i`` with weights
    ``weight[i]`` (and ``optimizer_state[i]``, ``[n, width]``; default zeros, a fresh optimizer's),
    seen ``counts[i]`` times (default 1), last at step ``last_seen[i]`` (default the table's step). The admission sketch, step and counters stay the
    table's unless ``meta`` overrides them (``sketch``, ``sketch_adds``, ``sketch_indexing``: how
    ``sketch`` places its counters, 1 or 2 as in ``dynamic_meta``, by default the table's; ``step``,
    ``admitted``, ``evicted``; ``admitted`` is at least the IDs imported). More IDs than the row bound
    raise ``CapacityError``; the engine checks the rest
    (distinct IDs, shapes) and leaves the table unchanged on error. ``check_only``: raise what the
    import would raise, and change nothing (as :func:`import_state`'s)."""
    cur = export_state(ebc, table)
    m = cur["dynamic_meta"].clone()
    n = int(ids.numel())
    name = table if isinstance(table, str) else _pooled(ebc).embedding_bag_configs()[table].name
    if n > int(m[_M_ROWS]):
        raise CapacityError(f"table {name!r}: {n} IDs for a row bound of {int(m[_M_ROWS])}")
    sketch = meta.get("sketch", cur["dynamic_sketch"])
    step = int(meta.get("step", m[_M_STEP]))
    m[_M_STEP], m[_M_HW], m[_M_FREE], m[_M_SKETCH] = step, n, 0, sketch.numel()
    m[_M_INDEXING] = int(meta.get("sketch_indexing", m[_M_INDEXING]))
    # (the table's count was replaced by n: a table that had admitted 20 IDs reported 2)
    m[_M_ADMIT] = int(meta.get("admitted", max(int(m[_M_ADMIT]), n)))
    m[_M_EVICT] = int(meta.get("evicted", m[_M_EVICT]))
    for what, per_id in (("counts", counts), ("last_seen", last_seen)):  # (longer ones were cut in silence)
        if per_id is not None and (not isinstance(per_id, torch.Tensor) or per_id.numel() != n):
            got = tuple(per_id.shape) if isinstance(per_id, torch.Tensor) else type(per_id).__name__
            raise InvalidInputError(f"table {name!r}: {what} of shape {got} for {n} IDs (one per ID)")
    entries = {"dynamic_meta": m, "dynamic_ids": ids.to(torch.int64).contiguous(),
               "dynamic_counts": torch.ones(n, dtype=torch.int64) if counts is None else counts.to(torch.int64),
               "dynamic_last_seen": torch.full((n,), step, dtype=torch.int64) if last_seen is None
               else last_seen.to(torch.int64),
               "dynamic_free": torch.zeros(0, dtype=torch.int64), "dynamic_sketch": sketch,
               "dynamic_sketch_adds": meta.get("sketch_adds", cur["dynamic_sketch_adds"])}
    if optimizer_state is None and int(m[_M_STATE]):
        optimizer_state = torch.zeros(n, int(m[_M_STATE]), dtype=torch.float32)
    elif isinstance(optimizer_state, torch.Tensor) and optimizer_state.is_floating_point():
        optimizer_state = optimizer_state.to(torch.float32)  # as the weights are
    dim = int(m[_M_DIM])
    if not isinstance(weight, torch.Tensor) or weight.numel() != n * dim:
        shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise InvalidInputError(f"table {name!r}: weight of shape {shape} for {n} IDs of dim {dim} "
                                f"(expected [{n}, {dim}])")
    import_state(ebc, table, entries, weight.to(torch.float32).reshape(n, dim), optimizer_state,
                 check_only=check_only)


def _checkpoint_args(name: str, state_dict: Any, prefix: str
                     ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor | None] | None:
    """Dynamic-ID table ``name``'s entries (keys under ``prefix``) in a state dict being loaded, as
    :func:`import_state` takes them: (the ID-map entries, the weight rows, the optimizer state or None);
    None when the state dict holds none of them. The ID map without the weight raises."""
    entries = {k: state_dict[prefix + k] for k in _KEYS if prefix + k in state_dict}
    weight = state_dict.get(prefix + "weight")
    if weight is None and not entries:
        return None
    if weight is None:
        raise InvalidInputError(f"table {name!r}: the checkpoint has the dynamic-table entries "
                                f"{sorted(entries)} but lacks {prefix}weight (a damaged or partial checkpoint?)")
    state = state_dict.get(prefix + "optimizer_state")
    return entries, weight.detach(), None if state is None else state.detach()


def check_checkpoint(ebc: Any, state_dict: Any, prefix: str) -> None:
    """Raise what loading ``state_dict`` would raise for any of the collection's dynamic-ID tables (their
    entries under ``prefix`` + the table's name), changing none: a load checks every table before it
    changes the first, so a refused one leaves them all as they were."""
    for cfg in ebc.embedding_bag_configs():
        if cfg.dynamic is not None and (args := _checkpoint_args(cfg.name, state_dict, f"{prefix}{cfg.name}.")):
            import_state(ebc, cfg.name, *args, check_only=True)


def _attach_table(ebc: Any, index: int) -> None:
    cfg = ebc.embedding_bag_configs()[index]
    holder = ebc.embedding_bags[cfg.name]
    if getattr(holder, "_recgo_dynamic_attached", False):
        return
    holder._recgo_dynamic_attached = True
    name = cfg.name
    if ebc.fused_optimizer is None and not getattr(ebc, "_recgo_dynamic_warned", False):
        ebc._recgo_dynamic_warned = True
        warnings.warn("dynamic-ID tables trained by a torch optimizer: its per-row state is not reset when "
                      "a row is evicted and reused by another ID; pass a fused optimizer (optimizer=) instead",
                      stacklevel=3)

    # The hooks live on the table's module, which the collection holds: a strong reference to the
    # collection here made a cycle, so a dropped collection (its tables' reserved memory, its engine
    # handle) was freed only when Python's cyclic collector next ran, which counts Python objects and
    # not the engine memory they hold.
    collection = weakref.ref(ebc)

    def owner(what: str) -> Any:
        ebc = collection()
        if ebc is None:
            raise InvalidInputError(f"dynamic table {name!r}: {what} of the table's module alone, after its "
                                    "collection was collected: the ID map lives with the collection; keep it")
        return ebc

    def save_hook(module: torch.nn.Module, state_dict: dict[str, Any], prefix: str, local_metadata: Any) -> None:
        # Only the rows in use (weight, optimizer_state) travel, with the ID map, from one snapshot.
        for k, v in _export(owner("state_dict()"), name, rows=True).items():
            if k in ("weight", "optimizer_state") and prefix + k not in state_dict:
                continue
            state_dict[prefix + k] = v

    def load_hook(module: torch.nn.Module, state_dict: dict[str, Any], prefix: str, local_metadata: Any,
                  strict: bool, missing_keys: list[str], unexpected_keys: list[str], error_msgs: list[str]) -> None:
        args = _checkpoint_args(name, state_dict, prefix)
        for k in _KEYS:
            state_dict.pop(prefix + k, None)  # not the module's parameters: torch would call them unexpected
        if args is None:
            return  # none of the table's entries: torch reports its missing keys (strict) or skips it
        with torch.no_grad():
            import_state(owner("load_state_dict()"), name, *args)
        # The engine now holds the checkpoint's rows: make the module's own copy a no-op (copying the
        # whole bound would commit every reserved page).
        state_dict[prefix + "weight"] = module.weight
        if args[2] is not None and hasattr(module, "optimizer_state"):
            state_dict[prefix + "optimizer_state"] = module.optimizer_state

    from .modules._copies import own_hook

    holder.register_state_dict_post_hook(own_hook(save_hook))
    holder.register_load_state_dict_pre_hook(own_hook(load_hook))


def attach(ebc: Any) -> Any:
    """Make ``ebc.state_dict()``/``load_state_dict()`` carry its dynamic tables' ID maps (idempotent;
    returns ``ebc``). EmbeddingBagCollection calls it for tables with a :class:`DynamicConfig`."""
    for i, cfg in enumerate(ebc.embedding_bag_configs()):
        if cfg.dynamic is not None:
            _attach_table(ebc, i)
    return ebc


def __getattr__(name: str) -> Any:
    """``DCPLoadPlanner`` (``torch.distributed.checkpoint`` loads of dynamic tables, see
    :mod:`recgo._dcp`), imported on first use: it pulls in ``torch.distributed.checkpoint``."""
    if name == "DCPLoadPlanner":
        from ._dcp import DCPLoadPlanner

        return DCPLoadPlanner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
