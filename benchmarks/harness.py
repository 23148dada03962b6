"""Side-by-side benchmark harness: variants timed interleaved in one process, medians, JSON + markdown.

Usage in ``benchmarks/<name>.py``::

    from harness import Bench

    bench = Bench("embedding")                  # parses --quick / --repeats from argv
    res = bench.compare("zipf26", {"recgo": step_a, "torchrec": step_b}, items=4096)
    bench.summary(speedup_vs_torchrec=res.ratio("recgo", "torchrec"))
    bench.write()                               # benchmarks/results/embedding.{json,md}

Variants of one case run interleaved, each once per round in a shuffled order (a, c, b, b, a, c, ...),
so a noisy neighbour slows all of them alike and none always inherits the same predecessor's cache
state; each reported time is the median over ``repeats`` rounds after ``warmup`` rounds. As in
``timeit``, Python's cyclic garbage collector is off while a case is timed (it is run before), so a
collection pass triggered by one variant's allocations is not billed to whichever variant runs next.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

RESULTS = Path(__file__).resolve().parent / "results"


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    try:
        import torchrec

        info["torchrec"] = getattr(torchrec, "__version__", "?")
    except Exception:
        pass
    try:
        import recgo

        info["recgo"] = recgo.__version__
        info["recgo_threads"] = recgo.num_threads()
        from recgo import _lib

        # the collector pacing in force when the report was written (-1: off; see docs/threads.md)
        info["recgo_gc_percent"] = _lib.gc_percent()
        # whether Go's sysmon thread runs under SCHED_BATCH (its thread ID) or not (0; see docs/threads.md)
        info["recgo_sysmon_batch"] = _lib.sysmon_thread() != 0
    except Exception:
        pass
    return info


@dataclass
class CaseResult:
    """Per-variant timings (seconds per call) of one case."""

    case: str
    times: dict[str, list[float]]
    items: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def median(self, variant: str) -> float:
        """Median seconds per call of a variant."""
        return statistics.median(self.times[variant])

    def ratio(self, fast: str, slow: str) -> float:
        """How many times faster ``fast`` ran than ``slow`` (median over median)."""
        return self.median(slow) / self.median(fast)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"case": self.case, "items_per_call": self.items, **self.extra, "variants": {}}
        for v, ts in self.times.items():
            med = statistics.median(ts)
            row = {"median_s": med, "min_s": min(ts), "max_s": max(ts), "runs": len(ts)}
            if self.items:
                row["items_per_s"] = self.items / med
            out["variants"][v] = row
        return out


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def worker_argv(bench: "Bench") -> list[str]:
    """The arguments a spawned worker's own :class:`Bench` takes to time as its parent was asked to
    (``--quick`` and ``--repeats``; the parent writes the results)."""
    return (["--quick"] if bench.quick else []) + (["--repeats", str(bench.args.repeats)] if bench.args.repeats else [])


#: The sample data folder (Criteo, Avazu and Taobao samples): ../shared/data beside the repository, or
#: the folder ``RECGO_DATA`` names. Benchmarks skip the cases that need a missing sample.
DATA = Path(os.environ.get("RECGO_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")


class Bench:
    """One benchmark run: collects cases, a summary and notes, then writes results/<name>.*."""

    def __init__(self, name: str, argv: list[str] | None = None, description: str = "", repeats: int = 7,
                 options: Callable[[argparse.ArgumentParser], None] | None = None) -> None:
        """Parse ``argv`` (default: the command line): ``--quick``, ``--repeats``, ``--out`` and what
        ``options`` adds to the parser; an unknown or misspelled flag is an error (it used to be dropped,
        so ``--quik`` ran the full benchmark)."""
        p = argparse.ArgumentParser(description=description or f"recgo benchmark {name}",
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--quick", action="store_true", help="smaller inputs, under a minute")
        p.add_argument("--repeats", type=_positive, default=None,
                       help=f"timed rounds per variant (default {repeats}; 3 with --quick)")
        p.add_argument("--out", type=Path, default=RESULTS, help="results folder")
        if options is not None:
            options(p)
        self.args = p.parse_args(argv)
        self.name = name
        self.quick: bool = self.args.quick
        self.repeats: int = self.args.repeats or (3 if self.quick else repeats)
        self.cases: list[CaseResult] = []
        self._summary: dict[str, Any] = {}
        self.notes: list[str] = []
        self.data: dict[str, Any] = {}
        self._load_start = os.getloadavg()[0]
        if not DATA.is_dir():
            print(f"[{name}] sample data folder {DATA} is absent (set RECGO_DATA to another): the cases that read "
                  "the Criteo, Avazu or Taobao samples are skipped and their summary keys left out", flush=True)
            self.notes.append(f"the sample data folder {DATA} was absent: cases reading it were skipped")

    def note_load(self) -> None:
        """Record the 1-minute load average at the start and now, with a note on what it means."""
        end = os.getloadavg()[0]
        self.data["load_average"] = {"start": self._load_start, "end": end}
        self.note(f"1-min load average {self._load_start:.1f} at start, {end:.1f} at end on {os.cpu_count()} CPUs: "
                  "other processes shared the machine, so compare ratios within a case, not absolute times across runs")

    def compare(
        self,
        case: str,
        variants: dict[str, Callable[[], Any]],
        *,
        items: int | None = None,
        warmup: int = 1,
        repeats: int | None = None,
        inner: int = 1,
    ) -> CaseResult:
        """Time each variant (a zero-argument callable) interleaved, in a shuffled order per round;
        ``inner`` calls per timing."""
        reps = repeats or self.repeats
        times: dict[str, list[float]] = {v: [] for v in variants}
        gc.collect()
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            order = list(variants.items())
            rng = random.Random(case)  # reproducible per case
            for r in range(warmup + reps):
                # A fresh order each round: no variant always runs right after the same other one
                # (whose cache churn or spinning worker threads it would otherwise always inherit).
                rng.shuffle(order)
                for v, fn in order:
                    t0 = time.perf_counter()
                    for _ in range(inner):
                        fn()
                    dt = (time.perf_counter() - t0) / inner
                    if r >= warmup:
                        times[v].append(dt)
        finally:
            if was_enabled:
                gc.enable()
            gc.collect()
        res = CaseResult(case, times, items)
        self.cases.append(res)
        med = {v: res.median(v) for v in variants}
        base = max(med.values())
        print(f"  {case}: " + ", ".join(f"{v} {m * 1e3:.2f} ms ({base / m:.2f}x)" for v, m in med.items()),
              flush=True)
        return res

    def summary(self, **figures: Any) -> None:
        """Headline figures for the JSON ``summary`` (ratios as plain numbers)."""
        self._summary.update(figures)

    def note(self, text: str) -> None:
        """A line for the markdown report."""
        self.notes.append(text)

    def write(self, extra_markdown: str = "") -> Path:
        """Write results/<name>.json and results/<name>.md; print the markdown table last."""
        self.args.out.mkdir(parents=True, exist_ok=True)
        doc = {
            "benchmark": self.name,
            "quick": self.quick,
            "repeats": self.repeats,
            "summary": self._summary,
            "machine": machine_info(),
            "cases": [c.as_dict() for c in self.cases],
            "data": self.data,
            "command": "python " + " ".join(sys.argv),
        }
        jpath = self.args.out / f"{self.name}.json"
        jpath.write_text(json.dumps(doc, indent=2, default=float) + "\n")
        md = self.markdown() + ("\n" + extra_markdown if extra_markdown else "")
        (self.args.out / f"{self.name}.md").write_text(md)
        print(md)
        return jpath

    def markdown(self) -> str:
        """The comparison table, the summary and notes as markdown."""
        lines = [f"# {self.name}", "", f"`{'python ' + ' '.join(sys.argv)}` — medians over the runs column", ""]
        if self.cases:  # benchmarks that time with their own tables have none
            lines += ["| case | variant | median ms | items/s | vs slowest | runs |", "|---|---|---:|---:|---:|---:|"]
        for c in self.cases:
            slowest = max(c.median(v) for v in c.times)
            for v in c.times:
                m = c.median(v)
                ips = f"{c.items / m:,.0f}" if c.items else ""
                lines.append(f"| {c.case} | {v} | {m * 1e3:.3f} | {ips} | {slowest / m:.2f}x | {len(c.times[v])} |")
        if self._summary:
            lines += ["", "**Summary**", ""]
            for k, v in self._summary.items():
                lines.append(f"- `{k}`: {v:.4g}" if isinstance(v, float) else f"- `{k}`: {v}")
        if self.notes:
            lines += [""] + [f"- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"
