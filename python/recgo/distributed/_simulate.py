"""Exact exchange traffic of a whole cluster, computed in Go without starting its ranks."""

from __future__ import annotations

from typing import Sequence

import torch

from .. import _lib
from ..tensors import ptr


def simulate_traffic(batches: Sequence[Sequence[torch.Tensor]], nodes: int, ranks_per_node: int) -> dict[str, float]:
    """Both exchange modes' traffic for one step of a ``nodes × ranks_per_node`` cluster under hash
    sharding, where ``batches[r][t]`` holds the IDs rank r looks up in table t.

    Returns lookups, requested (distinct per rank), flat/hierarchical intra- and inter-node IDs (each
    ID is also one returned vector and one gradient), ``retained`` (hierarchical ÷ flat inter-node IDs)
    and ``inter_node_reduction`` (1 − retained).
    """
    world = nodes * ranks_per_node
    if len(batches) != world:
        raise ValueError(f"simulate_traffic: {len(batches)} ranks' batches for {nodes} × {ranks_per_node}")
    tables = len(batches[0]) if batches else 0
    counts = torch.tensor([[int(b.numel()) for b in rank] for rank in batches], dtype=torch.int64)
    values = torch.cat([b.reshape(-1).to(torch.int64) for rank in batches for b in rank]) if tables else torch.empty(0, dtype=torch.int64)
    out = torch.zeros(6, dtype=torch.int64)
    _lib.call(_lib.fn("recgo_shard_simulate"), nodes, ranks_per_node, tables,
              ptr(counts.contiguous()), ptr(values), values.numel(), ptr(out))
    keys = ("lookups", "requested", "flat_intra", "flat_inter", "hier_intra", "hier_inter")
    res: dict[str, float] = dict(zip(keys, (int(v) for v in out.tolist())))
    res["retained"] = res["hier_inter"] / res["flat_inter"] if res["flat_inter"] else 1.0
    res["inter_node_reduction"] = 1.0 - res["retained"]
    return res


def hash_owners(ids: torch.Tensor, world: int) -> torch.Tensor:
    """The rank owning each ID under hash sharding in a world of ``world`` ranks
    (ID → one of 2^16 virtual buckets → contiguous bucket ranges per rank)."""
    from ..tensors import check_tensor

    ids = check_tensor(ids, "ids", (torch.int64,), ndim=1)
    out = torch.empty_like(ids)
    _lib.call(_lib.fn("recgo_shard_hash_owners"), ptr(ids), ids.numel(), world, ptr(out))
    return out


def eq3_reduction(batches: Sequence[Sequence[torch.Tensor]], nodes: int, ranks_per_node: int) -> int:
    """Σ_n Σ_x (G_n(x) − 1) computed directly (in torch, not by the engine's routing): for every node n
    and (table, ID) x owned off n, G_n(x) is the number of n's ranks whose batch holds x. Eq. 3 says
    this is what the hierarchical exchange saves in inter-node IDs over the flat one."""
    world = nodes * ranks_per_node
    total = 0
    for t in range(len(batches[0]) if batches else 0):
        for n in range(nodes):
            ids = torch.cat([torch.unique(batches[n * ranks_per_node + l][t].reshape(-1).to(torch.int64))
                             for l in range(ranks_per_node)])
            if ids.numel() == 0:
                continue
            off = ids[(hash_owners(ids, world) // ranks_per_node) != n]
            _, counts = torch.unique(off, return_counts=True)
            total += int((counts - 1).sum())
    return total
