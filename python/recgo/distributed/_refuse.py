"""A batch one rank refuses must stop the step on every rank.

A sharded collection's forward checks its batch (an ID out of range, a missing feature, a malformed
KJT) before the step's first collective. Raising there on one rank alone let its peers run the step
without it and pair their next batch with its next one, silently. So the refusing rank still drives
the step's first ops, marked as refused (the engine's ``recgo_shard_abandon``): every rank stops the
step there with :class:`recgo.errors.InvalidInputError` naming that rank and its reason, no shard
changes, and every rank's step number advances alike.
"""

from __future__ import annotations

import contextlib
import ctypes
from typing import Any, Iterator

from .. import _lib
from ..errors import InvalidInputError
from ._exchange import drive


class Refusal:
    """What kind of step a refusal stands in for: ``sequence`` for a step whose rows come back one per
    lookup (the sequence collection's, or a pooled one whose per-ID weights train), which the body
    sets once it knows."""

    __slots__ = ("sequence",)

    def __init__(self, sequence: bool) -> None:
        self.sequence = sequence


@contextlib.contextmanager
def refused_together(coll: Any, sequence: bool = False) -> Iterator[Refusal]:
    """Around a step's local checks and begin on ``coll`` (a sharded collection; ``sequence`` for
    the sequence collection's steps, or set on the yielded :class:`Refusal`): an exception there
    drives the refused step (:func:`abandon`), then this rank raises its own error."""
    refusal = Refusal(sequence)
    try:
        yield refusal
    except Exception as exc:
        abandon(coll, exc, refusal.sequence)
        raise


def abandon(coll: Any, exc: BaseException, sequence: bool) -> None:
    """Drive a step of ``coll`` that refuses this rank's batch because of ``exc``."""
    coll._sync_training()  # the first ops' size (pad tables) as the peers' steps have it
    reason = (str(exc) or type(exc).__name__).encode()
    buf = ctypes.create_string_buffer(reason, len(reason))
    step = _lib.H(0)
    handle = _lib.call_making(_lib.fn("recgo_shard_abandon"), [step], coll._handle.value, int(sequence), buf,
                              len(reason), ctypes.byref(step), then=lambda: _lib.Handle(step.value))
    try:
        drive(handle, coll._groups, {}, coll._wire)
    except InvalidInputError:  # the refusal itself (or a peer's, at the same op): exc says it
        pass
    finally:
        handle.free()
