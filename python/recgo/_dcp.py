"""Loading recgo collections with ``torch.distributed.checkpoint``.

DCP loads a checkpoint into the tensors of the state dict it is given, under its keys and with the
saved shapes. Two things of recgo's do not fit that as they are:

* A dynamic-ID table's entries (its ID map, and its weight and optimizer-state rows in use) change
  size as it trains, so a model's current state dict does not fit another moment's checkpoint.
* A sharded collection's entries are its rank's (``<table>.rank<r>_of_<world>.*``, see
  ``recgo.distributed._state``), so on another world size or sharding the keys a rank asks for are
  not the ones its rows were saved under.

:class:`DCPLoadPlanner` resizes the first to the checkpoint's shapes, and for the second asks for
every saved rank's entries of the table (or an unsharded checkpoint's whole table) before DCP plans
the reads; the model's ``load_state_dict`` then keeps the rows the rank holds now.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
from torch.distributed.checkpoint import DefaultLoadPlanner

from ._memory import physical_memory
from ._rank_tags import RANK_TAG, SHARD_IDS
from .errors import CapacityError, InvalidInputError

# The entry a dynamic table's state dict always has: its siblings are the table's resizable entries.
_MARK = "dynamic_meta"
# A sharded table's own entry: ``<head>rank<r>_of_<world>.shard_ids``.
_SHARD = re.compile(rf"(?P<head>.*\.)(?P<tag>{RANK_TAG.pattern})\.{SHARD_IDS}")
# A saved sharded entry under a table's head: ``rank<r>_of_<world>.<entry>``.
_SAVED = re.compile(rf"(?P<tag>{RANK_TAG.pattern})\.(?P<entry>[^.]+)")


class DCPLoadPlanner(DefaultLoadPlanner):
    """``torch.distributed.checkpoint`` load planner for models with recgo's sharded collections or
    dynamic-ID tables, in the state dict given to ``dcp.load`` (nested dicts included):

    * a sharded table whose rows this rank's entries do not hold as saved (the checkpoint was written
      by another world size or sharding, or by an unsharded collection, TorchRec's included) gets in
      place of its own entries every saved rank's entries of the table (or the unsharded table's:
      ``weight`` with recgo's ``optimizer_state`` and ``optimizer_step``, a dynamic table's ID map
      and rows in use), so each rank reads the whole table;
      ``model.load_state_dict`` then keeps the rows the rank holds now, by ID (a dynamic table's own
      rows bit for bit, free list included, where no ID changed its rank);
    * the entries of each dynamic table (those next to its ``dynamic_meta``: the ID map, ``weight``,
      ``optimizer_state``, a shard's ``shard_ids``) are replaced by empty tensors of the checkpoint's
      shapes.

    The planner sees shapes, not IDs: it tells a changed layout by the missing tag of this rank (another
    world size) or a fixed shard's changed size. A fixed table re-sharded into shards of the same sizes
    reads this rank's own entries, which ``load_state_dict`` then refuses by name on some rank (an ID
    that changed rank is not this rank's, or its row is missing here). A dynamic table saved by this
    world size reads this rank's own entries and every other rank's admission state (layout record,
    meta, sketch, step; not their rows): ``load_state_dict`` tells a changed layout by the records,
    moves pending sightings to their new owner, and refuses on every rank a change that would move rows
    in use. ``all_shards=True`` reads every saved rank's entries of every sharded table for such a
    load. Other keyword arguments are
    the default planner's. Other entries load as with the default planner::

        sd = {"model": model.state_dict()}
        dcp.load(sd, checkpoint_id=path, planner=recgo.distributed.DCPLoadPlanner())
        model.load_state_dict(sd["model"])
    """

    def __init__(self, *args: Any, all_shards: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.all_shards = all_shards

    def create_local_plan(self) -> Any:
        """Ask for the saved shards a sharded table needs and resize the dynamic tables' entries to the
        checkpoint's, then plan as the default planner."""
        assert self.metadata is not None
        saved = self.metadata.state_dict_metadata
        self._ask_for_saved_shards(saved)
        groups = {fqn.rpartition(".")[0] for fqn in self.state_dict if fqn.rpartition(".")[2] == _MARK}
        for fqn, cur in list(self.state_dict.items()):
            md = saved.get(fqn)
            if fqn.rpartition(".")[0] not in groups or not isinstance(cur, torch.Tensor) or md is None:
                continue
            size = getattr(md, "size", None)
            if size is None or tuple(size) == tuple(cur.shape):
                continue
            self._put(fqn, _empty(fqn, md), self._parent(fqn))
        return super().create_local_plan()

    def _ask_for_saved_shards(self, saved: dict[str, Any]) -> None:
        """For each sharded table of the state dict whose own saved entries would not give this rank
        its rows (none saved under its tag, or a fixed shard of another size), put every saved rank's
        entries of the table (or an unsharded checkpoint's) in place of its own."""
        for fqn in [k for k in self.state_dict if _SHARD.fullmatch(k)]:
            head, tag = _SHARD.fullmatch(fqn).group("head", "tag")  # type: ignore[union-attr]
            tagged = {k: m.group("tag", "entry") for k in saved
                      if k.startswith(head) and (m := _SAVED.fullmatch(k[len(head):]))}
            if not tagged:
                if head + "weight" not in saved:
                    continue  # nothing to re-distribute from: the default planner names the missing keys
                # an unsharded table's entries: a fixed one's weight (and recgo's optimizer entries), a
                # dynamic one's ID map and rows in use
                tagged = {k: (None, k[len(head):]) for k in saved if k.startswith(head) and "." not in k[len(head):]}
            elif not self.all_shards and tag in {t for t, _ in tagged.values()}:
                own, cur = saved.get(fqn), self.state_dict[fqn]
                if f"{head}{tag}.{_MARK}" in self.state_dict:
                    self._ask_for_admission_state(head, tag, tagged, saved, self._parent(fqn))
                    continue  # this rank's own entries (the hook checks their IDs and layout)
                if tuple(getattr(own, "size", ())) == tuple(cur.shape):
                    continue  # this rank's own entries (the hook checks their IDs)
            parent = self._parent(fqn)
            if not parent:
                raise InvalidInputError(
                    f"{fqn[:-len('.shard_ids')]}: this rank's rows are in other ranks' saved entries (another world "
                    "size or sharding), which the state dict given to dcp.load must take in; dcp.load hands back only "
                    "the top-level keys it was given, so pass the model's state nested: dcp.load({'model': model}, "
                    "...) (loaded in place), or sd = {'model': model.state_dict()}, then "
                    "model.load_state_dict(sd['model'])")
            for k in [k for k in self.state_dict if k.startswith(f"{head}{tag}.")]:
                self._drop(k)
            for k in tagged:
                md = saved[k]
                self._put(k, _empty(k, md), parent)

    def _ask_for_admission_state(self, head: str, tag: str, tagged: dict[str, tuple[str | None, str]],
                                 saved: dict[str, Any], parent: tuple) -> None:
        """For a dynamic table saved by this world size: besides this rank's own entries, the other
        ranks' admission state (their layout record, meta, sketch; not their rows), so that
        ``load_state_dict`` tells from the layout records whether any ID changed rank and, where
        none in use did, brings the pending IDs' sightings to their new owner (with this rank's
        entries alone they stayed with the old one, lost). A flat state dict (``parent`` empty)
        cannot take them in: the hook then refuses a changed layout by name. A checkpoint written
        before the layout records has none to tell by: it loads as before, its own entries alone
        (the record is not asked for: DCP would refuse the checkpoint for lacking it)."""
        # (a sharded collection is loading: recgo.distributed is imported already)
        from .distributed._dynamic import LAYOUT, LIGHT

        mine = f"{head}{tag}.{LAYOUT}"
        if mine not in saved:
            if mine in self.state_dict:
                self._drop(mine)
            return
        if not parent:
            return
        for k, (t, entry) in tagged.items():  # with its step, which the load checks against the others'
            if t != tag and (entry in LIGHT or entry == "optimizer_step") and k not in self.state_dict:
                self._put(k, _empty(k, saved[k]), parent)

    def _parent(self, fqn: str) -> tuple:
        """Where entry ``fqn`` sits in the nested state dict the caller passed in: the path of its dict."""
        return tuple(self.mappings[fqn][:-1]) if self.flatten_state_dict else ()

    def _put(self, fqn: str, value: torch.Tensor, parent: tuple) -> None:
        """Set entry ``fqn`` of the flat state dict and, in the dict at ``parent``, of the nested one
        the caller passed in (which it reads afterwards)."""
        self.state_dict[fqn] = value
        if self.flatten_state_dict:
            joined = ".".join(str(p) for p in parent)
            inner = fqn[len(joined) + 1:] if parent else fqn  # fqn is the path's parts joined by dots
            node: Any = self.original_state_dict
            for p in parent:
                node = node[p]
            node[inner] = value
            self.mappings[fqn] = (*parent, inner)

    def _drop(self, fqn: str) -> None:
        """Remove entry ``fqn`` from the flat state dict and the nested one."""
        self.state_dict.pop(fqn)
        if self.flatten_state_dict:
            path = self.mappings.pop(fqn)
            node: Any = self.original_state_dict
            for p in path[:-1]:
                node = node[p]
            node.pop(path[-1])


def _empty(fqn: str, md: Any) -> torch.Tensor:
    """An empty tensor of the size and dtype the checkpoint's metadata gives entry ``fqn``, refused when
    it is more than this machine's memory (the metadata's sizes are read from the checkpoint: a
    corrupted one asked torch's allocator for terabytes, which failed in its own wording)."""
    size, dtype = tuple(md.size), md.properties.dtype
    need = math.prod(size) * torch.empty((), dtype=dtype).element_size()
    have = physical_memory()
    if have is not None and need > have:
        raise CapacityError(f"checkpoint entry {fqn!r}: its metadata declares {size} ({need:,} bytes), more than "
                            f"this machine's {have:,} bytes of memory: a corrupted checkpoint?")
    return torch.empty(size, dtype=dtype)
