"""A gloo process group for ``DistributedDataParallel`` over sparse gradients (torch's own
``nn.Embedding``/``nn.EmbeddingBag`` with ``sparse=True``): :func:`sparse_ddp_group`."""

from __future__ import annotations

import itertools
import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..errors import InvalidInputError
from ._exchange import as_timeout

_groups = itertools.count(1)  # each group's keys in the store apart from the others'


def sparse_ddp_group(timeout: float | timedelta = 120.0) -> Any:
    """A gloo group of every rank whose collectives run on one worker thread, for
    ``DistributedDataParallel(model, process_group=sparse_ddp_group())`` when ``model`` has parameters
    with sparse gradients. A collective: every rank calls it, in the same order. ``timeout``: how long
    (seconds, or a ``timedelta``) a collective on it waits for its peers.

    Why: gloo runs a group's asynchronous collectives on two worker threads, and DDP starts one sparse
    all-reduce per sparse parameter as its gradient is ready. In torch 2.14 on the CPU two of them
    running at once corrupt the heap now and then: a rank aborts ("malloc(): unaligned tcache chunk
    detected") or segfaults with both gloo threads inside ``AsyncSparseAllreduceWork``'s coalesce.
    Plain torch does it, with no recgo loaded (``benchmarks/sparse_ddp_crash.py``). On one thread the
    sparse all-reduces run one after another. torch's ``new_group`` ignores gloo's options, so the
    group is assembled here over the default group's store; it takes the devices the default group
    takes (``GLOO_SOCKET_IFNAME``'s interfaces where that is set).

    Raises:
        InvalidInputError: the default process group is not initialised, or ``timeout`` is not a positive,
            finite time.
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise InvalidInputError("sparse_ddp_group: call torch.distributed.init_process_group first")
    return one_thread_group(as_timeout(timeout))


def one_thread_group(timeout: timedelta) -> Any:
    """The group :func:`sparse_ddp_group` returns, for a checked ``timeout`` (a collective)."""
    gloo = dist.ProcessGroupGloo
    options = gloo._Options()
    options._threads = 1
    names = [n for n in os.environ.get("GLOO_SOCKET_IFNAME", "").split(",") if n]
    options._devices = [gloo.create_device(interface=n) for n in names] or [gloo.create_default_device()]
    options._timeout = timeout
    rank, size = dist.get_rank(), dist.get_world_size()
    store = dist.PrefixStore(f"recgo-sparse-ddp-{next(_groups)}/", dist.distributed_c10d._get_default_store())
    group = dist.ProcessGroup(store, rank, size)
    group._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
    group._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, gloo(store, rank, size, options))
    return group
