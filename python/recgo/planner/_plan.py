"""Plans: solve a placement in Go (interruptible with Ctrl-C), price outside ones, save and load plan files."""

from __future__ import annotations

import ctypes
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from .. import _lib
from ..errors import InvalidInputError, NotFoundError, RecgoIOError
from ._json import bytes_arg
from ._profile import Profile
from ._remap import Remap
from ._topology import Topology

#: Strategies :func:`plan` accepts, the paper's whole-table baselines first.
STRATEGIES = ("greedy_size", "greedy_lookups", "greedy_size_lookups", "row_greedy", "milp")
#: The plots :meth:`Plan.save` writes (and removes when it does not rewrite them).
PLOT_FILES = ("gpu_costs.png", "cdfs.png")
#: Cost models, from the CDF alone to the full model (the paper's ablation).
COST_MODELS = ("cdf", "cdf+coverage", "cdf+coverage+pooling", "full")

#: Seconds of each wait for the Go planner: Ctrl-C is seen between waits.
_WAIT_SLICE = 0.1
#: Seconds between two progress lines of :func:`plan` with ``progress=True``.
_PROGRESS_EVERY = 1.0


class Plan:
    """A placement of every table: its GPU rank and hot-row count, with predicted costs."""

    def __init__(self, handle: _lib.Handle, profile: Profile | None = None) -> None:
        self._h = handle
        self._profile = profile
        self._doc: dict[str, Any] = _lib.call_json("recgo_plan_json", handle.value)

    @property
    def handle(self) -> _lib.Handle:
        """The Go plan's handle."""
        return self._h

    @property
    def strategy(self) -> str:
        """The strategy that made the plan (or "torchrec"/"external" for priced outside plans)."""
        return self._doc["strategy"]

    @property
    def tables(self) -> list[dict[str, Any]]:
        """Per table: name, rank, node, rows, hot_rows, hot/cold bytes, hbm_access_share, predicted_seconds."""
        return self._doc["tables"]

    @property
    def predicted(self) -> dict[str, Any]:
        """The full model's figures: gpu_seconds, max_seconds, spread, hbm_access_share, uvm_row_share, ..."""
        return self._doc["predicted"]

    @property
    def solver(self) -> dict[str, Any] | None:
        """MILP status, gap, dual bound, proof ("highs", "bound" or "search") and warm start (None for heuristics)."""
        return self._doc.get("solver")

    @property
    def warning(self) -> str:
        """Why the MILP fell back to the row-level greedy ("" when it did not)."""
        return self._doc.get("warning", "")

    @property
    def topology(self) -> Topology:
        """The topology the plan is for."""
        return Topology.from_dict(self._doc["topology"])

    @property
    def solve_seconds(self) -> float:
        """Wall time of the whole planning call (model build and solve)."""
        return float(self._doc["solve_seconds"])

    def to_dict(self) -> dict[str, Any]:
        """The plan.json document."""
        return self._doc

    def table(self, name: str) -> dict[str, Any]:
        """One table's placement; raises NotFoundError."""
        for t in self.tables:
            if t["name"] == name:
                return t
        raise NotFoundError(f"plan: no table {name!r}")

    def summary(self) -> dict[str, float]:
        """Headline figures: slowest GPU (ms), spread, HBM access share, UVM row share, solve s, gap."""
        p = self.predicted
        out = {"max_ms": p["max_seconds"] * 1e3, "spread": p["spread"], "hbm_access_share": p["hbm_access_share"],
               "uvm_row_share": p["uvm_row_share"], "solve_seconds": self.solve_seconds}
        if self.solver:
            out["mip_gap"] = self.solver["mip_gap"]
        return out

    def save(self, directory: str | os.PathLike[str], plots: bool = True) -> Path:
        """Write plan.json (with its checksum), report.md, remap.bin (when the profile has ranked rows)
        and PNG plots (gpu_costs.png; cdfs.png when the plan has its profile). With ``plots`` a missing
        matplotlib fails before anything is written. A remap.bin or plot of an earlier plan that this
        save does not rewrite is removed, so the folder never shows another plan's files as this one's."""
        from ._plots import plot_cdfs, plot_gpu_costs, require_matplotlib

        if plots:
            require_matplotlib()
        d = Path(directory)
        f = _lib.fn("recgo_plan_save")
        _lib.call(f, self._h.value, self._profile.handle.value if self._profile else 0, _lib.c_path(d))
        written = set()
        if plots:
            plot_gpu_costs({self.strategy: self}, d / "gpu_costs.png")
            written.add("gpu_costs.png")
            if self._profile is not None:
                plot_cdfs(self._profile, d / "cdfs.png")
                written.add("cdfs.png")
        for name in set(PLOT_FILES) - written:  # the Go save removes a stale remap.bin itself
            try:
                (d / name).unlink(missing_ok=True)
            except OSError as exc:
                raise RecgoIOError(f"plan: cannot remove the earlier plan's {d / name}: "
                                   f"{exc.strerror or exc}") from exc
        return d

    @staticmethod
    def load(path: str | os.PathLike[str]) -> "Plan":
        """Read and verify a plan.json (or a directory holding one); a corrupted or truncated file
        raises RecgoIOError naming the file and the part that does not match."""
        return Plan(_lib.new_handle("recgo_plan_load", _lib.c_path(path)))

    def remap(self, profile: Profile | None = None) -> Remap:
        """The hot-rows-first remap (needs a profile counted from data, not a synthetic one)."""
        prof = profile or self._profile
        if prof is None:
            raise InvalidInputError("remap: this plan has no profile; pass the one it was made from")
        return Remap(_lib.new_handle("recgo_remap_new", self._h.value, prof.handle.value))

    def plot(self, path: str | os.PathLike[str]) -> None:
        """Bar chart of the predicted per-GPU time."""
        from ._plots import plot_gpu_costs

        plot_gpu_costs({self.strategy: self}, path)

    def __repr__(self) -> str:
        s = self.summary()
        return (f"Plan({self.strategy}: slowest GPU {s['max_ms']:.4f} ms, {100 * s['hbm_access_share']:.2f}% "
                f"lookups in HBM, {100 * s['uvm_row_share']:.1f}% rows in UVM)")


