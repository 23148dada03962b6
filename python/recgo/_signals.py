"""SIGTERM as a KeyboardInterrupt, for the command line's long jobs.

A job scheduler stops a process with SIGTERM, whose default action ends it at once: a checkpoint
being written stays behind as a temporary file, and spawned ranks train on as orphans. Inside
:func:`terminate_as_interrupt` SIGTERM raises KeyboardInterrupt instead, so the usual Ctrl-C
clean-up (remove the temporary file, stop the ranks, print the resume hint) runs.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt for the duration (on the main thread; elsewhere signals cannot
    be handled and nothing changes); the previous handler is restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
