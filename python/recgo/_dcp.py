"""Loading dynamic-ID tables with ``torch.distributed.checkpoint``.

DCP loads a checkpoint into the tensors of the state dict it is given, which must already have the
saved shapes. A dynamic-ID table's entries (its ID map, and its weight and optimizer-state rows in
use) change size as it trains, so a model's current state dict does not fit another moment's
checkpoint. :class:`DCPLoadPlanner` resizes those entries to the checkpoint's shapes before DCP plans
the reads; the model's ``load_state_dict`` then takes them as it takes any size.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.checkpoint import DefaultLoadPlanner

# The entry a dynamic table's state dict always has: its siblings are the table's resizable entries.
_MARK = "dynamic_meta"


class DCPLoadPlanner(DefaultLoadPlanner):
    """``torch.distributed.checkpoint`` load planner for models with dynamic-ID tables (pooled or
    sequence, in one process or sharded): the entries of each dynamic table (those next to its
    ``dynamic_meta``: the ID map, ``weight``, ``optimizer_state``, a shard's ``shard_ids``) are replaced
    by empty tensors of the checkpoint's shapes before the reads are planned, in the state dict given to
    ``dcp.load`` (nested dicts included), so ``model.load_state_dict`` of it afterwards restores the
    tables. Other entries load as with the default planner::

        sd = {"model": model.state_dict()}
        dcp.load(sd, checkpoint_id=path, planner=recgo.dynamic.DCPLoadPlanner())
        model.load_state_dict(sd["model"])
    """

    def create_local_plan(self) -> Any:
        """Resize the dynamic tables' entries to the checkpoint's, then plan as the default planner."""
        assert self.metadata is not None
        saved = self.metadata.state_dict_metadata
        groups = {fqn.rpartition(".")[0] for fqn in self.state_dict if fqn.rpartition(".")[2] == _MARK}
        for fqn, cur in list(self.state_dict.items()):
            md = saved.get(fqn)
            if fqn.rpartition(".")[0] not in groups or not isinstance(cur, torch.Tensor) or md is None:
                continue
            size = getattr(md, "size", None)
            if size is None or tuple(size) == tuple(cur.shape):
                continue
            new = torch.empty(tuple(size), dtype=md.properties.dtype)
            self.state_dict[fqn] = new
            if self.flatten_state_dict:  # the caller reads the nested dict it passed in
                path = self.mappings[fqn]
                node: Any = self.original_state_dict
                for p in path[:-1]:
                    node = node[p]
                node[path[-1]] = new
        return super().create_local_plan()
