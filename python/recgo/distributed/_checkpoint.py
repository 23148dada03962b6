"""A sharded collection's own checkpoint format: one file per rank, loadable on any world size.

Each rank writes its shards' IDs with their rows, optimizer state and step (recgo's checksummed
checkpoint files); a load reads every file and keeps the rows its layout gives it, so the tables
re-distribute over a different world. A dynamic-ID table's shard is saved with its ID map (the rows
in use) and restored by ID (``_dynamic.restore``): as it was on the same world, re-distributed on
another.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ..errors import RecgoIOError
from ..modules.embedding import load_checkpoint, save_checkpoint
from . import _dynamic
from ._exchange import PeerFailureError
from ._reshard import check_covered, put_rows


def save_shards(coll: Any, directory: str | os.PathLike[str]) -> Path:
    """``ShardedEmbeddingBagCollection.save``: this rank's file, then (once every rank has written
    its own) rank 0 removes the files of another world size, so the folder holds one set."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    g = coll._groups
    # One id for every file of this save (rank 0 draws it), so a load can tell a set from one whose
    # save did not finish on every rank (new files beside the last save's).
    save_id = torch.tensor(int.from_bytes(os.urandom(7), "little") if g.rank == 0 else 0, dtype=torch.int64)
    try:
        dist.broadcast(save_id, src=dist.get_global_rank(g.world, 0), group=g.world)
    except RuntimeError as exc:
        raise PeerFailureError(f"rank {g.rank}: saving to {d}: a peer did not join the save: {exc}") from exc
    # Flat name → tensor entries, so the file carries recgo's per-tensor checksums.
    doc: dict[str, torch.Tensor] = {"world": torch.tensor(g.world_size), "rank": torch.tensor(g.rank),
                                    "save_id": save_id}
    for cfg, shard in zip(coll._configs, coll.embedding_bags.values()):
        p = f"tables.{cfg.name}."
        if cfg.dynamic is not None:  # the rows in use with the ID map (dynamic_*), from one snapshot
            doc |= {p + k: v for k, v in _dynamic.export(coll, cfg.name).items()}
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
    try:
        dist.barrier(group=g.world)  # every rank's new file is in place before the old set goes
        if g.rank == 0:
            for old in d.glob("shard-*-of-*.pt"):
                if old.stem.split("-of-")[-1] != str(g.world_size):
                    old.unlink(missing_ok=True)
        dist.barrier(group=g.world)  # and gone before any rank goes on (to load it, say)
    except RuntimeError as exc:  # gloo's errors for a dead or late peer
        raise PeerFailureError(f"rank {g.rank}: saving to {d}: a peer did not finish its part: {exc}") from exc
    return path


def _save_id(path: Path) -> int | None:
    """The id of the save that wrote ``path`` (memory-mapped: nothing else is read), None for a file
    without one (written before the id was added) or one the full load will refuse anyway."""
    try:
        entry = torch.load(path, weights_only=True, mmap=True, map_location="cpu")["state_dict"].get("save_id")
    except Exception:  # unreadable: load_checkpoint names the problem
        return None
    return None if entry is None else int(entry)


def load_shards(coll: Any, directory: str | os.PathLike[str], strict: bool = True) -> None:
    """``ShardedEmbeddingBagCollection.load``: every file of the set, each rank keeping the rows its
    layout gives it (the engine's ``locate``); every row of this rank must be in some file, and with
    ``strict`` every table of the files must be one of the collection's and every table of the
    collection in the files (``strict=False`` leaves a table no file holds as it is, as torch's
    ``load_state_dict`` leaves a missing key)."""
    d = Path(directory)
    files = sorted(d.glob("shard-*-of-*.pt"))
    if not files:
        raise RecgoIOError(f"{d}: no shard-*-of-*.pt checkpoint files")
    worlds = {int(f.stem.split("-of-")[1]) for f in files}
    if len(worlds) != 1 or len(files) != next(iter(worlds)):
        raise RecgoIOError(f"{d}: expected one complete set of shard files, found {[f.name for f in files]}")
    ids = {f.name: _save_id(f) for f in files}
    if len(set(ids.values())) > 1:
        raise RecgoIOError(f"{d}: the shard files come from different saves ({ids}): a save did not finish on "
                           "every rank, so the folder mixes it with the save before; load an earlier checkpoint")
    # which of this rank's fixed rows some file held (a dynamic shard has no fixed rows to cover)
    covered = [torch.zeros(n if c.dynamic is None else 0, dtype=torch.bool)
               for n, c in zip(coll._local_rows, coll._configs)]
    parts: dict[str, list[dict[str, torch.Tensor]]] = {c.name: [] for c in coll._configs if c.dynamic is not None}
    g = coll._groups
    own = None
    absent = [True] * len(coll._configs)  # tables no file holds (refused with strict)
    with torch.no_grad():
        for i, f in enumerate(files):
            doc = load_checkpoint(f)
            if int(doc["world"]) == g.world_size and int(doc["rank"]) == g.rank:
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
                absent[t] = False
                if int(e["rows"]) != cfg.num_embeddings or int(e["dim"]) != cfg.embedding_dim:
                    raise RecgoIOError(f"{f.name}: table {cfg.name!r} has another shape in the checkpoint "
                                       f"({int(e['rows'])} × {int(e['dim'])}, the collection's is "
                                       f"{cfg.num_embeddings} × {cfg.embedding_dim})")
                if (cfg.dynamic is not None) != ("dynamic_ids" in e):
                    raise RecgoIOError(f"{f.name}: table {cfg.name!r} was saved as a "
                                       f"{'fixed' if cfg.dynamic is not None else 'dynamic-ID'} table")
                if cfg.dynamic is not None:  # restored once every file is read (below)
                    parts[cfg.name].append(e)
                    shard.optimizer_step.copy_(e["step"])
                    continue
                put_rows(coll, t, e, covered[t], f.name, RecgoIOError)
        for name, ps in parts.items():
            if ps:
                _dynamic.restore(coll, name, ps, own, str(d))
    for t, (c, gone) in enumerate(zip(covered, absent)):
        if not gone:
            check_covered(coll, t, c, str(d), RecgoIOError)