def _config(topology: Topology, strategy: str, cost_model: str, tables: Sequence[str] | None,
            time_limit: float | None, mip_rel_gap: float, threads: int, symmetry: bool,
            warm_start: bool = True, memory_limit: int | None = None) -> tuple[ctypes.Array, int]:
    if not isinstance(topology, Topology):
        raise InvalidInputError(f"topology: expected a recgo.planner.Topology, got {type(topology).__name__} "
                                "(Topology(**fields) or Topology.from_dict(d) builds one from a dict)")
    if not isinstance(strategy, str):
        raise InvalidInputError(f"strategy: expected one of {STRATEGIES} (a string), got {strategy!r}")
    if not isinstance(cost_model, str):
        raise InvalidInputError(f"cost_model: expected one of {COST_MODELS} (a string), got {cost_model!r}")
    if strategy not in STRATEGIES and strategy != "external" and not strategy.startswith("torchrec"):
        raise InvalidInputError(f"strategy {strategy!r}: expected one of {STRATEGIES}")
    if cost_model not in COST_MODELS:
        raise InvalidInputError(f"cost_model {cost_model!r}: expected one of {COST_MODELS}")
    if isinstance(tables, str):
        raise InvalidInputError(f"tables: expected a list of table names, got the string {tables!r}")
    cfg = {"topology": topology.to_dict(), "strategy": strategy, "cost_model": cost_model,
           "tables": list(tables) if tables is not None else None, "time_limit": time_limit,
           "mip_rel_gap": mip_rel_gap, "threads": threads, "symmetry": symmetry, "warm_start": warm_start,
           "memory_limit": memory_limit or 0}
    return bytes_arg(cfg, "planner config")


