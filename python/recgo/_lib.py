"""Loads librecgo.so once and calls its exports with recgo's error convention.

Most exports take ``(..., errbuf, errlen)`` last and return a status code; :func:`call` appends the
buffer and raises the matching :class:`recgo.errors.RecgoError` subclass on failure. The signature of
every export and every constant shared with Go are declared once, in the generated
:mod:`recgo._abi` (``scripts/gen_abi.py`` writes it from the cgo header and capi/abi.go):
``fn("recgo_ebc_forward")`` returns the export with its ctypes signature set from there, and ``const("CodeInvalid")``
reads a constant. Pointer parameters are ``c_void_p``, so call sites pass ``tensor.data_ptr()``
integers, ``None``, ``ctypes.byref(...)`` or ``ctypes.addressof(...)``; ``char*`` parameters take
``bytes``.

Threads: :func:`fn`, :func:`call`, :func:`call_json`, :func:`const` and :func:`new_handle` may be called
from any number of threads at once (the error buffer is per thread; configuring an export twice sets
the same signature).

Fork safety: a process that forks after it loaded the library leaves the child a Go runtime without
its threads. Every call in such a child raises :class:`recgo.errors.ForkError`, also where the call
would first take a lock a parent's thread held at the fork (:func:`fork_safe_lock`); a child of a
process that never loaded the library loads its own and works.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import threading
import weakref
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from . import _abi
from .errors import (AbiError, ForkError, InternalError, InvalidInputError, LibraryNotFoundError, RecgoError,
                     error_for_code)

_ERRLEN = 4096
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_tls = threading.local()
_JSON_FIRST = 1 << 12  # first buffer size of a JSON-out call (grown to the size the export reports)
_loaded_pid = 0  # the pid that loaded the library
_forked = False  # set in a child forked after the library was loaded

# ctypes aliases the call sites use.
P, I64, I32, U64, D, S = (ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_uint64,
                          ctypes.c_double, ctypes.c_char_p)
H = ctypes.c_size_t  # uintptr_t on every platform recgo supports

# C types of the cgo header (see scripts/gen_abi.py SCALARS) and their ctypes.
_SCALARS: dict[str, Any] = {"int": ctypes.c_int, "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64,
                            "uint64_t": ctypes.c_uint64, "uintptr_t": H, "size_t": ctypes.c_size_t,
                            "double": ctypes.c_double}
_ERRPAIR = (("errbuf", "char*"), ("errlen", "size_t"))


def _ctype(t: str) -> Any:
    """The ctypes argtype for a C type of the header (pointers: c_void_p, strings: c_char_p)."""
    if t == "char*":
        return ctypes.c_char_p
    if t.endswith("*"):
        return ctypes.c_void_p
    return _SCALARS[t]


def _accepts(t: str, given: Any) -> bool:
    """Whether a call site's argtype ``given`` agrees with the declared C type ``t``."""
    if t == "char*":
        return given is ctypes.c_char_p
    if t == "void*":
        return given is ctypes.c_void_p
    if t.endswith("*"):
        return given is ctypes.c_void_p or given is ctypes.POINTER(_SCALARS[t[:-1]])
    return given is _SCALARS[t]


def _type_name(t: Any) -> str:
    return getattr(t, "__name__", repr(t))


