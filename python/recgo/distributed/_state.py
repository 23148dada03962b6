"""A sharded collection's state_dict entries are its rank's: keys that say whose they are.

Under the unsharded names on every rank, torch.distributed.checkpoint takes a shard for a replicated
tensor and keeps a single rank's copy of each key, so the ranks' rows would be lost or swapped in
silence; with the rank in the key it saves every rank's, and a load onto another rank, world size or
sharding is refused by name.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import torch

from ..errors import InvalidInputError
from ..modules._load_whole import put_back, save_tables
from ..modules._distributed_values import make_whole
from ..modules._storage import allow_weights_only
from .._rank_tags import RANK_TAG, SHARD_IDS, rank_tag
from .. import dynamic
from . import _dynamic, _failed
from ._reshard import check_parts, check_steps, redistribute


def tables_attr(module: Any) -> str:
    """The state-dict name of the module's shards (``embedding_bags`` or ``embeddings``)."""
    return next(n for n, m in module._modules.items() if m is module.embedding_bags)


def _tables_prefix(module: Any, prefix: str) -> str:
    """The state_dict key prefix of the module's shards (``embedding_bags.`` or ``embeddings.``)."""
    return f"{prefix}{tables_attr(module)}."


def _rank_tag(module: Any) -> str:
    g = module._groups
    return rank_tag(g.rank, g.world_size)


def rank_keys(module: Any, state_dict: dict, prefix: str, _meta: Any) -> None:
    """state_dict post-hook: a shard's entries are this rank's alone, so their keys say whose they are
    (``<table>.rank<r>_of_<world>.weight``, ``.optimizer_state``, ``.optimizer_step``), next to the IDs
    of its rows (``.shard_ids``). Under the same key on every rank, torch.distributed.checkpoint would
    take them for replicated tensors and keep one rank's copy of each (not even the same rank's for
    every key); with these keys it saves every rank's, and loading onto another rank, sharding or world
    size is refused (:func:`own_keys`) instead of handing over another rank's rows."""
    p, tag = _tables_prefix(module, prefix), _rank_tag(module)
    for cfg in module._configs:
        head = f"{p}{cfg.name}."
        ids, counts = state_dict.get(f"{head}dynamic_ids"), state_dict.get(f"{head}dynamic_counts")
        if cfg.dynamic is not None and ids is not None and counts is not None:
            shard_ids = ids[counts > 0]  # the IDs of the snapshot the table's entries came from (no second one)
        else:
            shard_ids = module.local_ids(cfg.name)
        for k in [k for k in state_dict if k.startswith(head) and "." not in k[len(head):]]:
            state_dict[f"{head}{tag}.{k[len(head):]}"] = state_dict.pop(k)
        state_dict[f"{head}{tag}.{SHARD_IDS}"] = shard_ids
        if cfg.dynamic is not None:  # whether an ID changed rank by the load, pending ones included
            state_dict[f"{head}{tag}.{_dynamic.LAYOUT}"] = _dynamic.layout(module, cfg.name)


# a fixed shard's state_dict entries → the names of a saved part (put_rows)
_FIXED = {SHARD_IDS: "ids", "weight": "weight", "optimizer_state": "state", "optimizer_step": "step"}


def _tagged(state_dict: dict, head: str) -> dict[str, dict[str, str]]:
    """The rank-tagged entries under ``head`` (a table's key prefix): tag → entry name → key."""
    out: dict[str, dict[str, str]] = {}
    for k in state_dict:
        if k.startswith(head):
            tag, _, entry = k[len(head):].partition(".")
            if RANK_TAG.fullmatch(tag) and entry and "." not in entry:
                out.setdefault(tag, {})[entry] = k
    return out


