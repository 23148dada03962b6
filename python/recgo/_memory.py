"""Zero-copy tensors over memory the engine owns (outside the Go heap, see internal/offheap).

:func:`wrap` is the one way Python views engine memory: the tensor keeps ``owner`` (the handle of
the Go object that owns the memory) alive, so the memory stays mapped for as long as any tensor over
it exists, and is released when the last one is collected.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import torch

_CTYPES: dict[torch.dtype, Any] = {
    torch.float32: ctypes.c_float,
    torch.float64: ctypes.c_double,
    torch.int64: ctypes.c_int64,
    torch.int32: ctypes.c_int32,
    torch.uint8: ctypes.c_uint8,
}


def wrap(address: int, count: int, dtype: torch.dtype, owner: object) -> torch.Tensor:
    """A 1-D tensor of ``count`` ``dtype`` values at ``address`` (engine memory), keeping ``owner`` alive.

    ``count == 0`` gives an empty tensor (the address may then be 0). The memory must stay valid while
    ``owner`` lives; the tensor shares it (writes go to the engine's copy).
    """
    if count < 0:
        raise ValueError(f"wrap: negative count {count}")
    if count == 0:
        return torch.empty(0, dtype=dtype)
    if not address:
        raise ValueError(f"wrap: null address for {count} values")
    try:
        ctype = _CTYPES[dtype]
    except KeyError:
        raise ValueError(f"wrap: unsupported dtype {dtype}") from None
    arr = (ctype * count).from_address(address)
    arr._recgo_owner = owner  # type: ignore[attr-defined]  # tensor -> buffer -> owner keeps the memory
    return torch.frombuffer(arr, dtype=dtype, count=count)


def _read_physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


_PHYSICAL = _read_physical_memory()  # once: torch.compile cannot trace os.sysconf


def physical_memory() -> int | None:
    """Bytes of memory this machine has, None where the OS does not say (a bound for buffers whose size
    comes from input, refused before torch's allocator fails with its own wording)."""
    return _PHYSICAL
