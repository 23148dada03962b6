"""A fused collection replicated by ``DistributedDataParallel`` is refused.

DDP keeps replicas equal by all-reducing gradients before the optimizer steps. A recgo collection with a
fused optimizer updates its rows inside the backward and hands DDP no gradient for them, so each rank's
copy moves by its own samples alone and the copies drift apart, without an error. That is what a model
gets when it is wrapped in DDP as it is, or in TorchRec's ``DistributedModelParallel`` (whose planner
skips recgo's collections, and which then wraps the whole model in DDP). The training forward refuses
it by name; ``recgo.distributed.shard_model`` is the way to train these tables on several ranks (a
collection whose parameters DDP is told to ignore is left alone: the user keeps it apart on purpose).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from ..errors import InvalidInputError


def _active_ddp() -> Any:
    """The ``DistributedDataParallel`` whose forward is running (torch sets it for TorchDynamo), or None."""
    return getattr(nn.parallel.DistributedDataParallel, "_active_ddp_module", None)


def _replicas(ddp: Any) -> int:
    group = getattr(ddp, "process_group", None)
    try:
        return group.size() if group is not None else 1
    except RuntimeError:  # a group torn down: nothing is replicated any more
        return 1


def refuse_in_ddp(owner: nn.Module, tables: Sequence[int]) -> None:
    """Before a training forward of the fused tables ``tables`` (indices) of ``owner`` (a pooled
    collection, or a sequence collection's owner of the engine tables): raise ``InvalidInputError``
    when a DDP of more than one rank whose module holds them, not ignored, is running its forward.
    Checked once per collection and DDP wrapper (the verdict is kept on the wrapper, which lives no
    longer than the check holds)."""
    ddp = _active_ddp()
    if ddp is None or torch.compiler.is_compiling():
        return
    seen: dict[tuple[int, ...], bool] = ddp.__dict__.setdefault("_recgo_fused_replicas", {})
    key = (id(owner), *tables)
    verdict = seen.get(key)
    if verdict is False:
        return
    names = [owner._configs[i].name for i in tables]
    if verdict is None:
        mine = {id(owner.embedding_bags[n].weight) for n in names}
        ignored = set(getattr(ddp, "parameters_to_ignore", ()))
        held = [n for n, p in ddp.module.named_parameters(remove_duplicate=False) if id(p) in mine]
        verdict = _replicas(ddp) > 1 and any(n not in ignored for n in held)
        seen[key] = verdict
    if verdict:
        raise InvalidInputError(
            f"recgo tables {list(names)} have a fused optimizer and run inside DistributedDataParallel "
            f"over {_replicas(ddp)} ranks (TorchRec's DistributedModelParallel wraps a model in it when its planner "
            "finds no TorchRec collection to shard): DDP all-reduces gradients, but a fused optimizer updates the "
            "rows in the backward and gives DDP none, so each rank's copy of the tables would train on its own "
            "samples and drift apart. Shard the model with recgo.distributed.shard_model(model) instead, or give "
            "the collection no fused optimizer (optimizer=None: DDP then all-reduces its dense gradients)")
