"""Running a test body on several threads at once (shared by the concurrency tests)."""

from __future__ import annotations

import sys
import threading
from typing import Callable


def run_threads(n: int, body: Callable[[int], None], switch_interval: float | None = 1e-6) -> None:
    """Run body(0..n-1) on n threads started together (switching the GIL every ``switch_interval``
    seconds, so that Python-side races show up; None keeps the default); re-raise the first failure."""
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def wrap(i: int) -> None:
        try:
            start.wait()
            body(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(switch_interval or old)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    if errors:
        raise errors[0]
