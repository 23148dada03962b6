"""Engine counters for leak checks (tests, debugging): nothing here is needed to use recgo.

Every Go object Python holds is a handle (:class:`recgo._lib.Handle`) freed explicitly or when its
owner is collected; :func:`live_handles` counts the ones not freed yet. :func:`memory_in_use` reports
the Go heap's live bytes after a full collection and the bytes the engine keeps mapped outside the Go
heap (tables, optimizer state, batch and output buffers). Goroutines: :func:`recgo.pipeline.goroutines`.

Python keeps an object alive as long as a reference cycle holds it, until :func:`gc.collect` runs;
call it before reading the counters.
"""

from __future__ import annotations

import ctypes

from . import _lib


def live_handles() -> int:
    """The number of engine handles made and not freed yet (explicitly, by a collected owner's capsule,
    or by the export that consumed them)."""
    out = ctypes.c_int64(0)
    _lib.call(_lib.fn("recgo_live_handles"), ctypes.byref(out))
    return int(out.value)


def memory_in_use() -> tuple[int, int]:
    """(live Go heap bytes, bytes mapped outside the Go heap), read after a full Go garbage collection
    (which stops the world: not for a training loop's hot path). Pools keep a bounded number of freed
    buffers for reuse, so the counts settle after a warm-up rather than returning to zero."""
    out = (ctypes.c_int64 * 2)()
    _lib.call(_lib.fn("recgo_memory_in_use"), ctypes.addressof(out))
    return int(out[0]), int(out[1])
