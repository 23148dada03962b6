"""A sharded collection's state_dict entries are its rank's: keys that say whose they are.

Under the unsharded names on every rank, torch.distributed.checkpoint takes a shard for a replicated
tensor and keeps a single rank's copy of each key, so the ranks' rows would be lost or swapped in
silence; with the rank in the key it saves every rank's, and a load onto another rank, world size or
sharding is refused by name.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import InvalidInputError

SHARD_IDS = "shard_ids"


def _tables_prefix(module: Any, prefix: str) -> str:
    """The state_dict key prefix of the module's shards (``embedding_bags.`` or ``embeddings.``)."""
    name = next(n for n, m in module._modules.items() if m is module.embedding_bags)
    return f"{prefix}{name}."


def _rank_tag(module: Any) -> str:
    g = module._groups
    return f"rank{g.rank}_of_{g.world_size}"


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


def own_keys(module: Any, state_dict: dict, prefix: str, _meta: Any,
              _strict: bool, _missing: list, _unexpected: list, _errors: list) -> None:
    """load_state_dict pre-hook: take back this rank's entries (:func:`rank_keys`) under the module's
    own names, after checking that their ``shard_ids`` are this rank's rows; an entry of another rank
    or world size, or IDs of another sharding, raise ``InvalidInputError``. Entries under the plain
    names (a state dict of an earlier version) load as they are."""
    p, tag = _tables_prefix(module, prefix), _rank_tag(module)
    g = module._groups
    for cfg in module._configs:
        head = f"{p}{cfg.name}."
        tagged = [k for k in state_dict if k.startswith(f"{head}rank") and k[len(head):].count(".") == 1]
        others = sorted({k[len(head):].split(".")[0] for k in tagged} - {tag})
        if others:
            raise InvalidInputError(
                f"rank {g.rank} of {g.world_size}: the state dict holds table {cfg.name!r}'s shard of "
                f"{', '.join(others)} (state dicts of a sharded collection are per rank): load each on the "
                "rank that saved it, or checkpoint with save()/load(), which re-distribute the rows")
        if cfg.dynamic is None and f"{head}{tag}.dynamic_ids" in state_dict:
            raise InvalidInputError(f"rank {g.rank}: the state dict holds table {cfg.name!r} as a dynamic-ID table "
                                    "(an ID map and the rows in use); this collection's is a fixed table")
        ids = state_dict.pop(f"{head}{tag}.{SHARD_IDS}", None)
        if ids is not None and cfg.dynamic is not None:  # a dynamic shard's IDs change as it trains
            if not (isinstance(ids, torch.Tensor) and bool((module.owners(cfg.name, ids.to(torch.int64)) == g.rank).all())):
                raise InvalidInputError(
                    f"rank {g.rank}: the state dict holds IDs of table {cfg.name!r} that another rank owns (saved "
                    "with another sharding): checkpoint with save()/load(), which re-distribute the rows")
        elif ids is not None:
            mine = module.local_ids(cfg.name)
            if not (isinstance(ids, torch.Tensor) and ids.shape == mine.shape and torch.equal(ids.to(mine.dtype), mine)):
                raise InvalidInputError(
                    f"rank {g.rank}: the state dict's rows of table {cfg.name!r} are not this shard's (saved with "
                    "another sharding): checkpoint with save()/load(), which re-distribute the rows")
        for k in tagged:
            if k in state_dict:  # (its shard_ids is popped above)
                state_dict[f"{head}{k[len(head) + len(tag) + 1:]}"] = state_dict.pop(k)
