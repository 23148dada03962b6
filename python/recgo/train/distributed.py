"""``--nproc N``: the training job on N ranks of ``torch.distributed`` (gloo on CPU).

``launch()`` starts N processes itself (``torch.multiprocessing`` spawn, a free localhost port), or,
started under ``torchrun`` (``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` in the environment), runs as the
rank torchrun made it. Each rank reads its shard of the data (rows ``g mod N == rank``, the Go readers'
sharding), so a step's global batch is N × ``batch_size`` and equals the single-process batch of that
size. The sparse half is sharded the way each library does it:

* ``recgo``: :class:`recgo.distributed.ShardedEmbeddingBagCollection` (``sharding``: hash by default,
  or table_wise / row_wise; ``exchange``: flat or hierarchical), fused optimizer on the owners;
* ``torchrec``: TorchRec's ``DistributedModelParallel`` over an ``EmbeddingBagCollection`` with the plan
  its ``EmbeddingShardingPlanner`` makes, the optimizer fused through the sharder's fused params;
* ``torch``: ``nn.EmbeddingBag(sparse=True)`` replicated on every rank under ``DistributedDataParallel``,
  over a gloo group of one worker thread (:func:`recgo.distributed.sparse_ddp_group`).

The sequence model (bst) has the same three with unpooled lookups: recgo's
:class:`recgo.distributed.ShardedEmbeddingCollection`, DMP over TorchRec's ``EmbeddingCollection``
(``EmbeddingCollectionSharder``) and ``nn.Embedding(sparse=True)`` under DDP.

The dense half is under ``DistributedDataParallel`` everywhere. Every rank starts from the same global
weights (:func:`recgo.train.backends.initial_weights`; each sharded table receives its rows of them).

Loss scaling: each rank's loss is the mean over its own samples; DDP averages dense gradients, which
gives the gradient of the global-batch mean. Sharded embeddings *sum* the ranks' gradients at the owner,
so the recgo backend scales the gradient reaching its embeddings by 1/N — the
updates then equal the single-process run on the global batch (tested).

Evaluation: every rank takes an equal slice of each validation batch, the scores and labels are
gathered, and AUC / log loss are computed on the whole held-out split (the same numbers as one process
computing them on the same scores). A rank that raises makes the launcher raise
:class:`TrainingProcessError` naming it, with its traceback (a user-facing :class:`~recgo.errors.RecgoError`,
such as a bad setting, is raised again as the same class, prefixed with the rank, without one); the
others are stopped, and every collective waits at most
``dist_timeout`` seconds, so the job never hangs.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import signal
import socket
import tempfile
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from .._lib import set_num_threads
from .._threads import share_cores
from ..errors import InvalidInputError, RecgoError
from ..sparse import KeyedJaggedTensor

SHARDINGS = ("hash", "table_wise", "row_wise")
EXCHANGES = ("flat", "hierarchical")


class TrainingProcessError(RecgoError, RuntimeError):
    """A rank of a ``--nproc`` run failed; the message names the rank and carries its traceback."""


@dataclass(frozen=True)
class World:
    """This process's place in the job: ``rank`` of ``size``, and the distributed settings."""

    rank: int
    size: int
    sharding: str = "hash"
    exchange: str = "flat"
    timeout: float = 120.0
    nodes: int = 1

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order (a collective: every rank calls it)."""
        import torch.distributed as dist

        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out


def env_world() -> tuple[int, int] | None:
    """``(rank, world size)`` when started under torchrun (its environment variables), else None."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env and "MASTER_PORT" in env:
        try:
            return int(env["RANK"]), int(env["WORLD_SIZE"])
        except ValueError as exc:
            raise InvalidInputError(f"RANK={env['RANK']!r} / WORLD_SIZE={env['WORLD_SIZE']!r}: not integers") from exc
    return None


