"""Reused memory for the collections' forward outputs and backward gradient buffers.

Fresh memory costs a page fault per 4 KiB on its first write (milliseconds for a large output), so a
collection hands out the memory of an earlier output again once nothing references it. The caller
only ever gets tensors on a base buffer's storage (never the base itself), so the base's storage use
count proves when every one of them is gone. A Python ``UntypedStorage`` object of an output does not
raise that count (torch's storage object borrows its storage once tensors share it): it is seen by
its Python reference count instead (:func:`_storage_free`). Outputs are built with ``set_`` rather
than as views: one op each, and autograd lets a Function's caller modify a non-view output in place.

Concurrency: :class:`OutputPool` is safe for concurrent forwards (the check and the hand-out are one
step under its lock, so two threads never share a base); a buffer taken with
:meth:`OutputPool.take_flat` belongs to its caller until :meth:`OutputPool.give_back`.
"""

from __future__ import annotations

import sys

import torch

from .._lib import fork_safe_lock


def _no_use_count(t: torch.Tensor) -> int:
    return -1  # unknown: never reuse


#: The number of tensors on ``t``'s storage, plus one for the probe's own temporary reference.
storage_use_count = (
    (lambda t: torch._C._storage_Use_Count(t.untyped_storage()._cdata))
    if hasattr(torch._C, "_storage_Use_Count") else _no_use_count
)


def _storage_refs(base: torch.Tensor) -> int:
    """The Python references of ``base``'s storage object, this probe's two included."""
    st = base.untyped_storage()
    return sys.getrefcount(st)


def _calibrate() -> int | None:
    """The storage object's reference count when nothing outside holds it, if holding it raises the
    count by one as expected in this torch and Python (else None: that check is left out)."""
    base = torch.empty(1)
    free = _storage_refs(base)
    held = base.untyped_storage()
    busy = _storage_refs(base)
    del held
    return free if busy == free + 1 and _storage_refs(base) == free else None


_FREE_REFS = _calibrate()


def _calibrate_uses() -> int | None:
    """A base's storage use count when no output of it lives, if an output built as :class:`OutputPool`
    builds them raises it by one and dropping it lowers it again (else None: nothing is reused). It
    is 2 on torch 2.12–2.14 and was 1 on 2.7 and older, where a fixed 2 made the pool hand out memory a
    live output still used."""
    base = torch.empty(4)
    free = storage_use_count(base)
    out = torch.empty(0, dtype=torch.float32).set_(base.untyped_storage(), 0, (2, 2), (2, 1))
    busy = storage_use_count(base)
    del out
    return free if free > 0 and busy == free + 1 and storage_use_count(base) == free else None


_FREE_USES = _calibrate_uses()


def _storage_free(base: torch.Tensor) -> bool:
    """Whether no output of ``base`` is referenced: no tensor (the use count) and no Python storage
    object outside the pool (its reference count)."""
    if _FREE_USES is None or storage_use_count(base) != _FREE_USES:
        return False
    return _FREE_REFS is None or _storage_refs(base) <= _FREE_REFS


class OutputPool:
    """Flat float32 base buffers, each lent out as the front of one ``[n, d]`` output at a time.

    Bases are sized with a quarter of headroom (sequence batches vary in length); the pool keeps two
    per output of the last forward."""

    def __init__(self) -> None:
        self._bases: list[torch.Tensor] = []
        self._free_flat: list[torch.Tensor] = []  # buffers of take_flat given back
        self._lock = fork_safe_lock()  # a forked child raises instead of waiting

    def take(self, shapes: list[tuple[int, int]]) -> list[torch.Tensor]:
        """One float32 ``[n, d]`` output per shape, on memory nothing else references (contents
        undefined)."""
        with self._lock:
            out, taken, fresh = [], set(), []
            for n, d in shapes:
                for base in self._bases:
                    if id(base) not in taken and base.numel() >= n * d and _storage_free(base):
                        taken.add(id(base))
                        break
                else:
                    base = torch.empty(n * d + n * d // 4, dtype=torch.float32)
                    fresh.append(base)
                out.append(torch.empty(0, dtype=torch.float32).set_(base.untyped_storage(), 0, (n, d), (d, 1)))
            if storage_use_count is not _no_use_count:  # newest first: those of a pending output may go
                self._bases = (fresh + self._bases)[:2 * max(1, len(shapes))]
            return out

    def take_flat(self, n: int) -> torch.Tensor:
        """A flat float32 buffer of at least ``n`` values, the caller's until it hands it back with
        :meth:`give_back` (concurrent callers each get their own)."""
        with self._lock:
            for i, base in enumerate(self._free_flat):
                if base.numel() >= n:
                    return self._free_flat.pop(i)
        return torch.empty(n + n // 4, dtype=torch.float32)

    def give_back(self, base: torch.Tensor) -> None:
        """Return a :meth:`take_flat` buffer (nothing may use it any more); the pool keeps two."""
        with self._lock:
            self._free_flat.append(base)
            del self._free_flat[:-2]
