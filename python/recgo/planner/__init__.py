"""RecShard-style placement of embedding tables: profile the data, model the cost, solve a MILP.

The solver and the cost model live in Go (planner/); this package wraps them.
"""

from __future__ import annotations

from ._highs import MipResult, solve_mip

__all__ = ["MipResult", "solve_mip"]
