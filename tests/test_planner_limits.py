"""recgo.planner at its limits: a time limit that bounds the call even while HiGHS presolves a large
MILP, Ctrl-C that returns at once from any phase, errors that say whether the MILP ran out of time
or proved that nothing fits, and a warning when a plan is not proven optimal."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import torch

import recgo
from recgo import CapacityError, InvalidInputError, SolverError
from recgo import planner as P

ROOT = Path(__file__).resolve().parents[1]


def _packing(*sizes: int) -> tuple[P.Profile, P.Topology]:
    """Tables of these byte sizes (never looked up) on 2 nodes of one GPU, no HBM, 1000 B of host
    memory each: a bin packing that the row greedy can fail."""
    tables = [{"name": chr(ord("a") + i), "rows": b // 4, "dim": 1, "elem_bytes": 4, "samples": 0, "lookups": 0,
               "coverage": 0.0, "pooling": 0.0, "touched": 0, "cdf": []} for i, b in enumerate(sizes)]
    prof = P.Profile.from_dict({"version": 1, "sample_rate": 1, "tables": tables})
    return prof, P.Topology(nodes=2, gpus_per_node=1, hbm_bytes=0, host_bytes=1000, batch_size=16)


def _looked_up_packing() -> tuple[P.Profile, P.Topology]:
    """Tables of 500, 500, 400, 400 and 200 B, looked up, on 2 nodes of one GPU with no HBM and
    1000 B of host memory each: 500+500 | 400+400+200 fits, but neither the row greedy nor the
    cheapest packing (which wants the looked-up rows in HBM) finds it; only the MILP does."""
    ps = P.Profiler([P.TableSpec(n, r, 1) for n, r in [("a", 125), ("b", 125), ("c", 100), ("d", 100), ("e", 50)]],
                    sample_rate=1.0)
    ps.add(recgo.KeyedJaggedTensor(list("abcde"), torch.tensor([0, 1, 0, 2, 3, 4, 1, 2, 3]),
                                   lengths=torch.tensor([1, 1, 1, 1, 1, 1, 1, 0, 1, 1])))
    return ps.profile(), P.Topology(nodes=2, gpus_per_node=1, hbm_bytes=0, host_bytes=1000, batch_size=16)


def test_a_milp_stopped_before_any_placement_is_not_called_a_capacity_error() -> None:
    prof, topo = _looked_up_packing()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", P.ThinProfileWarning)
        with pytest.raises(SolverError) as info:
            P.plan(prof, topo, "milp", time_limit=1e-6)
    assert not isinstance(info.value, CapacityError)
    msg = str(info.value)
    assert msg.startswith("planner: the MILP found no placement within the time limit (raise time_limit), "
                          "and its fallback, the row-level greedy, could not place the tables: "
                          'row greedy: table "d" needs 400 B'), msg
    # With the time, the MILP places what the greedy could not.
    plan = P.plan(prof, topo, "milp", time_limit=30)
    assert plan.solver["status"] == "optimal" and not plan.warning
    assert sorted(sum(t["rows"] * 4 for t in plan.tables if t["rank"] == r) for r in (0, 1)) == [1000, 1000]


def test_proven_infeasibility_is_a_capacity_error_naming_the_proof() -> None:
    prof, topo = _packing(600, 600, 600)
    with pytest.raises(CapacityError, match=r"^milp: no placement fits: HiGHS proved the MILP infeasible \(no choice "
                                            r"of a GPU and a hot-row split, .* for each of the 3 tables fits 2 GPUs"):
        P.plan(prof, topo, "milp", time_limit=30)


@pytest.mark.parametrize("cdf, end", [
    ([{"rows": 0, "frac": 0}, {"rows": 2, "frac": 0.3}, {"rows": 4, "frac": 0.5}], "(4, 0.5)"),
    ([{"rows": 0, "frac": 0}, {"rows": 4, "frac": 0.0}], "(4, 0)"),
])
def test_a_profile_cdf_must_end_at_one(cdf: list[dict], end: str) -> None:
    table = {"name": "a", "rows": 100, "dim": 8, "elem_bytes": 4, "samples": 10, "lookups": 10, "coverage": 1.0,
             "pooling": 1.0, "touched": 4, "cdf": cdf}
    with pytest.raises(InvalidInputError, match=rf'table "a": CDF must run from \(0, 0\) to \(touched=4, 1\), '
                                                rf"not to {end.replace('(', '[(]').replace(')', '[)]')}"):
        P.Profile.from_dict({"version": 1, "sample_rate": 1, "tables": [table]})


def _hard_model() -> tuple[P.Profile, P.Topology]:
    """60 tables on 8 GPUs with HBM for a twenty-fourth of them: no gap of 1e-9 closes in seconds."""
    spec = {"tables": 60, "dim": 64, "elem_bytes": 4, "total_bytes": 60 * 5e4 * 256, "min_rows": 2e4,
            "max_rows": 8e4, "alphas": [0.7, 0.9, 1.1], "coverages": [0.3, 0.6, 1.0], "poolings": [1, 3, 8],
            "touched_min": 0.5, "steps": 10, "seed": 3}
    prof = P.Profile.synthetic(spec)
    total = sum(t["rows"] * 256 for t in prof.tables)
    return prof, P.Topology(nodes=2, gpus_per_node=4, hbm_bytes=int(total / 24), host_bytes=int(total),
                            batch_size=4096)


def test_a_plan_stopped_at_its_time_limit_warns_and_progress_reports(capsys: pytest.CaptureFixture[str]) -> None:
    prof, topo = _hard_model()
    with pytest.warns(RuntimeWarning, match=r"^plan: the MILP stopped at the time limit of 1\.5 s; the plan is not "
                                            r"proven optimal \(within \d+\.\d\d % of its bound\): raise time_limit"):
        plan = P.plan(prof, topo, "milp", time_limit=1.5, mip_rel_gap=1e-9, threads=1, progress=True)
    assert plan.solver["status"] == "time limit"
    err = capsys.readouterr().err
    assert re.search(r"plan \(milp\): \S*\s*1/1\.5 s", err), err  # tqdm's bar: 1 of the 1.5 s
    # Off by default, and silent for a plan proven optimal.
    prof2, topo2 = _packing(500, 500, 400, 400, 200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        P.plan(prof2, topo2, "milp", time_limit=30)
    assert capsys.readouterr().err == ""


def test_a_fallback_to_the_row_greedy_warns_that_the_plan_is_not_proven() -> None:
    from types import SimpleNamespace

    from recgo.planner._plan import _warn_if_unproven

    def plan(solver: dict | None, warning: str) -> P.Plan:
        return SimpleNamespace(solver=solver, warning=warning)  # type: ignore[return-value]

    with pytest.warns(RuntimeWarning, match=r"^plan: MILP failed \(highs: run failed\); fell back to the row-level "
                                            r"greedy; the plan is not proven optimal$"):
        _warn_if_unproven(plan(None, "MILP failed (highs: run failed); fell back to the row-level greedy"), 10.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_if_unproven(plan(None, ""), 10.0)
        _warn_if_unproven(plan({"status": "optimal", "mip_gap": 0.0}, ""), 10.0)


# About 3000 tables on 64 GPUs (1.9M binaries, 12M nonzeros): HiGHS reads the model and presolves
# it for seconds without polling a callback or its time limit. Each plan must still return on time.
_LARGE_CHILD = textwrap.dedent("""
    import faulthandler, signal, sys, time, warnings
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test dumps the stacks if the child hangs
    signal.signal(signal.SIGINT, signal.default_int_handler)  # see test_planner_reliability's SIGINT test
    from recgo import planner as P
    spec = {"tables": 3000, "dim": 64, "elem_bytes": 4, "total_bytes": 3000 * 1e6 * 256, "min_rows": 5e5,
            "max_rows": 2e6, "alphas": [0.3, 0.6, 0.9], "coverages": [0.5, 0.8, 1.0], "poolings": [1, 2, 3],
            "touched_min": 0.5, "steps": 7, "seed": 2}
    prof = P.Profile.synthetic(spec)
    total = sum(t["rows"] * 256 for t in prof.tables)
    topo = P.Topology(nodes=8, gpus_per_node=8, hbm_bytes=int(total / 64 * 0.15), host_bytes=int(total),
                      batch_size=4096)
    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    p = P.plan(prof, topo, "milp", time_limit=LIMIT, mip_rel_gap=1e-9)
    print("limited", round(time.perf_counter() - t0, 3), p.solver["columns"], p.solver["status"], flush=True)
    print("solving", flush=True)
    p = P.plan(prof, topo, "milp", time_limit=8, mip_rel_gap=1e-9)
    print("interrupted", p.solver["status"], flush=True)
