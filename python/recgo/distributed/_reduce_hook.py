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
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.autograd import Variable
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from ..errors import InvalidInputError
from ._exchange import PeerFailureError

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
            Variable._execution_engine.queue_callback(self._wait)
        return fut

    def _wait(self) -> None:
        """Wait for this backward's reductions; a failed one raises :class:`PeerFailureError`."""
        pending, self._pending = self._pending, []
        for fut in pending:
            try:
                fut.wait()
            except RuntimeError as exc:
                hook = f" (or the comm hook {getattr(self.hook, '__qualname__', self.hook)!r} raised)" if self.user else ""
                raise PeerFailureError(
                    f"rank {dist.get_rank()}: the dense part's DistributedDataParallel all-reduce in the backward "
                    f"failed: a peer died, stalled past the timeout or is out of step{hook}: {exc}") from exc


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
