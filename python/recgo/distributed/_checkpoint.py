"""A sharded collection's own checkpoint format: one file per rank, loadable on any world size.

Each rank writes its shards' IDs with their rows, optimizer state and step (recgo's checksummed
checkpoint files); a load reads every file and keeps the rows its layout gives it, so the tables
re-distribute over a different world. A dynamic-ID table's shard is saved with its ID map (the rows
in use) and restored by ID (``_dynamic.prepare``): as it was on the same world, re-distributed on
another. A load is all or nothing across the ranks (:func:`load_shards`): a file, table or row that
fails its checks on any rank leaves every rank's shards as they were.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .. import errors
from ..errors import RecgoIOError
from ..modules._load_whole import whole_load
from ..modules._storage import check_optimizer_state
from ..modules.embedding import load_checkpoint, save_checkpoint
from . import _dynamic, _failed
from ._exchange import COLLECTIVES, peer_failure, peer_failures
from ._reshard import Staged, check_covered, check_dynamic_part, check_steps, put_rows


class CollectionCheckpoints:
    """The checkpoint methods of :class:`ShardedEmbeddingBagCollection` (a base class of it): its own
    format (:meth:`save`, :meth:`load`) and ``load_state_dict`` all or nothing."""

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write this rank's shards (IDs, weights, optimizer state, step) to
        ``directory/shard-<rank>-of-<world>.pt`` (atomically); every rank calls it (a collective). Once
        every rank has written its file, rank 0 removes the shard files another world size left in the
        folder, so that the folder holds one set and :meth:`load` takes it. After a backward exchange
        that raised on this rank it raises :class:`PartialStepError` (``_failed``) until a :meth:`load`."""
        _failed.refuse(self, f"save({str(directory)!r})")  # before the save's first collective
        with COLLECTIVES:  # not between the ops of a step another thread of this rank drives
            return save_shards(self, directory)

    def load(self, directory: str | os.PathLike[str], strict: bool = True) -> None:
        """Load shards saved by :meth:`save` from any world size: each rank reads every saved shard and
        keeps the rows its layout gives it (the engine decides), so tables re-distribute. With
        ``strict`` (as ``load_state_dict``'s), a checkpoint holding tables this collection lacks, or
        lacking one of its tables, raises ``RecgoIOError``; ``strict=False`` loads the tables both have
        and leaves the others (a table the checkpoint lacks keeps its values)."""
        with COLLECTIVES:
            load_shards(self, directory, strict)
        _failed.clear(self)  # every shard as the checkpoint has it

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """``nn.Module.load_state_dict`` (this rank's entries, another world's complete set, or an
        unsharded collection's, re-distributed by ID), all or nothing: if it raises, every table is as
        it was, weights, optimizer state, steps and ID maps (:func:`recgo.modules._load_whole.whole_load`)."""
        with whole_load(self, state_dict):
            return super().load_state_dict(state_dict, strict=strict, assign=assign)


