"""Moves the engine's exchange buffers with ``torch.distributed`` all-to-alls.

The Go engine decides every step's routing (owners, dedup, per-destination buffers, splits, inverse
maps, merges); :func:`drive` only asks it for the next all-to-all, runs ``all_to_all_single`` on
the named group and hands the received buffer back, until the engine has nothing left to send.
"""

from __future__ import annotations

import atexit
import ctypes
import math
import numbers
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from .. import _lib
from .._lib import I64
from ..errors import InvalidInputError, RecgoError
from ..tensors import ptr

GROUP_NAMES = ("world", "node", "rail")


class PeerFailureError(RecgoError, RuntimeError):
    """Another rank died, raised or stopped answering during an exchange (or the configured timeout
    passed). The message names the rank, the group and the underlying torch.distributed error."""


@dataclass
class Groups:
    """The process groups of one rank: the world (or the given group), its node, its rail."""

    world: Any
    node: Any
    rail: Any
    rank: int
    world_size: int
    nodes: int
    ranks_per_node: int
    timeout: timedelta

    def get(self, code: int) -> Any:
        """The process group of the engine's group ``code`` (0 world, 1 node, 2 rail)."""
        return (self.world, self.node, self.rail)[code]

    def index(self, code: int) -> int:
        """This rank's index in group ``code``."""
        return (self.rank, self.rank % self.ranks_per_node, self.rank // self.ranks_per_node)[code]


_created: list[Any] = []  # the process groups make_groups created, destroyed at exit
# The groups by what they are (see make_groups), for every later collection of the same topology and
# timeout: each collection used to create its own, and they lived until exit (5 file descriptors
# and 3 threads per flat collection, 14 and 9 per hierarchical one). Every rank builds the same
# collections in the same order, so the ranks' caches agree on what new_group (a collective) runs.
_cache: dict[tuple[Any, ...], Any] = {}
_cache_world: list[Any] = [None]  # the default group the cached groups belong to
# The most tables of any sharded collection built on this world: every collection sizes its drives'
# first ops for as many (engine/shard/sync.go, padTables), so that a rank running another
# collection's step than its peers meets them in ops of one size and the step headers name the
# mismatch (gloo aborted the process on the sizes). Every rank builds the same collections in the
# same order, so the ranks agree on it between the same steps.
_pad_tables: list[int] = [0]


def register_tables(n: int) -> None:
    """Count a collection of ``n`` tables built on this world (after the build's collective checks)."""
    _pad_tables[0] = max(_pad_tables[0], n)


def pad_tables() -> int:
    """The table count every collection's first ops are sized for (see :func:`register_tables`)."""
    return _pad_tables[0]


@atexit.register
def _destroy_groups() -> None:
    """Destroy the groups recgo created when the process exits with torch.distributed still up (a
    script that never calls ``destroy_process_group``, as TorchRec's examples): left to interpreter
    teardown, a gloo group's threads sometimes ended the process with SIGABRT ("terminate called
    without an active exception"), which a launcher reports as a failed rank."""
    groups, _created[:] = list(_created), []
    _cache.clear()
    if not (dist.is_available() and dist.is_initialized()):
        return
    for g in groups:
        try:
            dist.destroy_process_group(g)
        except Exception:  # already destroyed, or the default group went first
            pass


def _forget_stale_groups() -> None:
    """Drop the cached groups when torch.distributed was set up anew (its groups are gone)."""
    if _cache_world[0] is not dist.group.WORLD:
        _cache.clear()
        _cache_world[0] = dist.group.WORLD
        _pad_tables[0] = 0


def _cached_group(ranks: list[int], key: tuple[Any, ...], timeout: timedelta,
                  made: list[tuple[Any, ...]] | None = None, make: Callable[[], Any] | None = None) -> Any:
    """The process group of ``ranks`` with ``timeout`` cached under ``key`` (with the timeout),
    created (a collective: every rank asks in the same order) by ``make`` (default: torch's
    ``new_group``) if it is not; ``made`` collects the keys this created, so a refused build can
    forget them."""
    key = (*key, timeout.total_seconds())
    if key in _cache:
        return _cache[key]
    if made is not None:
        made.append(key)
    try:
        g = make() if make is not None else dist.new_group(ranks, timeout=timeout)
    except Exception as exc:  # gloo's store barrier: 'Wait timeout' when a peer never comes
        raise PeerFailureError(
            f"rank {dist.get_rank()}: creating the process group of ranks {ranks}: a peer did not join within the "
            f"{timeout.total_seconds():g} s timeout (it died, raised before building the collection, or "
            f"was given another topology or mode): {exc}") from exc
    if make is None:  # torch's registry knows it (a group assembled by ``make`` is not, and goes with its last reference)
        _created.append(g)
    _cache[key] = g
    return g


def make_groups(nodes: int | None, ranks_per_node: int | None, timeout: float | timedelta | None,
                hierarchical: bool) -> Groups:
    """Create the world, node and rail groups (every rank must call this in the same order)."""
    if not dist.is_available() or not dist.is_initialized():
        raise InvalidInputError("recgo.distributed: call torch.distributed.init_process_group first")
    world, rank = dist.get_world_size(), dist.get_rank()
    for what, v in (("nodes", nodes), ("ranks_per_node", ranks_per_node)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral)):
            raise InvalidInputError(f"topology: {what} must be a whole number of ranks, got {v!r}")
    if nodes is None and ranks_per_node is None:
        nodes, ranks_per_node = 1, world
    elif nodes is None:
        nodes = world // max(1, int(ranks_per_node))  # type: ignore[arg-type]
    elif ranks_per_node is None:
        ranks_per_node = world // max(1, int(nodes))
    nodes, ranks_per_node = int(nodes), int(ranks_per_node)  # type: ignore[arg-type]
    if nodes <= 0 or ranks_per_node <= 0 or nodes * ranks_per_node != world:
        raise InvalidInputError(f"topology: {nodes} nodes × {ranks_per_node} ranks per node does not match the "
                                f"world of {world} ranks")
    timeout = timedelta(seconds=60) if timeout is None else as_timeout(timeout)
    _forget_stale_groups()
    made: list[tuple[Any, ...]] = []  # the keys of the groups this call created

    def group(ranks: list[int], key: tuple[Any, ...]) -> Any:
        return _cached_group(ranks, key, timeout, made)

    # the world group's key leaves the topology out: ranks that disagree on it (refused below) still
    # agree on whether it exists
    groups = Groups(group(list(range(world)), ("world",)), None, None, rank, world, nodes, ranks_per_node, timeout)
    # The node and rail groups depend on the topology and mode: ranks that disagree on them would wait
    # on different groups until the timeout; compare them first and name the difference.
    # The timeout too: the cache keys hold it, and ranks that built a group under different keys would
    # later disagree on whether to create one (new_group is a collective). A refused build forgets the
    # world group it created, so every rank's cache is as before it.
    try:
        agree(groups, "process groups", {"topology": f"{nodes} nodes × {ranks_per_node} ranks per node",
                                         "mode": "hierarchical" if hierarchical else "flat",
                                         "timeout": f"{timeout.total_seconds():g} s"})
    except InvalidInputError:
        for key in made:
            _cache.pop(key, None)
        raise
    if hierarchical:
        for n in range(nodes):
            g = group([n * ranks_per_node + l for l in range(ranks_per_node)], ("node", nodes, ranks_per_node, n))
            if n == rank // ranks_per_node:
                groups.node = g
        for l in range(ranks_per_node):
            g = group([n * ranks_per_node + l for n in range(nodes)], ("rail", nodes, ranks_per_node, l))
            if l == rank % ranks_per_node:
                groups.rail = g
    return groups


