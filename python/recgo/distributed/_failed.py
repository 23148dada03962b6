"""A sharded collection whose backward exchange failed may hold a step its peers applied.

The engine applies a rank's fused updates (and hands a non-fused backward its gradients) only once
the rank's whole backward exchange has run: the update is the exchange's last stage, after its last
op (``engine/shard/exchange.go``, ``apply``), and it updates every table of the rank or none. A rank
whose backward drive raised therefore took no part of the step; but its peers are not atomic with
it: a peer that finished the exchange's last op before this rank failed (this rank raised, or died,
after that op) applied the whole step. The world's shards then hold different steps (step n here,
n + 1 there), and a :meth:`save` on every rank wrote a checkpoint mixing them that :meth:`load` took
without an error (world 3: ranks 0 and 1 at step 2, rank 2 at step 1;
``tests/test_distributed_partial_step.py``).

So a rank whose backward drive raised marks its collection (:func:`mark`; the good path costs one
attribute test per step and no collective): its forward, backward, ``save`` and ``state_dict`` then
raise :class:`PartialStepError` until a successful ``load`` (the last checkpoint), or a
``load_state_dict`` that gives every table its rows, optimizer state and step (``_state``), clears the
mark; a ``torch.distributed.checkpoint`` load goes into a new collection (DCP asks the marked one for
its ``state_dict`` first, and an exception for DCP's load would let its save through as well). A
peer that finished the step is not marked (its shards hold the whole step), but a save needs every
rank, so no torn set is written: the marked rank refuses before the save's first collective, and the
others raise :class:`PeerFailureError` there.
"""

from __future__ import annotations

from typing import Any

from ..errors import RecgoError
from ._exchange import drive


class PartialStepError(RecgoError, RuntimeError):
    """A sharded collection's backward exchange failed on this rank (a peer died, raised or timed out,
    or this rank was interrupted), so the step may be applied on some ranks and not on others: the
    collection refuses to step, ``save`` or give its ``state_dict`` until ``load`` restores a
    checkpoint. The message names the rank and the failure."""


def drive_backward(coll: Any, handle: Any, traffic: dict[str, int]) -> None:
    """Run a queued backward exchange of ``coll`` (refused if the collection is marked); any
    exception from it (``PeerFailureError``, a ``KeyboardInterrupt`` between its ops, an engine error)
    marks the collection before it propagates. The handler's first statement marks it with no Python
    call before the store (``nn.Module.__setattr__`` is one, where a pending Ctrl-C is raised), so a
    second Ctrl-C landing in the handler still leaves it marked; :func:`mark` then names the failure.
    (Marking from before the drive instead showed the mark to the threads that read the collection
    meanwhile, as a ``state_dict()`` while training.)"""
    refuse(coll, "backward")
    try:
        drive(handle, coll._groups, traffic, coll._wire)
    except BaseException as exc:  # peers that finished the exchange applied the step; this rank did not
        coll.__dict__["_partial_step"] = "the backward exchange raised"
        mark(coll, exc)
        raise


def mark(coll: Any, exc: BaseException) -> None:
    """Record that ``coll``'s backward drive raised ``exc`` on this rank."""
    coll._partial_step = (f"{type(exc).__name__}: {exc}".splitlines() or [""])[0][:300]


def clear(coll: Any) -> None:
    """Forget the mark (a load, or a load_state_dict of every table, restored every shard)."""
    coll._partial_step = None


def refuse(coll: Any, what: str) -> None:
    """Raise :class:`PartialStepError` for ``what`` if ``coll`` is marked."""
    failed = getattr(coll, "_partial_step", None)
    if failed is not None:
        raise PartialStepError(
            f"rank {coll._groups.rank}: {what}: this collection's backward exchange failed ({failed}), so that "
            "step is applied on the ranks that finished the exchange and not on this one: the shards across "
            "the ranks may hold different steps, and a checkpoint of them would mix the two. Load the last "
            "checkpoint (load(), or load_state_dict() of a whole state, clears this; after a lost peer, restart "
            "the world and load it), or build a new collection (for a torch.distributed.checkpoint load)")


def refuse_state_dict(module: Any, prefix: str, keep_vars: bool) -> None:
    """state_dict pre-hook: a marked collection gives no state dict (nor, through it, a
    ``torch.distributed.checkpoint`` save)."""
    refuse(module, "state_dict()")
