"""Checksummed checkpoints of state dicts (``EmbeddingBagCollection.save``/``load``).

The file is a ``torch.save`` of an envelope: format name and version, per entry its key, dtype,
shape and the CRC-32 of its bytes, a CRC-32 of that metadata, and the state dict itself.
:func:`load_checkpoint` verifies all of it, so a damaged file is refused (``RecgoIOError`` naming the
file and the part) instead of loading different values; CRC-32 detects every single-bit error.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import socket
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import torch

from ..errors import InvalidInputError, RecgoIOError

_FORMAT = "recgo-checkpoint"
_VERSION = 1


def _tensor_crc(t: torch.Tensor) -> int:
    """CRC-32 of a tensor's bytes (C order)."""
    t = t.detach().contiguous()
    n = t.numel() * t.element_size()
    if n == 0:
        return 0
    return zlib.crc32((ctypes.c_char * n).from_address(t.data_ptr()))


def _describe(state: dict[str, torch.Tensor]) -> list[list[Any]]:
    """Per entry: key, dtype, shape and CRC-32 of its bytes (the checkpoint's metadata)."""
    return [[k, str(v.dtype), list(v.shape), _tensor_crc(v)] for k, v in state.items()]


def _meta_crc(entries: Any) -> int:
    return zlib.crc32(json.dumps([_FORMAT, _VERSION, entries], separators=(",", ":")).encode())


def snapshot(module: Any) -> dict[str, Any]:
    """``module.state_dict()`` (a materialised pooled collection's) with every entry that views its
    engine memory (weights, optimizer state, step counters) replaced by a copy, and its dynamic-ID
    tables' entries read from snapshots, all taken in one section while no pass runs on the collection
    (the engine's lock, which fused updates and dynamic tables' training forwards hold): one
    consistent step of every table, whatever other threads train meanwhile. The views read a moving
    table, so a file's checksums disagreed with the bytes written after them; and each dynamic table
    was read on its own, so one file held several steps (tables at different clocks, step counters
    past both)."""
    from .. import _lib, dynamic

    fixed = [i for i, c in enumerate(module._configs) if c.dynamic is None]
    dyn = [i for i, c in enumerate(module._configs) if c.dynamic is not None]
    # a dynamic table's rows and state travel from its snapshot (copying its views would commit the
    # whole reserved bound): only its step counter is copied
    engine = [t for i in fixed for t in module._storage[i]] + [module._storage[i][2] for i in dyn]
    copies: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # engine address -> (engine tensor, buffer)
    for t in engine:
        if t.numel():
            extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))  # elements the tensor spans
            copies.setdefault(t.data_ptr(), (t, torch.empty(extent, dtype=t.dtype)))
    pairs = list(copies.values())
    n = len(pairs)
    srcs = (ctypes.c_void_p * n)(*[t.data_ptr() for t, _ in pairs])
    dsts = (ctypes.c_void_p * n)(*[b.data_ptr() for _, b in pairs])
    sizes = (ctypes.c_int64 * n)(*[b.numel() * b.element_size() for _, b in pairs])
    tables = (ctypes.c_int64 * len(dyn))(*dyn)
    raw = (ctypes.c_size_t * len(dyn))()
    # each element as a cell of its own (same memory), as freed_if_interrupted takes them
    cells = [ctypes.c_size_t.from_buffer(raw, k * ctypes.sizeof(ctypes.c_size_t)) for k in range(len(dyn))]
    with _lib.freed_if_interrupted(cells):  # until the Handles own the snapshots
        _lib.call(_lib.fn("recgo_ebc_snapshot_exclusive"), module._handle.value, n, srcs, dsts, sizes,
                  len(dyn), tables, raw)
        snaps = {i: _lib.Handle(raw[k]) for k, i in enumerate(dyn)}
        for cell in cells:
            cell.value = 0
    try:
        with dynamic.pinned(module, snaps):
            state = module.state_dict()
    finally:
        for h in snaps.values():
            h.free()
    snap = {addr: b.as_strided(t.shape, t.stride()).contiguous() for addr, (t, b) in copies.items()}
    return {k: snap[v.data_ptr()] if isinstance(v, torch.Tensor) and v.numel() and v.data_ptr() in snap else v
            for k, v in state.items()}


