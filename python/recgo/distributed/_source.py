"""A sharded collection built from an unsharded one (``from_ebc``/``from_ec``, ``shard_model``): each
rank takes its rows, their optimizer state and step, from the source's state, or, on the meta device,
nothing (it initialises its own rows)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..modules._walk import torchrec_kind
from ..modules.convert import table_flags, torchrec_optimizer_state
from . import _dynamic


def frozen_tables(src: nn.Module, prefix: str) -> list[str]:
    """The tables of the unsharded collection ``src`` (recgo's or TorchRec's; state-dict table keys
    under ``prefix``) frozen with ``requires_grad_(False)``, whose shards :func:`freeze` freezes in the
    sharded collection built from it (a torch optimizer over the parameters that require grad then
    leaves them, as it left the unsharded ones, and a fused optimizer updates the other tables alone)."""
    return [t for t, trains in table_flags(src, prefix).items() if not trains]


def freeze(coll: Any, tables: list[str]) -> Any:
    """``coll`` (a sharded collection) with the shards of ``tables`` frozen (:func:`frozen_tables`)."""
    for t in tables:
        coll.embedding_bags[t].weight.requires_grad_(False)
    return coll


def on_meta(module: nn.Module) -> bool:
    """Whether ``module``'s tables are on the meta device (shapes only: no rows to take)."""
    return any(t.is_meta for t in module.state_dict().values() if isinstance(t, torch.Tensor))


def take_rows(coll: Any, src: nn.Module, prefix: str) -> None:
    """Copy into ``coll`` this rank's rows of ``src`` (an unsharded collection whose state-dict table
    keys start with ``prefix``) and, where the shapes match, their optimizer state and step: a recgo
    collection's, or for a TorchRec collection the state TorchRec keeps outside its state dict, where
    ``coll``'s fused optimizer runs the same update (see recgo.from_torchrec). A dynamic-ID table takes
    the IDs this rank owns, with their ID map."""
    state = src.state_dict()
    if torchrec_kind(src):
        state.update(torchrec_optimizer_state(src, coll.fused_optimizer, prefix))
    with torch.no_grad():
        for cfg in coll.embedding_bag_configs():
            shard = coll.embedding_bags[cfg.name]
            head = f"{prefix}.{cfg.name}."
            if cfg.dynamic is not None:
                part = {k[len(head):]: v for k, v in state.items() if k.startswith(head)}
                _dynamic.restore(coll, cfg.name, [part], None, "from_ebc")
            else:
                ids = coll.local_ids(cfg.name)
                shard.weight.copy_(state[head + "weight"].to(torch.float32)[ids])
                st = state.get(head + "optimizer_state")
                if st is not None and hasattr(shard, "optimizer_state") and st.shape[1:] == shard.optimizer_state.shape[1:]:
                    shard.optimizer_state[: len(ids)].copy_(st[ids])
            step = state.get(head + "optimizer_step")
            if step is not None:
                shard.optimizer_step.copy_(step)