def as_timeout(value: Any) -> timedelta:
    """A collective's timeout given as seconds (a number) or a timedelta, checked: positive and finite.

    Raises:
        InvalidInputError: ``value`` is neither, or not a positive finite time.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(f"timeout must be seconds (a number) or a timedelta, got {value!r}")
    else:
        seconds = float(value)
    if not 0 < seconds < math.inf:
        raise InvalidInputError(f"timeout must be > 0 seconds and finite, got {seconds:g}")
    return timedelta(seconds=seconds)


def dense_group(timeout: timedelta, sparse: bool = False) -> Any:
    """A process group of the whole world with ``timeout``, for the dense part's
    ``DistributedDataParallel`` (:func:`recgo.distributed.shard_model`): on the default group its
    collectives waited for a dead or stalled peer as long as that group's timeout (30 minutes by
    default), not the collections'. Its own group, not the collections' world group, so its
    all-reduces never share an order of issue with their all-to-alls. Cached as they are.
    ``sparse``: the part has parameters with sparse gradients, and the group runs its collectives on
    one gloo thread (:func:`recgo.distributed.sparse_ddp_group` says why)."""
    _forget_stale_groups()
    make = None
    if sparse:
        from ._sparse_ddp import one_thread_group  # it imports this module

        make = lambda: one_thread_group(timeout)  # noqa: E731
    return _cached_group(list(range(dist.get_world_size())), ("dense", "one thread") if sparse else ("dense",),
                         timeout, make=make)


_DTYPES = (torch.int64, torch.float32, torch.uint8)
_scratch = threading.local()
# One rank's sharded collectives run one at a time: a step's whole drive (every op of a forward or a
# backward) and a save or load. The collections of a process share their process groups, and gloo
# pairs each rank's ops in the order the rank issues them, so two threads' drives whose ops
# interleaved met other ops of other sizes on the peer (gloo aborted the process: EnforceNotMet) or
# read data as a step's header. Whole drives meet whole drives, whose headers say whether the ranks
# run the same step of the same collection (InvalidInputError when they do not).
COLLECTIVES = _lib.fork_safe_lock(reentrant=True)


def _buffer(role: str, dtype: torch.dtype, n: int) -> torch.Tensor:
    """A reusable 1-D buffer of n elements for this thread's exchanges (send or receive side): the
    engine copies every received buffer before Feed returns and gloo's all_to_all_single finishes
    before it returns, so the next op may reuse it; fresh large tensors cost page faults each time."""
    cache = getattr(_scratch, "bufs", None)
    if cache is None:
        cache = _scratch.bufs = {}
    t = cache.get((role, dtype))
    if t is None or t.numel() < n:
        t = cache[(role, dtype)] = torch.empty(max(n, n + n // 4, 1024), dtype=dtype)
    return t[:n]


WIRE_DTYPES = {"fp32": None, "fp16": torch.float16}


def drive(step: _lib.Handle, groups: Groups, traffic: dict[str, int], wire: torch.dtype | None = None) -> None:
    """Run the step's pending all-to-alls; add the bytes sent to other ranks to ``traffic[group]``.

    ``wire`` (opt-in, lossy): move the float32 buffers (rows, partial sums, gradients) as this dtype,
    rounding them on the way out and widening them back on arrival. The whole drive holds
    :data:`COLLECTIVES`, whatever other threads of this rank run."""
    with COLLECTIVES:
        _drive(step, groups, traffic, wire)


def _drive(step: _lib.Handle, groups: Groups, traffic: dict[str, int], wire: torch.dtype | None) -> None:
    """:func:`drive`'s loop, with :data:`COLLECTIVES` held."""
    nxt = _lib.fn("recgo_shard_next")
    op = _lib.fn("recgo_shard_op")
    feed = _lib.fn("recgo_shard_feed")
    g, f, nsend, nsplits, done = I64(0), I64(0), I64(0), I64(0), I64(0)
    refs = tuple(ctypes.byref(v) for v in (g, f, nsend, nsplits, done))
    splits: dict[int, tuple[Any, Any]] = {}  # group size -> (send, receive) split arrays, reused
    while True:
        _lib.call(nxt, step.value, *refs)
        if done.value:
            return
        dtype = _DTYPES[f.value]
        n = nsplits.value
        arrs = splits.get(n)
        if arrs is None:
            arrs = splits[n] = ((ctypes.c_int64 * n)(), (ctypes.c_int64 * n)())
        send = _buffer("send", dtype, nsend.value)
        _lib.call(op, step.value, ptr(send), nsend.value, ctypes.addressof(arrs[0]), ctypes.addressof(arrs[1]), n)
        ss, rs = list(arrs[0]), list(arrs[1])
        recv = _buffer("recv", dtype, sum(rs))
        code = g.value
        name = GROUP_NAMES[code]
        narrow = wire is not None and dtype == torch.float32
        wsend, wrecv = (send.to(wire), torch.empty(recv.numel(), dtype=wire)) if narrow else (send, recv)
        traffic[name] = traffic.get(name, 0) + (sum(ss) - ss[groups.index(code)]) * wsend.element_size()
        with peer_failures(groups, f"the all-to-all on the {name} group failed"):
            dist.all_to_all_single(wrecv, wsend, rs, ss, group=groups.get(code))
            if narrow:
                recv.copy_(wrecv)
        _lib.call(feed, step.value, ptr(recv), recv.numel())


