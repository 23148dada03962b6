"""Step-time spread of a small recgo model under torch's default OpenMP settings, with and without
running recgo's parallel loops on torch's OpenMP threads (``recgo._threads``).

Each configuration runs in fresh processes (OpenMP settings are read when torch loads), ``--repeats``
times (default 8; 3 with ``--quick``): a small DLRM (``recgo.train``, synthetic data, recgo backend)
trains 40 steps of 2048 (20 of 1024 with ``--quick``) and the median step time of each run is kept.
Configurations:

* ``openmp_team``: the default environment, recgo on torch's OpenMP team (the fix);
* ``go_threads``: the default environment, recgo on its own Go threads (``RECGO_OPENMP=0``, before);
* ``tuned_env``: ``OMP_WAIT_POLICY=PASSIVE`` (OpenMP workers sleep at once) with Go threads — the
  hand-tuned environment the fix should match without anyone setting it.

``spread`` is max ÷ min of the per-run medians (run-to-run variation, what a user sees between two
launches of the same script); the JSON also keeps every step time.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Bench  # noqa: E402

CHILD = """
import json, sys, time, torch
from recgo.train.loop import TrainConfig, Trainer, make_source
steps, batch = int(sys.argv[1]), int(sys.argv[2])
cfg = TrainConfig(model="dlrm", steps=10**9, batch_size=batch, dim=16, max_rows=100_000, eval_every=10**9)
src = make_source(cfg)
tr = Trainer(cfg, src, "recgo")
stream = src.stream(depth=0)
batches = [next(stream) for _ in range(8)]
stream.close()
for b in batches[:3]:
    tr.train_step(b, timed=False)
ts = []
for i in range(steps):
    t = time.perf_counter(); tr.train_step(batches[i % 8], timed=False); ts.append(time.perf_counter() - t)
print("RESULT " + json.dumps({"steps": ts}))
"""

CONFIGS = {
    "openmp_team": {},
    "go_threads": {"RECGO_OPENMP": "0"},
    "tuned_env": {"RECGO_OPENMP": "0", "OMP_WAIT_POLICY": "PASSIVE"},
}


def run_once(env_extra: dict[str, str], steps: int, batch: int) -> list[float]:
    """One fresh process; returns its step times."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS",
                                                             "RECGO_OPENMP")}
    env |= env_extra
    out = subprocess.run([sys.executable, "-c", CHILD, str(steps), str(batch)], env=env, capture_output=True,
                         text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[7:])["steps"]


def main() -> None:
    bench = Bench("threads", description=__doc__, repeats=8)
    runs = 3 if bench.quick else bench.repeats
    steps, batch = (20, 1024) if bench.quick else (40, 2048)
    medians: dict[str, list[float]] = {c: [] for c in CONFIGS}
    raw: dict[str, list[list[float]]] = {c: [] for c in CONFIGS}
    for r in range(runs):  # interleave configurations run by run
        for name, env in CONFIGS.items():
            ts = run_once(env, steps, batch)
            raw[name].append(ts)
            medians[name].append(statistics.median(ts))
            print(f"  run {r} {name}: median {1e3 * medians[name][-1]:.1f} ms", flush=True)
    spread = {c: max(m) / min(m) for c, m in medians.items()}
    med = {c: statistics.median(m) for c, m in medians.items()}
    bench.summary(spread_default_env=spread["openmp_team"], spread_default_env_before=spread["go_threads"],
                  spread_tuned_env=spread["tuned_env"], median_vs_tuned=med["openmp_team"] / med["tuned_env"],
                  median_vs_tuned_before=med["go_threads"] / med["tuned_env"])
    bench.data.update({"per_run_median_s": medians, "step_times_s": raw, "configs": CONFIGS,
                       "steps": steps, "batch": batch})
    table = ["| configuration | median step ms | spread (max/min of run medians) | runs |", "|---|---:|---:|---:|"]
    table += [f"| {c} | {1e3 * med[c]:.1f} | {spread[c]:.2f} | {len(medians[c])} |" for c in CONFIGS]
    bench.write("\n".join(table) + "\n")


if __name__ == "__main__":
    main()
