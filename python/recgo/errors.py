"""Exceptions raised by recgo.

Every failure inside the Go engine reaches Python as a :class:`RecgoError` subclass chosen by the
status code the C ABI returned, with the engine's message (which names the argument and the problem).
The subclasses also derive from the matching built-in exception, so ``except ValueError`` still works.
"""

from __future__ import annotations


class RecgoError(Exception):
    """Base class of every error recgo raises."""


class InvalidInputError(RecgoError, ValueError):
    """An argument is malformed: wrong dtype, device or shape, out-of-range IDs, a bad config."""


class NotFoundError(RecgoError, KeyError):
    """Something named does not exist: an unknown feature, table or handle."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class SolverError(RecgoError, RuntimeError):
    """The placement solver failed: infeasible, timed out without a solution, or HiGHS errored."""


class RecgoIOError(RecgoError, OSError):
    """A file could not be read or written, or its contents are malformed."""


class CapacityError(RecgoError, MemoryError):
    """A request does not fit the memory or budget it was given; the message says by how much."""


class InternalError(RecgoError, RuntimeError):
    """A bug in recgo (a recovered Go panic). The process is intact; please report the message."""


class LibraryNotFoundError(RecgoError, ImportError):
    """librecgo.so is missing or cannot be loaded on this platform."""


# Status codes of internal/errs (Go) mapped to the exception raised for them.
CODE_TO_ERROR: dict[int, type[RecgoError]] = {
    1: InvalidInputError,
    2: NotFoundError,
    3: SolverError,
    4: RecgoIOError,
    5: CapacityError,
    99: InternalError,
}