def _unsharded(module: Any, t: int, state_dict: dict, head: str) -> bool:
    """For a fixed table's ``weight`` under the plain name (an unsharded collection's, TorchRec's or
    recgo's, directly or through torch.distributed.checkpoint): whether it must be spread by ID, the
    shard holding other rows or the same in another order (False: it loads as it is). A weight of
    another shape than the whole table's raises: it is no table of this size (a shard's shape would
    load another table's rows in silence)."""
    cfg, g = module._configs[t], module._groups
    shape, want = tuple(state_dict[f"{head}weight"].shape), (cfg.num_embeddings, cfg.embedding_dim)
    if shape != want:
        raise InvalidInputError(
            f"rank {g.rank}: the state dict holds table {cfg.name!r} under the plain names with shape {shape}, "
            f"the table's is {want} (an unsharded table of another size, or a shard saved without the rank "
            "in its keys): load a state dict of this table")
    return module._local_rows[t] != cfg.num_embeddings or not torch.equal(module.local_ids(cfg.name),
                                                                          torch.arange(cfg.num_embeddings))


def own_keys(module: Any, state_dict: dict, prefix: str, _meta: Any,
             _strict: bool, _missing: list, unexpected: list, _errors: list) -> None:
    """load_state_dict pre-hook. This rank's own entries (:func:`rank_keys`) load under the module's
    own names, after checking that their ``shard_ids`` are this rank's rows. Entries of every rank of
    another world or sharding (one world's complete set), or an unsharded collection's whole table,
    are re-distributed by ID (:func:`._reshard.redistribute`), as ``load()`` re-distributes its files;
    :func:`reloaded_keys` then drops the table's entries from the missing keys; optimizer state this
    collection has no place for is reported unexpected, as torch reports it. An incomplete set of
    another world's or sharding's shards, a set whose ranks' entries of a table are at different
    optimizer steps (a torn save, :func:`_check_set_steps`), or a plain ``weight`` of another shape
    than the whole table's, raises ``InvalidInputError``, since rows would be lost, misplaced or mixed
    from two steps."""
    # Loaded as a part of a model (torch calls this hook, not the collection's load_state_dict, whose
    # whole_load keeps a copy): each table this hook re-distributes is copied just before, and put back
    # if a later one is refused (a refused dynamic table left the fixed ones before it loaded, the
    # collection half new). A table that loads as it is changes only after the hook, in torch's copy.
    make_whole(state_dict, prefix)  # a TorchRec DMP's ShardedTensor held whole here: the plain table
    saved: list[Any] | None = None if getattr(module, "_whole_load", False) else []
    try:
        _own_keys(module, state_dict, prefix, unexpected, _errors,
                  None if saved is None else lambda name: saved.extend(save_tables(module, {}, prefix, [name])))
        # this rank's own entries load after this hook, table by table: the engine checks every dynamic
        # table's first, so a refused one leaves the others unimported (an import, even one put back,
        # replaces the rows a pending backward's forward looked up)
        dynamic.check_checkpoint(module, state_dict, _tables_prefix(module, prefix))
    except BaseException:
        if saved:
            put_back(module, saved)
        raise