""")


def _mem_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@pytest.mark.skipif(_mem_available() < 6 << 30, reason="the large MILP's child needs about 4 GB")
def test_time_limit_and_ctrl_c_return_on_time_while_highs_presolves() -> None:
    limit, sigint_after = 5.0, 5.5  # the second plan is then in HiGHS's set-up (after its warm start and build)
    child = subprocess.Popen([sys.executable, "-c", _LARGE_CHILD.replace("LIMIT", repr(limit))],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT / "python")})
    try:
        first = child.stdout.readline().split(maxsplit=3)
        assert first[:1] == ["limited"], first + [child.stderr.read()]
        assert first[3].strip() == "time limit", first
        # Before the fix, HiGHS's set-up ran past the limit by seconds (5 s took 8-10 s). The margin
        # leaves room for a loaded machine (a load average of 26 gave 6.02 s) and still catches that.
        assert float(first[1]) < limit + 2.5, first
        assert child.stdout.readline().strip() == "solving"
        time.sleep(sigint_after)
        sent = time.perf_counter()
        child.send_signal(signal.SIGINT)
        line = child.stdout.readline().strip()
        reacted = time.perf_counter() - sent
        # Before the fix, Ctrl-C waited for the end of presolve and beyond (4 s to minutes).
        assert line == "interrupted interrupted", line + child.stderr.read()
        assert reacted < 2.0, reacted
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
            child.kill()
        child.communicate()
