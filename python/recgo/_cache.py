"""A dict that keeps only its most recent entries, for the per-key-order caches of the modules."""

from __future__ import annotations

from typing import Any


class KeyCache(dict):  # type: ignore[type-arg]
    """A dict of at most ``limit`` entries: adding one more drops the oldest. The modules cache what
    they derive from a batch's key order; batches whose keys come in ever new orders or subsets
    (raw batches carrying only the features present) grew those caches by about 1.5 KB per order,
    without bound."""

    def __init__(self, limit: int = 256) -> None:
        super().__init__()
        self.limit = limit

    def __setitem__(self, key: Any, value: Any) -> None:
        # No lock (torch.compile traces through here, and cannot trace one): concurrent forwards may
        # race to evict, so the oldest key may be gone or the dict changing under the iteration, and
        # the cache may pass its limit by a key per thread for a moment. An insert evicts until the
        # cache is below its limit again (a few tries): one eviction per insert, skipped whenever a
        # race raised, kept every such excess for good (9 entries of a 4-entry cache after 4
        # threads' inserts).
        if key not in self:
            for _ in range(8):
                if len(self) < self.limit:
                    break
                try:
                    self.pop(next(iter(self)), None)
                except StopIteration:  # emptied by another thread
                    break
                except RuntimeError:  # changed size under the iteration: try again
                    pass
        super().__setitem__(key, value)

    def __reduce__(self) -> Any:  # copies and pickles keep the limit (and start empty: it is a cache)
        return (type(self), (self.limit,))
