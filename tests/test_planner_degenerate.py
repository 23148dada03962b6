"""The planner on degenerate shapes, checked against an independent brute force: RecShard's cost
model written out here in Python (not recgo.planner.evaluate), every placement of every table on
its splits enumerated. Shapes: one table, one GPU, more GPUs than tables, equal tables, no HBM, no
host memory, untouched and never-read tables, HBM slower than UVM; and profiles whose costs
overflow float64."""

from __future__ import annotations

import itertools
import math

import pytest

from recgo import InvalidInputError
from recgo import planner as P


def _table(name: str, rows: int, dim: int = 4, elem: int = 4, cov: float = 0.5, pool: float = 2.0,
           steps: tuple[tuple[int, float], ...] = (), touched: int | None = None) -> dict:
    """A profile table whose CDF runs through ``steps`` to (touched, 1); touched 0 reads no row."""
    touched = rows if touched is None else touched
    cdf = [{"rows": 0, "frac": 0.0}] + [{"rows": r, "frac": f} for r, f in steps]
    if touched:
        cdf.append({"rows": touched, "frac": 1.0})
    return {"name": name, "rows": rows, "dim": dim, "elem_bytes": elem, "samples": 100, "lookups": 100,
            "coverage": cov, "pooling": pool, "touched": touched, "cdf": cdf}


def _frac(t: dict, h: int) -> float:
    """Share of accesses the hottest h rows take: the CDF, linear between its points."""
    cdf = t["cdf"]
    if h <= 0 or len(cdf) < 2:
        return 0.0
    if h >= cdf[-1]["rows"]:
        return cdf[-1]["frac"]
    a, b = next((a, b) for a, b in zip(cdf, cdf[1:]) if a["rows"] <= h < b["rows"])
    return a["frac"] + (b["frac"] - a["frac"]) * (h - a["rows"]) / (b["rows"] - a["rows"])


def _seconds(t: dict, h: int, topo: P.Topology) -> float:
    """RecShard's per-step time: bytes read per step, the hot share at HBM and the rest at UVM bandwidth."""
    f = _frac(t, h)
    step = t["coverage"] * t["pooling"] * topo.batch_size * t["dim"] * t["elem_bytes"]
    return step * (f / topo.hbm_bandwidth + (1 - f) / topo.uvm_bandwidth)


