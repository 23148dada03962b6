"""Where the engine's parallel loops run: on torch's OpenMP threads (the default) or on Go's own.

torch's intra-op pool is OpenMP, and its worker threads spin for a while after each parallel op. On a
machine with few cores those spinning threads took the cores recgo's Go workers needed, and the same
script's step time varied from run to run by an order of magnitude. So, when the process has an OpenMP
runtime loaded (torch's bundled libgomp), recgo runs its parallel loops on that runtime's thread team
from the main thread: a worker that is spinning picks the work up at once and the two pools never
compete for a core. Calls from other threads and recgo's own pipeline goroutines keep Go's threads.

``RECGO_OPENMP=0`` in the environment (or :func:`use_openmp(False) <use_openmp>`) turns this off.
"""

from __future__ import annotations

import os

from . import _lib


def openmp_runtime() -> str | None:
    """Path of the OpenMP runtime (libgomp) mapped into this process, or None."""
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                path = line.rstrip("\n").split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
                if "libgomp" in os.path.basename(path) and path.startswith("/"):
                    return path
    except OSError:
        return None
    return None


def use_openmp(enable: bool = True) -> bool:
    """Run the engine's parallel loops on the loaded OpenMP runtime's threads (``True``) or on Go's
    (``False``). Returns whether OpenMP is now in use (False when no OpenMP runtime is loaded)."""
    path = openmp_runtime() if enable else None
    if enable and path is None:
        return False
    f = _lib.fn("recgo_use_openmp")
    _lib.call(f, (path or "").encode(), 1 if enable else 0)
    return enable


def configure_default() -> bool:
    """Apply the default at library load: OpenMP threads unless ``RECGO_OPENMP=0``."""
    if os.environ.get("RECGO_OPENMP", "1").strip() in ("0", "false", "no", "off"):
        return False
    try:
        return use_openmp(True)
    except Exception:  # never let this optimisation stop the library from loading
        return False
