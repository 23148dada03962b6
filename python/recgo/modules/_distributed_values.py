"""State-dict values that are torch's distributed tensors (a TorchRec ``DistributedModelParallel``'s
``ShardedTensor`` tables, an FSDP2 / tensor-parallel ``DTensor``), made plain where this process
holds the whole tensor, and refused by name where it does not: torch's copy into a recgo table raised
a bare ``RuntimeError`` ("torch function 'is_complex' ... not supported for ShardedTensor")."""

from __future__ import annotations

import sys
from typing import Any

import torch

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