def _splits(t: dict, topo: P.Topology) -> list[int]:
    """The planner's candidate hot-row counts that fit one GPU alone: none, each CDF step, all; or, when
    none does, the most rows one GPU's HBM holds."""
    rb = t["dim"] * t["elem_bytes"]
    hs = sorted({0, t["rows"], *(p["rows"] for p in t["cdf"])})
    fit = [h for h in hs if h * rb <= topo.hbm_bytes and (t["rows"] - h) * rb <= topo.host_bytes]
    return fit or [min(t["rows"], topo.hbm_bytes // rb)]


def _loads(tables: list[dict], topo: P.Topology, gpus, hots) -> tuple[list[float], bool]:
    """Per-GPU seconds of a placement, and whether it fits every HBM and host budget."""
    sec, hbm, host = [0.0] * topo.num_gpus, [0] * topo.num_gpus, [0] * topo.nodes
    for t, g, h in zip(tables, gpus, hots):
        rb = t["dim"] * t["elem_bytes"]
        sec[g] += _seconds(t, h, topo)
        hbm[g] += h * rb
        host[g // topo.gpus_per_node] += (t["rows"] - h) * rb
    return sec, max(hbm) <= topo.hbm_bytes and max(host) <= topo.host_bytes


def _brute_force(tables: list[dict], topo: P.Topology) -> float:
    """The least slowest-GPU time over every placement that fits (inf when none does)."""
    best = math.inf
    for gpus in itertools.product(range(topo.num_gpus), repeat=len(tables)):
        for hots in itertools.product(*(_splits(t, topo) for t in tables)):
            sec, fits = _loads(tables, topo, gpus, hots)
            if fits:
                best = min(best, max(sec))
    return best


def _topo(**kw) -> P.Topology:
    return P.Topology(**{"nodes": 1, "gpus_per_node": 2, "hbm_bytes": 1000, "host_bytes": 10**6,
                         "batch_size": 128, **kw})


_STEPS = ((10, 0.6), (50, 0.9))
CASES = {
    "one table": ([_table("a", 100, steps=_STEPS)], _topo()),
    "one GPU": ([_table("a", 100, steps=_STEPS), _table("b", 50, steps=((5, 0.5),))], _topo(gpus_per_node=1)),
    "more GPUs than tables": ([_table("a", 100, steps=_STEPS)], _topo(nodes=2, gpus_per_node=4)),
    "equal tables": ([_table(n, 100, steps=_STEPS) for n in "abc"], _topo()),
    "no HBM": ([_table("a", 100, steps=_STEPS), _table("b", 50)], _topo(hbm_bytes=0)),
    "no host memory": ([_table("a", 10, steps=((5, 0.7),)), _table("b", 5)], _topo(host_bytes=0)),
    "untouched and never read": ([_table("a", 100, touched=0), _table("b", 50, cov=0.0, steps=((3, 0.5),)),
                                  _table("c", 20, pool=0.0)], _topo()),
    # the planner's bound took each table's all-HBM split as its cheapest and called a worse plan optimal
    "HBM slower than UVM": ([_table("t0", 37, 1, 2, 1.0, 1.0, ((13, 0.27),)), _table("t1", 5, 4, 4, 0.3, 2.5, touched=0),
                             _table("t2", 100, 1, 2, 1.0, 0.0, ((22, 0.93),))],
                            _topo(gpus_per_node=3, hbm_bytes=96, host_bytes=271, hbm_bandwidth=1e9,
                                  uvm_bandwidth=22e9, batch_size=1)),
    # the row greedy packed by cost only and raised CapacityError on these feasible instances
    "one node's host memory": ([_table("t0", 100, 3, 1, 0.3, 2.5, touched=0),
                                _table("t1", 37, 3, 4, 0.3, 0.0, ((28, 0.28),))],
                               _topo(gpus_per_node=3, hbm_bytes=318, host_bytes=509, hbm_bandwidth=850e9,
                                     uvm_bandwidth=850e9)),
    "host memory in pieces": ([_table("t0", 10, 4, 2, 0.0, 2.5, touched=0), _table("t1", 100, 1, 2, 0.0, 1.0, touched=0),
                               _table("t2", 37, 4, 1, 1.0, 2.5, touched=33)],
                              _topo(nodes=2, gpus_per_node=1, hbm_bytes=0, host_bytes=243, hbm_bandwidth=22e9,
                                    uvm_bandwidth=850e9)),
}


@pytest.mark.parametrize("name", CASES)
def test_plans_of_degenerate_shapes_match_the_brute_force(name: str) -> None:
    tables, topo = CASES[name]
    want = _brute_force(tables, topo)
    assert want < math.inf
    prof = P.Profile.from_dict({"version": 1, "sample_rate": 1.0, "tables": tables})
    by_name = {t["name"]: t for t in tables}
    for strategy in ("row_greedy", "milp"):
        plan = P.plan(prof, topo, strategy, mip_rel_gap=1e-9, time_limit=20)
        placed = [by_name[t["name"]] for t in plan.tables]
        sec, fits = _loads(placed, topo, [t["rank"] for t in plan.tables], [t["hot_rows"] for t in plan.tables])
        assert fits and not plan.predicted.get("violation"), strategy
        assert max(sec) == pytest.approx(plan.predicted["max_seconds"], rel=1e-9, abs=1e-300), strategy
        assert max(sec) >= want * (1 - 1e-9), strategy
        if strategy == "milp":
            assert max(sec) == pytest.approx(want, rel=1e-7, abs=1e-300)


@pytest.mark.parametrize("pooling, batch, table", [(1e308, 128, "a"), (1e300, 2**40, "a"), (2e306, 8, "b")])
def test_costs_past_float64_name_the_table(pooling: float, batch: int, table: str) -> None:
    """An overflowing per-step traffic (one table's, or the sum's) failed as an InternalError from the
    plan's JSON ("unsupported value: +Inf")."""
    tables = [_table("a", 100, pool=pooling), _table("b", 50, pool=pooling)]
    prof = P.Profile.from_dict({"version": 1, "sample_rate": 1.0, "tables": tables})
    with pytest.raises(InvalidInputError, match=f'table "{table}": its bytes read per step.*overflows float64'):
        P.plan(prof, _topo(batch_size=batch), "row_greedy")


def test_a_denormal_bandwidth_is_refused() -> None:
    prof = P.Profile.from_dict({"version": 1, "sample_rate": 1.0, "tables": [_table("a", 100)]})
    with pytest.raises(InvalidInputError, match="at least 1 byte per second"):
        P.plan(prof, _topo(uvm_bandwidth=5e-324), "row_greedy")
