"""Re-distributing saved shards onto this rank's layout, by ID.

A fixed table's saved shard is its rows' IDs with their rows, optimizer state and step; each rank
keeps the rows whose IDs its layout gives it (``locate``) and checks that every row of its shard came
from some part. A dynamic table's parts are its ID maps with the rows in use
(``_dynamic.restore``). One piece serves ``load()`` of the shard files and ``load_state_dict`` of a
state dict holding other ranks' entries, or an unsharded collection's (the route of
``torch.distributed.checkpoint`` across world sizes and shardings).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..errors import InvalidInputError
from . import _dynamic

# what a saved dynamic table's part needs (``_dynamic.restore``); ``optimizer_state`` where it has one
_DYNAMIC_ENTRIES = frozenset({"dynamic_meta", "dynamic_ids", "dynamic_counts", "dynamic_last_seen", "dynamic_sketch",
                              "dynamic_sketch_adds", "weight"})


def put_rows(coll: Any, t: int, part: Mapping[str, Any], covered: torch.Tensor, where: str,
             err: type[Exception] = InvalidInputError, need_state: bool = True) -> None:
    """Copy into fixed table ``t``'s shard the rows of one saved part (``ids``, ``weight`` with a row
    per ID, ``state`` where the optimizer keeps one, ``step``) that this rank holds, marking them in
    ``covered``. Shapes and ID ranges are checked first; ``err`` is raised naming ``where``. Without
    ``need_state`` a part with no ``state`` leaves the shard's optimizer state as it is (a TorchRec
    state dict has none; ``load_state_dict`` reports the key missing)."""
    cfg = coll._configs[t]
    shard = coll.embedding_bags[cfg.name]
    ids, weight = part.get("ids"), part.get("weight")
    name = f"{where}: table {cfg.name!r}"
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.dtype not in (torch.int64, torch.int32):
        raise err(f"{name}: the saved shard has no 1-D integer IDs for its rows")
    if not isinstance(weight, torch.Tensor) or tuple(weight.shape) != (ids.numel(), cfg.embedding_dim):
        raise err(f"{name}: the saved rows are {None if weight is None else tuple(weight.shape)}, expected "
                  f"({ids.numel()}, {cfg.embedding_dim}) (one row of the table's width per saved ID)")
    ids = ids.to(torch.int64)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= cfg.num_embeddings):
        raise err(f"{name}: saved IDs span {int(ids.min())}..{int(ids.max())}, outside the table's "
                  f"{cfg.num_embeddings} rows (saved from a table of another size?)")
    rows = coll.locate(cfg.name, ids)
    mine = rows >= 0
    at = rows[mine]
    shard.weight[at] = weight[mine].to(shard.weight.dtype)
    state = part.get("state")
    if hasattr(shard, "optimizer_state") and (need_state or state is not None):
        want = (ids.numel(), *shard.optimizer_state.shape[1:])
        if not isinstance(state, torch.Tensor) or tuple(state.shape) != want:
            raise err(f"{name}: the saved shard has no optimizer state of this collection's optimizer "
                      f"(expected {want}, found {None if state is None else tuple(state.shape)})")
        shard.optimizer_state[at] = state[mine].to(shard.optimizer_state.dtype)
    step = part.get("step")
    if isinstance(step, torch.Tensor) and step.numel() == shard.optimizer_step.numel():
        shard.optimizer_step.copy_(step.reshape(shard.optimizer_step.shape))
    covered[at] = True


def check_covered(coll: Any, t: int, covered: torch.Tensor, where: str, err: type[Exception]) -> None:
    """Raise ``err`` when some row of fixed table ``t``'s shard was in none of the parts."""
    if not bool(covered.all()):
        raise err(f"{where}: table {coll._configs[t].name!r}: {int((~covered).sum())} of rank "
                  f"{coll._groups.rank}'s rows are in no saved shard")


def redistribute(coll: Any, t: int, parts: list[dict[str, Any]], own: int | None, where: str) -> None:
    """Load table ``t``'s shard from a complete set of saved parts: a fixed table's rows by ID
    (:func:`put_rows`, every row of the shard covered; the optimizer state only if the parts have
    it), a dynamic table's ID maps
    (``_dynamic.restore``; ``own`` is the index of this rank's own part when the saving world was this
    one, so an unmoved layout loads bit for bit)."""
    cfg = coll._configs[t]
    with torch.no_grad():
        if cfg.dynamic is not None:
            for p in parts:
                lacks = sorted(_DYNAMIC_ENTRIES - set(p))
                if lacks:
                    raise InvalidInputError(f"{where}: table {cfg.name!r}: the saved dynamic-ID table lacks {lacks} "
                                            "(a damaged or partial checkpoint?)")
                w = p["weight"]
                if not isinstance(w, torch.Tensor) or w.dim() != 2 or w.shape[1] != cfg.embedding_dim:
                    raise InvalidInputError(f"{where}: table {cfg.name!r}: the saved rows are "
                                            f"{tuple(getattr(w, 'shape', ()))}, not of the table's width "
                                            f"{cfg.embedding_dim}")
            _dynamic.restore(coll, cfg.name, parts, own, where)
            steps = [p["optimizer_step"] for p in parts if isinstance(p.get("optimizer_step"), torch.Tensor)]
            if steps:  # (as load() and put_rows take it: the last part's)
                coll.embedding_bags[cfg.name].optimizer_step.copy_(steps[-1].reshape(-1))
            return
        covered = torch.zeros(coll._local_rows[t], dtype=torch.bool)
        for p in parts:
            put_rows(coll, t, p, covered, where, need_state=False)
    check_covered(coll, t, covered, where, InvalidInputError)
