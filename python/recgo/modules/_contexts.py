"""Engine forward contexts owned by the autograd graph that needs them.

A module whose forward keeps an engine context for its backward (the embedding collections) hands
:meth:`ContextStore.keep` the context's handle and gets back a one-element int64 tensor, the *ticket*.
The ticket's memory is a small buffer that holds the handle, so the handle lives exactly as long as
the ticket's storage: the module's custom op returns the ticket as an output and its autograd
formula saves it for backward, so the context is freed when the graph is (after its backward, or
when the graph is dropped without one), with no limit on how many graphs are pending (many threads,
gradient accumulation over any number of micro-batches). :meth:`ContextStore.take` hands the handle
to a fused backward exactly once (it updates the rows; a second backward of the graph finds
nothing); a gradient-only backward only reads the context, which stays with its graph, so a graph
kept by ``retain_graph=True`` may run backward again.

This works the same under ``torch.compile``: the compiled graph saves the ticket like any other
tensor. The eager path (``_eager.py``, an ``autograd.Function``) needs no ticket: the Function's node
holds the handle (:meth:`ContextStore.own`) and is freed with the graph, which frees the context (a
gradient-only backward frees it at the end of its graph task unless the graph is retained).
The store is safe for concurrent use (its dict operations are atomic under the GIL; a handle
may be collected on any thread).
"""

from __future__ import annotations

import ctypes
import itertools
import weakref
from typing import Any, Callable

import torch

from .._lib import Handle
from ..errors import InvalidInputError

_ids = itertools.count(1)


class _Cell(ctypes.c_int64 * 1):
    """The ticket's memory; it owns the handle (attribute ``handle``) while any view of it lives."""


class _Owned(Handle):
    """A context handle that an eager graph's autograd node owns (:meth:`ContextStore.own`)."""

    __slots__ = ("_pending",)

    def free(self) -> None:
        h = self._h
        super().free()
        self._pending.pop(h, None)  # atomic under the GIL, like the store in own()


def owning(ctx: ctypes.c_size_t, keep: bool, owner: Callable[[int], Any], ran: Callable[[], None]) -> Callable[[], Any]:
    """What a forward runs as its engine call's ``then`` (``_lib.call_making``), inside the call's
    protection against Ctrl-C: ``ran`` (the recomputation check's record, which calls the engine too),
    then the owner of the context whose raw handle the call wrote into ``ctx``, made by ``owner`` (None
    without ``keep``). A raw handle returned to be wrapped by the caller was lost to a Ctrl-C landing
    in between."""
    def then() -> Any:
        ran()
        return owner(ctx.value) if keep else None
    return then


#: The error of a backward that finds no context (a fused graph's backward ran before, or its forward
#: ran without grad tracking).
NO_CONTEXT = ("recgo backward: no saved forward for this graph: with a fused optimizer a graph's backward runs "
              "once (it updated the rows), so backward(retain_graph=True) followed by a second backward is not "
              "supported (sum the losses and call backward once, or use optimizer=None and a torch optimizer); "
              "or the forward ran without grad tracking")


class ContextStore:
    """Handles of engine contexts, each owned by the storage of the ticket tensor :meth:`keep` returns
    (the custom ops' path), or by an eager graph's autograd node (:meth:`own`, see ``_eager.py``)."""

    def __init__(self) -> None:
        # ticket id -> its handle, weakly, without a callback (like _owned below; pruned when counted).
        self._live: dict[int, weakref.ref[Handle]] = {}
        # Raw handles given out by own() and not freed yet, with a weak reference to their owner: a
        # collected owner's capsule frees the context in C, with no Python finalizer that could update
        # this (a Ctrl-C would have been swallowed there), so dead entries are pruned when counted.
        self._owned: dict[int, weakref.ref[Handle]] = {}
        self._prune_at = 64

    def ticket(self, raw: int) -> torch.Tensor:
        """The ticket owning the context ``raw`` (:meth:`keep`), or a ticket of id 0 when there is none."""
        return self.keep(Handle(raw)) if raw else torch.zeros(1, dtype=torch.int64)

    def own(self, raw: int) -> Handle:
        """A handle of context ``raw`` for an owner that frees it (or drops it: it is freed when collected),
        counted in ``len`` until then. Cheaper than a ticket: no tensor."""
        h = _Owned(raw)
        h._pending = self._owned
        self._owned[raw] = weakref.ref(h)
        if len(self._owned) > self._prune_at:  # bounded by twice the pending contexts, amortized O(1)
            self._prune()
        return h

    def _prune(self) -> None:
        for entries in (self._live, self._owned):
            for key, ref in list(entries.items()):
                if ref() is None:
                    entries.pop(key, None)
        self._prune_at = max(64, 2 * max(len(self._live), len(self._owned)))

    def keep(self, handle: Handle) -> torch.Tensor:
        """A ticket (int64 tensor of one element, its id) that owns ``handle`` until it is collected."""
        ident = next(_ids)
        cell = _Cell(ident)
        cell.handle = handle  # type: ignore[attr-defined]  # the storage → buffer → cell chain owns it
        self._live[ident] = weakref.ref(handle)
        if len(self._live) > self._prune_at:
            self._prune()
        return torch.frombuffer(cell, dtype=torch.int64, count=1)

    def take(self, ticket: int, once: bool = True) -> Handle:
        """The handle behind ``ticket`` (its id); :class:`InvalidInputError` (``NO_CONTEXT``) when it was
        taken or its graph is gone. With ``once`` (a fused backward) it is handed out once and the caller
        frees it when done (freeing early is safe: the ticket only drops it); without, it stays with the
        ticket, for a further backward of a retained graph, and the caller must not free it."""
        ref = self._live.pop(int(ticket), None) if once else self._live.get(int(ticket))
        handle = ref() if ref is not None else None
        if handle is None:
            raise InvalidInputError(NO_CONTEXT)
        return handle

    def __len__(self) -> int:
        """Contexts still pending (kept or owned, neither taken nor collected, nor freed)."""
        self._prune()
        return len(self._live) + len(self._owned)
