"""The multistage input pipeline (RecIS §3.3) from Python: DataPipeline and TrainPipeline.

:class:`DataPipeline` starts the Go pipeline over a :mod:`recgo.data` source and a
:class:`recgo.FeatureEngine`: while the trainer runs step t, Go goroutines read, transform and
format steps t+1..t+depth (``depth=0`` is the serial schedule, everything inside ``next()``). Each
:class:`Batch` is ``(sparse KeyedJaggedTensor, dense [B, D] float32, labels [B] float32)`` wrapping
the batch's off-heap memory without a copy; the memory returns to the pipeline's pool when the
tensors are gone. The batch also carries each table's deduplicated IDs, which an
:class:`recgo.EmbeddingBagCollection` uses instead of deduplicating again. No embedding value is
read ahead: lookups and updates stay in the step, in order.

:class:`TrainPipeline` (defined in ``_train_pipeline``) runs the whole step (forward, loss, backward,
optimizer) on those batches, in the spirit of TorchRec's ``TrainPipeline.progress``. Neither relies
on DataLoader worker processes: the Go runtime does not survive ``fork()``, and the pipeline's own
goroutines do the work.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import torch

from . import _lib
from ._memory import wrap
from ._pass_end import check_pass_end
from .data import Source
from .data import _prepared
from .data.sources import spec_json
from .errors import InvalidInputError, RecgoError
from .feature import Feature, FeatureEngine
from .sparse import KeyedJaggedTensor
from .tensors import int64, integer

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
        return Batch(*(t.to(device, non_blocking=non_blocking) for t in self))

    def pin_memory(self) -> "Batch":
        """The batch in pinned memory."""
        return Batch(*(t.pin_memory() for t in self))

    def record_stream(self, stream: Any) -> None:
        """Mark every tensor as used by ``stream`` (TorchRec's ``Multistreamable``)."""
        for t in self:
            t.record_stream(stream)


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
    world_size = 1 if world_size is None else int64("world_size", world_size)
    rank = 0 if rank is None else int64("rank", rank)
    if world_size < 1 or not 0 <= rank < world_size:
        raise InvalidInputError(f"rank {rank} of world_size {world_size}: world_size must be ≥ 1 and rank in "
                                f"[0, world_size)")
    return rank, world_size


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
    other features, deduplicates it itself. A :class:`recgo.planner.PlannedEmbeddingBagCollection`
    gives its tables as given (the keys it is fed), not its wrapped ``.ebc``'s."""
    from .modules import EmbeddingBagCollection

    first = _first_collection(model)
    if first is None:
        return []
    found = [first] if not isinstance(first, EmbeddingBagCollection) else \
        [m for m in model.modules() if isinstance(m, EmbeddingBagCollection)]
    # a planned collection is fed the user's keys, which its wrapped .ebc may read under others
    planner = sys.modules.get("recgo.planner.ebc")  # not imported: no planned collection exists
    outer = {id(m.ebc): m for m in model.modules()
             if planner is not None and isinstance(m, planner.PlannedEmbeddingBagCollection)}
    groups: dict[str, dict[str, Any]] = {}
    taken: set[str] = set()  # a batch key is deduplicated in one group: the first table that lists it
    for m in found:
        for c in outer.get(id(m), m).embedding_bag_configs():
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
        self.batch_size, self.depth = int64("batch_size", batch_size), int64("depth", depth)
        self.threads = int64("threads", threads)
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
        self._lock = _lib.fork_safe_lock()  # serializes next() and the info calls with close()
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
        # a pass from the start of the data is checked at its end (_pass_end.check_pass_end)
        self._fresh = position is None or (int(position.get("global", 0)) == 0 and not position.get("taken"))
        self._end_checked = False
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
        """The next batch; at the end of the pass ``StopIteration``, after the checks of
        :func:`recgo._pass_end.check_pass_end` (once): a pass from the start of the data that handed out
        no batch raises InvalidInputError naming why, and one that skipped more than half its rows under
        ``skip_bad`` warns."""
        return self._deliver(None)

    def _deliver(self, slot: list[Batch | None] | None) -> Batch:
        """:meth:`__next__`, also storing the batch in ``slot[0]`` (when given) before anything that a
        Ctrl-C can interrupt: a caller of recgo's own (``TrainPipeline``) finds it there when the
        interrupt lands on the way back, and keeps it rather than losing it."""
        try:
            return self._next_batch(slot)
        except StopIteration:
            if not self._end_checked:
                self._end_checked = True
                check_pass_end(self._info(), source=self.source, fresh=self._fresh, rank=self.rank,
                               world_size=self.world_size, batch_size=self.batch_size, drop_last=self.drop_last)
            raise

    def _next_batch(self, slot: list[Batch | None] | None = None) -> Batch:
        info = self._info_buf
        handed = 0  # the batch the engine handed out, once it has
        owner: _lib.Handle | None = None
        batch: Batch | None = None
        try:
            with self._lock:
                info[0] = 0
                try:
                    _lib.call(self._next, self._handle(), ctypes.addressof(info))
                finally:  # (no call here: also run when Ctrl-C is raised as the call returns)
                    handed = info[0]
                h, vp, nv, lp, nl, labp, dp, size, width, _step = info[:_INFO_WORDS]
                if h == 0:
                    self._ended = True
                    raise StopIteration
                owner = _lib.Handle(h, armed=False)  # (armed once the batch is made: see below)
                values = wrap(vp, nv, torch.int64, owner)
                lengths = wrap(lp, nl, torch.int64, owner)
                labels = wrap(labp, size, torch.float32, owner)
                dense = wrap(dp, size * width, torch.float32, owner).view(size, width)
                if self.tables:
                    _prepared.register(vp, nv, lp, owner)
                batch = Batch(KeyedJaggedTensor(self.keys, values, lengths=lengths), dense, labels)
                owner.arm()
                if slot is not None:
                    slot[0] = batch  # (a store, no call: nothing can interrupt it)
            # Nothing is called from here to the caller's frame: no Ctrl-C can land in between.
            return batch
        except (RecgoError, StopIteration):
            raise
        except BaseException:
            # Ctrl-C can land anywhere from the call's return to the lock's release after the Batch is
            # made (the release is a call, and Python raises a pending KeyboardInterrupt after it), with
            # the batch handed out: give it back (position and step too), so the next call delivers it
            # and nothing is lost. The engine frees its handle; the tensors made of it are dropped. Its
            # Handle frees nothing when collected before it is armed (a Ctrl-C inside its construction
            # dropped an armed one, which freed the batch, and the give-back failed).
            if handed and not (slot is not None and batch is not None and slot[0] is batch):  # (handed over)
                if owner is not None:
                    owner.disown()
                with contextlib.suppress(Exception), self._lock:
                    _lib.call(_lib.fn("recgo_pipeline_unnext"), self._handle(), handed)
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
        for k, v in zip(("rank", "world_size"), taken):
            if isinstance(v, bool) or not isinstance(v, int):  # "0" and 0.0 read as another rank, True as 1
                raise InvalidInputError(f"position[{k!r}] must be an integer, got {v!r} (a position from "
                                        "DataPipeline.position() has it)")
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
        batches, samples and skipped malformed rows so far, and ``first_skip``, the first skipped row's
        error (``""`` when none was skipped)."""
        s = self._info()["stats"]
        return {"read_s": s["read_ns"] / 1e9, "transform_s": s["transform_ns"] / 1e9,
                "format_s": s["format_ns"] / 1e9, "wait_s": s["wait_ns"] / 1e9, "batches": s["batches"],
                "samples": s["samples"], "skipped": s["skipped"], "first_skip": s.get("first_skip", "")}

    def state_dict(self) -> dict[str, Any]:
        """``{"position": ...}``: what a checkpoint needs to resume the batch stream."""
        return {"position": self.position()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restart from a :meth:`state_dict` (batches prepared ahead are dropped), also after the pass
        ended or the pipeline was closed. A position this pipeline cannot take (another rank's, past
        the data) raises and leaves the pipeline as it was; one inside a shuffle window is checked
        against that window when the next batch reads it again, and raises there if the data no
        longer holds the window's rows."""
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

    def __reduce__(self) -> Any:
        # A copy would share the running stream (both drawing interleaved batches from it, and
        # closing one would close the other); there is no stream to pickle.
        raise TypeError("a DataPipeline cannot be copied or pickled (it is a stream running on the engine's "
                        "goroutines): build another from the same source and features, and "
                        "load_state_dict(pipeline.state_dict()) to go on from where this one stands")

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


from ._train_pipeline import TrainPipeline  # noqa: E402  (it uses the names above)

__all__ = ["MAX_SHUFFLE", "Batch", "DataPipeline", "TrainPipeline", "bce_loss", "goroutines", "sharded_of",
           "shared_collections", "tables_of"]
