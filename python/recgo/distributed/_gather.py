"""A sharded model's state dict gathered whole on one rank: what the unsharded model loads.

Training ends on many ranks; serving, evaluation or a conversion back to TorchRec wants one model.
:func:`gather_state_dict` assembles every sharded collection's tables from their ranks' rows (a
collective) under the names the unsharded collection uses, next to the dense entries, so
``unsharded_model.load_state_dict(state)`` takes it: a recgo model, or the TorchRec model the sharded
one was made from.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..errors import InvalidInputError
from ..modules._distributed_values import whole_rows
from ._collection import ShardedEmbeddingBagCollection
from ._exchange import peer_failures
from ._state import tables_attr


def gather_state_dict(model: nn.Module, dst: int = 0, optimizer_state: bool = False) -> dict[str, torch.Tensor]:
    """The state dict of ``model`` (a sharded collection, a model holding some, or
    :func:`shard_model`'s wrapper) as the unsharded model holds it, on rank ``dst`` of the
    collections' world; the other ranks get ``{}``. A collective: every rank calls it at the same point.

    Each sharded collection's tables come whole, as ``<path>.embedding_bags.<table>.weight``
    (``embeddings.`` for sequence collections), assembled from every rank's rows; the dense entries
    are this rank's (DDP keeps them equal); ``shard_model``'s wrapper adds no ``module.`` prefix.
    With ``optimizer_state`` the fused optimizer's per-row state and step come too, as the unsharded
    recgo collection names them (``<table>.optimizer_state``, ``<table>.optimizer_step``), so an
    unsharded recgo model loads the whole training state with ``strict=True`` and trains on as the
    sharded one would; without it (the default) the state dict is the weights TorchRec's unsharded
    modules load too. (``save``/``load`` carry everything onto any world size.)

    Raises:
        InvalidInputError: a dynamic-ID table (its rows have no fixed places to assemble; use
            ``save``/``load``), or ``dst`` outside the world.
        PeerFailureError: torch.distributed or gloo failed the gather (a peer closed the connection, or
            did not answer within the collections' timeout).
    """
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    sharded = {n: m for n, m in inner.named_modules() if isinstance(m, ShardedEmbeddingBagCollection)}
    state = inner.state_dict()
    out = {k: v for k, v in state.items()
           if not any(not p or k.startswith(p + ".") for p in sharded)}  # the dense entries
    world, rank = (dist.get_world_size(), dist.get_rank()) if dist.is_initialized() else (1, 0)
    if not 0 <= dst < world:
        raise InvalidInputError(f"gather_state_dict: dst {dst} is not a rank of the world of {world}")
    is_dst = rank == dst  # without sharded collections: the dense entries, on dst alone all the same
    for path, m in sharded.items():
        g = m._groups
        if not 0 <= dst < g.world_size:
            raise InvalidInputError(f"gather_state_dict: dst {dst} is not a rank of the world of {g.world_size}")
        is_dst = g.rank == dst
        attr = tables_attr(m)
        for cfg, shard in zip(m._configs, m.embedding_bags.values()):
            if cfg.dynamic is not None:
                raise InvalidInputError(f"gather_state_dict: table {cfg.name!r} is a dynamic-ID table, whose rows "
                                        "have no fixed places to assemble; checkpoint it with save()/load()")
            state = getattr(shard, "optimizer_state", None) if optimizer_state else None
            mine = (m.local_ids(cfg.name), shard.weight.detach().clone(), None if state is None else state.clone())
            parts: list[Any] = [None] * g.world_size
            with peer_failures(g, f"gathering table {cfg.name!r}"):
                dist.gather_object(mine, parts if is_dst else None, dst=dist.get_global_rank(g.world, dst), group=g.world)
            if not is_dst:
                continue
            key = f"{path + '.' if path else ''}{attr}.{cfg.name}"
            out[f"{key}.weight"] = whole_rows(cfg.name, cfg.num_embeddings, [(ids, rows) for ids, rows, _ in parts],
                                              "gather_state_dict")
            if state is not None:
                out[f"{key}.optimizer_state"] = whole_rows(cfg.name, cfg.num_embeddings,
                                                           [(ids, st) for ids, _, st in parts], "gather_state_dict")
            if optimizer_state:  # every rank steps a table any rank used: its count is the same everywhere
                out[f"{key}.optimizer_step"] = shard.optimizer_step.detach().clone()
    return out if is_dst else {}
