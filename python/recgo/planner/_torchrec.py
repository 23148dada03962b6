"""Bridges to TorchRec's planner: run it on the same topology, and export recgo plans to it.

TorchRec's placements are priced in recgo's cost model with this mapping of its compute kernels
(table-wise sharding only, so each table lives on one GPU as in RecShard):

* ``fused`` (all rows in HBM) → hot rows = all rows;
* ``fused_uvm`` (all rows in host memory over UVM) → hot rows = 0;
* ``fused_uvm_caching`` (an HBM cache in front of UVM) → hot rows = cache load factor × rows, as if
  the cache always held the hottest rows (an ideal cache: optimistic for TorchRec).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ..errors import InvalidInputError, require_extra
from ._plan import Plan
from ._profile import Profile
from ._topology import Topology


def _torchrec_topology(topo: Topology) -> Any:
    from torchrec.distributed.planner import Topology as TRTopology

    return TRTopology(world_size=topo.num_gpus, compute_device="cuda", hbm_cap=int(topo.hbm_bytes),
                      ddr_cap=int(topo.host_bytes // max(1, topo.gpus_per_node)),
                      local_world_size=topo.gpus_per_node, hbm_mem_bw=topo.hbm_bandwidth,
                      ddr_mem_bw=topo.uvm_bandwidth)


def _meta_ebc(profile: Profile, names: list[str]) -> Any:
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    cfgs = [EmbeddingBagConfig(name=t["name"], embedding_dim=int(t["dim"]), num_embeddings=int(t["rows"]),
                               feature_names=[t["name"]]) for t in (profile.table(n) for n in names)]
    return EmbeddingBagCollection(tables=cfgs, device=torch.device("meta"))


def torchrec_placement(profile: Profile, topology: Topology,
                       tables: list[str] | None = None) -> tuple[dict[str, tuple[int, int]], dict[str, str]]:
    """Run TorchRec's EmbeddingShardingPlanner on meta-device tables (table-wise sharding, with the
    profile's pooling factors) and return ``({table: (rank, hot_rows)}, {table: compute_kernel})``."""
    require_extra("torchrec", "compare", "torchrec_placement")
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner
    from torchrec.distributed.planner.constants import UVM_CACHING_RATIO
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.types import ShardingType

    names = tables or [t["name"] for t in profile.tables]
    kernels = [EmbeddingComputeKernel.FUSED.value, EmbeddingComputeKernel.FUSED_UVM.value,
               EmbeddingComputeKernel.FUSED_UVM_CACHING.value]
    constraints = {}
    for n in names:
        t = profile.table(n)
        constraints[n] = ParameterConstraints(sharding_types=[ShardingType.TABLE_WISE.value], compute_kernels=kernels,
                                              pooling_factors=[max(1e-3, t["coverage"] * t["pooling"])])
    # TorchRec's batch_size is per rank; recgo's is global (each table serves the whole batch).
    planner = EmbeddingShardingPlanner(topology=_torchrec_topology(topology),
                                       batch_size=max(1, topology.batch_size // topology.num_gpus),
                                       constraints=constraints)
    sharding = planner.plan(_meta_ebc(profile, names), [EmbeddingBagCollectionSharder()])
    out: dict[str, tuple[int, int]] = {}
    used: dict[str, str] = {}
    for n, ps in sharding.plan[""].items():
        rows = int(profile.table(n)["rows"])
        if ps.sharding_type != ShardingType.TABLE_WISE.value or not ps.ranks or len(ps.ranks) != 1:
            raise InvalidInputError(f"torchrec planner: table {n!r} got {ps.sharding_type} on ranks {ps.ranks}")
        if ps.compute_kernel == EmbeddingComputeKernel.FUSED.value:
            hot = rows
        elif ps.compute_kernel == EmbeddingComputeKernel.FUSED_UVM.value:
            hot = 0
        else:
            lf = ps.cache_params.load_factor if ps.cache_params and ps.cache_params.load_factor else UVM_CACHING_RATIO
            hot = int(rows * lf)
        out[n] = (int(ps.ranks[0]), hot)
        used[n] = ps.compute_kernel
    return out, used


def torchrec_constraints(plan: Plan) -> dict[str, Any]:
    """The plan as TorchRec ``ParameterConstraints`` (table-wise; kernel and cache load factor from the
    hot-row split), for users who keep TorchRec's planner but want RecShard's tiering."""
    require_extra("torchrec", "compare", "torchrec_constraints")
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.types import CacheParams, ShardingType

    out = {}
    for t in plan.tables:
        kernel, cache = _kernel(t, EmbeddingComputeKernel)
        out[t["name"]] = ParameterConstraints(
            sharding_types=[ShardingType.TABLE_WISE.value], compute_kernels=[kernel],
            cache_params=CacheParams(load_factor=cache) if cache is not None else None,
            pooling_factors=[max(1e-3, t["coverage"] * t["pooling"])])
    return out


def _kernel(t: Mapping[str, Any], kinds: Any) -> tuple[str, float | None]:
    if t["hot_rows"] >= t["rows"]:
        return kinds.FUSED.value, None
    if t["hot_rows"] == 0:
        return kinds.FUSED_UVM.value, None
    return kinds.FUSED_UVM_CACHING.value, max(1e-6, t["hot_rows"] / t["rows"])


def torchrec_sharding_plan(plan: Plan, module: Any = None) -> Any:
    """The plan as a TorchRec ``EmbeddingModuleShardingPlan`` for an EmbeddingBagCollection whose
    tables are named as in the plan (``module`` defaults to a meta-device EBC built from the plan):
    each table table-wise on its rank, kernel and cache load factor from its hot-row split."""
    require_extra("torchrec", "compare", "torchrec_sharding_plan")
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan, table_wise
    from torchrec.distributed.types import CacheParams
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    topo = plan.topology
    if module is None:
        module = EmbeddingBagCollection(tables=[EmbeddingBagConfig(
            name=t["name"], embedding_dim=int(t["dim"]), num_embeddings=int(t["rows"]), feature_names=[t["name"]])
            for t in plan.tables], device=torch.device("meta"))
    per_param = {}
    caches = {}
    for t in plan.tables:
        kernel, cache = _kernel(t, EmbeddingComputeKernel)
        per_param[t["name"]] = table_wise(rank=int(t["rank"]), compute_kernel=kernel)
        caches[t["name"]] = cache
    msp = construct_module_sharding_plan(module, per_param, local_size=topo.gpus_per_node,
                                         world_size=topo.num_gpus, device_type="cuda")
    for name, ps in msp.items():
        if caches.get(name) is not None:
            ps.cache_params = CacheParams(load_factor=caches[name])
    return msp