def state_copy(module: Any, owned: bool) -> dict[str, Any]:
    """What a copy or a pickle of a materialised pooled collection loads: :func:`snapshot`, one step of
    every table also while other threads train (copies read the live tables, a dynamic table at a
    time, and held tables of different steps); with ``owned`` no tensor is the module's own."""
    state = snapshot(module)
    if owned:  # what snapshot left as it was: the module's own tensors that are not engine memory
        mine = {t.data_ptr() for t in (*module.parameters(), *module.buffers()) if t.numel()}
        state = {k: v.detach().clone() if isinstance(v, torch.Tensor) and v.numel() and v.data_ptr() in mine else v
                 for k, v in state.items()}
    return state


def save_checkpoint(state: dict[str, torch.Tensor], path: str | os.PathLike[str]) -> None:
    """Write a state dict (str → tensor) to ``path`` with per-tensor and metadata CRC-32s (read it
    back with :func:`load_checkpoint`). The file is written with ``torch.save`` to a temporary file in
    the same folder, fsynced and renamed over ``path``: ``path`` is never half-written."""
    for k, v in state.items():
        if not isinstance(k, str) or not isinstance(v, torch.Tensor):
            raise InvalidInputError(f"save_checkpoint: entry {k!r} is not a str → tensor pair")
    entries = _describe(state)
    _save_atomic({"format": _FORMAT, "version": _VERSION, "entries": entries, "meta_crc": _meta_crc(entries),
                  "state_dict": dict(state)}, path)