def save_shards(coll: Any, directory: str | os.PathLike[str]) -> Path:
    """``ShardedEmbeddingBagCollection.save``: this rank's file, then (once every rank has written
    its own) rank 0 removes the files of another world size, so the folder holds one set."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    g = coll._groups
    # One id for every file of this save (rank 0 draws it), so a load can tell a set from one whose
    # save did not finish on every rank (new files beside the last save's).
    save_id = torch.tensor(int.from_bytes(os.urandom(7), "little") if g.rank == 0 else 0, dtype=torch.int64)
    with peer_failures(g, f"saving to {d}: agreeing on the save's id"):
        dist.broadcast(save_id, src=dist.get_global_rank(g.world, 0), group=g.world)
    # Flat name → tensor entries, so the file carries recgo's per-tensor checksums.
    doc: dict[str, torch.Tensor] = {"world": torch.tensor(g.world_size), "rank": torch.tensor(g.rank),
                                    "save_id": save_id}
    for cfg, shard in zip(coll._configs, coll.embedding_bags.values()):
        p = f"tables.{cfg.name}."
        if cfg.dynamic is not None:  # the rows in use with the ID map (dynamic_*), from one snapshot
            doc |= {p + k: v for k, v in _dynamic.export(coll, cfg.name).items()}
            doc[p + _dynamic.LAYOUT] = _dynamic.layout(coll, cfg.name)  # a move of pending IDs, told on load
            doc |= {p + "step": shard.optimizer_step.clone(), p + "rows": torch.tensor(cfg.num_embeddings),
                    p + "dim": torch.tensor(cfg.embedding_dim)}
            continue
        doc |= {p + "ids": coll.local_ids(cfg.name), p + "weight": shard.weight.detach().clone(),
                p + "step": shard.optimizer_step.clone(), p + "rows": torch.tensor(cfg.num_embeddings),
                p + "dim": torch.tensor(cfg.embedding_dim)}
        if hasattr(shard, "optimizer_state"):
            doc[p + "state"] = shard.optimizer_state.clone()
    path = d / f"shard-{g.rank}-of-{g.world_size}.pt"
    save_checkpoint(doc, path)
    with peer_failures(g, f"saving to {d}: waiting for every rank's file"):
        dist.barrier(group=g.world)  # every rank's new file is in place before the old set goes
        if g.rank == 0:
            for old in d.glob("shard-*-of-*.pt"):
                m = _NAME.fullmatch(old.name)  # only shard files: "shard-0-of-1 copy.pt" is someone's
                if m is not None and int(m.group(2)) != g.world_size:
                    old.unlink(missing_ok=True)
        dist.barrier(group=g.world)  # and gone before any rank goes on (to load it, say)
    return path


_UNREADABLE = "unreadable"


def _save_id(path: Path) -> int | str | None:
    """The id of the save that wrote ``path`` (memory-mapped: nothing else is read), None for a file
    without one (written before the id was added), ``_UNREADABLE`` for one the full load will refuse
    anyway (naming the problem)."""
    try:
        entry = torch.load(path, weights_only=True, mmap=True, map_location="cpu")["state_dict"].get("save_id")
        return None if entry is None else int(entry)
    except Exception:  # unreadable: load_checkpoint names the problem
        return _UNREADABLE


_NAME = re.compile(r"shard-(\d+)-of-(\d+)\.pt")
_MAX_STEP = 1 << 53  # as an unsharded collection's load (modules._storage)


def _set_of(d: Path) -> list[Path]:
    """The folder's shard files, after checking that they are one complete set (their names parse)."""
    files = sorted(d.glob("shard-*-of-*.pt"))
    if not files:
        raise RecgoIOError(f"{d}: no shard-*-of-*.pt checkpoint files")
    odd = [f.name for f in files if not _NAME.fullmatch(f.name)]
    if odd:  # int() of "1 copy" raised ValueError
        raise RecgoIOError(f"{d}: {odd} match shard-*-of-*.pt but are not shard files (shard-<rank>-of-<world>.pt): "
                           "move them out of the checkpoint folder")
    worlds = {int(_NAME.fullmatch(f.name).group(2)) for f in files}  # type: ignore[union-attr]
    if len(worlds) != 1 or len(files) != next(iter(worlds)):
        raise RecgoIOError(f"{d}: expected one complete set of shard files, found {[f.name for f in files]}")
    return files


def _int(doc: dict[str, torch.Tensor], key: str, where: str, lo: int = 0, hi: int = 1 << 63) -> int:
    """Entry ``key`` of a shard file: one integer in ``[lo, hi)``, else ``RecgoIOError`` naming it (a
    missing entry raised KeyError, two values or a NaN a ValueError)."""
    v = doc.get(key)
    if not isinstance(v, torch.Tensor) or v.numel() != 1 or v.dtype not in (torch.int64, torch.int32) \
            or not lo <= int(v.reshape(-1)[0]) < hi:
        shown = v.tolist() if isinstance(v, torch.Tensor) and v.numel() <= 4 else v if v is None else type(v).__name__
        bound = f"≥ {lo}" if hi == 1 << 63 else f"in [{lo}, 2^{hi.bit_length() - 1})"
        raise RecgoIOError(f"{where}: entry {key!r} is {shown!r}, not one integer {bound} (a damaged or forged "
                           "checkpoint)")
    return int(v.reshape(-1)[0])


