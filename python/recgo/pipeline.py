"""The multistage input pipeline (RecIS §3.3) from Python: DataPipeline and TrainPipeline.

:class:`DataPipeline` starts the Go pipeline over a :mod:`recgo.data` source and a
:class:`recgo.FeatureEngine`: while the trainer runs step t, Go goroutines read, transform and
format steps t+1..t+depth (``depth=0`` is the serial schedule, everything inside ``next()``). Each
:class:`Batch` is ``(sparse KeyedJaggedTensor, dense [B, D] float32, labels [B] float32)`` wrapping
the batch's off-heap memory without a copy; the memory returns to the pipeline's pool when the
tensors are gone. The batch also carries each table's deduplicated IDs, which an
:class:`recgo.EmbeddingBagCollection` uses instead of deduplicating again. No embedding value is
read ahead: lookups and updates stay in the step, in order.

:class:`TrainPipeline` runs the whole step (forward, loss, backward, optimizer) on those batches,
in the spirit of TorchRec's ``TrainPipeline.progress``. Neither relies on DataLoader worker
processes: the Go runtime does not survive ``fork()``, and the pipeline's own goroutines do the work.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import torch

from . import _lib
from .data import Source
from .data import _prepared
from .data.sources import spec_json
from .errors import InvalidInputError, RecgoError
from .feature import Feature, FeatureEngine
from .sparse import KeyedJaggedTensor
from .tensors import integer

_INFO_WORDS = 10


class Batch(NamedTuple):
    """One prepared batch: the sparse features, the dense columns and the labels.

    It is also what TorchRec's train pipelines take (``torchrec.datasets.utils.Batch``'s face):
    ``dense_features`` and ``sparse_features`` name the same tensors, ``to``, ``pin_memory`` and
    ``record_stream`` move or mark all three, and it counts as TorchRec's ``Pipelineable`` once
    ``torchrec`` is imported, so ``TrainPipelineSparseDist(...).progress(iter(data_pipeline))`` runs
    a model written for TorchRec's batches (``DLRMTrain``)."""

    sparse: KeyedJaggedTensor
    dense: torch.Tensor
    labels: torch.Tensor

    @property
    def dense_features(self) -> torch.Tensor:
        """TorchRec's name of :attr:`dense`."""
        return self.dense

    @property
    def sparse_features(self) -> KeyedJaggedTensor:
        """TorchRec's name of :attr:`sparse`."""
        return self.sparse

    def to(self, device: Any, non_blocking: bool = False) -> "Batch":
        """The batch on ``device`` (itself when it is there already, as ``Tensor.to``)."""
        return Batch(self.sparse.to(device, non_blocking=non_blocking), self.dense.to(device, non_blocking=non_blocking),
                     self.labels.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> "Batch":
        """The batch in pinned memory."""
        return Batch(self.sparse.pin_memory(), self.dense.pin_memory(), self.labels.pin_memory())

    def record_stream(self, stream: Any) -> None:
        """Mark every tensor as used by ``stream`` (TorchRec's ``Multistreamable``)."""
        self.sparse.record_stream(stream)
        self.dense.record_stream(stream)
        self.labels.record_stream(stream)


_END = object()  # what next() gives TrainPipeline.progress at the end of the batches


def _as_batch(item: Any) -> Batch:
    """A batch an iterator handed :meth:`TrainPipeline.progress`: recgo's :class:`Batch`, or one with
    TorchRec's field names (``torchrec.datasets.utils.Batch``: ``dense_features``, ``sparse_features``,
    ``labels``); anything else is refused by name before a step starts."""
    if isinstance(item, Batch):
        return item
    if all(hasattr(item, k) for k in ("dense_features", "sparse_features", "labels")):
        return Batch(item.sparse_features, item.dense_features, item.labels)
    raise InvalidInputError(f"TrainPipeline.progress: the iterator gave a {type(item).__name__}; expected a "
                            "recgo.pipeline.Batch (sparse, dense, labels) or a batch with TorchRec's dense_features, "
                            "sparse_features and labels")


def _register_pipelineable() -> None:
    """Make :class:`Batch` a virtual subclass of TorchRec's ``Pipelineable`` (its pipelines assert it)
    when torchrec is imported already (recgo never imports it for this)."""
    streamable = sys.modules.get("torchrec.streamable")
    if streamable is not None and not issubclass(Batch, streamable.Pipelineable):
        streamable.Pipelineable.register(Batch)


def _world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """``rank``/``world_size`` as given, else from the default process group (torchrun), else 0/1."""
    if rank is None or world_size is None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            rank = dist.get_rank() if rank is None else rank
            world_size = dist.get_world_size() if world_size is None else world_size
    world_size = 1 if world_size is None else integer("world_size", world_size)
    rank = 0 if rank is None else integer("rank", rank)
    if world_size < 1 or not 0 <= rank < world_size:
        raise InvalidInputError(f"rank {rank} of world_size {world_size}: world_size must be ≥ 1 and rank in "
                                f"[0, world_size)")
    return rank, world_size


def _wrap(address: int, n: int, ctype: Any, dtype: torch.dtype, owner: _lib.Handle) -> torch.Tensor:
    if n == 0:
        return torch.empty(0, dtype=dtype)
    arr = (ctype * n).from_address(address)
    arr._recgo_owner = owner  # type: ignore[attr-defined]
    return torch.frombuffer(arr, dtype=dtype)


def _first_collection(model: torch.nn.Module) -> Any:
    """The first :class:`recgo.EmbeddingBagCollection` or
    :class:`recgo.distributed.ShardedEmbeddingBagCollection` in ``model`` (``model`` itself counts),
    or None."""
    from .distributed import ShardedEmbeddingBagCollection
    from .modules import EmbeddingBagCollection

    for m in model.modules():
        if isinstance(m, (EmbeddingBagCollection, ShardedEmbeddingBagCollection)):
            return m
    return None


def tables_of(model: torch.nn.Module) -> list[dict[str, Any]]:
    """The dedup groups for ``model``: one per table, its features in the collection's order (what
    its forward deduplicates together). When the first collection in ``model`` is a
    :class:`recgo.distributed.ShardedEmbeddingBagCollection`, its tables (the ones the pipeline
    partitions for it); else the tables of every :class:`recgo.EmbeddingBagCollection` in ``model``
    (a two-tower model's both towers), the first of two tables of one name. A batch key several
    tables list is deduplicated with the first of them only (the pipeline deduplicates each key in
    one group). A collection whose table the pipeline did not deduplicate, or deduplicated over
    other features, deduplicates it itself."""
    from .modules import EmbeddingBagCollection

    first = _first_collection(model)
    if first is None:
        return []
    found = [first] if not isinstance(first, EmbeddingBagCollection) else \
        [m for m in model.modules() if isinstance(m, EmbeddingBagCollection)]
    groups: dict[str, dict[str, Any]] = {}
    taken: set[str] = set()  # a batch key is deduplicated in one group: the first table that lists it
    for m in found:
        for c in m.embedding_bag_configs():
            if c.name in groups:
                continue
            keys = [k for k in c.feature_names if k not in taken]
            taken.update(keys)
            if keys:
                groups[c.name] = {"name": c.name, "keys": keys}
    return list(groups.values())


def sharded_of(model: torch.nn.Module) -> Any:
    """The :class:`recgo.distributed.ShardedEmbeddingBagCollection` whose tables :func:`tables_of`
    takes (the first collection of ``model`` when it is a sharded one), or None: what
    :class:`TrainPipeline` hands :class:`DataPipeline` as ``shard=``; None too for one with a feature
    several tables list, whose batches cannot be partitioned ahead."""
    from .distributed import ShardedEmbeddingBagCollection

    m = _first_collection(model)
    if not isinstance(m, ShardedEmbeddingBagCollection) or m._shared:  # noqa: SLF001 (see DataPipeline's shard)
        return None
    return m


MAX_SHUFFLE: int = _lib.const("MaxShuffleWindow")
"""The most rows a shuffle window (``DataPipeline(shuffle=...)``) may hold in memory."""


class DataPipeline:
    """Prepared batches from ``source`` through ``features``, ``depth`` steps ahead.

    ``features`` is a :class:`FeatureEngine` or what one accepts (a list of :class:`Feature`, a
    config path). ``threads`` is the pipeline's thread budget: that many goroutines run TRANSFORM and
    FORMAT, and at most that many stages (READ included) work at once, so preparation never takes
    more than ``threads`` cores from the training step (give a source that waits on slow storage
    ``threads=2``, since a READ waiting on I/O holds its share of the budget).
    ``tables`` (``[{"name": table, "keys": [features...]}]``, or :func:`tables_of` a model) makes
    FORMAT deduplicate each table's IDs for the collection; ``remap`` (a planner remap handle owner
    with ``._h``) renumbers the planned tables' IDs. ``shard`` (a
    :class:`recgo.distributed.ShardedEmbeddingBagCollection`) makes FORMAT also partition each of its
    tables' distinct IDs by owner, as its step would (``tables`` default to its tables, and must
    contain them with the same features in the same order): that collection's forward then skips
    both the dedup and the partition. A prepared batch is a valid batch for any collection: one
    laid out otherwise (other world, rank, sharding, mode or tables), or a batch whose IDs were
    changed in place, deduplicates and partitions what the pipeline did not prepare for it itself.
    ``rank``/``world_size`` shard the source (default: the process group's, under torchrun).
    ``position`` resumes from :meth:`state_dict`'s position. Iterate it; each :class:`Batch` is valid
    as long as you keep it. Every batch holds ``batch_size`` samples except the last, which holds
    what is left of the data (by default it is delivered; ``drop_last=True`` drops it). ``shuffle``
    (rows, 0: in file order) reads the source in windows of that many rows and hands each window's
    rows out in a random order drawn from ``seed`` and the window's number: every row still comes
    exactly once, each rank keeps its share, and :meth:`state_dict` positions resume exactly (the
    same ``shuffle`` and ``seed`` are required). Give a new ``seed`` per epoch for a new order. One thread may
    :meth:`close` the pipeline while another is in ``next()``: that call finishes, later ones raise
    InvalidInputError ("the pipeline is closed").
    """

    def __init__(self, source: Source, features: FeatureEngine | Sequence[Feature] | str | Path,
                 batch_size: int, depth: int = 2, threads: int = 1, *, tables: Sequence[dict[str, Any]] | None = None,
                 remap: Any = None, drop_last: bool = False, rank: int | None = None, world_size: int | None = None,
                 position: dict[str, Any] | None = None, shard: Any = None, shuffle: int = 0,
                 seed: int = 0) -> None:
        if not isinstance(source, Source):
            raise InvalidInputError(f"source must be a recgo.data source, got {type(source).__name__}")
        if shard is not None:
            from .distributed import ShardedEmbeddingBagCollection

            if not isinstance(shard, ShardedEmbeddingBagCollection):
                raise InvalidInputError(f"shard must be a ShardedEmbeddingBagCollection, got {type(shard).__name__}")
            if shard._shared:  # noqa: SLF001
                raise InvalidInputError(
                    "shard: the collection has a feature several tables list, whose IDs its step repeats per table "
                    "before its exchange, so a batch cannot be partitioned for it ahead; leave shard= out (its "
                    "step partitions the batch itself)")
            if tables is None:
                tables = tables_of(shard)
        self._shard = shard
        self.engine = features if isinstance(features, FeatureEngine) else FeatureEngine(features)
        self.source = source
        self.batch_size, self.depth = integer("batch_size", batch_size), integer("depth", depth)
        self.threads = integer("threads", threads)
        if self.threads < 1:  # Go takes 0 as its default of 1
            raise InvalidInputError(f"threads must be at least 1, got {self.threads}")
        self.drop_last = bool(drop_last)
        self.shuffle, self.seed = integer("shuffle", shuffle), integer("seed", seed)
        if not 0 <= self.shuffle <= MAX_SHUFFLE or not 0 <= self.seed < 2**64:
            raise InvalidInputError(f"shuffle must be 0..{MAX_SHUFFLE} rows (a window held in memory) and seed in "
                                    f"[0, 2^64), got {shuffle!r}, {seed!r}")
        self.rank, self.world_size = _world(rank, world_size)
        self.tables = [dict(t) for t in tables] if tables else []
        if remap is not None and not self.tables:  # the remap renumbers the IDs of the tables deduplicated
            raise InvalidInputError("remap: the pipeline renumbers the IDs of the tables given in tables= (e.g. "
                                    "recgo.pipeline.tables_of(model)); without tables it would renumber none")
        self._remap = remap
        self._h: _lib.Handle | None = None
        self._lock = threading.Lock()  # serializes next() and the info calls with close()
        self._next = _lib.fn("recgo_pipeline_next")
        self._info_buf = (ctypes.c_int64 * _INFO_WORDS)()
        self._ended = False  # next() reached the end of the data
        _register_pipelineable()
        self._start(position)

    def _start(self, position: dict[str, Any] | None) -> None:
        source = self.source.spec(self.rank, self.world_size)
        if self.shuffle:
            source = {**source, "shuffle": self.shuffle, "seed": self.seed}
        spec = {"source": source, "batch_size": self.batch_size,
                "depth": self.depth, "workers": self.threads, "drop_last": bool(self.drop_last), "tables": self.tables}
        if position is not None:
            spec["position"] = self._own_position(position)
        data = spec_json(spec, "pipeline spec")
        buf = ctypes.create_string_buffer(data, len(data))
        remap_h = self._remap._h.value if self._remap is not None else 0
        shard_h = self._shard._handle.value if self._shard is not None else 0  # noqa: SLF001
        h = _lib.new_handle("recgo_pipeline_new", self.engine._h.value, remap_h, shard_h,
                            ctypes.addressof(buf), len(data))
        info = _lib.call_json("recgo_pipeline_info", h.value)
        with self._lock:  # the new pipeline replaces a running one only once it has started
            old, self._h, self._ended = self._h, h, False
        if old is not None:
            old.free()
        self.keys: list[str] = list(info["keys"])
        self.dense_width: int = int(info["dense_width"])

    def _info(self) -> dict[str, Any]:
        with self._lock:
            return _lib.call_json("recgo_pipeline_info", self._handle())

    def _handle(self) -> int:
        """The live handle (call with the lock held, so that close() cannot free it meanwhile)."""
        if self._h is None:
            raise InvalidInputError("the pipeline is closed")
        return self._h.value

    def __iter__(self) -> "DataPipeline":
        """The pipeline itself: one pass over the data, which later loops continue. A loop started
        after the pass ended raises instead of silently running no step (build a new pipeline for
        another epoch)."""
        if self._ended:
            raise InvalidInputError("the pipeline has delivered all its data: a DataPipeline is one pass "
                                    "(an iterator, not a DataLoader); build a new one for another epoch")
        _register_pipelineable()  # torchrec imported since the pipeline was built
        return self

    def __next__(self) -> Batch:
        info = self._info_buf
        with self._lock:
            info[0] = 0
            owner: _lib.Handle | None = None
            try:
                _lib.call(self._next, self._handle(), ctypes.addressof(info))
                h, vp, nv, lp, nl, labp, dp, size, width, _step = info[:_INFO_WORDS]
                if h == 0:
                    self._ended = True
                    raise StopIteration
                owner = _lib.Handle(h)
                values = _wrap(vp, nv, ctypes.c_int64, torch.int64, owner)
                lengths = _wrap(lp, nl, ctypes.c_int64, torch.int64, owner)
                labels = _wrap(labp, size, ctypes.c_float, torch.float32, owner)
                dense = _wrap(dp, size * width, ctypes.c_float, torch.float32, owner).view(size, width)
                if self.tables:
                    _prepared.register(vp, nv, lp, owner)
                return Batch(KeyedJaggedTensor(self.keys, values, lengths=lengths), dense, labels)
            except (RecgoError, StopIteration):
                raise
            except BaseException:
                # Ctrl-C can land anywhere from the call's return to the Batch's hand-over, with the batch
                # handed out: give it back (position and step too), so the next call delivers it and
                # nothing is lost. The engine frees its handle; the tensors made of it are dropped.
                if info[0]:
                    if owner is not None:
                        owner.disown()
                    with contextlib.suppress(Exception):
                        _lib.call(_lib.fn("recgo_pipeline_unnext"), self._handle(), info[0])
                raise

    def position(self) -> dict[str, Any]:
        """The source position after the last batch handed out (resume from it with ``position=``), with
        the rank and world size it belongs to."""
        return {**self._info()["position"], "rank": self.rank, "world_size": self.world_size}

    def _own_position(self, position: dict[str, Any]) -> dict[str, Any]:
        """``position`` for the reader, after checking that it was taken by this rank of a world of this
        size (another rank's, or one of another world size, would read other rows or repeat some)."""
        if not isinstance(position, dict):
            raise InvalidInputError(f"position must be a dict from DataPipeline.position(), got {position!r}")
        mine = {k: v for k, v in position.items() if k not in ("rank", "world_size")}
        taken = (position.get("rank", self.rank), position.get("world_size", self.world_size))
        if taken != (self.rank, self.world_size):
            raise InvalidInputError(f"position was taken by rank {taken[0]} of a world of {taken[1]}; this pipeline "
                                    f"is rank {self.rank} of {self.world_size}: resume each rank from its own "
                                    "position, on the world size it was taken with")
        return mine

    @property
    def step(self) -> int:
        """Batches handed out so far (since the start or the resumed position)."""
        return int(self._info()["step"])

    def stats(self) -> dict[str, float]:
        """Seconds spent in each stage (summed over goroutines), seconds ``next()`` waited, and the
        batches, samples and skipped malformed rows so far."""
        s = self._info()["stats"]
        return {"read_s": s["read_ns"] / 1e9, "transform_s": s["transform_ns"] / 1e9,
                "format_s": s["format_ns"] / 1e9, "wait_s": s["wait_ns"] / 1e9, "batches": s["batches"],
                "samples": s["samples"], "skipped": s["skipped"]}

    def state_dict(self) -> dict[str, Any]:
        """``{"position": ...}``: what a checkpoint needs to resume the batch stream."""
        return {"position": self.position()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restart from a :meth:`state_dict` (batches prepared ahead are dropped), also after the pass
        ended or the pipeline was closed. A position this pipeline cannot take (another rank's, past
        the data) raises and leaves the pipeline as it was."""
        if not isinstance(state, dict) or "position" not in state:
            raise InvalidInputError(f"load_state_dict: expected {{'position': ...}} from state_dict(), got {state!r}")
        self._start(state["position"])

    def close(self) -> None:
        """Stop the goroutines (waiting for them) and close the source. Batches still held stay valid.
        A ``next()`` running in another thread finishes first."""
        with self._lock:
            if self._h is not None:
                self._h.free()
                self._h = None

    def __enter__(self) -> "DataPipeline":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def goroutines() -> tuple[int, int]:
    """(goroutines in the process, goroutines of running pipelines): for leak checks."""
    out = (ctypes.c_int64 * 2)()
    _lib.call(_lib.fn("recgo_pipeline_goroutines"), ctypes.addressof(out))
    return int(out[0]), int(out[1])


def bce_loss(output: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The default loss: binary cross-entropy on logits ``[B]`` or ``[B, 1]``."""
    return torch.nn.functional.binary_cross_entropy_with_logits(output.reshape(-1), labels)


def shared_collections(model: torch.nn.Module) -> list[Any]:
    """One :class:`recgo.EmbeddingCollection` per pooled collection of ``model`` whose fused tables it
    shares (``share=``): :class:`TrainPipeline` runs each step inside their ``merged_update`` scopes, so
    a table used pooled and as a sequence in one step takes one optimizer step over the summed
    gradients."""
    from .modules.sequence import EmbeddingCollection

    in_model = {id(m) for m in model.modules()}
    out: dict[int, Any] = {}
    for m in model.modules():
        if isinstance(m, EmbeddingCollection) and m.fused_optimizer is not None:
            owner = m._owner  # noqa: SLF001 (the collection whose tables and optimizer it uses)
            if id(owner) in in_model and id(owner) not in out:
                out[id(owner)] = m
    return list(out.values())


def _model_call(model: torch.nn.Module) -> Callable[[torch.nn.Module, Batch], torch.Tensor]:
    """How :class:`TrainPipeline` calls ``model`` on a batch: ``model(dense, sparse)`` when the forward's
    first parameter is named ``dense...`` (TorchRec's ``DLRM(dense_features, sparse_features)``), else
    ``model(sparse, dense)``."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    inner = model.module if isinstance(model, DistributedDataParallel) else model  # shard_model's wrapper
    try:
        params = list(inspect.signature(inner.forward).parameters)
    except (TypeError, ValueError):  # no signature to read: the documented order
        params = []
    if params and params[0].startswith("dense"):
        return lambda m, b: m(b.dense, b.sparse)
    return lambda m, b: m(b.sparse, b.dense)


def _warn_untrained(model: torch.nn.Module) -> None:
    """Warn, naming them, about the trainable parameters no fused optimizer updates: with
    ``optimizer=None`` nothing steps them, so they would never train."""
    from .modules.optim import fused_collections

    fused = [name for name, _ in fused_collections(model)]
    idle = [n for n, p in model.named_parameters()
            if p.requires_grad and not any(f == "" or n.startswith(f"{f}.") for f in fused)]
    if idle:
        shown = ", ".join(idle[:6]) + (", ..." if len(idle) > 6 else "")
        warnings.warn(f"TrainPipeline(optimizer=None): {len(idle)} trainable parameters ({shown}) are in no "
                      "optimizer and will not train; pass a torch optimizer over them", RuntimeWarning, stacklevel=3)


class TrainPipeline:
    """Trains ``model`` on prepared batches: ``model(sparse, dense)`` gives logits (``model(dense,
    sparse)`` when its forward's first parameter is named ``dense...``, as TorchRec's ``DLRM`` and
    ``DLRM_DCN`` forwards are; ``forward(model, batch)`` overrides both), ``loss_fn(out, labels)`` the
    loss (default :func:`bce_loss`), then backward and ``optimizer.step()`` (``None``
    when the collection's fused optimizer is the only one; a ``RuntimeWarning`` names any trainable
    parameter that nothing would then update). The batch of step t+1..t+depth is
    prepared while step t runs. The collection's dedup groups come from the model (:func:`tables_of`)
    unless ``tables`` is given; when they come from a
    :class:`recgo.distributed.ShardedEmbeddingBagCollection` (:func:`sharded_of`), the pipeline also
    partitions its IDs by owner (``shard=``, unless given). Other arguments are :class:`DataPipeline`'s. A table an
    :class:`recgo.EmbeddingCollection` shares with a pooled collection of the model takes one fused
    update per step over both gradients (:func:`shared_collections`).

    :meth:`progress` runs one step and returns its loss (``StopIteration`` at the end of the data),
    :meth:`run` runs many with a progress bar (samples/s); :meth:`state_dict`/:meth:`save` checkpoint
    the model, the optimizer and the reader position, :meth:`load` resumes exactly. As TorchRec's train
    pipelines, a step follows the model's mode: in ``model.eval()`` it runs the forward and the loss
    only (no backward, no optimizer step, not counted in :attr:`steps`). A step that raises before its
    backward (Ctrl-C or an error in the forward or the loss) keeps its batch: the next
    :meth:`progress` runs it, and a checkpoint taken meanwhile resumes before it. The optimizer is
    ``self.optimizer`` (``self._optimizer``, where TorchRec's ``GradientAccumulationWrapper`` puts its own).

    On several ranks (the source sharded over a ``torch.distributed`` world of more than one rank)
    every step is a collective, but the ranks' shares of the rows can differ by a batch (row g goes
    to rank g mod world_size), and by more with ``skip_bad`` (a dropped row still counts as its
    rank's). So before each step the ranks agree, with one ``all_reduce`` of a flag,
    that all of them have a batch; at the first step where one has none, every rank stops there
    (``StopIteration``) instead of the others waiting forever in their next all-to-all. A rank that
    stops with batches left counts them in :attr:`unused_batches` (reading its share to the end to
    count them) and warns with the number of samples; ``drop_last=True`` without ``skip_bad``
    leaves at most one short batch's difference. The agreement runs on the world of the model's
    sharded collection when it has one (within that collection's ``timeout``, so a rank that failed
    to read makes the others raise :class:`recgo.distributed.PeerFailureError` in time), also when
    each rank reads a source of its own.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, source: Source,
                 features: FeatureEngine | Sequence[Feature] | str | Path, batch_size: int, depth: int = 2,
                 threads: int = 1, *, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = bce_loss,
                 tables: Sequence[dict[str, Any]] | None = None,
                 forward: Callable[[torch.nn.Module, Batch], torch.Tensor] | None = None, **kwargs: Any) -> None:
        self.model, self._optimizer, self.loss_fn = model, optimizer, loss_fn
        self._pending: tuple[Batch, dict[str, Any]] | None = None  # a failed step's batch, its position before
        self._forward = forward if forward is not None else _model_call(model)
        if tables is None and "shard" not in kwargs:
            kwargs["shard"] = sharded_of(model)
        self.data = DataPipeline(source, features, batch_size, depth, threads,
                                 tables=tables if tables is not None else tables_of(model), **kwargs)
        self.steps = 0
        self.last_batch_size = 0  # samples in the batch of the last step (the final one may be short)
        self.unused_batches = 0  # batches this rank held when another rank ran out (see the class doc)
        self._merged = shared_collections(model)
        self._world = _step_group(self.data, model)
        if optimizer is None:
            _warn_untrained(model)

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        """The torch optimizer each training step steps (None: the fused optimizers alone)."""
        return self._optimizer

    @optimizer.setter
    def optimizer(self, value: torch.optim.Optimizer | None) -> None:
        self._optimizer = value

    def progress(self, iterator: Iterator[Batch] | None = None) -> torch.Tensor:
        """Run one step on the next batch (of ``iterator`` if given; a batch whose step raised before its
        backward comes first) and return the loss: a training step in training mode, the forward and
        loss alone in eval mode. On several ranks, ``StopIteration`` as soon as any rank has no batch
        left (see the class doc)."""
        own = iterator is None
        if own and self._pending is not None:
            (batch, before), self._pending = self._pending, None
        else:
            before = self.data.state_dict() if own else {}
            item = next(self.data if own else iterator, _END)  # a sentinel: an iterator may yield None
            batch = None if item is _END else _as_batch(item)
        if self._world is not None and not _all_have(batch is not None, self._world):
            if batch is not None:
                self._count_unused(batch, own)
            raise StopIteration
        if batch is None:
            raise StopIteration
        self.last_batch_size = int(batch.labels.shape[0])
        trains = self.model.training  # as TorchRec's pipelines: eval mode runs the forward only
        optimizer = self._optimizer
        backward = False
        try:
            if trains and optimizer is not None:
                optimizer.zero_grad(set_to_none=True)
            with contextlib.ExitStack() as scopes:  # tables used pooled and as sequences: one merged update
                if trains:
                    for ec in self._merged:
                        scopes.enter_context(ec.merged_update())
                loss = self.loss_fn(self._forward(self.model, batch), batch.labels)
                if not trains:
                    return loss.detach()
                backward = True
                loss.backward()
        except BaseException:
            if own and not backward:  # nothing updated: the next step runs this batch
                self._pending = (batch, before)
            raise
        if optimizer is not None:
            optimizer.step()
        self.steps += 1
        return loss.detach()

    def _count_unused(self, batch: Batch, own_data: bool) -> None:
        """Count and warn about the batches this rank holds when another rank ran out: the one in hand
        and, from its own pipeline, every one left (rows ``skip_bad`` dropped shorten a rank's share,
        so shares can differ by more than a batch)."""
        batches, samples = 1, int(batch.labels.shape[0])
        for rest in (self.data if own_data else ()):
            batches, samples = batches + 1, samples + int(rest.labels.shape[0])
        self.unused_batches += batches
        warnings.warn(f"rank {self.data.rank}: another rank ran out of batches at step {self.steps}; this rank "
                      f"stops with {batches} batch(es) of {samples} samples unused", stacklevel=3)

    def run(self, steps: int | None = None, progress: bool = True) -> list[float]:
        """Run ``steps`` steps (default: to the end of the data) and return the losses; with
        ``progress`` a tqdm bar shows the loss and samples/s."""
        from tqdm import tqdm

        losses: list[float] = []
        bar = tqdm(total=steps, disable=not progress, unit="step", dynamic_ncols=True)
        t0, samples = time.perf_counter(), 0
        try:
            while steps is None or len(losses) < steps:
                try:
                    loss = self.progress()
                except StopIteration:
                    break
                losses.append(float(loss))
                samples += self.last_batch_size
                bar.update(1)
                if len(losses) % 10 == 0 or len(losses) == steps:
                    rate = samples / max(time.perf_counter() - t0, 1e-9)
                    bar.set_postfix(loss=f"{losses[-1]:.4f}", samples_per_s=f"{rate:,.0f}")
        finally:
            bar.close()
        return losses

    def state_dict(self) -> dict[str, Any]:
        """The model's and optimizer's state and the reader position after the last step (before a
        batch whose step raised before its backward: resuming runs it)."""
        return {"model": self.model.state_dict(),
                "optimizer": self._optimizer.state_dict() if self._optimizer is not None else None,
                "pipeline": self._pending[1] if self._pending is not None else self.data.state_dict(),
                "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`: weights, optimizer state, and the batch stream's position. The
        position goes first, then the optimizer's state, then the model's: a position this pipeline
        refuses (another rank's, another shuffle) or an optimizer state it refuses (other parameter
        groups; torch checks before it changes anything) raises with the model untouched, and the
        position and the optimizer are put back when the model refuses its state. (A model that refuses
        may keep the entries that matched, as torch's ``load_state_dict`` copies them before it raises;
        backing the whole model up first would double its memory.)"""
        before = self.data.state_dict()
        self.data.load_state_dict(state["pipeline"])
        opt = self._optimizer if state.get("optimizer") is not None else None
        opt_before = copy.deepcopy(opt.state_dict()) if opt is not None else None
        try:
            if opt is not None:
                opt.load_state_dict(state["optimizer"])
            self.model.load_state_dict(state["model"])
        except BaseException:
            self.data.load_state_dict(before)
            if opt is not None:
                opt.load_state_dict(opt_before)
            raise
        self._pending = None
        self.steps = int(state.get("steps", 0))

    def save(self, path: str | Path) -> None:
        """Write :meth:`state_dict` atomically, with recgo's checksums (``recgo.modules.save_state``)."""
        from .modules._checkpoint import save_state

        save_state(self.state_dict(), path)

    def load(self, path: str | Path) -> None:
        """Resume from a checkpoint written by :meth:`save` (checksums verified first)."""
        from .modules._checkpoint import load_state

        self.load_state_dict(load_state(path))

    def close(self) -> None:
        """Stop the input pipeline."""
        self.data.close()


def _step_group(data: DataPipeline, model: torch.nn.Module) -> Any:
    """The group whose ranks must take their steps together, or None on one rank: the world of the
    model's sharded collection when it has one (with the collection's timeout, whether or not the
    pipeline partitions batches for it, and also when each rank reads a source of its own), else the
    default group when the source is sharded over several ranks."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    from .distributed import ShardedEmbeddingBagCollection

    sharded = next((m for m in model.modules() if isinstance(m, ShardedEmbeddingBagCollection)), None)
    if sharded is not None and sharded._groups.world_size > 1:  # noqa: SLF001
        return sharded._groups.world  # noqa: SLF001
    return dist.group.WORLD if data.world_size > 1 else None


def _all_have(mine: bool, group: Any) -> bool:
    """Whether every rank of ``group`` has a batch for the next step (one ``all_reduce`` MIN)."""
    import torch.distributed as dist

    flag = torch.tensor([int(mine)], dtype=torch.int64)
    try:
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    except Exception as exc:  # a peer died or timed out: the same named error as the exchanges
        from .distributed import PeerFailureError

        raise PeerFailureError(f"rank {dist.get_rank()}: agreeing on the next step failed (a peer died, "
                               f"raised or exceeded the timeout): {exc}") from exc
    return bool(flag.item())


__all__ = ["MAX_SHUFFLE", "Batch", "DataPipeline", "TrainPipeline", "bce_loss", "goroutines", "sharded_of",
           "shared_collections", "tables_of"]
