"""The collections' reused output memory (recgo.modules._outputs.OutputPool)."""

from __future__ import annotations

import ctypes
import threading

import pytest
import torch

from recgo.modules._outputs import OutputPool, _no_use_count, storage_use_count

needs_count = pytest.mark.skipif(storage_use_count is _no_use_count, reason="torch lacks _storage_Use_Count")


def test_outputs_have_the_shapes_and_are_not_views() -> None:
    pool = OutputPool()
    a, b = pool.take([(3, 4), (5, 2)])
    assert (a.shape, b.shape) == ((3, 4), (5, 2))
    assert a.is_contiguous() and b.is_contiguous()
    assert not a._is_view() and not b._is_view()
    assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr(), "two outputs of one call share no base"


@needs_count
def test_memory_is_reused_only_when_unreferenced() -> None:
    pool = OutputPool()
    (a,) = pool.take([(10, 8)])
    a.fill_(1.0)
    (b,) = pool.take([(10, 8)])  # a is alive: fresh memory
    assert b.data_ptr() != a.data_ptr()
    b.fill_(2.0)
    assert torch.equal(a, torch.ones(10, 8))
    ptr = a.data_ptr()
    del a
    (c,) = pool.take([(9, 8)])  # a smaller output fits the freed base
    assert c.data_ptr() == ptr
    view = c[2:]  # a view keeps the base referenced too
    del c
    (d,) = pool.take([(10, 8)])
    assert d.data_ptr() not in (ptr, b.data_ptr())
    del view


@needs_count
def test_an_output_held_only_by_its_storage_is_not_reused() -> None:
    """A Python storage object did not raise the storage's use count, so an output kept only through
    ``untyped_storage()`` was overwritten by the next forward; NumPy and DLPack holders keep it too."""
    pool = OutputPool()
    for keep in (lambda t: t.untyped_storage(), lambda t: t.numpy(), lambda t: torch.utils.dlpack.to_dlpack(t)):
        (a,) = pool.take([(6, 4)])
        a.fill_(1.0)
        ptr, held = a.data_ptr(), keep(a)
        del a
        for _ in range(3):
            (b,) = pool.take([(6, 4)])
            assert b.data_ptr() != ptr
            b.fill_(2.0)
        assert torch.equal(torch.frombuffer(bytearray(ctypes.string_at(ptr, 96)), dtype=torch.float32),
                           torch.ones(24))
        del held


@needs_count
def test_newest_bases_are_kept_when_outputs_stay_alive() -> None:
    pool = OutputPool()
    held = [pool.take([(4, 4)])[0] for _ in range(3)]  # three pending outputs: the two newest bases kept
    ptrs = [h.data_ptr() for h in held]
    del held
    assert pool.take([(4, 4)])[0].data_ptr() in ptrs[1:]
    ptrs = {pool.take([(4, 4)])[0].data_ptr() for _ in range(5)}
    assert len(ptrs) == 1, "a dropped output's base serves the next forward"


def test_flat_buffers_are_lent_exclusively() -> None:
    pool = OutputPool()
    x, y = pool.take_flat(100), pool.take_flat(100)
    assert x.numel() >= 100 and y.numel() >= 100 and x.data_ptr() != y.data_ptr()
    pool.give_back(x)
    assert pool.take_flat(50).data_ptr() == x.data_ptr()
    assert pool.take_flat(50).data_ptr() not in (x.data_ptr(), y.data_ptr())


@needs_count
def test_concurrent_takes_never_share_a_base() -> None:
    pool = OutputPool()
    barrier = threading.Barrier(8)
    got: list[list[int]] = [[] for _ in range(8)]

    def body(i: int) -> None:
        barrier.wait()
        for _ in range(200):
            (o,) = pool.take([(16, 4)])
            o.fill_(float(i))
            got[i].append(int(torch.equal(o, torch.full((16, 4), float(i)))))
            del o

    threads = [threading.Thread(target=body, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(all(g) for g in got), "no thread's output was overwritten by another's"
