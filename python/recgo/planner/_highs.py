"""HiGHS MILP solves through librecgo.so (the Go binding planner/highs).

Exposed for tests and for users who want HiGHS with a warm start from Python; the planner itself
builds and solves its MILP entirely in Go.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from .. import _lib
from ..errors import InvalidInputError

_STATUS = {_lib.const(f"HighsStatus{k}"): v for k, v in (
    ("Optimal", "optimal"), ("Infeasible", "infeasible"), ("TimeLimit", "time limit"),
    ("IterationLimit", "iteration limit"), ("SolutionLimit", "solution limit"), ("ObjectiveBound", "objective bound"),
    ("ObjectiveTarget", "objective target"), ("Unknown", "unknown"), ("Interrupted", "interrupted"))}


@dataclass(frozen=True)
class MipResult:
    """Outcome of :func:`solve_mip`: the solution (incumbent at a limit) with its gap and bound."""

    x: list[float]
    status: str
    objective: float
    dual_bound: float
    gap: float
    start_accepted: bool
    start_objective: float
    seconds: float
    nodes: int


def _f64(values: Sequence[float] | torch.Tensor, n: int, name: str) -> torch.Tensor:
    t = torch.as_tensor(values, dtype=torch.float64).contiguous()
    if t.dim() != 1 or t.numel() != n:
        raise InvalidInputError(f"{name}: expected {n} values, got shape {tuple(t.shape)}")
    return t


def solve_mip(
    cost: Sequence[float],
    col_lower: Sequence[float],
    col_upper: Sequence[float],
    integer: Sequence[bool],
    rows: Sequence[tuple[float, float, Sequence[int], Sequence[float]]],
    *,
    maximize: bool = False,
    start: Sequence[float] | None = None,
    time_limit: float = 0.0,
    mip_rel_gap: float = 0.0,
    threads: int = 0,
    max_nodes: int = 0,
) -> MipResult:
    """Solve a MILP with HiGHS; each row is ``(lower, upper, column_indices, coefficients)``.

    ``start`` is a feasible warm start (one value per column). Bounds may be ``±math.inf``. On a
    time limit, or after ``max_nodes`` branch-and-bound nodes (negative: the root only; a limit that
    stops at the same point on every machine), the incumbent is returned with its gap. Raises :class:`recgo.SolverError` when no
    feasible point was found and :class:`recgo.InvalidInputError` for a malformed model.
    """
    n = len(cost)
    c = _f64(cost, n, "cost")
    lo, up = _f64(col_lower, n, "col_lower"), _f64(col_upper, n, "col_upper")
    ints = torch.as_tensor([1 if b else 0 for b in integer], dtype=torch.uint8)
    if ints.numel() != n:
        raise InvalidInputError(f"integer: expected {n} flags, got {ints.numel()}")
    starts, index, value, rlo, rup = [0], [], [], [], []
    for i, row in enumerate(rows):
        lower, upper, idx, val = row
        if len(idx) != len(val):
            raise InvalidInputError(f"row {i}: {len(idx)} indices but {len(val)} coefficients")
        cols = [int(j) for j in idx]
        bad = next((j for j in cols if not 0 <= j < n), None)
        if bad is not None:  # (one past 2^31 raised torch's overflow; HiGHS refused others as "rejected")
            raise InvalidInputError(f"row {i}: column index {bad} is outside [0, {n})")
        if len(set(cols)) != len(cols):
            raise InvalidInputError(f"row {i}: column {next(j for j in cols if cols.count(j) > 1)} is listed twice "
                                    "(give each column once, its coefficients summed)")
        if len(index) + len(cols) >= 2**31:
            raise InvalidInputError("the model has 2^31 or more coefficients, more than HiGHS's 32-bit indices hold")
        index.extend(cols)
        value.extend(float(v) for v in val)
        starts.append(len(index))
        rlo.append(float(lower))
        rup.append(float(upper))
    a_start = torch.tensor(starts, dtype=torch.int32)
    a_index = torch.tensor(index, dtype=torch.int32)
    a_value = torch.tensor(value, dtype=torch.float64)
    row_lo = torch.tensor(rlo, dtype=torch.float64)
    row_up = torch.tensor(rup, dtype=torch.float64)
    x0 = None if start is None else _f64(start, n, "start")
    x = torch.zeros(n, dtype=torch.float64)
    info = torch.zeros(8, dtype=torch.float64)
    f = _lib.fn("recgo_highs_solve")
    ptr = lambda t: None if t is None or t.numel() == 0 else t.data_ptr()  # noqa: E731
    _lib.call(f, n, len(rlo), len(index), -1 if maximize else 1, ptr(c), ptr(lo), ptr(up), ptr(ints),
              ptr(row_lo), ptr(row_up), ptr(a_start) if rlo else None, ptr(a_index), ptr(a_value),
              ptr(x0), float(time_limit), float(mip_rel_gap), int(threads), int(max_nodes), ptr(x), ptr(info))
    status, obj, bound, gap, accepted, secs, nodes, start_obj = info.tolist()
    return MipResult(x=x.tolist(), status=_STATUS.get(int(status), f"status {int(status)}"),
                     objective=obj, dual_bound=bound, gap=gap, start_accepted=bool(accepted),
                     start_objective=start_obj if not math.isnan(start_obj) else math.nan,
                     seconds=secs, nodes=int(nodes))
