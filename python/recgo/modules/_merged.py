"""One optimizer step per table over several fused backwards (``merged_update`` of the pooled and
sequence collections)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from .. import _lib
from ..errors import InvalidInputError


@contextlib.contextmanager
def merged_update(ebc: Any) -> Iterator[None]:
    """A scope in which the fused backwards over ``ebc``'s tables (an ``EmbeddingBagCollection``, also
    the owner of a sequence collection's tables) sum their gradients per row instead of updating;
    leaving it applies one optimizer step per used table over the sums (its step counter advances
    once), also when the block raises (gradients that reached the engine are not lost). Forwards
    inside the scope see the weights as they were when it opened (a dynamic table still admits and
    evicts IDs: a row evicted inside the scope takes only its new ID's gradient). One scope at a time
    per collection (a second raises); close it before saving a checkpoint."""
    if ebc._handle is None:
        raise InvalidInputError("merged_update: the collection is on the meta device; materialise it first")
    f = _lib.fn("recgo_ebc_merged_update")
    _lib.call(f, ebc._handle.value, 1)
    try:
        yield
    finally:
        _lib.call(f, ebc._handle.value, 0)