def free_port() -> int:
    """A TCP port on localhost nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the sparse half on N ranks ------------------------------------------------------------------------

class _Bags(nn.Module):
    """Plain-torch pooled lookups as one module, so DDP can wrap them: ``{key: (ids, offsets)}`` → ``[B, F, D]``."""

    def __init__(self, bags: nn.ModuleDict, keys: list[str], table_of: dict[str, str]) -> None:
        super().__init__()
        self.bags, self.keys, self.table_of = bags, keys, table_of

    def forward(self, batch: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        return torch.stack([self.bags[self.table_of[k]](*batch[k]) for k in self.keys], 1)


class _Seqs(nn.Module):
    """Plain-torch sequence lookups as one module, so DDP can wrap them: ``{key: (ids, lengths)}`` →
    ``{key: [n, D]}``."""

    def __init__(self, bags: nn.ModuleDict, keys: list[str], table_of: dict[str, str]) -> None:
        super().__init__()
        self.bags, self.keys, self.table_of = bags, keys, table_of

    def forward(self, batch: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return {k: self.bags[self.table_of[k]](batch[k][0]) for k in self.keys}


def build_recgo(tables: Sequence[Any], dim: int, optim: Any, weights: dict[str, torch.Tensor], world: World,
                seed: int, pooled: bool = True) -> nn.Module:
    """recgo's sharded collection (pooled: ShardedEmbeddingBagCollection; sequences:
    ShardedEmbeddingCollection) holding this rank's rows of the global ``weights``."""
    import recgo
    from ..distributed import ShardedEmbeddingBagCollection, ShardedEmbeddingCollection

    config, cls = ((recgo.EmbeddingBagConfig, ShardedEmbeddingBagCollection) if pooled
                   else (recgo.EmbeddingConfig, ShardedEmbeddingCollection))
    cfgs = [config(num_embeddings=t.rows, embedding_dim=dim, name=t.name, feature_names=list(t.features))
            for t in tables]
    # DDP (the dense part, torch's tables) and TorchRec's all-to-all backward (its gradient division,
    # on by default) average the ranks' gradients; gradient_division makes recgo's owners do the same,
    # so every backend trains on the gradient of the global-batch mean loss.
    # _init=False: the rows are copied from ``weights`` next (no draw of every table's initial weights)
    module = cls(cfgs, world.sharding, mode=world.exchange, nodes=world.nodes, optimizer=optim.recgo(), seed=seed,
                 timeout=world.timeout, gradient_division=True, _init=False)
    with torch.no_grad():
        for t in tables:
            module.embedding_bags[t.name].weight.copy_(weights[t.name][module.local_ids(t.name)])
    return module


def _torchrec_fused_params(optim: Any) -> dict[str, Any]:
    from fbgemm_gpu.split_embedding_configs import EmbOptimType

    if optim.kind == "sgd":
        return {"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": optim.lr}
    return {"optimizer": EmbOptimType.EXACT_ADAGRAD, "learning_rate": optim.lr, "eps": optim.eps}


