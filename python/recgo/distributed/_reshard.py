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
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import InvalidInputError
from . import _dynamic

# what a saved dynamic table's part needs (``_dynamic.restore``); ``optimizer_state`` where it has one
_DYNAMIC_ENTRIES = frozenset({"dynamic_meta", "dynamic_ids", "dynamic_counts", "dynamic_last_seen", "dynamic_sketch",
                              "dynamic_sketch_adds", "weight"})


@dataclass
class Staged:
    """A fixed table's shard as a load rebuilds it: copies of its rows, optimizer state and step that
    the saved parts are put into (:func:`put_rows`), with the rows some part ``covered``. Only once
    every part of every table passed its checks does :meth:`commit` copy them into the shard (whose
    memory the engine holds), so a refused load leaves the shard as it was."""

    weight: torch.Tensor
    optimizer_step: torch.Tensor
    optimizer_state: torch.Tensor | None
    covered: torch.Tensor

    @classmethod
    def of(cls, shard: Any) -> "Staged":
        """Copies of ``shard``'s tensors, none of its rows covered yet."""
        state = getattr(shard, "optimizer_state", None)
        return cls(shard.weight.detach().clone(), shard.optimizer_step.clone(),
                   None if state is None else state.clone(), torch.zeros(shard.weight.shape[0], dtype=torch.bool))

    def commit(self, shard: Any) -> None:
        """Copy the staged tensors into ``shard``."""
        with torch.no_grad():
            shard.weight.copy_(self.weight)
            shard.optimizer_step.copy_(self.optimizer_step)
            if self.optimizer_state is not None:
                shard.optimizer_state.copy_(self.optimizer_state)


def put_rows(coll: Any, t: int, part: Mapping[str, Any], into: Staged, where: str,
             err: type[Exception] = InvalidInputError, need_state: bool = True) -> None:
    """Copy into ``into`` (fixed table ``t``'s shard, staged) the rows of one saved part (``ids``,
    ``weight`` with a row per ID, ``state`` where the optimizer keeps one, ``step``) that this rank
    holds, marking them covered. Shapes and ID ranges are checked first; ``err`` is raised naming
    ``where``. Without ``need_state`` a part with no ``state`` leaves the staged optimizer state as it
    is (a TorchRec state dict has none; ``load_state_dict`` reports the key missing)."""
    cfg = coll._configs[t]
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
    into.weight[at] = weight[mine].to(into.weight.dtype)
    state = part.get("state")
    if into.optimizer_state is not None and (need_state or state is not None):
        want = (ids.numel(), *into.optimizer_state.shape[1:])
        if not isinstance(state, torch.Tensor) or tuple(state.shape) != want:
            raise err(f"{name}: the saved shard has no optimizer state of this collection's optimizer "
                      f"(expected {want}, found {None if state is None else tuple(state.shape)})")
        into.optimizer_state[at] = state[mine].to(into.optimizer_state.dtype)
    step = part.get("step")
    if isinstance(step, torch.Tensor) and step.numel() == into.optimizer_step.numel():
        into.optimizer_step.copy_(step.reshape(into.optimizer_step.shape))
    into.covered[at] = True


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
            _check_dynamic_parts(cfg, parts, own, where)
            _dynamic.restore(coll, cfg.name, parts, own, where)
            steps = [p["optimizer_step"] for p in parts if isinstance(p.get("optimizer_step"), torch.Tensor)]
            if steps:  # (as load() and put_rows take it: the last part's)
                coll.embedding_bags[cfg.name].optimizer_step.copy_(steps[-1].reshape(-1))
            return
        shard = coll.embedding_bags[cfg.name]
        staged = Staged.of(shard)
        for p in parts:
            put_rows(coll, t, p, staged, where, need_state=False)
        check_covered(coll, t, staged.covered, where, InvalidInputError)
        staged.commit(shard)


def check_parts(coll: Any, t: int, parts: list[dict[str, Any]], own: int | None, where: str) -> None:
    """Raise what :func:`redistribute` of dynamic-ID table ``t`` from ``parts`` would (the engine's
    checks included), changing nothing: a load checks every such table before it changes any, since
    an import, even one put back, replaces the rows a pending backward's forward looked up."""
    _check_dynamic_parts(coll._configs[t], parts, own, where)
    _dynamic.prepare(coll, coll._configs[t].name, parts, own, where)(check_only=True)


