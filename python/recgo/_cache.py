"""A dict that keeps only its most recent entries, for the per-key-order caches of the modules."""

from __future__ import annotations

import threading
from typing import Any


class KeyCache(dict):  # type: ignore[type-arg]
    """A dict of at most ``limit`` entries: adding one more drops the oldest. The modules cache what
    they derive from a batch's key order; batches whose keys come in ever new orders or subsets
    (raw batches carrying only the features present) grew those caches by about 1.5 KB per order,
    without bound."""

    def __init__(self, limit: int = 256) -> None:
        super().__init__()
        self.limit = limit
        self._lock = threading.Lock()  # forwards may run concurrently; reads need none (a dict read is atomic)

    def __setitem__(self, key: Any, value: Any) -> None:
        with self._lock:
            if key not in self and len(self) >= self.limit:
                del self[next(iter(self))]
            super().__setitem__(key, value)

    def __reduce__(self) -> Any:  # copies and pickles keep the limit (and start empty: it is a cache)
        return (type(self), (self.limit,))
