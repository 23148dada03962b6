"""HiGHS through librecgo.so: known optimum, warm start accepted, incumbent kept at a time limit."""

from __future__ import annotations

import math
import random

import pytest

from recgo import InvalidInputError, SolverError
from recgo.planner import solve_mip

INF = math.inf


def _knapsack(start=None, **kw):
    # maximize 8a + 11b + 6c + 4d  s.t.  5a + 7b + 4c + 3d <= 14, binary: optimum 21 at (0,1,1,1).
    return solve_mip([8, 11, 6, 4], [0] * 4, [1] * 4, [True] * 4,
                     [(-INF, 14, [0, 1, 2, 3], [5, 7, 4, 3])], maximize=True, start=start, **kw)


def _brute_force_knapsack() -> float:
    best = 0.0
    for mask in range(16):
        x = [(mask >> j) & 1 for j in range(4)]
        if 5 * x[0] + 7 * x[1] + 4 * x[2] + 3 * x[3] <= 14:
            best = max(best, 8 * x[0] + 11 * x[1] + 6 * x[2] + 4 * x[3])
    return best


def test_known_optimum_cold_and_warm() -> None:
    cold = _knapsack()
    assert cold.status == "optimal"
    assert cold.objective == pytest.approx(_brute_force_knapsack())
    assert cold.x == pytest.approx([0, 1, 1, 1])
    warm = _knapsack(start=[1, 1, 0, 0], threads=1)
    assert warm.status == "optimal" and warm.objective == pytest.approx(21)
    assert warm.start_objective == pytest.approx(19)
    assert warm.start_accepted


def test_node_limit_returns_incumbent_with_gap() -> None:
    """A node limit (root only) stops at the same point on every machine, so the limit branch
    always runs: the warm start is kept as the incumbent, with a positive gap and a weaker bound."""
    rng = random.Random(3)
    n = 120
    cost = [float(rng.randint(10, 99)) for _ in range(n)]
    rows = []
    for _ in range(10):
        coef = [float(rng.randint(5, 64)) for _ in range(n)]
        rows.append((-INF, math.floor(sum(coef) / 2), list(range(n)), coef))
    res = solve_mip(cost, [0] * n, [1] * n, [True] * n, rows, maximize=True, start=[0.0] * n,
                    max_nodes=-1, mip_rel_gap=1e-9, threads=1)
    assert res.status == "solution limit"
    assert res.start_accepted
    assert res.objective == pytest.approx(sum(c * x for c, x in zip(cost, res.x)))
    for lo, up, idx, coef in rows:
        assert sum(coef[k] * res.x[j] for k, j in enumerate(idx)) <= up + 1e-6
    assert res.gap > 0 and res.dual_bound > res.objective
    assert res.nodes <= 1


def test_infeasible_raises_solver_error() -> None:
    with pytest.raises(SolverError, match="no feasible solution"):
        solve_mip([1, 1], [0, 0], [1, 1], [True, True], [(3, INF, [0, 1], [1, 1])])


@pytest.mark.parametrize("kwargs, match", [
    (dict(start=[1, 1, 1, 1]), "warm start is infeasible"),
    (dict(start=[1]), "expected 4 values"),
    (dict(time_limit=-1), "negative"),
])
def test_bad_input_is_named(kwargs, match) -> None:
    with pytest.raises(InvalidInputError, match=match):
        _knapsack(**kwargs)


@pytest.mark.parametrize("index, match", [
    ([7], r"row 0: column index 7 is outside \[0, 1\)"),
    ([2**31], r"column index 2147483648 is outside"),  # torch's int32 overflow, raw
    ([0, 0], "row 0: column 0 is listed twice"),  # HiGHS's "passMip rejected the model" (a SolverError)
])
def test_bad_column_index(index: list[int], match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        solve_mip([1], [0], [1], [True], [(0, 1, index, [1.0] * len(index))])