def build_torchrec(tables: Sequence[Any], dim: int, optim: Any, weights: dict[str, torch.Tensor],
                   world: World, pooled: bool = True) -> tuple[nn.Module, dict[str, str]]:
    """TorchRec's DMP over an EmbeddingBagCollection (pooled) or an EmbeddingCollection (sequences,
    with its EmbeddingCollectionSharder), planned by its own planner, with the optimizer fused (the
    sharder's fused params); returns the module and the plan (table → kind@ranks).

    Data-parallel placements are left out of the planner's choices: a data-parallel table gets a dense
    gradient and no fused optimizer, so it would need a second optimizer the other backends lack."""
    import torch.distributed as dist
    import torchrec
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.embedding_types import ShardingType
    from torchrec.distributed.embedding import EmbeddingCollectionSharder
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
    from torchrec.distributed.types import ShardingEnv

    config, collection, sharder_cls = (
        (torchrec.EmbeddingBagConfig, torchrec.EmbeddingBagCollection, EmbeddingBagCollectionSharder) if pooled
        else (torchrec.EmbeddingConfig, torchrec.EmbeddingCollection, EmbeddingCollectionSharder))
    cfgs = [config(num_embeddings=t.rows, embedding_dim=dim, name=t.name, feature_names=list(t.features))
            for t in tables]
    ebc = collection(tables=cfgs, device=torch.device("meta"))
    sharder = sharder_cls(fused_params=_torchrec_fused_params(optim))
    kinds = [ShardingType.TABLE_WISE.value, ShardingType.COLUMN_WISE.value, ShardingType.TABLE_COLUMN_WISE.value,
             ShardingType.ROW_WISE.value, ShardingType.TABLE_ROW_WISE.value]
    constraints = {t.name: ParameterConstraints(sharding_types=kinds) for t in tables}
    with _quiet_torchrec_planner():
        planner = EmbeddingShardingPlanner(topology=Topology(world_size=world.size, compute_device="cpu"),
                                           constraints=constraints)
        plan = planner.collective_plan(ebc, [sharder], dist.GroupMember.WORLD)
    module = DistributedModelParallel(ebc, device=torch.device("cpu"), plan=plan, sharders=[sharder],
                                      env=ShardingEnv.from_process_group(dist.GroupMember.WORLD))
    with torch.no_grad():
        for key, value in module.state_dict().items():
            name = _table_key(key)
            if name is None:
                continue
            full = weights[name]
            for piece, (r0, c0) in _local_pieces(value):
                piece.copy_(full[r0:r0 + piece.shape[0], c0:c0 + piece.shape[1]])
    placed = {name: f"{ps.sharding_type}@{ps.ranks}" for mp in plan.plan.values() for name, ps in mp.items()}
    return module, placed


@contextlib.contextmanager
def _quiet_torchrec_planner() -> Iterator[None]:
    """Hold back the TorchRec planner's advice about its own GPU-oriented defaults (building a Topology
    directly, its storage reservation's dry-run estimates): it prints on every rank of every run, and
    nothing in a CPU job can act on it. Errors still come through."""
    logger = logging.getLogger("torchrec.distributed.planner")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"torchrec\.distributed\.planner")
            yield
    finally:
        logger.setLevel(level)


def _table_key(key: str) -> str | None:
    """``...embedding_bags.<table>.weight`` (or ``...embeddings.<table>.weight``) → ``<table>``."""
    parts = key.split(".")
    if len(parts) >= 3 and parts[-1] == "weight" and parts[-3] in ("embedding_bags", "embeddings"):
        return parts[-2]
    return None


def _local_pieces(value: Any) -> list[tuple[torch.Tensor, tuple[int, int]]]:
    """A state-dict entry's local tensors and their (row, column) offsets in the global table."""
    if hasattr(value, "local_shards"):
        return [(s.tensor, (int(s.metadata.shard_offsets[0]), int(s.metadata.shard_offsets[1])))
                for s in value.local_shards()]
    return [(value, (0, 0))]


def build_torch(tables: Sequence[Any], dim: int, optim: Any, weights: dict[str, torch.Tensor], keys: list[str],
                table_of: dict[str, str], pooled: bool = True,
                timeout: float = 120.0) -> tuple[nn.Module, torch.optim.Optimizer]:
    """``nn.EmbeddingBag(sparse=True)`` (pooled) or ``nn.Embedding(sparse=True)`` (sequences) tables
    replicated under DDP (sparse gradients averaged over gloo on
    :func:`recgo.distributed.sparse_ddp_group`, whose collectives wait at most ``timeout`` seconds)."""
    from ..distributed import sparse_ddp_group

    make = (lambda t: nn.EmbeddingBag(t.rows, dim, mode="sum", sparse=True)) if pooled else (
        lambda t: nn.Embedding(t.rows, dim, sparse=True))
    bags = nn.ModuleDict({t.name: make(t) for t in tables})
    with torch.no_grad():
        for t in tables:
            bags[t.name].weight.copy_(weights[t.name])
    module = nn.parallel.DistributedDataParallel((_Bags if pooled else _Seqs)(bags, keys, table_of),
                                                 process_group=sparse_ddp_group(timeout))
    return module, optim.torch_class()(module.parameters(), **optim.torch_kwargs())