class _Progress:
    """A tqdm bar on stderr of the seconds a plan job has run against its time limit, redrawn about
    once a second while it runs; nothing when off."""

    def __init__(self, on: bool, strategy: str, time_limit: float | None) -> None:
        self._bar: Any = None
        self._t0 = time.perf_counter()
        self._next = self._t0 + _PROGRESS_EVERY
        self._args = (on, strategy, time_limit)

    def tick(self) -> None:
        """Advance the bar when a second has passed since the last redraw (created on the first)."""
        now = time.perf_counter()
        on, strategy, limit = self._args
        if not on or now < self._next:
            return
        self._next = now + _PROGRESS_EVERY
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=limit, desc=f"plan ({strategy})", unit="s", file=sys.stderr, leave=False, mininterval=0,
                             bar_format="{desc}: {bar} {n:.0f}/{total_fmt} s" if limit else "{desc}: {n:.0f} s")
        self._bar.update(now - self._t0 - self._bar.n)

    def close(self) -> None:
        """Remove the bar (when one was drawn)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _wait(job: _lib.Handle, progress: _Progress | None = None) -> _lib.Handle:
    """Wait for a plan job in short slices (so Ctrl-C reaches Python between them)."""
    f = _lib.fn("recgo_plan_wait")
    done, out = _lib.I32(0), _lib.H(0)
    while True:
        # made and owned in one protected block: plan() catches a Ctrl-C and waits again, which made a
        # second handle of the plan while the first, interrupted on its way out, was never freed
        with _lib.freed_if_interrupted([out]):
            _lib.call(f, job.value, _WAIT_SLICE, ctypes.byref(done), ctypes.byref(out))
            if done.value:
                return _lib.Handle(out.value)
        if progress is not None:
            progress.tick()


def _warn_if_unproven(p: Plan, time_limit: float | None) -> None:
    """Warn when the MILP stopped at its time limit, or fell back to the row-level greedy: the plan
    is then not proven optimal."""
    s = p.solver
    if s and s.get("status") == "time limit":
        why = f" ({p.warning})" if p.warning else ""
        warnings.warn(f"plan: the MILP stopped at the time limit of {time_limit:g} s{why}; the plan is not proven "
                      f"optimal (within {100 * s['mip_gap']:.2f} % of its bound): raise time_limit to close the gap",
                      RuntimeWarning, stacklevel=3)
    elif s is None and p.warning:
        warnings.warn(f"plan: {p.warning}; the plan is not proven optimal", RuntimeWarning, stacklevel=3)


def plan(profile: Profile, topology: Topology | None = None, strategy: str = "milp", *,
         cost_model: str = "full", tables: Sequence[str] | None = None, time_limit: float | None = 60.0,
         mip_rel_gap: float = 0.01, threads: int = 0, symmetry: bool = True, warm_start: bool = True,
         memory_limit: int | None = None, progress: bool = False) -> Plan:
    """Place the profiled tables on ``topology`` (default: RecShard's 2 × 8 GPUs with 24 GB each)
    with ``strategy`` (default: the MILP).

    ``time_limit`` (seconds, > 0; ``None`` for no limit, as is one past what Go's time.Duration holds,
    about 292 years) bounds the whole call, model building and HiGHS's presolve included. ``threads``
    is HiGHS's thread count (0: recgo's worker count; at most 1024). The MILP is warm-started from the
    row-level greedy and stops at the time limit (``plan.solver["status"] == "time limit"``, with a
    RuntimeWarning that the plan is not proven optimal), or when its incumbent is within
    ``mip_rel_gap`` of the best bound (HiGHS's, or the planner's own, which settles the case where
    everything fits in HBM without a MILP), returning its incumbent with gap and bound. When the time
    left cannot cover building and presolving a large MILP, the warm start is returned without it
    (:attr:`Plan.warning` says so).
    Ctrl-C interrupts the solve within a fraction of a second, presolve included, and returns the
    incumbent (``plan.solver["status"] == "interrupted"``, with a RuntimeWarning). If HiGHS fails
    the plan falls back to the row-level greedy and says so in :attr:`Plan.warning`
    (``warm_start=False`` solves cold, to measure what the start is worth). ``progress=True`` keeps a
    one-line report of the elapsed time on stderr while the plan is made.

    ``memory_limit`` (bytes; default 8 GiB) caps the model the planner may build. Raises
    CapacityError (naming the size) when the tables cannot fit (proven: by a size check, or by
    HiGHS, whose proof the message names), when a greedy baseline strategy finds no placement in
    its packing order (no proof: the message says so, and ``"milp"`` may place them), or when the
    model would pass the limit; SolverError when the
    MILP found no placement before the time limit or Ctrl-C and the row-level greedy could not
    place the tables either (no proof that none fits: raise ``time_limit``); NotFoundError for
    tables missing from the profile, InvalidInputError for an empty or repeated table list, a
    non-positive time limit, ``threads`` outside [0, 1024] or a NaN/infinite argument.
    """
    _check_profile(profile)
    buf, n = _config(Topology() if topology is None else topology, strategy, cost_model, tables, time_limit,
                     mip_rel_gap, threads, symmetry, warm_start, memory_limit)
    job = _lib.new_handle("recgo_plan_start", profile.handle.value, buf, n)
    bar = _Progress(progress, strategy, time_limit)
    interrupted = False
    try:
        try:
            p = Plan(_wait(job, bar), profile)
        except KeyboardInterrupt:
            interrupted = True
            _lib.call(_lib.fn("recgo_plan_cancel"), job.value)
            p = Plan(_wait(job), profile)
    finally:
        bar.close()
        job.free()
    if interrupted:
        warnings.warn("plan: interrupted (Ctrl-C); returning the best placement found so far "
                      f"(status {p.solver['status'] if p.solver else 'heuristic'})", RuntimeWarning, stacklevel=2)
    else:
        _warn_if_unproven(p, time_limit)
    return p


def evaluate(profile: Profile, topology: Topology, placement: Mapping[str, tuple[int, int]],
             name: str = "external") -> Plan:
    """Price an outside placement ``{table: (rank, hot_rows)}`` with recgo's full cost model.

    Raises InvalidInputError for a placement that is not such a mapping of whole-number pairs (or
    whose numbers do not fit in int64); the Go side checks ranks and hot rows against the topology
    and the profile."""
    _check_profile(profile)
    if not isinstance(placement, Mapping):
        raise InvalidInputError(f"placement: expected {{table: (rank, hot_rows)}}, got {type(placement).__name__}")
    names = list(placement)
    buf, n = _config(topology, name, "full", names, None, 0, 0, True)
    pairs = [_placement_pair(k, placement[k]) for k in names]
    gpus = torch.tensor([g for g, _ in pairs], dtype=torch.int64)
    hots = torch.tensor([h for _, h in pairs], dtype=torch.int64)
    h = _lib.new_handle("recgo_plan_evaluate",
                        profile.handle.value, buf, n, gpus.data_ptr(), hots.data_ptr(), len(names))
    return Plan(h, profile)


def _check_profile(profile: Any) -> None:
    if not isinstance(profile, Profile):
        raise InvalidInputError(f"profile: expected a recgo.planner.Profile, got {type(profile).__name__}")


def _placement_pair(table: str, v: Any) -> tuple[int, int]:
    """One table's (rank, hot_rows) of an outside placement, as int64s (a bare TypeError or torch's
    overflow otherwise)."""
    try:
        rank, hot = v
        ok = not isinstance(v, str) and all(not isinstance(x, bool) and int(x) == x for x in (rank, hot))
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise InvalidInputError(f"placement of table {table!r}: expected a (rank, hot_rows) pair of whole numbers, "
                                f"got {v!r}")
    rank, hot = int(rank), int(hot)
    for what, x in (("rank", rank), ("hot_rows", hot)):
        if not -(2**63) <= x < 2**63:
            raise InvalidInputError(f"placement of table {table!r}: {what} {x} does not fit in int64")
    return rank, hot
