"""Input pipeline benchmark (RecIS §3.3): reader + transform throughput, and overlap with training.

1. Reader + transform on Criteo-format data: a large TSV generated from the real sample's statistics
   (``CriteoSource(sample).fit()``, then ``write_criteo``). recgo's pipeline (Go: read, parse, hash,
   bucketize, format) against what a TorchRec user does today: a ``torch.utils.data.DataLoader``
   whose workers parse the same lines in Python and hash/bucketize the same fields with vectorized
   torch ops (spawn start method: the Go runtime does not survive fork). Throughput is compared per
   CPU second used (the process's and its workers' user+system time), as
   ``reader_speedup_per_core_vs_dataloader``.
2. A training step (recgo EmbeddingBagCollection + an MLP sized so its time matches preparation)
   with preparation and dense compute each given one core (the pipeline's thread budget
   ``threads=1`` for its Go work; ``torch.set_num_threads(1)`` for the step, whose recgo kernels
   then run on the one thread of torch's OpenMP team too), run in a subprocess: step time at depth 0..4 against the serial
   stage times (``pipelined_over_max_stage`` = best pipelined step ÷ max(prep, dense),
   ``pipelined_speedup_vs_serial``), with the ``depth_sweep`` table and a PNG.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import DATA, Bench  # noqa: E402

CRITEO = DATA / "criteo" / "criteo_dac_train_head10109.txt"
BOUNDS = [0, 1, 2, 4, 8, 16, 64, 256, 1024]
MOD = 100_000
HASH_MUL = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64
TRAIN_MOD, DIM = 10_000, 8  # the training sweep's tables: small, so the dense part can match preparation


def features(mod: int = MOD) -> list[Any]:
    import recgo

    feats = [recgo.Feature(f"C{i}").fill_missing(0).hash(seed=i).mod(mod) for i in range(1, 27)]
    feats += [recgo.Feature(f"I{i}").fill_missing(-1).bucketize(BOUNDS) for i in range(1, 14)]
    return feats


# -- the DataLoader baseline (module level, so spawned workers can import it) --------------------

class CriteoLines(torch.utils.data.IterableDataset):
    """Batches of a Criteo file parsed in Python; worker w takes batches w, w+W, ..."""

    def __init__(self, path: str, batch: int) -> None:
        self.path, self.batch = path, batch

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        with open(self.path) as fh:
            chunk: list[str] = []
            k = 0
            for line in fh:
                chunk.append(line)
                if len(chunk) == self.batch:
                    if k % nw == wid:
                        yield parse_and_hash(chunk)
                    chunk, k = [], k + 1
            if chunk and k % nw == wid:
                yield parse_and_hash(chunk)


def parse_and_hash(lines: list[str]) -> dict[str, torch.Tensor]:
    """Per-line parsing (split, int, int(x, 16)) and per-batch vectorized hash/mod and bucketize."""
    labels, dense = [], []
    ints: list[list[int]] = [[] for _ in range(13)]
    cats: list[list[int]] = [[] for _ in range(26)]
    for line in lines:
        f = line.rstrip("\n").split("\t")
        labels.append(float(f[0]))
        row = []
        for i in range(13):
            v = f[1 + i]
            x = int(v) if v else -1
            ints[i].append(x)
            row.append(max(x, 0))
        dense.append(row)
        for i in range(26):
            v = f[14 + i]
            cats[i].append(int(v, 16) if v else 0)
    c = torch.tensor(cats, dtype=torch.int64)
    seeds = torch.arange(1, 27, dtype=torch.int64).unsqueeze(1)
    h = (c ^ seeds) * HASH_MUL
    h = (h ^ (h >> 29)) * HASH_MUL
    cat_ids = torch.remainder(h, MOD)
    buckets = torch.bucketize(torch.tensor(ints, dtype=torch.int64), torch.tensor(BOUNDS), right=True)
    return {"values": torch.cat([cat_ids.reshape(-1), buckets.reshape(-1)]),
            "lengths": torch.ones(39 * len(lines), dtype=torch.int64),
            "dense": torch.log1p(torch.tensor(dense, dtype=torch.float32)),
            "labels": torch.tensor(labels)}


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of this process and the given ones (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in [os.getpid(), *pids]:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError):
            pass
    return total


def throughput(bench: Bench, path: Path, lines: int, batch: int) -> dict[str, Any]:
    import recgo
    from recgo.data import CriteoSource

    engine = recgo.FeatureEngine(features())

    def run_recgo() -> tuple[float, float]:
        t0, c0 = time.perf_counter(), cpu_seconds([])
        n = 0
        with recgo.DataPipeline(CriteoSource(path), engine, batch, depth=2, threads=1) as pipe:
            for b in pipe:
                n += b.labels.numel()
        assert n == lines
        return time.perf_counter() - t0, cpu_seconds([]) - c0

    workers = 2
    loader = torch.utils.data.DataLoader(CriteoLines(str(path), batch), batch_size=None, num_workers=workers,
                                         multiprocessing_context="spawn", persistent_workers=True, prefetch_factor=4)
    it = iter(loader)
    pids = [w.pid for w in it._workers]  # noqa: SLF001 (the only way to see the workers' CPU time)
    for _ in it:  # warm-up epoch: spawn and import in the workers
        pass
    assert loader._iterator is it  # noqa: SLF001 (later epochs reuse these workers)

    def run_loader() -> tuple[float, float]:
        t0, c0 = time.perf_counter(), cpu_seconds(pids)
        n = 0
        for b in loader:  # persistent workers: the same processes every epoch
            n += b["labels"].numel()
        assert n == lines
        return time.perf_counter() - t0, cpu_seconds(pids) - c0

    def run_recgo_one_core() -> tuple[float, float]:
        """One epoch in a subprocess with GOMAXPROCS=1: recgo's throughput on one core."""
        env = dict(os.environ, GOMAXPROCS="1", OMP_NUM_THREADS="1")
        res = subprocess.run([sys.executable, __file__, "--recgo-epoch", str(path), str(lines), str(batch)],
                             env=env, capture_output=True, text=True, check=True)
        wall, cpu = json.loads(res.stdout.strip().splitlines()[-1])
        return wall, cpu

    rows: dict[str, list[tuple[float, float]]] = {"recgo": [], "recgo_1core": [], "dataloader": []}
    run_recgo()
    reps = bench.repeats
    runs = {"recgo": run_recgo, "recgo_1core": run_recgo_one_core, "dataloader": run_loader}
    for r in range(reps):
        order = list(runs)
        random.Random(r).shuffle(order)
        for v in order:
            rows[v].append(runs[v]())
    del it, loader
    out: dict[str, Any] = {}
    for v, ts in rows.items():
        wall = statistics.median(t for t, _ in ts)
        cpu = statistics.median(c for _, c in ts)
        out[v] = {"wall_s": wall, "cpu_s": cpu, "samples_per_s": lines / wall, "samples_per_cpu_s": lines / cpu,
                  "cores_used": cpu / wall}
        print(f"  {v}: {lines / wall:,.0f} samples/s wall, {lines / cpu:,.0f} per CPU second ({cpu / wall:.2f} cores)")
    out["workers"] = workers
    return out