def _cause(exc: BaseException) -> str:
    """One line of why torch.load failed: for a weights-only unpickling failure the unpickler's own
    reason (torch's message around it advises loading with weights_only=False), else the first line."""
    text = str(exc)
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text.split(marker, 1)[1]
    return next((line.strip() for line in text.splitlines() if line.strip()), "no reason given")


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """The state dict of a checkpoint written by :func:`save_checkpoint`, after checking its format,
    metadata checksum and every tensor's checksum, dtype and shape. Raises ``RecgoIOError`` naming
    the file and the damaged part for a missing, truncated, corrupted or foreign file."""
    try:
        obj = torch.load(path, weights_only=True, map_location="cpu")
    except OSError as exc:  # missing, unreadable: the OS's reason says it
        if exc.errno == errno.EINVAL and Path(path).is_file():  # torch's reader on a cut archive
            raise RecgoIOError(f"{path}: cannot read the checkpoint: not a readable recgo checkpoint (the file is "
                               f"truncated or corrupted): {type(exc).__name__}: {exc}") from exc
        raise RecgoIOError(f"{path}: cannot read the checkpoint: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:  # torch raises EOFError, RuntimeError, UnpicklingError, UnicodeDecodeError, ...
        # (not torch's own advice, which for a weights-only failure is to load with weights_only=False:
        # wrong for a damaged file, and unsafe)
        raise RecgoIOError(f"{path}: cannot read the checkpoint: not a readable recgo checkpoint (the file is "
                           f"truncated, corrupted or in another format): {type(exc).__name__}: {_cause(exc)}") from exc
    if not isinstance(obj, dict) or obj.get("format") != _FORMAT:
        raise RecgoIOError(f"{path}: not a recgo checkpoint (no checksummed envelope); a plain torch.save of "
                           "a state dict loads with ebc.load_state_dict(torch.load(path))")
    if obj.get("version") != _VERSION:
        raise RecgoIOError(f"{path}: checkpoint format version {obj.get('version')!r}, this recgo reads {_VERSION}")
    entries, state = obj.get("entries"), obj.get("state_dict")
    try:
        meta_ok = obj.get("meta_crc") == _meta_crc(entries)
    except (TypeError, ValueError):
        meta_ok = False
    if not meta_ok or not isinstance(state, dict):
        raise RecgoIOError(f"{path}: checkpoint metadata checksum mismatch (the file is corrupted)")
    # a well-checksummed envelope of another shape (a forged or foreign file) is refused as one
    if not isinstance(entries, list) or not all(
            isinstance(e, (list, tuple)) and len(e) == 4 and isinstance(e[0], str) and isinstance(e[1], str)
            and isinstance(e[2], list) and all(type(d) is int for d in e[2]) and type(e[3]) is int for e in entries):
        raise RecgoIOError(f"{path}: checkpoint metadata is malformed (each entry must be key, dtype, shape, "
                           "checksum; the file is corrupted or not recgo's)")
    if [e[0] for e in entries] != list(state):
        raise RecgoIOError(f"{path}: checkpoint entries {list(state)} differ from its metadata (the file is corrupted)")
    for key, dtype, shape, crc in entries:
        v = state[key]
        if not isinstance(v, torch.Tensor) or str(v.dtype) != dtype or list(v.shape) != shape:
            raise RecgoIOError(f"{path}: checkpoint entry {key!r} is not a {dtype} tensor of shape {shape} "
                               "(the file is corrupted)")
        if _tensor_crc(v) != crc:
            raise RecgoIOError(f"{path}: checksum mismatch in checkpoint entry {key!r} (the file is corrupted)")
    return {k: v.detach() for k, v in state.items()}  # values only (a pickled requires_grad flag is not state)


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (os.umask can only be read by
    setting it, which races with other threads creating files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


ORPHAN_AGE = 86400.0  # seconds after which a temporary checkpoint file of another machine is an orphan
# A dead writer's file must also be this old (s): a file a live writer in another pid namespace with
# the same host name (a container) is writing keeps a recent modification time.
DEAD_WRITER_AGE = 300.0


def temp_prefix(path: Path) -> str:
    """The name prefix of ``path``'s temporary files while it is written: ``.{name}.{host}-{pid}.``
    (the Go engine's dynamic-table files use it too), so that :func:`remove_orphans` can tell a
    dead writer's file from a live one's."""
    return f".{path.name}.{socket.gethostname()}-{os.getpid()}."


def remove_orphans(path: Path) -> None:
    """Delete the temporary files an earlier writer of ``path`` left when it was killed mid-write (a
    preempted job: SIGKILL runs no cleanup, and each left a checkpoint-sized file): those of a dead
    process of this machine untouched for five minutes, and any older than a day (another
    machine's, or an older version's unnamed ones). Errors are ignored: this is housekeeping."""
    host, mine = socket.gethostname(), os.getpid()
    start = f".{path.name}."
    try:
        names = [n for n in os.listdir(path.parent) if n.startswith(start) and n.endswith(".tmp")]
    except OSError:
        return
    for name in names:
        f = path.parent / name
        # .{name}.{host}-{pid}.{random}.tmp: the random part has no dot, a host name may have several
        whost, _, pid = name[len(start):-len(".tmp")].rpartition(".")[0].rpartition("-")
        try:
            age = time.time() - f.stat().st_mtime
            if whost == host and pid.isdigit() and int(pid) != mine and age > DEAD_WRITER_AGE:
                try:
                    os.kill(int(pid), 0)
                    continue  # alive: still writing
                except ProcessLookupError:
                    f.unlink()
                    continue
                except PermissionError:
                    continue  # alive, another user's
            if age > ORPHAN_AGE:
                f.unlink()
        except OSError:
            pass


def _save_atomic(obj: Any, path: str | os.PathLike[str]) -> None:
    """``torch.save(obj, path)`` that never leaves a half-written file: it writes a temporary file in
    the same folder, fsyncs it and renames it over ``path``; on failure ``path`` is untouched (an
    ``OSError`` is raised as ``RecgoIOError`` naming ``path``, not the temporary file). Temporary
    files of killed earlier writers are removed first (:func:`remove_orphans`)."""
    path = Path(path)
    remove_orphans(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise RecgoIOError(f"{path}: cannot write the checkpoint: {exc.strerror or exc}") from exc
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; a checkpoint gets open()'s usual mode
        with os.fdopen(fd, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):  # disk full, a folder in the path's place, ...
            raise RecgoIOError(f"{path}: cannot write the checkpoint: {exc.strerror or exc}") from exc
        raise


_SKELETON = "__structure__"


def _flatten(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """A JSON-able skeleton of ``obj`` with every tensor replaced by a reference into ``tensors``.
    Dict keys keep their type (optimizer state dicts are keyed by int), tuples stay tuples."""
    if isinstance(obj, torch.Tensor):
        key = f"t{len(tensors)}"
        tensors[key] = obj.detach()
        return {"t": key}
    if isinstance(obj, dict):
        return {"d": [[_flatten(k, tensors), _flatten(v, tensors)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return {"l" if isinstance(obj, list) else "u": [_flatten(v, tensors) for v in obj]}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise InvalidInputError(f"save_state: cannot store a {type(obj).__name__} (only tensors, dicts, lists, tuples, "
                            "numbers, strings and None)")


def _unflatten(node: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(node, dict):
        if "t" in node:
            return tensors[node["t"]]
        if "d" in node:
            return {_unflatten(k, tensors): _unflatten(v, tensors) for k, v in node["d"]}
        items = [_unflatten(v, tensors) for v in node.get("l", node.get("u", []))]
        return items if "l" in node else tuple(items)
    return node


def save_state(obj: Any, path: str | os.PathLike[str]) -> None:
    """Write a nested training state (dicts, lists, tuples of tensors, numbers and strings: a model's
    and an optimizer's state dicts, a reader position) with the same checksums and atomic write as
    :func:`save_checkpoint`; read it back with :func:`load_state`."""
    tensors: dict[str, torch.Tensor] = {}
    skeleton = json.dumps(_flatten(obj, tensors), separators=(",", ":")).encode()
    tensors[_SKELETON] = torch.frombuffer(bytearray(skeleton), dtype=torch.uint8) if skeleton else torch.empty(0)
    save_checkpoint(tensors, path)


def peek_state(path: str | os.PathLike[str], key: str) -> Any:
    """The value under the top-level ``key`` of the dict :func:`save_state` wrote at ``path`` (a number,
    string or None: not a tensor), read without verifying the checksums or reading the tensors (for a
    message about a checkpoint, not to resume from it); None when it cannot be read so."""
    try:
        tensors = torch.load(path, weights_only=True, map_location="cpu", mmap=True)["state_dict"]
        top = json.loads(bytes(tensors[_SKELETON].numpy())).get("d", [])  # the dict's [key, value] pairs
    except Exception:  # noqa: BLE001 - not readable so: the caller goes without it
        return None
    value = next((v for k, v in top if k == key), None)
    return None if isinstance(value, dict) else value


def load_state(path: str | os.PathLike[str]) -> Any:
    """The object :func:`save_state` wrote, after verifying every checksum (``RecgoIOError`` otherwise)."""
    tensors = load_checkpoint(path)
    raw = tensors.pop(_SKELETON, None)
    if raw is None:
        raise RecgoIOError(f"{path}: not a training-state checkpoint (no structure entry)")
    try:
        return _unflatten(json.loads(bytes(raw.numpy())), tensors)
    except (ValueError, KeyError, TypeError, RecursionError) as exc:  # a forged structure nested past the stack
        raise RecgoIOError(f"{path}: the training-state structure does not decode ({type(exc).__name__})") from exc