def _own_keys(module: Any, state_dict: dict, prefix: str, unexpected: list, _errors: list,
              before_change: Callable[[str], None] | None) -> None:
    """:func:`own_keys`' work; ``before_change(name)`` runs before table ``name`` is re-distributed."""
    p, tag = _tables_prefix(module, prefix), _rank_tag(module)
    g = module._groups
    module._reloaded = [k for k in getattr(module, "_reloaded", []) if not k.startswith(p)]
    module._loading = (p, _errors, len(_errors))  # for reloaded_keys: did every table load?
    for cfg in module._configs:  # before any table changes: a refused set leaves them all as they were
        _check_set_steps(module, cfg, state_dict, _tagged(state_dict, f"{p}{cfg.name}."))
    work: list[tuple[int, Any, list[dict[str, Any]], int | None, list[str]]] = []  # tables to re-distribute
    for t, cfg in enumerate(module._configs):
        head = f"{p}{cfg.name}."
        tagged = _tagged(state_dict, head)
        for entries in tagged.values():  # (a dynamic part has a meta: another rank's may be light)
            if cfg.dynamic is None and "dynamic_meta" in entries:
                raise InvalidInputError(f"rank {g.rank}: the state dict holds table {cfg.name!r} as a dynamic-ID table "
                                        "(an ID map and the rows in use); this collection's is a fixed table")
            if cfg.dynamic is not None and "dynamic_meta" not in entries:
                raise InvalidInputError(f"rank {g.rank}: the state dict holds table {cfg.name!r} as a fixed table; "
                                        "this collection's is a dynamic-ID table")
        if set(tagged) == {tag} and _own_rows(module, cfg, state_dict, tagged[tag]):
            if cfg.dynamic is None:  # torch would copy them after this hook, refusing a shape only at the end
                _check_shapes(module, cfg, state_dict, tagged[tag], g.rank)
            for entry, k in tagged[tag].items():
                v = state_dict.pop(k)
                if entry not in (SHARD_IDS, _dynamic.LAYOUT):  # (made at save time: no place in the table)
                    state_dict[f"{head}{entry}"] = v
            continue
        if tagged:
            loaded = {e for entries in tagged.values() for e in entries}
            parts, own = _complete_set(module, cfg, state_dict, tagged, tag)
        elif cfg.dynamic is None and isinstance(state_dict.get(f"{head}weight"), torch.Tensor):
            if not _unsharded(module, t, state_dict, head):  # the whole table, laid out as this shard holds it:
                plain = {e: f"{head}{e}" for e in _FIXED if f"{head}{e}" in state_dict}
                _check_shapes(module, cfg, state_dict, plain, g.rank)  # it loads as it is
                continue
            raw = {e: state_dict.pop(f"{head}{e}") for e in _FIXED if f"{head}{e}" in state_dict}
            loaded, own = set(raw), None
            parts = [{_FIXED[e]: v for e, v in raw.items()} | {"ids": torch.arange(cfg.num_embeddings)}]
        elif cfg.dynamic is not None and f"{head}dynamic_ids" in state_dict:
            # an unsharded dynamic table's ID map and rows (or a shard's under the plain names, as state
            # dicts had them before the rank tags): each rank admits the IDs it owns
            raw = {k[len(head):]: state_dict.pop(k) for k in [k for k in state_dict
                                                                if k.startswith(head) and "." not in k[len(head):]]}
            loaded, own, parts = set(raw), None, [raw]
        else:
            continue  # none of the table's entries: torch reports them missing (strict) or leaves the table
        if cfg.dynamic is None and "optimizer_state" in loaded and not hasattr(module.embedding_bags[cfg.name],
                                                                                 "optimizer_state"):
            unexpected.append(f"{head}optimizer_state")  # as torch reports it for a collection without one
            loaded.discard("optimizer_state")
        work.append((t, cfg, parts, own, [f"{head}{e}" for e in loaded]))
    where = f"rank {g.rank}: loading the state dict"
    for t, cfg, parts, own, _ in work:  # every dynamic table checked by the engine before any table changes
        if cfg.dynamic is not None:
            check_parts(module, t, parts, own, where)
    for t, cfg, parts, own, keys in work:
        if before_change is not None:
            before_change(cfg.name)
        redistribute(module, t, parts, own, where)
        module._reloaded += keys


def _check_shapes(module: Any, cfg: Any, state_dict: dict, entries: dict[str, str], rank: int) -> None:
    """Refuse this rank's own entries of fixed table ``cfg`` whose shapes are not its shard's, before
    any table changes (torch copies the entries after the hooks and raises its size mismatch only once
    every other entry is copied)."""
    table = module.embedding_bags[cfg.name]
    for entry, k in entries.items():
        v, mine = state_dict.get(k), getattr(table, entry, None)
        if isinstance(v, torch.Tensor) and isinstance(mine, torch.Tensor) and v.shape != mine.shape:
            raise InvalidInputError(f"rank {rank}: loading the state dict: {k} has shape {tuple(v.shape)}, this "
                                    f"rank's shard of table {cfg.name!r} {tuple(mine.shape)}")


def _check_set_steps(module: Any, cfg: Any, state_dict: dict, tagged: dict[str, dict[str, str]]) -> None:
    """Refuse several ranks' entries of table ``cfg`` at different ``optimizer_step`` values (a fixed
    or a dynamic-ID table's: ``dynamic_meta``'s step counts forward passes, which a rank whose backward
    failed also ran), as ``load()`` refuses such shard files: the set was saved after a step some ranks
    applied and others did not (``_failed``)."""
    steps = {tag: int(v.reshape(-1)[0]) for tag, entries in tagged.items()
             if isinstance(v := state_dict.get(entries.get("optimizer_step", "")), torch.Tensor) and v.numel()}
    check_steps(f"rank {module._groups.rank}: loading the state dict", cfg.name, steps, "the ranks' entries",
                InvalidInputError)


