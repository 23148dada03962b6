"""Which tensors are a prepared pipeline batch's own memory (so a collection can use its dedup).

The pipeline registers each batch's values address with a weak reference to the batch's owner
handle; :func:`prepared_handle` returns the live handle whose values and lengths a KeyedJaggedTensor
still views, or None. The Go side checks the addresses and the dedup against the values again.

Pipelines in several threads register into the one registry: its sweep of dead entries holds a lock
(a sweep that iterated it while another thread's pipeline added a batch raised "dictionary changed
size during iteration" from that pipeline's ``next()``). Lookups are single dict reads and take none.
"""

from __future__ import annotations

import weakref
from typing import Any

from .._lib import fork_safe_lock

_BATCHES: dict[int, tuple["weakref.ref[Any]", int, int, int]] = {}
_MAX = 256
_LOCK = fork_safe_lock()


def register(values_ptr: int, numel: int, lengths_ptr: int, owner: Any) -> None:
    """Remember that the tensors at ``values_ptr``/``lengths_ptr`` belong to ``owner`` (a Handle)."""
    if not values_ptr:
        return
    entry = (weakref.ref(owner), numel, lengths_ptr, owner.value)
    with _LOCK:
        _BATCHES[values_ptr] = entry
        if len(_BATCHES) > _MAX:
            for k in [k for k, v in _BATCHES.items() if v[0]() is None]:
                del _BATCHES[k]


def prepared_handle(values: Any, lengths: Any) -> int | None:
    """The prepared batch handle behind ``values`` and ``lengths``, if they are a live batch's."""
    if not _BATCHES or values.numel() == 0:
        return None
    entry = _BATCHES.get(values.data_ptr())
    if entry is None:
        return None
    ref, numel, lengths_ptr, h = entry
    owner = ref()
    if owner is None or not getattr(owner, "_h", 0) or numel != values.numel() or lengths.data_ptr() != lengths_ptr:
        return None
    return h
