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


def _data_type(table: str, elem_bytes: int) -> Any:
    """The TorchRec ``DataType`` of a table stored with ``elem_bytes`` per element, so TorchRec's planner
    sizes it as recgo's does (an FP16 table is half an FP32 one)."""
    from torchrec.modules.embedding_configs import DataType

    kinds = {4: DataType.FP32, 2: DataType.FP16, 1: DataType.INT8}
    if elem_bytes not in kinds:
        raise InvalidInputError(f"table {table!r}: {elem_bytes} bytes per element has no TorchRec data type "
                                "(TorchRec's planner sizes tables of 4 (FP32), 2 (FP16) or 1 (INT8) bytes per element)")
    return kinds[elem_bytes]


def _meta_ebc(tables: list[Mapping[str, Any]]) -> Any:
    """A meta-device TorchRec EBC of ``tables`` (dicts with name, rows, dim, elem_bytes), one feature
    per table named like it."""
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    cfgs = [EmbeddingBagConfig(name=t["name"], embedding_dim=int(t["dim"]), num_embeddings=int(t["rows"]),
                               feature_names=[t["name"]], data_type=_data_type(t["name"], int(t["elem_bytes"])))
            for t in tables]
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

    if tables is not None and not tables:  # (it planned every table, where plan() refuses an empty list)
        raise InvalidInputError("torchrec_placement: tables=[] names no table; leave it out to place them all")
    names = list(tables) if tables is not None else [t["name"] for t in profile.tables]
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
    sharding = planner.plan(_meta_ebc([profile.table(n) for n in names]), [EmbeddingBagCollectionSharder()])
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
    hot-row split), for users who keep TorchRec's planner but want RecShard's tiering.

    The constraints carry each table's sharding type, compute kernel, cache load factor and pooling
    factor, not its rank (``ParameterConstraints`` has no rank field): TorchRec's planner fed them
    places the tables itself, on other GPUs than the plan's. :func:`torchrec_sharding_plan` gives
    TorchRec the plan's placement."""
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
    each table table-wise on its rank, kernel and cache load factor from its hot-row split.

    Raises InvalidInputError when ``module``'s tables are not the plan's (other names, or other row
    counts or dims than the plan was made for)."""
    require_extra("torchrec", "compare", "torchrec_sharding_plan")
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan, table_wise
    from torchrec.distributed.types import CacheParams

    topo = plan.topology
    if module is None:
        module = _meta_ebc([{**t, "elem_bytes": _plan_elem_bytes(t)} for t in plan.tables])
    else:
        _check_module(plan, module)
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


def _plan_elem_bytes(t: Mapping[str, Any]) -> int:
    """Bytes per element of a plan's table (its hot and cold bytes over its elements)."""
    elems = int(t["rows"]) * int(t["dim"])
    return (int(t["hot_bytes"]) + int(t["cold_bytes"])) // elems if elems else 4


def _check_module(plan: Plan, module: Any) -> None:
    """Refuse, by name, a module whose tables are not the plan's (TorchRec would assert, or shard rows
    the plan never priced)."""
    configs = getattr(module, "embedding_bag_configs", None)
    if not callable(configs):
        raise InvalidInputError(f"torchrec_sharding_plan: module: expected a TorchRec EmbeddingBagCollection, got "
                                f"{type(module).__name__}")
    have = {c.name: c for c in configs()}
    planned = {t["name"]: t for t in plan.tables}
    if set(have) != set(planned):
        raise InvalidInputError(f"torchrec_sharding_plan: the module's tables {sorted(have)} are not the plan's "
                                f"{sorted(planned)}: plan the module's tables (their EmbeddingBagConfig names)")
    for n, t in planned.items():
        c = have[n]
        if (int(c.num_embeddings), int(c.embedding_dim)) != (int(t["rows"]), int(t["dim"])):
            raise InvalidInputError(f"torchrec_sharding_plan: table {n!r} has {c.num_embeddings} rows of dim "
                                    f"{c.embedding_dim} in the module, but the plan was made for {t['rows']} rows of "
                                    f"dim {t['dim']}")
