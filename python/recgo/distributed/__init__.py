"""recgo's embedding tables sharded across the ranks of ``torch.distributed`` (RecIS §3.2).

Go decides, torch.distributed moves: the engine computes each ID's owner (hash → virtual bucket →
rank, contiguous row ranges, table → rank, or a RecShard plan), deduplicates, writes the
per-destination buffers with their splits and inverse maps, merges at the owner, looks rows up and
merges gradients; this package hands the buffers to ``dist.all_to_all_single`` on the world, node
or rail group (gloo on CPU). See :class:`ShardedEmbeddingBagCollection` (pooled) and
:class:`ShardedEmbeddingCollection` (sequences: one row per ID), and :func:`shard_model` (TorchRec's
``DistributedModelParallel``: every collection of a model sharded, the rest under DDP).
:class:`DCPLoadPlanner` loads a ``torch.distributed.checkpoint`` onto another world size or sharding.
:func:`sparse_ddp_group` is a gloo group for DDP over torch's own sparse embeddings (see there why).
"""

from typing import Any

from ._collection import ShardedEmbeddingBagCollection
from ._sharding import MODES, RETURNS, SHARDING_TYPES
from ._exchange import Groups, PeerFailureError, make_groups
from ._failed import PartialStepError
from ._gather import gather_state_dict
from ._model import shard_model
from ._sequence import ShardedEmbeddingCollection
from ._simulate import eq3_reduction, hash_owners, simulate_traffic
from ._sparse_ddp import sparse_ddp_group
from ._traffic import COUNTERS

__all__ = ["COUNTERS", "DCPLoadPlanner", "MODES", "RETURNS", "SHARDING_TYPES", "Groups", "PartialStepError", "PeerFailureError", "ShardedEmbeddingBagCollection",
           "ShardedEmbeddingCollection",
           "eq3_reduction", "gather_state_dict", "hash_owners", "make_groups", "shard_model", "simulate_traffic",
           "sparse_ddp_group"]


def __getattr__(name: str) -> Any:
    """``DCPLoadPlanner`` (``torch.distributed.checkpoint`` loads across world sizes and shardings, see
    ``recgo._dcp``), imported on first use: importing DCP costs every process that never checkpoints."""
    if name == "DCPLoadPlanner":
        from .._dcp import DCPLoadPlanner

        return DCPLoadPlanner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