# -- the training-step sweep (run in a subprocess: pipeline threads=1, torch 1 thread) ------------

def make_model(hidden: int, layers: int) -> torch.nn.Module:
    import recgo
    from torch import nn

    class DLRMish(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            tables = [recgo.EmbeddingBagConfig(name=f"t{i}", embedding_dim=DIM, num_embeddings=TRAIN_MOD,
                                               feature_names=[f"C{i}"]) for i in range(1, 27)]
            tables.append(recgo.EmbeddingBagConfig(name="tI", embedding_dim=DIM, num_embeddings=16,
                                                   feature_names=[f"I{i}" for i in range(1, 14)]))
            self.ebc = recgo.EmbeddingBagCollection(tables, optimizer=recgo.modules.optim.RowWiseAdagrad(lr=0.01))
            self.bottom = nn.Sequential(nn.Linear(13, 64), nn.ReLU())
            mods: list[nn.Module] = [nn.Linear(39 * DIM + 64, hidden), nn.ReLU()]
            for _ in range(layers - 1):
                mods += [nn.Linear(hidden, hidden), nn.ReLU()]
            self.top = nn.Sequential(*mods, nn.Linear(hidden, 1))

        def forward(self, sparse: Any, dense: torch.Tensor) -> torch.Tensor:
            return self.top(torch.cat([self.ebc(sparse).values(), self.bottom(dense)], dim=1))

    return DLRMish()


def train_sweep(path: str, batch: int, steps: int, rounds: int) -> dict[str, Any]:
    import recgo
    from recgo.data import CriteoSource

    torch.set_num_threads(1)
    engine = recgo.FeatureEngine(features(TRAIN_MOD))

    def trainer(depth: int, hidden: int, layers: int) -> recgo.TrainPipeline:
        model = make_model(hidden, layers)
        opt = torch.optim.SGD([p for n, p in model.named_parameters() if not n.startswith("ebc")], lr=0.01)
        return recgo.TrainPipeline(model, opt, CriteoSource(path), engine, batch, depth=depth)

    def serial_split(hidden: int, layers: int, n: int) -> tuple[float, float]:
        """Median (prep, dense) seconds per step at depth 0."""
        tp = trainer(0, hidden, layers)
        preps, denses = [], []
        for s in range(n + 3):
            t0 = time.perf_counter()
            b = next(tp.data)
            t1 = time.perf_counter()
            tp.progress(iter([b]))
            t2 = time.perf_counter()
            if s >= 3:
                preps.append(t1 - t0)
                denses.append(t2 - t1)
        tp.close()
        return statistics.median(preps), statistics.median(denses)

    # Calibrate the dense part: the smallest MLP whose step takes at least the preparation time.
    calib = []
    hidden, layers = 256, 2
    for h, l in ((32, 1), (128, 1), (256, 2), (512, 2), (768, 3), (1024, 3), (1536, 3), (2048, 3)):
        prep, dense = serial_split(h, l, 6)
        calib.append({"hidden": h, "layers": l, "prep_ms": prep * 1e3, "dense_ms": dense * 1e3})
        hidden, layers = h, l
        if dense >= prep:
            break
    sweep: dict[int, list[float]] = {d: [] for d in range(5)}
    waits: dict[int, list[float]] = {d: [] for d in range(5)}
    splits = []
    for r in range(rounds):
        splits.append(serial_split(hidden, layers, steps))
        order = list(range(5))
        random.Random(r).shuffle(order)
        for depth in order:
            tp = trainer(depth, hidden, layers)
            for _ in range(3):
                tp.progress()
            w0 = tp.data.stats()["wait_s"]
            t0 = time.perf_counter()
            for _ in range(steps):
                tp.progress()
            sweep[depth].append((time.perf_counter() - t0) / steps)
            waits[depth].append((tp.data.stats()["wait_s"] - w0) / steps)
            tp.close()
    prep = statistics.median(p for p, _ in splits)
    dense = statistics.median(d for _, d in splits)
    table = [{"depth": d, "step_ms": statistics.median(sweep[d]) * 1e3, "wait_ms": statistics.median(waits[d]) * 1e3,
              "runs": len(sweep[d])} for d in range(5)]
    return {"prep_ms": prep * 1e3, "dense_ms": dense * 1e3, "hidden": hidden, "layers": layers, "batch": batch,
            "steps": steps, "calibration": calib, "depth_sweep": table,
            "gomaxprocs": os.environ.get("GOMAXPROCS"), "torch_threads": torch.get_num_threads()}


def plot(sweep: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sweep["depth_sweep"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r["depth"] for r in rows], [r["step_ms"] for r in rows], "o-", label="step time")
    ax.axhline(sweep["prep_ms"], color="tab:green", ls="--", label="prep (serial)")
    ax.axhline(sweep["dense_ms"], color="tab:red", ls="--", label="dense (serial)")
    ax.axhline(sweep["prep_ms"] + sweep["dense_ms"], color="gray", ls=":", label="prep + dense")
    ax.set_xlabel("pipeline depth (0 = serial)")
    ax.set_ylabel("ms per step")
    ax.set_ylim(bottom=0)
    ax.set_xticks(range(5))
    ax.legend()
    ax.set_title(f"recgo TrainPipeline, batch {sweep['batch']}, 1 core prep + 1 core dense")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> None:
    if "--recgo-epoch" in sys.argv:  # a subprocess of part 1: one warm epoch, then one timed
        i = sys.argv.index("--recgo-epoch")
        import recgo
        from recgo.data import CriteoSource

        path, lines, batch = sys.argv[i + 1], int(sys.argv[i + 2]), int(sys.argv[i + 3])
        engine = recgo.FeatureEngine(features())
        for timed in (False, True):
            t0, c0 = time.perf_counter(), cpu_seconds([])
            n = sum(b.labels.numel() for b in recgo.DataPipeline(CriteoSource(path), engine, batch, depth=2))
            assert n == lines
        print(json.dumps([time.perf_counter() - t0, cpu_seconds([]) - c0]))
        return
    if "--train-sweep" in sys.argv:  # the subprocess of part 2
        i = sys.argv.index("--train-sweep")
        path, batch, steps, rounds = sys.argv[i + 1], int(sys.argv[i + 2]), int(sys.argv[i + 3]), int(sys.argv[i + 4])
        print(json.dumps(train_sweep(path, batch, steps, rounds)))
        return
    bench = Bench("pipeline", description=__doc__, repeats=5)
    if not CRITEO.exists():
        print(f"{CRITEO} not present: the benchmark needs the Criteo sample to fit its generator")
        return
    import recgo
    from recgo.data import CriteoSource

    lines = 60_000 if bench.quick else 400_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "criteo_large.txt"
        t0 = time.perf_counter()
        fitted = CriteoSource(CRITEO).fit(max_rows=10_109, samples=lines)
        assert fitted.write_criteo(path, lines) == lines
        print(f"generated {lines:,} Criteo lines ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f} s")
        print("reader + transform:")
        tput = throughput(bench, path, lines, 4096)
        bench.data["throughput"] = tput
        speed = tput["recgo_1core"]["samples_per_cpu_s"] / tput["dataloader"]["samples_per_cpu_s"]
        print("training-step sweep (subprocess, pipeline threads=1, torch 1 thread):")
        steps, rounds = (12, 1) if bench.quick else (30, 3)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        env.pop("GOMAXPROCS", None)  # Go keeps a P per core: the budgets, not the scheduler, split the cores
        res = subprocess.run([sys.executable, __file__, "--train-sweep", str(path), "2048", str(steps), str(rounds)],
                             env=env, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise SystemExit(f"train sweep failed:\n{res.stderr[-4000:]}")
        sweep = json.loads(res.stdout.strip().splitlines()[-1])
    bench.data["train"] = sweep
    rows = sweep["depth_sweep"]
    serial = rows[0]["step_ms"]
    best = min(rows[1:], key=lambda r: r["step_ms"])
    max_stage = max(sweep["prep_ms"], sweep["dense_ms"])
    for r in rows:
        print(f"  depth {r['depth']}: {r['step_ms']:.2f} ms/step (waited {r['wait_ms']:.2f} ms)")
    print(f"  serial split: prep {sweep['prep_ms']:.2f} ms, dense {sweep['dense_ms']:.2f} ms")
    bench.summary(
        reader_speedup_per_core_vs_dataloader=speed,
        reader_speedup_wall_vs_dataloader=tput["recgo"]["samples_per_s"] / tput["dataloader"]["samples_per_s"],
        recgo_samples_per_cpu_s=tput["recgo_1core"]["samples_per_cpu_s"],
        recgo_2core_samples_per_cpu_s=tput["recgo"]["samples_per_cpu_s"],
        dataloader_samples_per_cpu_s=tput["dataloader"]["samples_per_cpu_s"],
        pipelined_over_max_stage=best["step_ms"] / max_stage,
        pipelined_speedup_vs_serial=serial / best["step_ms"],
        best_depth=best["depth"],
        depth2_speedup_vs_serial=serial / rows[2]["step_ms"],
        depth_sweep=rows,
    )
    png = bench.args.out / "pipeline_depth_sweep.png"
    bench.args.out.mkdir(parents=True, exist_ok=True)
    plot(sweep, png)
    table = ["## depth_sweep", "", f"prep {sweep['prep_ms']:.2f} ms, dense {sweep['dense_ms']:.2f} ms per step "
             f"(serial split; MLP hidden {sweep['hidden']} × {sweep['layers']}, batch {sweep['batch']})", "",
             "| depth | ms/step | waited in next() ms | vs serial | ÷ max(prep, dense) |", "|---:|---:|---:|---:|---:|"]
    for r in rows:
        table.append(f"| {r['depth']} | {r['step_ms']:.2f} | {r['wait_ms']:.2f} | {serial / r['step_ms']:.2f}x | "
                     f"{r['step_ms'] / max_stage:.2f} |")
    table += ["", f"![depth sweep]({png.name})", ""]
    bench.note("Throughput: recgo DataPipeline(depth=2, threads=1), in this process (GOMAXPROCS=2) and in a "
               "subprocess with GOMAXPROCS=1 (recgo_1core, the per-core figure of the summary; the whole file after a "
               "warm epoch), vs DataLoader(2 spawn workers, Python parsing, "
               "vectorized torch hash/bucketize: a multiplicative hash, cheaper than recgo's XXH64), whole file per run, "
               "CPU time from /proc (process + workers).")
    bench.note("Training sweep in a subprocess: the pipeline's thread budget is 1 (DataPipeline threads=1: READ, "
               "TRANSFORM and FORMAT share one token, so at most one core prepares), torch.set_num_threads(1) (the "
               "MLP and, through torch's OpenMP team, recgo's embedding kernels of the step run on the main thread "
               "alone); GOMAXPROCS is left at the core count.")
    bench.note("Machine shared with other jobs (2 cores): absolute times are noisy; ratios are side by side.")
    bench.write("\n".join(table))


if __name__ == "__main__":
    main()
