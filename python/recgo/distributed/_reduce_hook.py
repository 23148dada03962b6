"""The dense part's backward all-reduce failing as :class:`PeerFailureError`, not torch's bare error.

``shard_model``'s ``DistributedDataParallel`` all-reduces each bucket of dense gradients as the
backward makes it ready and waits for them in its Reducer's finalize, a C++ callback at the end of
the backward, whose error (a dead peer's closed connection, gloo's timeout) reaches ``backward()`` as
a bare ``RuntimeError``: a C++ future keeps no Python exception. A Python exception raised from an
autograd engine callback reaches ``backward()`` as itself, so :class:`CheckedReduce`, DDP's comm hook,
launches each bucket's all-reduce as DDP would (``allreduce_hook``, which divides by the world size as
DDP's built-in reduction does, or the hook the user registers), and with the last bucket queues a
callback (ahead of DDP's finalize, which the Reducer queues once that bucket's hook returned) that
waits for the buckets and raises :class:`PeerFailureError`. The all-reduces still overlap the rest of the backward.

A backward that raised part-way (a Ctrl-C landing in recgo's Python autograd nodes or in this comm
hook, or any exception they raise) leaves DDP's Reducer mid-iteration: its buckets half marked, its
finalize never run. Every later forward then failed in DDP's sync (an internal assert in its bucket
rebuild, or "Expected to have finished reduction in the prior iteration"), so the wrapper could never
step again. :class:`Backward` notes each forward's backward as due and done (an autograd engine
callback, which runs only when the backward completes), and the next forward resets the Reducer
when the backward it was due raised; a backward that completed without finishing DDP's reduction
(parameters unused without ``find_unused_parameters``) still gets DDP's own error.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.autograd import Variable
from torch.utils._pytree import tree_flatten
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from ..errors import InvalidInputError
from ._exchange import PeerFailureError

# how a torch future reports a KeyboardInterrupt raised in its Python callback (a Ctrl-C landing in
# the all-reduce hook's ``.then``): the interrupt, not a failed peer
_INTERRUPTED = "error when running the callback: KeyboardInterrupt"
# DDP's built-in comm hooks (``_register_builtin_comm_hook``) as the Python hooks that do the same
_BUILTIN = {"ALLREDUCE": default_hooks.allreduce_hook, "FP16_COMPRESS": default_hooks.fp16_compress_hook}


class CheckedReduce:
    """A ``DistributedDataParallel`` comm hook (:meth:`reduce`) over ``process_group``: each bucket
    reduced by ``hook(state, bucket)`` (default: DDP's all-reduce), a failure raised from the backward
    as :class:`PeerFailureError`."""

    def __init__(self, process_group: Any) -> None:
        self.state: Any = process_group
        self.hook: Callable[..., torch.futures.Future] = default_hooks.allreduce_hook
        self.user = False  # whether the user's hook replaced the default
        self._pending: list[torch.futures.Future] = []
        self.waiting = False  # a backward's wait was queued and has not finished (Backward.due)

    def replace(self, state: Any, hook: Callable[..., torch.futures.Future]) -> None:
        """Reduce with the user's ``hook`` and ``state`` (``register_comm_hook``; once, as DDP allows)."""
        if self.user:
            raise InvalidInputError("register_comm_hook: the model already has a comm hook (DDP takes one)")
        self.state, self.hook, self.user = state, hook, True

    # (no annotations: DDP's _check_comm_hook compares them with its classes, and here they are strings)
    def reduce(self, _state, bucket):  # type: ignore[no-untyped-def]
        """The comm hook: launch the bucket's reduction, and with the last one queue :meth:`_wait`."""
        if bucket.index() == 0:
            self._pending.clear()  # a backward that stopped before its last bucket left its futures
        fut = self.hook(self.state, bucket)
        self._pending.append(fut)
        if bucket.is_last():
            self.waiting = True
            Variable._execution_engine.queue_callback(self._wait)
        return fut

    def _wait(self) -> None:
        """Wait for this backward's reductions; a failed one raises :class:`PeerFailureError`."""
        pending, self._pending = self._pending, []
        for fut in pending:
            try:
                fut.wait()
            except RuntimeError as exc:
                if _INTERRUPTED in str(exc):  # a Ctrl-C in a future's Python callback (the hook's .then)
                    raise KeyboardInterrupt from exc
                hook = f" (or the comm hook {getattr(self.hook, '__qualname__', self.hook)!r} raised)" if self.user else ""
                raise PeerFailureError(
                    f"rank {dist.get_rank()}: the dense part's DistributedDataParallel all-reduce in the backward "
                    f"failed: a peer died, stalled past the timeout or is out of step{hook}: {exc}") from exc
        self.waiting = False


class Backward:
    """The backward due after one forward of a DDP wrapper (:meth:`due`), ``done`` once it completed."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False

    @staticmethod
    def due(ddp: Any) -> "Backward":
        """Before ``ddp``'s forward: reset its Reducer if the backward due after its last forward raised
        part-way (it left the Reducer unfinalized), and note the one due after this forward. Set
        before the forward runs, so a Ctrl-C anywhere after this call still leaves it noted."""
        last, reduce = ddp.__dict__.get("_recgo_backward"), ddp.__dict__.get("_recgo_reduce")
        # (the wait runs after this backward's done callback: one it left unfinished raised too)
        if last is not None and (not last.done or (reduce is not None and reduce.waiting)):
            try:
                ddp.reducer._check_reducer_finalized()
            except RuntimeError:  # its hooks ran, its finalize did not: the backward raised
                ddp._has_rebuilt_buckets = False  # (as DDP's own _update_process_group resets it)
                ddp.reducer._reset_state()
            if reduce is not None:
                reduce.waiting = False
        ddp.__dict__["_recgo_backward"] = now = Backward()
        return now

    def watch(self, output: Any) -> None:
        """Note this backward done when one through ``output``'s tensors completes: each tensor's
        gradient hook queues an engine callback, which the engine runs only at the end of a backward
        that raised nothing."""
        if not torch.is_grad_enabled():
            return
        for t in tree_flatten(output)[0]:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                t.register_hook(self._started)

    def _started(self, grad: torch.Tensor) -> None:
        Variable._execution_engine.queue_callback(self._done)

    def _done(self) -> None:
        self.done = True


def install(ddp: Any) -> CheckedReduce | None:
    """Register a :class:`CheckedReduce` as ``ddp``'s comm hook and return it; None where DDP already
    registered one (its ``mixed_precision``) or reduces in Python (compiled autograd), which take no
    other."""
    if ddp._comm_hooks or getattr(ddp, "_use_python_reducer", False):
        return None
    checked = CheckedReduce(ddp.process_group)
    torch.nn.parallel.DistributedDataParallel.register_comm_hook(ddp, None, checked.reduce)
    return checked


def builtin(comm_hook_type: Any) -> Callable[..., torch.futures.Future]:
    """The Python hook of DDP's built-in hook type ``comm_hook_type``."""
    name = getattr(comm_hook_type, "name", str(comm_hook_type).rsplit(".", 1)[-1])
    if name not in _BUILTIN:
        raise InvalidInputError(f"_register_builtin_comm_hook: unknown hook type {comm_hook_type!r} (DDP's are "
                                f"{sorted(_BUILTIN)})")
    return _BUILTIN[name]
