"""State-dict values of distributed training, made whole for an unsharded collection.

* torch's distributed tensors (a TorchRec ``DistributedModelParallel``'s ``ShardedTensor`` tables, an
  FSDP2 / tensor-parallel ``DTensor``) are made plain where this process holds the whole tensor, and
  refused by name where it does not: torch's copy into a recgo table raised a bare ``RuntimeError``
  ("torch function 'is_complex' ... not supported for ShardedTensor") (:func:`make_whole`).
* recgo's own sharded collections' entries (``<table>.rank<r>_of_<world>.weight`` with the rows'
  ``shard_ids``, ``recgo._rank_tags``), every rank's of one world merged into one state dict, become
  the whole table under the plain names (:func:`tables_from_ranks`). Before, an unsharded collection
  took them for unexpected keys: ``load_state_dict(..., strict=False)`` of a sharded model's state dict
  left every table at its initial weights without a word.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

import torch

from .._rank_tags import RANK_TAG, SHARD_IDS
from ..errors import InvalidInputError


def _sharded_whole(key: str, value: Any) -> torch.Tensor:
    """A ShardedTensor whose every shard is local, as one tensor."""
    shards = value.local_shards()
    if len(shards) != len(value.metadata().shards_metadata):
        raise InvalidInputError(
            f"state dict entry {key!r} is a ShardedTensor (a TorchRec DistributedModelParallel's table) with "
            f"{len(value.metadata().shards_metadata) - len(shards)} of its shards on other ranks: a recgo collection "
            "loads whole tables (or a recgo sharded collection's own state dict). Convert the sharded model's "
            "checkpoint with torch.distributed.checkpoint into the recgo model (DCP gathers the shards), or "
            "save the TorchRec model unsharded")
    whole = torch.empty(tuple(value.size()), dtype=shards[0].tensor.dtype if shards else torch.float32)
    for shard in shards:
        at = tuple(slice(o, o + n) for o, n in zip(shard.metadata.shard_offsets, shard.metadata.shard_sizes))
        whole[at] = shard.tensor.detach().to("cpu")
    return whole


def _dtensor_whole(key: str, value: Any) -> torch.Tensor:
    """A DTensor this process holds whole (replicated, or a mesh of one), as a plain tensor."""
    local = value.to_local()
    if tuple(local.shape) != tuple(value.shape):
        raise InvalidInputError(
            f"state dict entry {key!r} is a DTensor sharded over {value.device_mesh.size()} processes (this one "
            f"holds {tuple(local.shape)} of {tuple(value.shape)}): a recgo collection loads whole tables; gather it "
            "(DTensor.full_tensor() on every rank) or load through torch.distributed.checkpoint")
    return local.detach()


def make_whole(state_dict: dict[str, Any], prefix: str) -> None:
    """Replace, in place, each entry under ``prefix`` that is a ShardedTensor or DTensor by the plain tensor
    it holds, when this process holds all of it.

    Raises:
        InvalidInputError: an entry has shards on other processes (naming the entry and how to gather it).
    """
    sharded = sys.modules.get("torch.distributed._shard.sharded_tensor")  # none exists unless imported
    dtensor = sys.modules.get("torch.distributed.tensor")
    kinds = [(getattr(m, name), fn) for m, name, fn in ((sharded, "ShardedTensor", _sharded_whole),
                                                         (dtensor, "DTensor", _dtensor_whole)) if m is not None]
    if not kinds:
        return
    for key in [k for k in state_dict if k.startswith(prefix)]:
        for cls, whole in kinds:
            if isinstance(state_dict[key], cls):
                state_dict[key] = whole(key, state_dict[key])
                break


def whole_rows(table: str, num_rows: int, parts: Sequence[tuple[torch.Tensor, torch.Tensor]], where: str) -> torch.Tensor:
    """Table ``table``'s ``num_rows`` rows whole from its shards' ``(ids, rows)`` (replicas give the same
    rows twice).

    Raises:
        InvalidInputError: an ID outside the table, a part whose rows and IDs differ in number, or a
            row no part holds (``where`` starts the message).
    """
    first = parts[0][1]
    full = torch.empty(num_rows, *first.shape[1:], dtype=first.dtype)
    seen = torch.zeros(num_rows, dtype=torch.bool)
    for ids, rows in parts:
        ids = ids.to(torch.int64).reshape(-1)
        if ids.numel() != rows.shape[0] or (ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < num_rows)):
            raise InvalidInputError(f"{where}: table {table!r}: a shard of {rows.shape[0]} rows has {ids.numel()} IDs "
                                    f"(in [0, {num_rows}) each): it is no shard of this table")
        full[ids] = rows
        seen[ids] = True
    if not bool(seen.all()):
        raise InvalidInputError(f"{where}: table {table!r}: {int((~seen).sum())} rows on no rank")
    return full


def tables_from_ranks(state_dict: dict[str, Any], prefix: str, configs: Sequence[Any], tables: Any) -> None:
    """Replace, in place, a recgo sharded collection's entries of each fixed table in ``configs`` (keys
    ``<prefix><table>.rank<r>_of_<world>.<entry>``, every rank's of one world: the ranks' state dicts
    merged) by the whole table under the unsharded names (``<prefix><table>.weight``, and
    ``optimizer_state`` / ``optimizer_step`` where a fused collection saved them), each row placed by its
    ``shard_ids``: what ``gather_state_dict`` would have given, so an unsharded collection (a serving
    model in one process) loads a sharded model's checkpoint. ``tables`` holds the collection's table
    modules by name: an unfused shard's step counter goes only to a table that keeps one.

    Raises:
        InvalidInputError: some rank's entries are missing (the world's other ranks saved rows this
            one lacks), they come from several worlds, the ranks are at different optimizer steps (a
            torn save), the table is a dynamic-ID table (its rows have no fixed places: load the
            entries into the sharded model, which a world of one process runs), or the state dict holds
            the table under both the plain and the rank-tagged names.
    """
    found: dict[str, dict[tuple[int, int], dict[str, str]]] = {}  # table → (rank, world) → entry → key
    for k in state_dict:  # one pass over the keys (table names hold no dot: ModuleDict keys)
        if isinstance(k, str) and k.startswith(prefix):
            name, _, rest = k[len(prefix):].partition(".")
            tag, _, entry = rest.partition(".")
            m = RANK_TAG.fullmatch(tag)
            if m and entry and "." not in entry:
                found.setdefault(name, {}).setdefault((int(m["rank"]), int(m["world"])), {})[entry] = k
    for cfg in configs:
        tagged = found.get(cfg.name)
        if not tagged:
            continue
        head = f"{prefix}{cfg.name}."
        where = f"loading table {cfg.name!r} from a sharded collection's state dict"
        ranks = sorted(tagged)
        worlds = sorted({w for _, w in ranks})
        if len(worlds) != 1 or [r for r, _ in ranks] != list(range(worlds[0])):
            raise InvalidInputError(
                f"{where}: it holds the entries of {', '.join(f'rank{r}_of_{w}' for r, w in ranks)}, not every rank's of "
                "one world, so rows would be missing: merge every rank's state dict (or load "
                "recgo.distributed.gather_state_dict(model) of the sharded model)")
        if cfg.dynamic is not None or any("dynamic_meta" in e for e in tagged.values()):
            raise InvalidInputError(
                f"{where}: a sharded dynamic-ID table's ID maps cannot be loaded into an unsharded collection; load "
                "them into the sharded model (shard_model on a world of one process takes every rank's entries) "
                "or checkpoint with save()/load()")
        if any(f"{head}{e}" in state_dict for e in ("weight", "optimizer_state", "optimizer_step")):
            raise InvalidInputError(f"{where}: the state dict holds the table both whole (under {head}weight ...) "
                                    "and as a sharded collection's entries; load one of them")
        parts = [{e: state_dict.pop(k) for e, k in tagged[r].items()} for r in ranks]
        for (r, _), p in zip(ranks, parts):
            lacking = [e for e in ("weight", SHARD_IDS) if not isinstance(p.get(e), torch.Tensor)]
            if lacking:
                raise InvalidInputError(f"{where}: rank {r}'s entries lack {lacking}")
        by_id = lambda entry: [(p[SHARD_IDS], p[entry]) for p in parts]  # noqa: E731
        state_dict[f"{head}weight"] = whole_rows(cfg.name, cfg.num_embeddings, by_id("weight"), where)
        fused = all(isinstance(p.get("optimizer_state"), torch.Tensor) for p in parts)
        if fused:
            state_dict[f"{head}optimizer_state"] = whole_rows(cfg.name, cfg.num_embeddings, by_id("optimizer_state"),
                                                              where)
        steps = {f"rank{r}": int(p["optimizer_step"].reshape(-1)[0]) for (r, _), p in zip(ranks, parts)
                 if isinstance(p.get("optimizer_step"), torch.Tensor) and p["optimizer_step"].numel()}
        keeps_step = "optimizer_step" in getattr(tables[cfg.name], "_buffers", {})
        if steps and (fused or keeps_step):  # an unfused shard's counter has no place in an unfused table
            from ..distributed._reshard import check_steps

            check_steps(where, cfg.name, steps, "the ranks' entries", InvalidInputError)
            state_dict[f"{head}optimizer_step"] = parts[0]["optimizer_step"]
