"""recgo._memory.wrap: zero-copy tensors over engine memory that keep their owner alive."""

from __future__ import annotations

import ctypes
import gc
import weakref

import pytest
import torch

from recgo._memory import wrap


class _Owner:
    pass


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8])
def test_wrap_shares_memory_and_keeps_the_owner_alive(dtype: torch.dtype) -> None:
    src = torch.arange(10, dtype=dtype)
    owner = _Owner()
    owner.src = src  # the "engine memory" lives as long as the owner
    t = wrap(src.data_ptr(), 10, dtype, owner)
    assert t.dtype == dtype and t.data_ptr() == src.data_ptr()
    assert torch.equal(t, torch.arange(10, dtype=dtype))
    src[3] = 42
    assert t[3].item() == 42  # a view, not a copy
    ref = weakref.ref(owner)
    del owner, src
    gc.collect()
    assert ref() is not None  # the tensor holds the owner
    del t
    gc.collect()
    assert ref() is None


def test_wrap_edge_cases() -> None:
    assert wrap(0, 0, torch.float32, None).shape == (0,)
    with pytest.raises(ValueError, match="null address"):
        wrap(0, 3, torch.float32, None)
    with pytest.raises(ValueError, match="negative"):
        wrap(ctypes.addressof(ctypes.c_int64(0)), -1, torch.int64, None)
    with pytest.raises(ValueError, match="unsupported dtype"):
        wrap(ctypes.addressof(ctypes.c_int64(0)), 1, torch.complex64, None)