def declaration(name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``(return type, ((param, C type), ...))`` of export ``name`` from :mod:`recgo._abi`."""
    decl = _abi.EXPORTS.get(name)
    if decl is None:
        raise AbiError(f"{name} is not declared in recgo/_abi.py: if it is a new export, regenerate the "
                       "declarations with `python scripts/gen_abi.py`")
    return decl


def takes_errbuf(name: str) -> bool:
    """Whether export ``name`` follows the ``(..., errbuf, errlen)`` convention."""
    return declaration(name)[1][-2:] == _ERRPAIR


def check_argtypes(name: str, argtypes: Sequence[Any],
                   decl: tuple[str, tuple[tuple[str, str], ...]] | None = None) -> None:
    """Raise :class:`AbiError` when a call site's argtypes (without the error pair) disagree with the
    declaration of ``name`` (or with ``decl``, for tests)."""
    ret, params = decl if decl is not None else declaration(name)
    if params[-2:] == _ERRPAIR:
        params = params[:-2]
    given = list(argtypes)
    if len(given) != len(params):
        raise AbiError(f"{name}: the call site declares {len(given)} arguments, the export takes {len(params)} "
                       f"({', '.join(f'{t} {p}' for p, t in params)})")
    for i, ((p, t), g) in enumerate(zip(params, given)):
        if not _accepts(t, g):
            raise AbiError(f"{name}: argument {i} ({p}) is {t} in the C ABI, but the call site declares "
                           f"{_type_name(g)}")


def library_path() -> Path:
    """Path of the librecgo.so this package loads (``RECGO_LIBRARY`` overrides it)."""
    override = os.environ.get("RECGO_LIBRARY")
    if override:
        return Path(override)
    return Path(__file__).with_name("librecgo.so")


def _fork_error() -> ForkError:
    return ForkError(
        f"recgo cannot run in this process (pid {os.getpid()}): it was forked from pid {_loaded_pid} after that "
        "process loaded librecgo.so, and a forked child keeps none of the Go runtime's threads. Start workers "
        "with the 'spawn' or 'forkserver' start method (e.g. DataLoader(..., multiprocessing_context='spawn') "
        "or multiprocessing.get_context('spawn')), or feed batches with recgo's own readers, which run their "
        "parallel work inside the library"
    )


def _after_fork_in_child() -> None:
    global _forked
    if _lib is not None:
        _forked = True
    for lock in list(_fork_locks):
        lock._at_fork_reinit()  # (what threading does for its own locks at a fork)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_fork_locks: "weakref.WeakSet[Any]" = weakref.WeakSet()  # the locks fork_safe_lock made


def fork_safe_lock(reentrant: bool = False) -> Any:
    """A ``threading.Lock`` (``reentrant=True``: an ``RLock``) for recgo objects, made free again in a
    child forked after the library loaded: a thread of the parent that held it at the fork (inside
    ``next()`` or a forward) does not exist in the child, so the lock never came free there and the
    child's call, and its exit through ``__del__`` / ``close()``, hung; now the call goes on to the
    library and raises :class:`ForkError`. It is the C lock itself, not a wrapper: a Ctrl-C landing in
    a wrapper's Python ``__exit__`` (or between its acquire and return) left it held, and the object
    hung for good."""
    lock = threading.RLock() if reentrant else threading.Lock()
    _fork_locks.add(lock)
    return lock


def lib() -> ctypes.CDLL:
    """The loaded library, loading it on first use (and checking it against :mod:`recgo._abi`)."""
    global _lib, _loaded_pid
    if _forked:
        raise _fork_error()
    if _lib is not None:
        return _lib
    first = False
    with _lock:
        if _lib is None:
            first = True
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
            _check_constants(loaded, path)
            _loaded_pid = os.getpid()
            _lib = loaded
    if first:  # parallel loops on torch's OpenMP team unless RECGO_OPENMP=0 (see recgo._threads)
        from . import _threads

        _threads.configure_default()
    return _lib


def _read_json(f: Any, *args: Any) -> Any:
    """Call a configured JSON-out export (``..., buf, buflen, needed``), growing the buffer on demand."""
    needed = I64(0)
    size = _JSON_FIRST
    while True:
        buf = ctypes.create_string_buffer(size)
        call(f, *args, buf, size, ctypes.byref(needed))
        if needed.value <= size:
            return json.loads(buf.raw[: needed.value])
        size = int(needed.value)


def _check_constants(loaded: ctypes.CDLL, path: Path) -> None:
    """Refuse a library whose constants manifest differs from :data:`recgo._abi.CONSTANTS`."""
    try:
        raw = loaded.recgo_abi_constants
    except AttributeError:
        raise LibraryNotFoundError(f"{path} predates this recgo package (no recgo_abi_constants); rebuild it with "
                                   "`make lib`") from None
    _configure(raw, "recgo_abi_constants")
    got = {c["name"]: int(c["value"]) for c in _read_json(raw)}
    if got != _abi.CONSTANTS:
        diff = sorted(set(got.items()) ^ set(_abi.CONSTANTS.items()))
        raise LibraryNotFoundError(f"{path} was built from other sources than this recgo package: its constants "
                                   f"differ in {diff[:6]}; rebuild it with `make lib` (and regenerate "
                                   "recgo/_abi.py with `python scripts/gen_abi.py` if Go changed)")


def _configure(f: Any, name: str) -> Any:
    ret, params = declaration(name)
    f.argtypes = [_ctype(t) for _, t in params]
    f.restype = None if ret == "void" else _ctype(ret)
    return f


_ready: dict[str, Any] = {}  # export name -> its configured ctypes function
_accepted: dict[str, list[list[Any]]] = {}  # export name -> call-site argtypes lists already checked


def fn(name: str, argtypes: Sequence[Any] | None = None) -> Any:
    """The export ``name`` with its ctypes signature set from :mod:`recgo._abi`.

    ``argtypes`` (without the error buffer pair) is accepted from call sites written before the
    declarations were generated, and checked: :class:`AbiError` when it disagrees with the export.
    """
    if _forked:
        raise _fork_error()
    if argtypes is not None:
        seen = _accepted.get(name)
        if seen is None or argtypes not in seen:  # list equality: a cheap re-check of a known call site
            check_argtypes(name, argtypes)
            _accepted.setdefault(name, []).append(list(argtypes))
    f = _ready.get(name)
    if f is None:
        declaration(name)  # a clear AbiError for an undeclared export, before the library lookup
        f = _ready[name] = _configure(getattr(lib(), name), name)
    return f


def c_path(path: str | os.PathLike[str] | bytes) -> bytes:
    """``path`` encoded for the engine (a C string): a NUL byte in it would end the string there, and
    another file would be read or written, so it is refused as ``open()`` refuses it."""
    b = os.fsencode(path)
    if b"\0" in b:
        raise InvalidInputError(f"the path {os.fsdecode(b)!r} holds a NUL byte")
    return b


def call(f: Any, *args: Any) -> None:
    """Call export ``f`` (from :func:`fn`) and raise the mapped RecgoError on a non-zero status."""
    if _forked:
        raise _fork_error()
    buf = _errbuf()
    code = f(*args, buf, _ERRLEN)
    if code != 0:
        raise error_for_code(code)(buf.value.decode("utf-8", "replace"))


@contextlib.contextmanager
def freed_if_interrupted(made: Sequence[Any]) -> Iterator[None]:
    """Around a call that makes Go objects and writes their handles into the ctypes cells ``made``
    (zero before it) and the code that takes them over: a Ctrl-C during a long call reaches Python as
    the foreign call returns, and Python raises KeyboardInterrupt right there, before the caller owns
    the handles. Then the objects are freed (else they leaked: a batch's or a context's memory per
    interrupt) and the exception goes on. A recgo error means the call made nothing."""
    try:
        yield
    except RecgoError:
        raise
    except BaseException:
        for cell in made:
            h, cell.value = cell.value, 0
            if h:
                try:
                    call(fn("recgo_free"), h)
                except Exception:  # already freed (handles are never reused): nothing leaked
                    pass
        raise


def call_making(f: Any, made: Sequence[Any], *args: Any, then: Callable[[], Any] | None = None) -> Any:
    """:func:`call` for an export that makes Go objects, writing their handles into the ctypes cells
    ``made`` (passed by reference among ``args``), within :func:`freed_if_interrupted`; returns what
    ``then`` returns, called within it too. ``then`` wraps the handles into their owners (a
    :class:`Handle`, or an object holding one): a Ctrl-C can land at any Python call after the export
    returned, so a raw handle carried out of the protected block to be wrapped later was lost when one
    landed in between (a forward context, a feature output, a plan)."""
    with freed_if_interrupted(made):
        call(f, *args)
        return then() if then is not None else None


def call_json(name: str, *args: Any) -> Any:
    """Call a JSON-out export ``name(*args, buf, buflen, needed, errbuf, errlen)`` and parse its document,
    retrying with the size the export reports when the first buffer was short."""
    return _read_json(fn(name), *args)


def const(name: str) -> int:
    """The value of the C ABI constant ``name`` (see capi/abi.go; no library load needed)."""
    try:
        return _abi.CONSTANTS[name]
    except KeyError:
        raise AbiError(f"no C ABI constant {name!r} in recgo/_abi.py (add it to capi/abi.go and run "
                       "`python scripts/gen_abi.py`)") from None


def _errbuf() -> ctypes.Array:
    buf = getattr(_tls, "buf", None)
    if buf is None:
        buf = _tls.buf = ctypes.create_string_buffer(_ERRLEN)
    return buf


def version() -> str:
    """Version string of the loaded library."""
    buf = ctypes.create_string_buffer(64)
    fn("recgo_version")(buf, 64)
    return buf.value.decode()


def num_threads() -> int:
    """Number of goroutines recgo's parallel kernels use off the OpenMP team: the machine's cores
    unless :func:`set_num_threads` or ``GOMAXPROCS`` in the environment said otherwise. Go's
    GOMAXPROCS is one more than this (a spare P, so a thread calling into Go never waits for one)
    unless the environment set it."""
    return int(fn("recgo_num_threads")())


def gc_percent() -> int:
    """The GOGC the library's garbage-collector pacing last set (100 until the live Go heap passes
    the headroom, lower above it), or -1 when pacing is off because the environment sets ``GOGC`` or
    ``RECGO_GC_HEADROOM=0``. See docs/threads.md, "Go's garbage collector"."""
    return int(fn("recgo_gc_percent")())


def sysmon_thread() -> int:
    """The thread ID of Go's sysmon, which the library set to the ``SCHED_BATCH`` policy at load so
    that its wakeups wait for a free core instead of preempting the step's threads, or 0 when it set
    none (``RECGO_SYSMON_BATCH=0``, a process already under ``SCHED_BATCH``, not Linux, or no thread
    stood out). See docs/threads.md."""
    return int(fn("recgo_sysmon_thread")())


def set_num_threads(n: int) -> None:
    """Set how many goroutines recgo's parallel kernels use off the OpenMP team (Go's GOMAXPROCS
    becomes ``n + 1``: the spare P runs none of the kernels' work, it keeps Go's scheduler from
    taking the P of a thread that calls into Go from Python or OpenMP between its calls).

    Several processes on one machine (ranks of ``torch.distributed``, DataLoader workers that use
    recgo) should each take their share of its cores, as with :func:`torch.set_num_threads`: with
    every rank using all the cores, their loops compete and each runs slower. Loops called from the
    main thread while the OpenMP team is in use follow :func:`torch.set_num_threads` instead. May be
    called at any time, from any thread; loops already running keep their workers.

    Raises:
        InvalidInputError: ``n`` is not an integer in ``[1, max(1024, 8 × the machine's CPUs)]`` (more
            goroutines only slow every parallel loop down, and Go's per-thread structures take
            gigabytes at 10^5).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidInputError(f"set_num_threads: the number of threads must be an integer of at least 1, got {n!r}")
    clamped = min(n, 1 << 62)  # the engine's argument holds no more; it names the bound it refuses
    try:
        call(fn("recgo_set_num_threads"), clamped)
    except InvalidInputError as exc:
        raise InvalidInputError(str(exc).replace(f"got {clamped}", f"got {n}")) from None


class ByteFlags:
    """Per-table flags as the engine takes them: one byte each, 1 where set (``args``: the bytes'
    address and count, or ``(None, 0)`` for no flags). Keep the object until the call returns: it
    owns the bytes."""

    __slots__ = ("_buf",)

    def __init__(self, flags: Sequence[bool] | None) -> None:
        self._buf = None if flags is None else (ctypes.c_uint8 * len(flags))(*map(int, flags))

    @property
    def args(self) -> tuple[int | None, int]:
        """(address, count) for the export's pointer and length arguments."""
        return (None, 0) if self._buf is None else (ctypes.addressof(self._buf), len(self._buf))


_capsule_api: tuple[Any, Any, int] | None = None  # (PyCapsule_New, PyCapsule_SetDestructor, destructor)


def _capsules() -> tuple[Any, Any, int]:
    """Python's PyCapsule_New and PyCapsule_SetDestructor, and the engine's C destructor that frees
    the handle a capsule holds (``recgo_capsule_destructor``, internal/capsule)."""
    global _capsule_api
    api = _capsule_api
    if api is None:
        py = ctypes.pythonapi  # a PyDLL: the calls keep the GIL, so no signal is handled inside them
        new, disarm = py.PyCapsule_New, py.PyCapsule_SetDestructor
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        disarm.restype, disarm.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_void_p]
        out = H(0)
        call(fn("recgo_capsule_destructor"), ctypes.cast(py.PyCapsule_GetPointer, ctypes.c_void_p).value,
             ctypes.byref(out))
        api = _capsule_api = (new, disarm, out.value)
    return api


