"""A TorchRec managed-collision collection for the tests of its conversion to recgo's dynamic-ID tables
(test_from_torchrec.py, test_distributed_sim.py). Import it after importorskip("torchrec")."""

from __future__ import annotations

from typing import Any

import torch
import torchrec as tr
from torch import nn
from torch.distributed.optim import _apply_optimizer_in_backward as apply_optimizer_in_backward


def _hash(ids: torch.Tensor, size: int) -> torch.Tensor:
    return (ids * 7919) % size


def managed_collection(return_remapped: bool, sequence: bool = False, hashed: bool = False, policy: str = "LRU",
                       optimizer: type = torch.optim.Adagrad, zch_size: int = 16, threshold: Any = None) -> nn.Module:
    """TorchRec's managed-collision collection (pooled or sequence): an MCH module of ``zch_size`` slots
    (eviction ``policy``: LRU, LFU or DistanceLFU) over a table trained by an in-backward ``optimizer``
    (Adagrad by default); with ``hashed``, the module hashes IDs into 1000 first (``input_hash_func``);
    ``threshold``: the eviction policy's ``threshold_filtering_func``."""
    from torchrec.modules import mc_modules
    from torchrec.modules.mc_embedding_modules import (ManagedCollisionEmbeddingBagCollection,
                                                       ManagedCollisionEmbeddingCollection)
    from torchrec.modules.mc_modules import ManagedCollisionCollection, MCHManagedCollisionModule

    torch.manual_seed(0)
    if sequence:
        cfg: list = [tr.EmbeddingConfig(name="t", embedding_dim=4, num_embeddings=zch_size, feature_names=["f"])]
        coll: nn.Module = tr.EmbeddingCollection(tables=cfg, device=torch.device("cpu"))
    else:
        cfg = [tr.EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=zch_size, feature_names=["f"])]
        coll = tr.EmbeddingBagCollection(tables=cfg, device=torch.device("cpu"))
    apply_optimizer_in_backward(optimizer, coll.parameters(), {"lr": 0.1, "eps": 1e-8})
    policy_cls = getattr(mc_modules, f"{policy}_EvictionPolicy")
    policy_args = {} if threshold is None else {"threshold_filtering_func": threshold}
    mch = MCHManagedCollisionModule(zch_size=zch_size, device=torch.device("cpu"), eviction_policy=policy_cls(**policy_args),
                                    eviction_interval=1, input_hash_size=1000 if hashed else 2**62,
                                    input_hash_func=_hash if hashed else None)
    mc = ManagedCollisionCollection(managed_collision_modules={"t": mch}, embedding_configs=cfg)
    cls = ManagedCollisionEmbeddingCollection if sequence else ManagedCollisionEmbeddingBagCollection
    return cls(coll, mc, return_remapped_features=return_remapped)