def peer_error(groups: Groups, what: str, exc: BaseException) -> PeerFailureError | None:
    """The :class:`PeerFailureError` for ``exc``, raised by a collective doing ``what``, when
    torch.distributed or gloo raised it (:func:`gloo_failure` says what it tells of the peers); None
    for any other exception (a mistake on this rank, or an exception raised into it): the caller
    re-raises it as it is, since nothing says a peer failed."""
    why = gloo_failure(exc, f"the {groups.timeout.total_seconds():g} s timeout")
    if why is None:
        return None
    return PeerFailureError(f"rank {groups.rank}: {what}: {why}: {exc}")


@contextmanager
def peer_failures(groups: Groups, what: str) -> Iterator[None]:
    """Run a collective doing ``what``: an exception torch.distributed or gloo raised comes out as
    the :class:`PeerFailureError` of :func:`peer_error`, any other (this rank's own) as it is."""
    try:
        yield
    except Exception as exc:
        failure = peer_error(groups, what, exc)
        if failure is None:
            raise
        raise failure from exc


def gloo_failure(exc: BaseException, timeout: str) -> str | None:
    """What a collective's ``exc`` says of the peers when torch.distributed or gloo raised it (a
    ``DistError``, or gloo's ``RuntimeError`` naming its source): a closed connection (a peer died, or
    raised and left the collective), no answer within ``timeout`` (words, e.g. "the 3 s timeout": a
    peer stuck, slow or gone), or another gloo failure. None for any other exception."""
    msg = str(exc)
    if not isinstance(exc, dist.DistError) and not (isinstance(exc, RuntimeError) and "gloo" in msg):
        return None
    if "Connection closed by peer" in msg or "Connection reset by peer" in msg:
        return "a peer closed the connection (it died, or raised and left the exchange)"
    if "Timed out" in msg or "timed out" in msg:
        return f"no peer answer within {timeout} (a peer is stuck, slower than the timeout, or gone)"
    return "gloo failed"


