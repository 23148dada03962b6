"""Where the engine's parallel loops run: on torch's OpenMP threads (the default) or on Go's own.

torch's intra-op pool is OpenMP, and its worker threads spin for a while after each parallel op. On a
machine with few cores those spinning threads took the cores recgo's Go workers needed, and the same
script's step time varied from run to run by an order of magnitude. So, when the process has an OpenMP
runtime loaded (torch's bundled libgomp), recgo runs its parallel loops on that runtime's thread team
from the main thread: a worker that is spinning picks the work up at once and the two pools never
compete for a core. Calls from other threads and recgo's own pipeline goroutines keep Go's threads.

``RECGO_OPENMP=0`` in the environment (or :func:`use_openmp(False) <use_openmp>`) turns this off.

Go's workers default to every core of the machine. Under ``torchrun`` (``LOCAL_WORLD_SIZE`` > 1 in the
environment) each rank takes its share of the cores instead, unless ``GOMAXPROCS`` is set: ranks that
each ran a worker per core competed for them and every rank's sharded step got slower.
"""

from __future__ import annotations

import os

from . import _lib
from .errors import InvalidInputError


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


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cores_per_rank(ranks: int) -> int:
    """Each of ``ranks`` processes' share of :func:`machine_cores` (at least 1)."""
    return max(1, machine_cores() // max(1, ranks))


def share_of_cores(environ: dict[str, str] | None = None) -> int | None:
    """This rank's share of the machine's cores when ``torchrun`` started several ranks here and
    ``GOMAXPROCS`` is unset; None otherwise."""
    env = os.environ if environ is None else environ
    if env.get("GOMAXPROCS"):
        return None
    try:
        local = int(env.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        return None
    if local <= 1:
        return None
    return cores_per_rank(local)


def share_cores(ranks: int | None = None) -> int:
    """Size torch's intra-op threads and recgo's Go workers to this process's share of the machine when
    ``ranks`` processes (default: torchrun's ``LOCAL_WORLD_SIZE``, else 1) run on it; returns that
    share. Call it in each rank before its first step: ranks that each run a worker per core compete
    for the cores and every rank's step gets slower.

    Raises:
        InvalidInputError: ``ranks`` is not an integer of at least 1.
    """
    import torch

    if ranks is None:
        try:
            ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        except ValueError:
            ranks = 1
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise InvalidInputError(f"share_cores: the number of ranks must be an integer of at least 1, got {ranks!r}")
    n = cores_per_rank(ranks)
    torch.set_num_threads(n)
    _lib.set_num_threads(n)
    return n


def configure_default() -> bool:
    """Apply the defaults at library load: Go's workers sized by :func:`share_of_cores`, and OpenMP
    threads unless ``RECGO_OPENMP=0``. Returns whether OpenMP is in use."""
    share = share_of_cores()
    if share is not None:
        try:
            _lib.set_num_threads(share)
        except Exception:  # an optimisation: never stop the library from loading
            pass
    if os.environ.get("RECGO_OPENMP", "1").strip() in ("0", "false", "no", "off"):
        return False
    try:
        return use_openmp(True)
    except Exception:  # never let this optimisation stop the library from loading
        return False