def load_shards(coll: Any, directory: str | os.PathLike[str], strict: bool = True) -> None:
    """``ShardedEmbeddingBagCollection.load``: every file of the set, each rank keeping the rows its
    layout gives it (the engine's ``locate``); every row of this rank must be in some file, and with
    ``strict`` every table of the files must be one of the collection's and every table of the
    collection in the files (``strict=False`` leaves a table no file holds as it is, as torch's
    ``load_state_dict`` leaves a missing key).

    All or nothing, on every rank: each rank reads and checks every file, stages its rows
    (:class:`._reshard.Staged`) and has the engine check its dynamic-ID shards' imports, changing
    nothing, then the ranks tell each other whether that succeeded (:func:`._exchange.peer_failure`).
    Only if it did on every rank are the dynamic-ID shards imported and the staged rows copied in;
    otherwise every rank raises (this rank's error, or one naming the rank that failed and its
    reason), the shards' rows, optimizer state, steps and ID maps as they were. A refused load imports
    nothing: an import, even one put back, replaces every row of the shard for a backward whose forward
    ran before it, which then dropped its gradients (the load was refused, yet that step was lost)."""
    d = Path(directory)
    g = coll._groups
    staged: dict[int, Staged] = {}
    steps: dict[int, torch.Tensor] = {}
    imports: dict[str, Callable[..., None]] = {}
    failure: Exception | None = None
    try:
        staged, steps, imports = _stage(coll, d, strict)
    except Exception as exc:  # any: the peers must hear of it before they commit
        failure = exc
    peer = peer_failure(g, f"loading {d}", failure)
    if failure is not None:
        raise failure
    if peer is not None:
        r, kind, reason = peer
        raise _error_class(kind)(f"rank {g.rank}: loading {d}: rank {r} refused the checkpoint, so no rank "
                                 f"loaded it (this rank's tables are as they were): {kind}: {reason}")
    before: dict[str, dict[str, torch.Tensor]] = {}  # dynamic shards imported so far, as they were
    try:
        for name, load in imports.items():  # checked: an import fails only on a shard closed since
            before[name] = _dynamic.export(coll, name)
            load()
    except BaseException:
        _put_back(coll, before)
        raise
    with torch.no_grad():
        for t, shard in enumerate(coll.embedding_bags.values()):
            if t in staged:
                staged[t].commit(shard)
            elif t in steps:
                shard.optimizer_step.copy_(steps[t])