def gather_objects(groups: Groups, what: str, value: Any) -> list[Any]:
    """Every rank's ``value`` (``all_gather_object`` over the world group, a collective).

    Raises:
        PeerFailureError: torch.distributed or gloo failed the gather (:func:`gloo_failure`: a peer
            closed the connection, or did not answer within the groups' timeout; :func:`peer_error`),
            naming ``what``.
            Any other exception (this rank's own, say a ``value`` that does not pickle) propagates
            as it is, since nothing says a peer failed."""
    got: list[Any] = [None] * groups.world_size
    with peer_failures(groups, f"{what}: gathering every rank's part failed"):
        dist.all_gather_object(got, value, group=groups.world)
    return got


def agree(groups: Groups, what: str, desc: dict[str, Any]) -> None:
    """Check that every rank of the world describes ``what`` the same way (a collective: every rank calls
    it at the same point). The ranks exchange ``desc`` (plain values) with ``all_gather_object``; if any
    differs from rank 0's, every rank raises :class:`InvalidInputError` naming the first rank and entries
    that differ. Without this, ranks that disagree on a table's size, dimension or order size their
    all-to-all buffers differently, and gloo aborts the process (``EnforceNotMet``) or, worse, the
    IDs route to the wrong owner without an error."""
    descs = gather_objects(groups, f"building the {what}", desc)
    ref = descs[0]
    for r, other in enumerate(descs):
        if other != ref:
            keys = [k for k in ref if ref[k] != other.get(k)] + [k for k in other if k not in ref]
            shown = "; ".join(f"{k}: {other.get(k)!r} on rank {r}, {ref.get(k)!r} on rank 0" for k in keys[:4])
            raise InvalidInputError(f"rank {groups.rank}: rank {r} builds the {what} differently from rank 0 "
                                    f"(every rank must pass the same arguments): {shown}")


def peer_failure(groups: Groups, what: str, exc: BaseException | None) -> tuple[int, str, str] | None:
    """Tell every rank whether this rank's part of ``what`` failed (``exc``) and learn whether another's
    did (a collective: every rank calls it at the same point, over the world group with the
    configured timeout): the first other rank that failed, with its error's class name and message,
    or None. So that no rank commits what a peer refused; a peer that never comes raises
    :class:`PeerFailureError`."""
    mine = None if exc is None else (type(exc).__name__, str(exc) or type(exc).__name__)
    got = gather_objects(groups, what, mine)
    return next(((r, *o) for r, o in enumerate(got) if o is not None and r != groups.rank), None)


def check_peers(groups: Groups, timeout: float | timedelta | None = None) -> None:
    """``monitored_barrier`` over the world group: raises :class:`PeerFailureError` naming the ranks
    that did not arrive within ``timeout`` (default: the groups' timeout). gloo only."""
    t = groups.timeout if timeout is None else (timeout if isinstance(timeout, timedelta) else timedelta(seconds=timeout))
    try:
        dist.monitored_barrier(group=groups.world, timeout=t, wait_all_ranks=True)
    except Exception as exc:
        raise PeerFailureError(f"rank {groups.rank}: peers missing at the monitored barrier: {exc}") from exc
