"""RecShard-style placement of embedding tables: profile the data, model the cost, solve a MILP.

:func:`profile` counts table accesses over KJT batches (sampled), :func:`plan` places every table
on a GPU with a hot/cold split (strategies: the paper's whole-table greedy baselines, a row-level
greedy, the MILP with HiGHS), :class:`Plan` saves plan.json, report.md, the remap and plots. The
profiler, cost model and solvers run in Go (planner/); this package wraps them.
"""

from __future__ import annotations

from ._plan import COST_MODELS, STRATEGIES, Plan, evaluate, plan
from ._profile import Profile, Profiler, TableSpec, ThinProfileWarning, profile
from ._remap import Remap
from ._topology import Topology, local_gpus
from ._highs import MipResult, solve_mip
from ._torchrec import torchrec_constraints, torchrec_placement, torchrec_sharding_plan
from .ebc import PlannedEmbeddingBagCollection
from ._plots import plot_cdfs, plot_gpu_costs

from .._lazy import submodules as _submodules

__getattr__ = _submodules(__name__, ("synthetic", "criteo"))  # imported on first use

__all__ = [
    "COST_MODELS",
    "STRATEGIES",
    "MipResult",
    "Plan",
    "PlannedEmbeddingBagCollection",
    "Profile",
    "Profiler",
    "Remap",
    "TableSpec",
    "ThinProfileWarning",
    "Topology",
    "evaluate",
    "local_gpus",
    "plan",
    "plot_cdfs",
    "plot_gpu_costs",
    "profile",
    "solve_mip",
    "torchrec_constraints",
    "torchrec_placement",
    "torchrec_sharding_plan",
]