def _stage(coll: Any, d: Path, strict: bool
           ) -> tuple[dict[int, Staged], dict[int, torch.Tensor], dict[str, Callable[..., None]]]:
    """:func:`load_shards`' checks, changing nothing: every file read and checked, the fixed tables'
    rows staged (by table index), their coverage checked, then the dynamic-ID tables' parts checked,
    by the engine too. Returns the staged tables, the dynamic tables' steps (the last file's, as a
    fixed table's) and their imports (by table name, :func:`._dynamic.prepare`'s)."""
    files = _set_of(d)
    # (an unreadable file is named by its own load, not taken for another save's: a truncated shard was
    # reported as "the shard files come from different saves")
    ids = {f.name: i for f in files if (i := _save_id(f)) != _UNREADABLE}
    if len(set(ids.values())) > 1:
        raise RecgoIOError(f"{d}: the shard files come from different saves ({ids}): a save did not finish on "
                           "every rank, so the folder mixes it with the save before; load an earlier checkpoint")
    g = coll._groups
    staged: dict[int, Staged] = {}
    steps: dict[int, torch.Tensor] = {}
    parts: dict[int, list[dict[str, torch.Tensor]]] = {}  # a dynamic table's parts, one per file
    counted: dict[str, dict[str, int]] = {}  # table -> file -> its optimizer step
    own = None
    with torch.no_grad():
        for i, f in enumerate(files):
            doc = load_checkpoint(f)
            if _int(doc, "world", f.name, 1) == g.world_size and _int(doc, "rank", f.name) == g.rank:
                own = i
            extra = sorted({k.split(".")[1] for k in doc if k.startswith("tables.")} - {c.name for c in coll._configs})
            if strict and extra:
                raise RecgoIOError(f"{f.name}: the checkpoint holds tables {extra} this collection does not have; "
                                   "load(directory, strict=False) loads the tables it has and leaves those")
            for t, (cfg, shard) in enumerate(zip(coll._configs, coll.embedding_bags.values())):
                p = f"tables.{cfg.name}."
                e = {k[len(p):]: v for k, v in doc.items() if k.startswith(p)}
                if not e:
                    if strict:
                        raise RecgoIOError(f"{f.name}: the checkpoint has no table {cfg.name!r}; load(directory, "
                                           "strict=False) loads the tables it has and leaves this one as it is")
                    continue
                _check_table(cfg, e, f.name)
                counted.setdefault(cfg.name, {})[f.name] = _int(e, "step", f"{f.name}: table {cfg.name!r}", 0, _MAX_STEP)
                state = e.get("state", e.get("optimizer_state"))
                if isinstance(state, torch.Tensor) and coll.fused_optimizer is not None:  # NaN, negative sums
                    check_optimizer_state(f"{f.name}: tables.{cfg.name}.state", state, coll.fused_optimizer,
                                          cfg.embedding_dim)
                if cfg.dynamic is not None:  # imported once every file is read (below)
                    check_dynamic_part(cfg, e, f.name, RecgoIOError)
                    parts.setdefault(t, []).append(e)
                    steps[t] = e["step"]
                    continue
                put_rows(coll, t, e, staged.setdefault(t, Staged.of(shard)), f.name, RecgoIOError)
    _check_steps(d, counted)
    for t, s in staged.items():
        check_covered(coll, t, s.covered, str(d), RecgoIOError)
    imports = {coll._configs[t].name: _dynamic.prepare(coll, coll._configs[t].name, ps, own, str(d))
               for t, ps in parts.items()}
    for load in imports.values():
        load(check_only=True)
    return staged, steps, imports


def _check_steps(d: Path, counted: dict[str, dict[str, int]]) -> None:
    """Refuse a set whose files hold a table at different optimizer steps (:func:`check_steps`)."""
    for name, by_file in counted.items():
        check_steps(str(d), name, by_file, "the shard files", RecgoIOError)


def _check_table(cfg: Any, e: dict[str, torch.Tensor], where: str) -> None:
    """Refuse a file's entries ``e`` of table ``cfg`` of another shape or kind (fixed or dynamic-ID)."""
    lacks = sorted({"rows", "dim", "step"} - set(e))
    if lacks:
        raise RecgoIOError(f"{where}: table {cfg.name!r} lacks {lacks} (a damaged or partial checkpoint?)")
    rows, dim = (_int(e, k, f"{where}: table {cfg.name!r}", 1) for k in ("rows", "dim"))
    if rows != cfg.num_embeddings or dim != cfg.embedding_dim:
        raise RecgoIOError(f"{where}: table {cfg.name!r} has another shape in the checkpoint "
                           f"({rows} × {dim}, the collection's is {cfg.num_embeddings} × {cfg.embedding_dim})")
    if (cfg.dynamic is not None) != ("dynamic_ids" in e):
        raise RecgoIOError(f"{where}: table {cfg.name!r} was saved as a "
                           f"{'fixed' if cfg.dynamic is not None else 'dynamic-ID'} table")


def _put_back(coll: Any, before: dict[str, dict[str, torch.Tensor]]) -> None:
    """Undo a refused load's dynamic-ID imports: each shard as it was."""
    for name, snapshot in before.items():
        _dynamic.load_exact(coll, name, snapshot)


def _error_class(name: str) -> type[Exception]:
    """recgo's error class of that name (a peer's error, raised alike here), else RecgoIOError."""
    cls = getattr(errors, name, None)
    return cls if isinstance(cls, type) and issubclass(cls, errors.RecgoError) else RecgoIOError
