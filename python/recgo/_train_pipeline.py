"""recgo's :class:`TrainPipeline`: a whole training step (forward, loss, backward, optimizer) over a
:class:`recgo.DataPipeline`'s batches, in the spirit of TorchRec's ``TrainPipeline.progress``.
Imported by :mod:`recgo.pipeline`, which exports it."""

from __future__ import annotations

import contextlib
import copy
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from . import _lib
from .data import Source
from .errors import InvalidInputError
from .feature import Feature, FeatureEngine
from .pipeline import Batch, DataPipeline, bce_loss, shared_collections, sharded_of, tables_of

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


def _model_call(model: torch.nn.Module) -> Callable[[torch.nn.Module, Batch], torch.Tensor]:
    """How :class:`TrainPipeline` calls ``model`` on a batch: ``model(dense, sparse)`` when the forward's
    first parameter is named ``dense...`` (TorchRec's ``DLRM(dense_features, sparse_features)``), else
    ``model(sparse, dense)``; a forward that cannot take two arguments raises InvalidInputError naming
    ``forward=`` (else torch's TypeError came from inside the first step)."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    inner = model.module if isinstance(model, DistributedDataParallel) else model  # shard_model's wrapper
    params: list[str] = []
    try:
        sig = inspect.signature(inner.forward)
    except (TypeError, ValueError):  # no signature to read: the documented order
        pass
    else:
        try:
            sig.bind(None, None)
        except TypeError:
            raise InvalidInputError(
                f"TrainPipeline: {type(inner).__name__}.forward{sig.replace(return_annotation=sig.empty)} does not "
                "take the two arguments a step passes (model(sparse, dense), or model(dense, sparse) when forward's "
                "first parameter is named dense...): pass forward=lambda model, batch: model(...) reading "
                "batch.sparse, batch.dense") from None
        params = list(sig.parameters)
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
    each rank reads a source of its own. A rank whose next batch raises (a malformed row; a pass
    with no rows) flags that in the agreement before raising, so its peers raise
    ``PeerFailureError`` naming it at once.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, source: Source,
                 features: FeatureEngine | Sequence[Feature] | str | Path, batch_size: int, depth: int = 2,
                 threads: int = 1, *, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = bce_loss,
                 tables: Sequence[dict[str, Any]] | None = None,
                 forward: Callable[[torch.nn.Module, Batch], torch.Tensor] | None = None, **kwargs: Any) -> None:
        self.model, self._optimizer, self.loss_fn = model, optimizer, loss_fn
        self._pending: tuple[Batch, dict[str, Any]] | None = None  # a failed step's batch, its position before
        self._closed = False
        # A step, a checkpoint (state_dict, save, load) and a restore run one at a time, whichever threads call them.
        self._step_lock = _lib.fork_safe_lock(reentrant=True)
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
        self._told = False  # whether the peers were told that this rank's next batch raised
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
        left (see the class doc). Steps and checkpoints called from several threads run one at a time."""
        with self._step_lock:
            return self._progress(iterator)

    def _progress(self, iterator: Iterator[Batch] | None) -> torch.Tensor:
        """:meth:`progress` with the step lock held. From the moment this rank's pipeline hands a batch
        over (into ``slot``, before anything a Ctrl-C can interrupt) to the start of its backward, an
        exception keeps it for the next step, with the position before it: nothing updated yet."""
        self._check_open()
        own = iterator is None
        batch: Batch | None = None
        before: dict[str, Any] = {}
        slot: list[Batch | None] = [None]
        backward = False
        try:
            if own and self._pending is not None:
                (batch, before), self._pending = self._pending, None
            else:
                if own:
                    before = self.data.state_dict()
                try:
                    if own:
                        item: Any = self.data._deliver(slot)
                    else:
                        item = next(iterator, _END)  # a sentinel: an iterator may yield None
                except StopIteration:
                    item = _END
                except Exception as exc:  # tell the peers, waiting in this step's agreement, before raising
                    if self._world is not None and not self._told:  # once: a later call meets no peer
                        self._told = True
                        _tell_failure(exc, self._world)
                    raise
                batch = None if item is _END else _as_batch(item)
            if self._world is not None and not _all_have(batch is not None, self._world):
                if batch is not None:
                    spare, batch = batch, None  # (counted unused, not kept)
                    self._count_unused(spare, own)
                raise StopIteration
            if batch is None:
                raise StopIteration
            self.last_batch_size = int(batch.labels.shape[0])
            trains = self.model.training  # as TorchRec's pipelines: eval mode runs the forward only
            optimizer = self._optimizer
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
            if batch is None:
                batch = slot[0]  # handed over, and the interrupt landed before it was taken
            if own and not backward and batch is not None:  # nothing updated: the next step runs this batch
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
        t0, samples, shown = time.perf_counter(), 0, 0

        def show() -> None:
            nonlocal shown
            rate = samples / max(time.perf_counter() - t0, 1e-9)
            bar.set_postfix(loss=f"{losses[-1]:.4f}", samples_per_s=f"{rate:,.0f}")
            shown = len(losses)

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
                    show()
            if losses and shown != len(losses):  # the data ended between updates: show the last step
                show()
        finally:
            bar.close()
        return losses

    def state_dict(self) -> dict[str, Any]:
        """The model's and optimizer's state and the reader position after the last step (before a
        batch whose step raised before its backward: resuming runs it). Called from another thread
        while one trains, it waits for the running step to end; its tensors are the live ones (as
        torch's ``state_dict``), which the next step changes: save them with :meth:`save`, which
        writes the file before the next step starts."""
        with self._step_lock:
            return self._state()

    def _state(self) -> dict[str, Any]:
        """:meth:`state_dict` with the step lock held."""
        self._check_open()
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
        backing the whole model up first would double its memory.) A running step ends first."""
        with self._step_lock:
            self._restore(state)

    def _restore(self, state: dict[str, Any]) -> None:
        """:meth:`load_state_dict` with the step lock held."""
        steps = _checked_state(state)  # before anything is applied: a bad count left weights loaded
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
        self.steps = steps

    def save(self, path: str | Path) -> None:
        """Write :meth:`state_dict` atomically, with recgo's checksums (``recgo.modules.save_state``).
        From another thread while one trains: the file holds the state between two steps (the running
        step ends first, and the next waits until the file is written)."""
        from .modules._checkpoint import save_state

        with self._step_lock:
            save_state(self._state(), path)

    def load(self, path: str | Path) -> None:
        """Resume from a checkpoint written by :meth:`save` (checksums verified first)."""
        from .modules._checkpoint import load_state

        state = load_state(path)  # read and verified before a running step has to end
        self.load_state_dict(state)

    def close(self) -> None:
        """Stop the input pipeline. Steps and ``state_dict`` then raise ``InvalidInputError`` (a failed
        step's batch, kept for the next step, is no longer run or resumed from)."""
        self._closed = True
        self.data.close()

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidInputError("this TrainPipeline was closed (close() stopped its input pipeline): build a "
                                    "new one, and load_state_dict a state saved before the close to go on")


_STATE_KEYS = ("model", "optimizer", "pipeline", "steps")


def _checked_state(state: Any) -> int:
    """The step count of a :meth:`TrainPipeline.state_dict` (0 when it has none), after checking the
    dict's form: its entries and a step count that is a non-negative integer. A state refused here
    changes nothing."""
    if not isinstance(state, dict):
        raise InvalidInputError(f"TrainPipeline.load_state_dict: expected a dict from state_dict(), got "
                                f"{type(state).__name__}")
    missing = [k for k in ("model", "pipeline") if k not in state]
    if missing:
        raise InvalidInputError(f"TrainPipeline.load_state_dict: the state lacks {missing} (a state_dict() has "
                                f"{list(_STATE_KEYS)})")
    for k in ("model", "optimizer"):
        if state.get(k) is not None and not isinstance(state[k], dict):
            raise InvalidInputError(f"TrainPipeline.load_state_dict: {k!r} must be a state dict, got "
                                    f"{type(state[k]).__name__}")
    steps = state.get("steps", 0)
    # int only: a float or string count was truncated or raised after the weights were loaded
    if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps < 2**63:
        raise InvalidInputError(f"TrainPipeline.load_state_dict: 'steps' must be an integer in [0, 2^63), got "
                                f"{steps!r}")
    return steps


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


_FAILED, _NONE, _HAVE = -1, 0, 1
"""A rank's state in the step agreement: its next batch raised, it has none left, it has one."""


def _agreement(state: int, group: Any) -> list[int]:
    """Every rank's state (in ``group``'s rank order) for the next step: one ``all_reduce`` MIN of a vector
    holding ``state`` in this rank's slot and :data:`_HAVE` (neutral) in the others'.

    Raises:
        PeerFailureError: torch.distributed or gloo failed the all-reduce (a peer died or left it, or did
            not come within the group's timeout), as the exchanges classify it (``gloo_failure``); any
            other exception (this rank's own) propagates as it is."""
    import torch.distributed as dist

    flags = torch.full((dist.get_world_size(group),), _HAVE, dtype=torch.int64)
    flags[dist.get_rank(group)] = state
    try:
        dist.all_reduce(flags, op=dist.ReduceOp.MIN, group=group)
    except Exception as exc:
        from .distributed import PeerFailureError
        from .distributed._exchange import gloo_failure

        what = gloo_failure(exc, "the group's timeout")
        if what is None:
            raise  # nothing says a peer failed: this rank's own error, as it is
        raise PeerFailureError(f"rank {dist.get_rank()}: agreeing on the next step failed: {what}: {exc}") from exc
    return [int(f) for f in flags.tolist()]


def _all_have(mine: bool, group: Any) -> bool:
    """Whether every rank of ``group`` has a batch for the next step (:func:`_agreement`).

    Raises:
        PeerFailureError: a peer's next batch raised (a pass with no rows, a malformed row: its own
            error names it), naming the peer; or the agreement failed."""
    import torch.distributed as dist

    flags = _agreement(_HAVE if mine else _NONE, group)
    failed = [r for r, f in zip(dist.get_process_group_ranks(group), flags) if f == _FAILED]
    if failed:
        from .distributed import PeerFailureError

        raise PeerFailureError(f"rank {dist.get_rank()}: rank {', '.join(map(str, failed))} failed to read its next "
                               "batch (its own error names why: a pass with no rows, a malformed row), so this "
                               "rank stops too")
    return min(flags) == _HAVE


def _tell_failure(exc: BaseException, group: Any) -> None:
    """Take part in the step agreement as a rank whose next batch raised ``exc``, so that the peers
    raise :class:`PeerFailureError` now instead of at their timeout (or when this process exits); a
    failing agreement (the peers gone too) is ignored: the caller raises ``exc``."""
    try:
        _agreement(_FAILED, group)
    except Exception:  # noqa: BLE001 - this rank's own error is the one to raise
        pass
