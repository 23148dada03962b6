"""Exceptions raised by recgo.

Every failure inside the Go engine reaches Python as a :class:`RecgoError` subclass chosen by the
status code the C ABI returned, with the engine's message (which names the argument and the problem).
The subclasses also derive from the matching built-in exception, so ``except ValueError`` still works.
"""

from __future__ import annotations

from . import _abi


class RecgoError(Exception):
    """Base class of every error recgo raises."""


class InvalidInputError(RecgoError, ValueError):
    """An argument is malformed: wrong dtype, device or shape, out-of-range IDs, a bad config."""


class StateDictKeysError(InvalidInputError, RuntimeError):
    """A strict ``load_state_dict`` found missing or unexpected keys (a ``RuntimeError`` too, as torch's
    error for them is); raised before any entry is loaded."""


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
    """librecgo.so is missing, cannot be loaded on this platform, or was built from other sources."""


class AbiError(RecgoError, TypeError):
    """A call site disagrees with the C ABI declared in recgo/_abi.py (a bug in recgo)."""


class ForkError(RecgoError, RuntimeError):
    """recgo was used in a process forked after its parent loaded the library (use 'spawn' workers)."""


class MissingExtraError(RecgoError, ImportError):
    """An optional dependency is not installed; the message names the ``recgo[extra]`` that provides it."""


def _code(name: str) -> int:
    return _abi.CONSTANTS[name]


# Status codes of internal/errs (Go, through recgo/_abi.py) mapped to the exception raised for them.
CODE_TO_ERROR: dict[int, type[RecgoError]] = {
    _code("CodeInvalid"): InvalidInputError,
    _code("CodeNotFound"): NotFoundError,
    _code("CodeSolver"): SolverError,
    _code("CodeIO"): RecgoIOError,
    _code("CodeCapacity"): CapacityError,
    _code("CodeInternal"): InternalError,
}


def error_for_code(code: int) -> type[RecgoError]:
    """The exception class for a non-zero status code (InternalError for a code recgo does not know)."""
    return CODE_TO_ERROR.get(code, InternalError)


def missing_extra(module: str, extra: str, purpose: str) -> MissingExtraError:
    """The one-line error for optional ``module`` missing: what needed it and the extra that installs it."""
    return MissingExtraError(f"{purpose} needs {module}, which is not installed: pip install 'recgo[{extra}]'")


def import_failure(exc: BaseException) -> str:
    """``does not import on torch <version> (<type>: <first line>)``: why an installed optional module
    cannot be used, in one line (``exc`` is what importing it raised)."""
    import torch

    first = (str(exc).splitlines() or [""])[0]
    return f"does not import on torch {torch.__version__} ({type(exc).__name__}: {first})"


def unusable_extra(module: str, extra: str, purpose: str, exc: BaseException) -> MissingExtraError:
    """The one-line error for optional ``module`` installed but failing to import: typically a compiled
    dependency built for another torch (fbgemm-gpu under torchrec raises OSError on an undefined symbol)."""
    return MissingExtraError(
        f"{purpose} needs {module}, which is installed but {import_failure(exc)}: its compiled parts (for torchrec, fbgemm-gpu) must be the release "
        f"built for this torch; reinstall 'recgo[{extra}]' with matching versions, or the torch they were built for")


def require_extra(module: str, extra: str, purpose: str) -> object:
    """Import optional ``module`` or raise :class:`MissingExtraError` naming ``pip install 'recgo[extra]'``
    (or, when it is installed but its import fails, the error that made it fail)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise missing_extra(module, extra, purpose) from exc
    except Exception as exc:  # installed but broken: OSError/RuntimeError from a .so built for another torch
        raise unusable_extra(module, extra, purpose, exc) from exc