def _own_rows(module: Any, cfg: Any, state_dict: dict, entries: dict[str, str]) -> bool:
    """Whether this rank's own tagged entries hold its rows as its shard now lays them out (the
    sharding unchanged): a fixed shard's IDs in row order, a dynamic shard's IDs all owned here and
    its layout record, where it has one, this collection's (``_dynamic.LAYOUT``)."""
    ids = state_dict.get(entries.get(SHARD_IDS, ""))
    if not isinstance(ids, torch.Tensor):
        return SHARD_IDS not in entries  # no IDs to check (written by hand): load as given
    g = module._groups
    if cfg.dynamic is not None:  # a dynamic shard's IDs change as it trains
        # its layout record tells a move its rows cannot: pending IDs' sightings move too
        rec = state_dict.get(entries.get(_dynamic.LAYOUT, ""))
        if isinstance(rec, torch.Tensor) and not torch.equal(rec.reshape(-1), _dynamic.layout(module, cfg.name)):
            return False
        return bool((module.owners(cfg.name, ids.to(torch.int64)) == g.rank).all())
    mine = module.local_ids(cfg.name)
    return ids.shape == mine.shape and torch.equal(ids.to(mine.dtype), mine)


def _complete_set(module: Any, cfg: Any, state_dict: dict, tagged: dict[str, dict[str, str]],
                  tag: str) -> tuple[list[dict[str, Any]], int | None]:
    """The saved parts of one world's every rank for table ``cfg`` (popped from ``state_dict``), and
    the index of this rank's own part when that world is this one; raise naming what is missing."""
    g = module._groups
    ranks = {t: tuple(int(x) for x in RANK_TAG.fullmatch(t).groups()) for t in tagged}  # type: ignore[union-attr]
    worlds = sorted({w for _, w in ranks.values()})
    have = sorted(r for r, _ in ranks.values())
    if len(worlds) != 1 or have != list(range(worlds[0])):
        raise InvalidInputError(
            f"rank {g.rank} of {g.world_size}: the state dict holds table {cfg.name!r}'s shard of "
            f"{', '.join(sorted(tagged))}, not every rank's of one world, and this rank's rows are laid out "
            "otherwise (another rank, world size or sharding): load every rank's entries (dcp.load with "
            "planner=recgo.distributed.DCPLoadPlanner(all_shards=True) reads them all), or checkpoint with "
            "save()/load()")
    parts, own = [], None
    for i, t in enumerate(sorted(tagged, key=lambda t: ranks[t][0])):
        raw = {e: state_dict.pop(k) for e, k in tagged[t].items()}
        parts.append(raw if cfg.dynamic is not None else {_FIXED.get(e, e): v for e, v in raw.items()})
        if t == tag:
            own = i
    return parts, own


def reloaded_keys(module: Any, incompatible: Any) -> None:
    """load_state_dict post-hook: the entries :func:`own_keys` re-distributed were loaded from other
    names, so they are not missing (an entry no part had, say a TorchRec table's optimizer state,
    is missing, unless the collection's optimizer entries are all missing and none of its weights: a
    weights-only state dict, TorchRec's, loads as into the unsharded collection). A load that gave
    every table its rows, optimizer state and step, without an error, clears a failed backward's mark
    (``_failed``), as ``load()`` does; a partial one (a table, or its optimizer entries, missing) leaves it."""
    done = set(getattr(module, "_reloaded", []))
    if done:
        incompatible.missing_keys[:] = [k for k in incompatible.missing_keys if k not in done]
        module._reloaded = []
    loading, module._loading = getattr(module, "_loading", None), None  # (prefix, error list, its length)
    if loading is not None and len(loading[1]) == loading[2] and \
            not any(k.startswith(loading[0]) for k in incompatible.missing_keys):
        _failed.clear(module)  # every table's rows, optimizer state and step came from the state dict
    # weights alone load (TorchRec's state dict, an unsharded one); an unfused shard's step counter
    # too has nothing to take from an unfused collection's state dict, which has none
    allow_weights_only(tables_attr(module), module.embedding_bags, incompatible)