def global_weights(arch: Any, world: World) -> dict[str, torch.Tensor]:
    """The whole tables of a distributed SparseArch, on every rank (a collective)."""
    if arch.backend == "torch":
        return {n: b.weight.detach().clone() for n, b in arch.module.module.bags.items()}
    if arch.backend == "recgo":
        mine = {n: (arch.module.local_ids(n), s.weight.detach().clone()) for n, s in arch.module.embedding_bags.items()}
        out: dict[str, torch.Tensor] = {}
        for part in world.gather(mine):
            for n, (ids, w) in part.items():
                out.setdefault(n, torch.zeros(arch.rows[n], w.shape[1]))[ids] = w
        return out
    mine_tr = {}
    for key, value in arch.module.state_dict().items():
        name = _table_key(key)
        if name is not None:
            mine_tr[name] = [(p.detach().clone(), off) for p, off in _local_pieces(value)]
    out = {}
    for part in world.gather(mine_tr):
        for n, pieces in part.items():
            full = out.setdefault(n, torch.zeros(arch.rows[n], arch.dim))
            for p, (r0, c0) in pieces:
                full[r0:r0 + p.shape[0], c0:c0 + p.shape[1]] = p
    return out


# -- evaluation on N ranks -------------------------------------------------------------------------------

def take(kjt: KeyedJaggedTensor, idx: torch.Tensor) -> KeyedJaggedTensor:
    """Samples ``idx`` (in that order, repeats allowed) of every feature of ``kjt``."""
    keys = kjt.keys()
    b = kjt.stride()
    lengths = kjt.lengths().view(len(keys), b)
    starts = (torch.cumsum(kjt.lengths(), 0) - kjt.lengths()).view(len(keys), b)
    sel_len, sel_start = lengths[:, idx].reshape(-1), starts[:, idx].reshape(-1)
    total = int(sel_len.sum())
    shift = torch.repeat_interleave(sel_start - (torch.cumsum(sel_len, 0) - sel_len), sel_len)
    values = kjt.values()[shift + torch.arange(total)]
    return KeyedJaggedTensor(list(keys), values, lengths=sel_len)


def eval_slice(size: int, rank: int, world: int) -> tuple[torch.Tensor, int]:
    """Rank ``rank``'s sample indices of a validation batch of ``size`` and how many of them count.

    Every rank gets ``ceil(size / world)`` indices (equal local batches keep every library's exchange
    simple); a rank whose slice runs past the end repeats sample 0 for the rest and ignores those."""
    per = -(-size // world)
    lo = min(rank * per, size)
    real = min(per, size - lo)
    idx = torch.cat([torch.arange(lo, lo + real), torch.zeros(per - real, dtype=torch.int64)])
    return idx, real


# -- the launcher ----------------------------------------------------------------------------------------

def _init(rank: int, size: int, timeout: float, port: int | None) -> None:
    import torch.distributed as dist

    init = f"tcp://127.0.0.1:{port}" if port is not None else "env://"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=size, timeout=timedelta(seconds=timeout))


