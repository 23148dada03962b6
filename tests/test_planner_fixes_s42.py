"""Planner defects a review found (session 42), each test failing on the code before the fix:

* Re-planning into an existing folder kept the earlier plan's remap.bin and plots when the new save
  wrote none (a profile without ranked rows, ``--no-plots``), the CLI's "wrote ..." line listed them
  as this run's, and report.md's next steps always loaded ``dir/remap.bin``.
* ``plan --strategy all`` stopped at the first baseline that could not pack the tables, writing
  nothing, though the MILP placed them.
* A time limit past what Go's time.Duration holds (centuries, meant as "none") wrapped to a negative
  duration: the MILP stopped at once.
* ``threads`` had no upper bound and was cut to HiGHS's narrower integer (a huge count ran with a
  few threads).
* ``Remap.load`` of a FIFO blocked forever in open() (``Plan.load`` and ``Profile.load`` refuse it).
* ``profile --out DIR`` was refused only after the whole profiling run; ``plan`` created its
  ``--out`` folder before checking its arguments, leaving an empty folder when they were refused.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from recgo import planner as P
from recgo.errors import InvalidInputError

from test_planner_degenerate import _table

ROOT = Path(__file__).resolve().parents[1]


def _main(*argv: str) -> tuple[int, str, str]:
    """``python -m recgo`` in this process: status, stdout, stderr."""
    from recgo.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def counted() -> P.Profile:
    """A profile counted from batches: it has ranked rows, so a save writes remap.bin."""
    g = torch.Generator().manual_seed(0)
    u = torch.rand(400, generator=g) ** 4
    specs = [P.TableSpec("ta", 60, 4), P.TableSpec("tb", 80, 8)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", P.ThinProfileWarning)
        return P.profile([{"ta": (u * 60).long(), "tb": 79 - (u * 80).long()}], specs, sample_rate=1.0,
                         min_lookups=0)


TOPO = P.Topology(nodes=1, gpus_per_node=2, hbm_bytes=300, host_bytes=10**6)


def test_a_save_removes_the_earlier_plans_remap_and_plots(counted: P.Profile, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    d = tmp_path / "plan"
    P.plan(counted, TOPO, time_limit=10).save(d)
    assert {p.name for p in d.iterdir()} == {"plan.json", "report.md", "remap.bin", "gpu_costs.png", "cdfs.png"}
    assert 'Remap.load(dir + "/remap.bin")' in (d / "report.md").read_text()
    unranked = P.Profile.from_dict(counted.to_dict())  # the same tables, no ranked rows
    P.plan(unranked, TOPO, time_limit=10).save(d, plots=False)
    assert {p.name for p in d.iterdir()} == {"plan.json", "report.md"}
    report = (d / "report.md").read_text()
    assert "Remap.load" not in report and "No remap.bin was written" in report
    P.plan(counted, TOPO, time_limit=10).save(d)
    P.Plan.load(d).save(d)  # a plan without its profile draws no CDFs: the earlier cdfs.png goes
    assert {p.name for p in d.iterdir()} == {"plan.json", "report.md", "gpu_costs.png", "remap.bin"}  # its own
    assert 'Remap.load(dir + "/remap.bin")' in (d / "report.md").read_text()


def test_replanning_into_an_out_folder_lists_only_this_runs_files(counted: P.Profile, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    ranked, unranked, d = tmp_path / "ranked.json", tmp_path / "unranked.json", tmp_path / "out"
    counted.save(ranked)
    P.Profile.from_dict(counted.to_dict()).save(unranked)
    flags = ["--nodes", "1", "--gpus-per-node", "2", "--hbm-gb", "3e-7", "--time-limit", "10", "--no-progress"]
    rc, out, err = _main("plan", "--profile", str(ranked), "--out", str(d), *flags)
    assert rc == 0, err
    assert out.splitlines()[-1] == f"wrote {d}/plan.json, report.md, remap.bin, gpu_costs.png, cdfs.png"
    rc, out, err = _main("plan", "--profile", str(unranked), "--out", str(d), "--no-plots", *flags)
    assert rc == 0, err
    assert out.splitlines()[-1] == f"wrote {d}/plan.json, report.md"
    assert sorted(p.name for p in d.iterdir()) == ["plan.json", "report.md"]


def _pack_profile(path: Path) -> None:
    """Small tables of one-byte rows that fit two GPUs' HBM (no host memory) only when the two largest
    share a GPU: largest-first onto the least-loaded GPU leaves the last table no room."""
    tables = [_table(f"t{i}", r, dim=1, elem=1) for i, r in enumerate([3, 3, 2, 2, 2])]
    P.Profile.from_dict({"version": 1, "sample_rate": 1.0, "tables": tables}).save(path)


def test_strategy_all_writes_the_milp_plan_when_a_baseline_cannot_pack(tmp_path: Path) -> None:
    prof = tmp_path / "pack.json"
    _pack_profile(prof)
    flags = ["--profile", str(prof), "--nodes", "1", "--gpus-per-node", "2", "--host-gb", "0", "--no-plots",
             "--no-progress", "--strategy", "all", "--time-limit", "10"]
    rc, out, err = _main("plan", *flags, "--hbm-gb", "6e-9", "--out", str(tmp_path / "all"))
    assert rc == 0, err
    assert "warning: greedy_size could not place the tables and is left out of the comparison: " in err
    assert "greedy_size: no placement (CapacityError)" in out
    assert "could not place the tables" in out.splitlines()[-2]
    assert out.splitlines()[-1] == f"wrote {tmp_path / 'all'}/plan.json, report.md"
    plan = P.Plan.load(tmp_path / "all")
    assert plan.strategy == "milp" and not plan.predicted.get("violation")
    # the MILP's own failure is still the run's: less HBM in all than the rows need
    rc, out, err = _main("plan", *flags, "--hbm-gb", "2.5e-9", "--out", str(tmp_path / "none"))
    assert rc == 2 and "error: CapacityError: " in err
    assert not (tmp_path / "none").exists()


def test_strategy_all_compares_the_strategies_that_placed_the_tables(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from recgo.planner import _plots

    prof = tmp_path / "pack.json"
    _pack_profile(prof)
    titles = []
    real = _plots.plot_gpu_costs

    def spy(plans, path, title=""):
        titles.append((sorted(plans), title))
        real(plans, path, title)

    _plots.plot_gpu_costs, P.plot_gpu_costs = spy, spy
    try:
        rc, _, err = _main("plan", "--profile", str(prof), "--nodes", "1", "--gpus-per-node", "2", "--hbm-gb",
                           "6e-9", "--host-gb", "0", "--no-progress", "--strategy", "all", "--time-limit", "10",
                           "--out", str(tmp_path / "all"))
    finally:
        _plots.plot_gpu_costs, P.plot_gpu_costs = real, real
    assert rc == 0, err
    # every baseline here fails (each packs largest-first or by cost); the comparison names them
    assert titles[-1] == (["milp"], "Per-GPU modeled cost by strategy (greedy_size, greedy_lookups, "
                                    "greedy_size_lookups, row_greedy: no placement)")
    assert (tmp_path / "all" / "gpu_costs.png").stat().st_size > 0


@pytest.mark.parametrize("time_limit", [1e10, 1e300])
def test_a_time_limit_past_a_go_duration_is_no_limit(time_limit: float) -> None:
    # tables on GPUs whose HBM holds part of them: a MILP, not settled by the planner's bound
    tables = [_table(f"t{i}", 40 + 7 * i, dim=4, elem=4, cov=0.3 + 0.05 * i, steps=((4 + i, 0.6), (20, 0.9)))
              for i in range(8)]
    prof = P.Profile.from_dict({"version": 1, "sample_rate": 1.0, "tables": tables})
    topo = P.Topology(nodes=1, gpus_per_node=2, hbm_bytes=1200, host_bytes=10**6, batch_size=64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "stopped at the time limit" would raise
        p = P.plan(prof, topo, "milp", time_limit=time_limit, mip_rel_gap=1e-6, threads=1)
    assert p.solver["status"] == "optimal" and not p.warning


@pytest.mark.parametrize("threads", [1025, 2**31, 2**32 + 2])
def test_threads_past_the_bound_are_refused_by_value(counted: P.Profile, threads: int) -> None:
    with pytest.raises(InvalidInputError, match=rf"threads {threads} outside \[0, 1024\]"):
        P.plan(counted, TOPO, "milp", time_limit=10, threads=threads)


def test_remap_load_refuses_a_fifo_and_a_folder(tmp_path: Path) -> None:
    fifo = tmp_path / "remap.fifo"
    os.mkfifo(fifo)
    code = ("import sys\nfrom recgo import planner as P\nfor p in sys.argv[1:]:\n"
            "    try:\n        P.Remap.load(p)\n    except Exception as e:\n"
            "        print(type(e).__name__, e)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}
    try:  # in a child: before the fix its open() of the FIFO never returned
        r = subprocess.run([sys.executable, "-c", code, str(fifo), str(tmp_path)], capture_output=True, text=True,
                           env=env, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("Remap.load blocked on a FIFO")
    lines = r.stdout.splitlines()
    assert lines[0] == (f"RecgoIOError remap: {fifo} is not a regular file (a pipe, socket or device): give the "
                        "remap.bin file itself")
    assert lines[1] == f"RecgoIOError remap: {tmp_path} is a directory, not a file"


def test_profile_refuses_a_folder_as_out_before_profiling(tmp_path: Path) -> None:
    rc, out, err = _main("profile", "--synthetic", "rm1", "--tables", "2", "--out", str(tmp_path))
    assert rc == 2
    assert err.strip() == (f"error: RecgoIOError: --out {tmp_path}: is a folder; name the file to write "
                           f"(e.g. {tmp_path / 'profile.json'})")
    assert "synthetic rm1" not in out  # refused before the profile was made


@pytest.mark.parametrize("flag, value, message", [
    ("--gap", "2", "mip_rel_gap 2 outside"), ("--time-limit", "-1", "time_limit -1 must be a positive"),
    ("--nodes", "0", "nodes 0 and gpus_per_node 2 must be positive"), ("--threads", "5000", "threads 5000 outside"),
])
def test_plan_refusing_its_arguments_creates_no_out_folder(counted: P.Profile, tmp_path: Path, flag: str,
                                                          value: str, message: str) -> None:
    prof = tmp_path / "p.json"
    counted.save(prof)
    out = tmp_path / "new" / "plan"
    rc, _, err = _main("plan", "--profile", str(prof), "--out", str(out), "--no-plots", "--no-progress",
                       "--gpus-per-node", "2", flag, value)
    assert rc == 2 and "InvalidInputError" in err and message in err, err
    assert not (tmp_path / "new").exists()


def test_plan_still_refuses_an_out_it_cannot_create(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    for out, why in ((blocker, "not a folder"), (blocker / "plan", "is not a writable folder")):
        rc, stdout, err = _main("plan", "--profile", "missing.json", "--out", str(out), "--no-plots")
        assert rc == 2 and f"RecgoIOError: --out {out}: " in err and why in err, err
        assert "topology:" not in stdout


def test_a_topology_past_int64_and_an_empty_torchrec_table_list_are_refused(counted: P.Profile) -> None:
    """``hbm_bytes=10**40`` (``--hbm-gb 1e30``) gave Go's "cannot unmarshal number ..." text; an empty
    table list planned every table in torchrec_placement, while plan() refuses it."""
    with pytest.raises(InvalidInputError, match=r"topology: hbm_bytes must be an integer within int64"):
        P.plan(counted, P.Topology(nodes=1, gpus_per_node=1, hbm_bytes=10**40))
    pytest.importorskip("torchrec")
    with pytest.raises(InvalidInputError, match=r"tables=\[\] names no table"):
        P.torchrec_placement(counted, TOPO, tables=[])