class Handle:
    """Owns one Go object handle and frees it exactly once (explicitly or when collected).

    Freeing when collected is done by a capsule's C destructor, not by ``__del__``: a Ctrl-C pending
    as the object is collected is raised at the first instruction of any Python finalizer, which then
    never freed the handle (each interrupt leaked the memory of a batch or a forward context) and
    swallowed the KeyboardInterrupt. The destructor runs no Python code, so the handle is freed and
    the interrupt reaches the caller's next instruction (``tests/test_interrupts.py``). Handles may be
    collected on any thread.
    """

    __slots__ = ("_h", "_owner", "__weakref__")

    def __init__(self, h: int, armed: bool = True) -> None:
        """``armed=False`` holds the handle without freeing it when collected until :meth:`arm`: a
        Ctrl-C raised before the new Handle is stored drops it without freeing what it names."""
        if not h:
            raise InternalError("the engine returned a null handle")
        new, _, destructor = _capsules()
        self._h = int(h)
        self._owner = new(self._h, None, destructor if armed else None)

    def arm(self) -> None:
        """Free the handle when collected from now on (see ``armed``)."""
        _, set_destructor, destructor = _capsules()
        set_destructor(self._owner, destructor)

    @property
    def value(self) -> int:
        """The raw handle; raises :class:`InvalidInputError` if already freed (the object was closed)."""
        if not self._h:
            raise InvalidInputError("this recgo object was closed (close() or free() released its engine "
                                    "memory): build a new one")
        return self._h

    def free(self) -> None:
        """Release the Go object and its memory now. Safe to call twice; a no-op in a forked child
        (the object belongs to the parent's runtime)."""
        h, self._h = self._h, 0
        if h and _lib is not None and not _forked:
            call(fn("recgo_free"), h)
            # Disarmed only once the free ran: a Ctrl-C raised at any call before it (fn, call, the
            # error buffer's) or as it returns leaves the capsule armed, to free the handle when
            # collected or to find it not live (handles are never reused). Disarming in a finally
            # lost the handle whenever the interrupt came before the free.
            self._disarm()

    def disown(self) -> None:
        """Forget the handle without freeing it (the engine took the object back and frees it itself)."""
        self._h = 0
        self._disarm()

    def _disarm(self) -> None:
        _capsules()[1](self._owner, None)

    def __reduce__(self) -> Any:
        # A handle number is meaningful only in this process, for this one object: a copy would share
        # (and double-free) it, an unpickled one could name an unrelated object.
        raise TypeError("a recgo engine handle cannot be copied or pickled; copy the module that owns it "
                        "(recgo modules rebuild their engine state)")


def new_handle(export: str, *args: Any) -> Handle:
    """Call a constructor export whose last argument before the error pair is ``uintptr_t *out``.

    The older form ``new_handle(export, argtypes, *args)`` (argtypes without ``out``) is accepted and
    checked like :func:`fn`'s.
    """
    if args and isinstance(args[0], list):
        f = fn(export, [*args[0], ctypes.POINTER(H)])
        args = args[1:]
    else:
        f = fn(export)
    out = H(0)
    with freed_if_interrupted([out]):  # also if interrupted before the Handle owns it
        call(f, *args, ctypes.byref(out))
        return Handle(out.value)
