"""Loads librecgo.so once and calls its exports with recgo's error convention.

Every export takes ``(..., errbuf, errlen)`` last and returns a status code; :func:`call` appends the
buffer and raises the matching :class:`recgo.errors.RecgoError` subclass on failure. Pointers cross
as ``c_void_p`` integers from ``tensor.data_ptr()`` (cheaper than ndpointer argtypes).
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading
from pathlib import Path
from typing import Any

from .errors import CODE_TO_ERROR, InternalError, LibraryNotFoundError

_ERRLEN = 4096
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_tls = threading.local()

# (name, argtypes) of every export; the error buffer pair is appended for those that take one.
P, I64, I32, U64, D, S = (ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_uint64,
                          ctypes.c_double, ctypes.c_char_p)
H = ctypes.c_size_t  # uintptr_t on every platform recgo supports


def library_path() -> Path:
    """Path of the librecgo.so this package loads (``RECGO_LIBRARY`` overrides it)."""
    override = os.environ.get("RECGO_LIBRARY")
    if override:
        return Path(override)
    return Path(__file__).with_name("librecgo.so")


def lib() -> ctypes.CDLL:
    """The loaded library, loading it on first use."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            path = library_path()
            if not path.exists():
                raise LibraryNotFoundError(
                    f"librecgo.so not found at {path}. Build it with `make lib` in a source checkout, "
                    "or reinstall recgo with `pip install` (which compiles it with Go)."
                )
            try:
                loaded = ctypes.CDLL(str(path))
            except OSError as exc:
                raise LibraryNotFoundError(
                    f"cannot load {path} on {platform.system()}/{platform.machine()}: {exc}. "
                    "It was probably built for another platform; rebuild it here with `make lib`."
                ) from exc
            loaded.recgo_version.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
            loaded.recgo_version.restype = ctypes.c_int
            loaded.recgo_num_threads.restype = ctypes.c_int
            _lib = loaded
    return _lib


def _errbuf() -> ctypes.Array:
    buf = getattr(_tls, "buf", None)
    if buf is None:
        buf = _tls.buf = ctypes.create_string_buffer(_ERRLEN)
    return buf


def fn(name: str, argtypes: list[Any]) -> Any:
    """The export ``name`` with its argtypes set (error buffer pair appended) and an int restype."""
    f = getattr(lib(), name)
    if getattr(f, "_recgo_ready", False) is False:
        f.argtypes = list(argtypes) + [ctypes.c_char_p, ctypes.c_size_t]
        f.restype = ctypes.c_int
        f._recgo_ready = True
    return f


def call(f: Any, *args: Any) -> None:
    """Call export ``f`` (from :func:`fn`) and raise the mapped RecgoError on a non-zero status."""
    buf = _errbuf()
    code = f(*args, buf, _ERRLEN)
    if code != 0:
        raise CODE_TO_ERROR.get(code, InternalError)(buf.value.decode("utf-8", "replace"))


def version() -> str:
    """Version string of the loaded library."""
    buf = ctypes.create_string_buffer(64)
    lib().recgo_version(buf, 64)
    return buf.value.decode()


def num_threads() -> int:
    """Number of goroutines recgo's parallel kernels use (GOMAXPROCS, read once at load)."""
    return int(lib().recgo_num_threads())


class Handle:
    """Owns one Go object handle and frees it exactly once (explicitly or when collected)."""

    __slots__ = ("_h", "__weakref__")

    def __init__(self, h: int) -> None:
        if not h:
            raise InternalError("the engine returned a null handle")
        self._h = int(h)

    @property
    def value(self) -> int:
        """The raw handle; raises if already freed."""
        if not self._h:
            raise InternalError("use of a freed recgo object")
        return self._h

    def free(self) -> None:
        """Release the Go object and its memory now. Safe to call twice."""
        h, self._h = self._h, 0
        if h and _lib is not None:
            call(fn("recgo_free", [H]), h)

    def __reduce__(self) -> Any:
        # A handle number is meaningful only in this process, for this one object: a copy would share
        # (and double-free) it, an unpickled one could name an unrelated object.
        raise TypeError("a recgo engine handle cannot be copied or pickled; copy the module that owns it "
                        "(recgo modules rebuild their engine state)")

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # interpreter shutdown: nothing useful to do
            pass


def new_handle(export: str, argtypes: list[Any], *args: Any) -> Handle:
    """Call a constructor export whose last argument before the error pair is ``uintptr_t *out``."""
    out = H(0)
    call(fn(export, list(argtypes) + [ctypes.POINTER(H)]), *args, ctypes.byref(out))
    return Handle(out.value)