def _check_dynamic_parts(cfg: Any, parts: list[dict[str, Any]], own: int | None, where: str) -> None:
    for i, p in enumerate(parts):  # another rank's part may be light (_dynamic.LIGHT)
        check_dynamic_part(cfg, p, where, InvalidInputError, light=i != own)


def check_dynamic_part(cfg: Any, part: Mapping[str, Any], where: str, err: type[Exception],
                       light: bool = False) -> None:
    """Raise ``err`` unless ``part`` holds what a saved dynamic-ID table's part needs, with rows of the
    width of table ``cfg``. With ``light``, a part of the layout record and counters alone
    (``_dynamic.LIGHT``: what ``DCPLoadPlanner`` reads of another rank's part on the saving world)
    passes too."""
    is_light = light and _dynamic.LAYOUT in part and "dynamic_ids" not in part
    lacks = sorted((_dynamic.LIGHT if is_light else _DYNAMIC_ENTRIES) - set(part))
    if lacks:
        raise err(f"{where}: table {cfg.name!r}: the saved dynamic-ID table lacks {lacks} (a damaged or partial "
                  "checkpoint?)")
    rec = part.get(_dynamic.LAYOUT)
    if rec is not None and (not isinstance(rec, torch.Tensor) or rec.dtype != torch.int64 or rec.numel() != 2):
        raise err(f"{where}: table {cfg.name!r}: {_dynamic.LAYOUT} is not 2 int64 values (a damaged checkpoint?)")
    w = part.get("weight")
    if not is_light and (not isinstance(w, torch.Tensor) or w.dim() != 2 or w.shape[1] != cfg.embedding_dim):
        raise err(f"{where}: table {cfg.name!r}: the saved rows are {tuple(getattr(w, 'shape', ()))}, not of the "
                  f"table's width {cfg.embedding_dim}")
    # the ID map's form, which the re-distribution indexes before the engine checks the rest (a short
    # meta raised IndexError, a high water mark past the arrays sliced short)
    from ..dynamic import _M_FREE, _M_HW, _META_LEN, _META_LENS

    meta = part["dynamic_meta"]
    if not isinstance(meta, torch.Tensor) or meta.dtype != torch.int64 or meta.dim() != 1 \
            or meta.numel() not in _META_LENS:
        raise err(f"{where}: table {cfg.name!r}: dynamic_meta is not {_META_LEN} int64 values (a damaged checkpoint?)")
    hw = int(meta[_M_HW])
    arrays = ("dynamic_sketch_adds",) if is_light else ("dynamic_ids", "dynamic_counts", "dynamic_last_seen",
                                                         "dynamic_sketch_adds")
    for k in arrays:
        v = part[k]
        if not isinstance(v, torch.Tensor) or v.dtype != torch.int64 or v.dim() != 1:
            raise err(f"{where}: table {cfg.name!r}: {k} is not a 1-D int64 tensor (a damaged checkpoint?)")
    if not isinstance(part["dynamic_sketch"], torch.Tensor):
        raise err(f"{where}: table {cfg.name!r}: dynamic_sketch is not a tensor (a damaged checkpoint?)")
    if is_light:
        if not 0 <= int(meta[_M_FREE]) <= hw:
            raise err(f"{where}: table {cfg.name!r}: dynamic_meta declares {int(meta[_M_FREE])} free rows of {hw} "
                      "(a damaged checkpoint?)")
        return
    if not 0 <= hw <= min(part["dynamic_ids"].numel(), part["dynamic_counts"].numel(),
                          part["dynamic_last_seen"].numel(), w.shape[0]):
        raise err(f"{where}: table {cfg.name!r}: dynamic_meta declares {hw} rows in use, more than the saved "
                  "arrays hold (a damaged checkpoint?)")


def check_steps(where: str, table: str, steps: Mapping[str, int], parts: str, err: type[Exception]) -> None:
    """Raise ``err`` when ``steps`` (each saved part of table ``table`` → its optimizer step; the
    parts are ``parts``, say "the shard files") differ. Every rank's shard of a table counts the same
    steps (an owner with no rows in a step steps too), so such a set was saved after a step some
    ranks applied and others did not (``_failed``): its rows mix two steps."""
    if len(set(steps.values())) > 1:
        raise err(f"{where}: table {table!r} is at different optimizer steps in {parts} ({dict(steps)}): the "
                  "checkpoint was saved after a step that some ranks applied and others did not, so its rows mix "
                  "two steps; load an earlier checkpoint")