def _worker(rank: int, size: int, port: int | None, cfg: Any, backends: Sequence[str], progress: bool,
            result: str | None, options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One rank: train the backends; returns the merged histories and placements (rank 0 also saves
    them to ``result``)."""
    import torch.distributed as dist

    from .run import train_ranks

    if options.get("threads"):
        torch.set_num_threads(options["threads"])
        set_num_threads(options["threads"])
    else:
        share_cores(size)  # torch's and Go's workers: ranks sharing the cores must not compete for them
    _init(rank, size, cfg.dist_timeout, port)
    world = World(rank, size, cfg.sharding, cfg.exchange, cfg.dist_timeout, cfg.nodes)
    got = train_ranks(cfg, backends, world, progress=progress and rank == 0,
                      weights_dir=options.get("weights_dir"), fail_at=options.get("fail_at"),
                      resume=bool(options.get("resume")))
    if rank == 0 and result is not None:
        torch.save(got, result)
    dist.barrier()
    dist.destroy_process_group()
    return got


def _spawned(rank: int, size: int, port: int, cfg: Any, backends: Sequence[str], progress: bool,
             result: str, options: dict[str, Any]) -> None:
    from .. import _lib
    from .._cli_warnings import one_line_warnings

    # A fatal signal (a crash in native code, an abort) leaves no Python error: faulthandler writes
    # every thread's Python stack to this file then, and the launcher shows it with the exit status.
    # Installed before the engine loads, so that the Go runtime's handlers come first (a fault in Go
    # code stays a Go panic, which the engine returns as an error) and pass other faults on to it.
    if _lib._lib is None:
        crash = open(_rank_file(result, "crash", rank), "w")  # noqa: SIM115 - open until the process ends
        faulthandler.enable(file=crash, all_threads=True)
    try:
        with one_line_warnings():  # as the launcher shows them (a spawned rank starts with Python's format)
            _worker(rank, size, port, cfg, backends, progress, result, options)
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the launcher
        # Write the traceback for the launcher, then leave at once: tearing gloo down while the peers
        # are inside a collective can abort the process and lose the message.
        if _user_error(exc):  # the user's mistake (a bad setting, a checkpoint of other settings): no traceback
            text = f"{_USER_ERROR}{type(exc).__name__}\n{exc}"
        else:
            text = f"rank {rank} failed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        with open(_rank_file(result, "error", rank), "w") as fh:
            fh.write(text)
        os._exit(1)


# An error file starting with this marker holds a user-facing RecgoError: its class name on the rest of
# the first line, its message on the following lines (the launcher raises the same class again).
_USER_ERROR = "recgo-user-error: "


def _user_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a user-facing recgo error (shown as one line, no traceback): a RecgoError
    except the ones that mean a bug in recgo."""
    from .. import errors

    return (isinstance(exc, errors.RecgoError) and not isinstance(exc, (errors.InternalError, errors.AbiError))
            and type(exc).__name__ in vars(errors))


def _reraise_user_error(text: str, prefix: str) -> None:
    """If ``text`` (an error file) holds a user-facing error, raise the same class with ``prefix``."""
    if not text.startswith(_USER_ERROR):
        return
    from .. import errors

    name, _, msg = text[len(_USER_ERROR):].partition("\n")
    cls = vars(errors).get(name)
    if isinstance(cls, type) and issubclass(cls, errors.RecgoError):
        raise cls(f"{prefix}{msg}") from None


def _rank_file(result: str, kind: str, rank: int) -> str:
    """The file beside ``result`` where ``rank`` leaves its ``kind`` ("error": its Python error,
    "crash": faulthandler's stacks)."""
    return os.path.join(os.path.dirname(result), f"{kind}-{rank}.txt")


def _crash_stack(result: str, rank: int) -> str:
    """What faulthandler wrote for ``rank`` when a fatal signal stopped it ("" when nothing)."""
    try:
        with open(_rank_file(result, "crash", rank), errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _failure(result: str, nproc: int, exc: Any, exitcodes: Sequence[int | None]) -> tuple[int, str]:
    """The failing rank to report and what to say: the earliest error file's (:func:`_first_error`),
    except where it says only that a peer failed and a rank was stopped by a fatal signal (faulthandler
    wrote its stack): that rank, the cause, which the launcher may hear of after its peer's error (it
    did under load). Without an error file, the rank ``exc`` (torch's join error) names."""
    first = _first_error(result, nproc)
    crashed = next((r for r in range(nproc) if _crash_stack(result, r)), None)
    if first is not None and (crashed is None or not _peer_failure(first[1])):
        return first
    rank = exc.error_index if crashed is None else crashed
    code = exitcodes[rank]
    how = exc if rank == exc.error_index or code is None or code >= 0 else \
        f"process {rank} terminated with signal {next((g.name for g in signal.Signals if g == -code), -code)}"
    msg = f"rank {rank} exited ({how}) without a Python error (killed or crashed)"
    stack = _crash_stack(result, rank)
    return rank, f"{msg}; its Python threads when it stopped:\n{stack}" if stack else msg


def _peer_failure(text: str) -> bool:
    """Whether an error file says only that a peer failed (``PeerFailureError``: it died or left)."""
    return text.split("\n", 1)[0].split(": ", 2)[1:2] == ["PeerFailureError"]


def _first_error(result: str, nproc: int) -> tuple[int, str] | None:
    """The first failing rank (the earliest error file) and what it wrote, if any rank wrote one."""
    found = [r for r in range(nproc) if os.path.exists(_rank_file(result, "error", r))]
    if not found:
        return None
    rank = min(found, key=lambda r: os.path.getmtime(_rank_file(result, "error", r)))
    with open(_rank_file(result, "error", rank)) as fh:
        return rank, fh.read().strip()


def _run_world(ctx: Any) -> None:
    """Wait for the spawned ranks of ``ctx`` (torch.multiprocessing's context). If this process is
    interrupted or terminated (SIGTERM, as a job scheduler stops it) the ranks are stopped with it
    instead of training on as orphans: SIGTERM becomes a KeyboardInterrupt here, and on any exception
    the live ranks get SIGTERM, then SIGKILL after 5 s."""
    from .._signals import terminate_as_interrupt

    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    level = spawn_log.level
    with terminate_as_interrupt():
        try:
            # torch logs a warning as it stops the other ranks after one failed; the launcher reports
            # the failure itself
            spawn_log.setLevel(logging.ERROR)
            while not ctx.join():
                pass
        except BaseException:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
            for p in ctx.processes:
                p.join(5)
                if p.is_alive():
                    p.kill()
                    p.join()
            raise
        finally:
            spawn_log.setLevel(level)


def launch(cfg: Any, backends: Sequence[str], nproc: int, out: str | Path | None = None, progress: bool = True,
           **options: Any) -> dict[str, Any] | None:
    """Train on ``nproc`` ranks and return the report (on rank 0; None on the other torchrun ranks).

    Under torchrun the process is one rank of the world torchrun made (``nproc`` must match its world
    size) and trains the backends one after the other; otherwise each backend gets a fresh world of
    ``nproc`` spawned processes (nothing of one backend's run stays in memory for the next) and this
    process waits for them and writes the report. ``options``:
    ``threads`` (torch threads per rank; default cores ÷ nproc), ``one_world`` (spawn: all backends
    in one world, which starts faster), ``resume`` (each backend continues from its checkpoint folder
    ``<cfg.checkpoint>.<backend>`` when it holds one; see :mod:`recgo.train.nproc_checkpoint`) and, for
    tests, ``weights_dir`` (each backend's final global tables are written there) and ``fail_at``
    ((rank, step): that rank raises; (rank, step, "abort"): it aborts)."""
    from .run import nproc_report

    env = env_world()
    if env is not None:
        rank, size = env
        if size != nproc:
            raise InvalidInputError(f"--nproc {nproc} but torchrun started a world of {size}")
        runs, placement = _worker(rank, size, None, cfg, backends, progress, None, options)
        return nproc_report(cfg, runs, placement, out) if rank == 0 else None
    import torch.multiprocessing as mp

    runs, placement = {}, {}
    groups = [list(backends)] if options.get("one_world") else [[b] for b in backends]
    for group in groups:
        backend = ",".join(group)
        with tempfile.TemporaryDirectory(prefix="recgo-train-") as tmp:
            result = os.path.join(tmp, "runs.pt")
            args = (nproc, free_port(), cfg, group, progress, result, options)
            ctx = mp.start_processes(_spawned, args=args, nprocs=nproc, join=False, start_method="spawn")
            try:
                _run_world(ctx)
            except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
                rank, msg = _failure(result, nproc, exc, [p.exitcode for p in ctx.processes])
                _reraise_user_error(msg, f"--nproc {nproc}, backend {backend}, rank {rank}: ")
                raise TrainingProcessError(f"--nproc {nproc}, backend {backend}: the job stopped because "
                                           f"{msg}") from None
            got_runs, got_placement = torch.load(result, weights_only=False)
        runs |= got_runs
        placement |= got_placement
    return nproc_report(cfg, runs, placement, out)
