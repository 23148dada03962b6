"""A sharded training step from batches the input pipeline partitioned by owner, vs the same batches
through the collection's own local dedup and partition (issue 12: "FORMAT ... partition by owner").

World 2 (two processes on this machine, gloo, torch.multiprocessing spawn, each rank half the cores).
Each rank prepares a few batches with ``recgo.DataPipeline(..., shard=collection)`` (FORMAT
deduplicates each table's IDs and partitions them by owner) and keeps them; ``prepared`` trains on
them, ``plain`` on copies of the same batches in fresh memory, which the collection does not
recognise, so its step deduplicates and partitions itself. Both variants step the same collection
(fused SGD), interleaved in the same shuffled order on both ranks. Also reported: the pipeline's
FORMAT time per batch with and without ``shard=`` (the work moved off the step, onto the pipeline's
goroutines).

    python benchmarks/pipeline_shard.py [--quick]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Bench, worker_argv  # noqa: E402

WORLD, TABLES, ROWS, DIM = 2, 8, 100_000, 16


def _copy(kjt: Any) -> Any:
    import recgo

    return recgo.KeyedJaggedTensor(kjt.keys(), kjt.values().clone(), lengths=kjt.lengths().clone())


def _worker(rank: int, store: str, argv: list[str], out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    import recgo

    recgo.share_cores(WORLD)  # torch's and Go's workers: the ranks share the cores
    from recgo.data import SyntheticField, SyntheticSource
    from recgo.distributed import ShardedEmbeddingBagCollection
    from recgo.feature import Feature
    from recgo.modules import optim

    quick = "--quick" in argv
    B = 1024 if quick else 4096
    pooling = 20.0
    source = SyntheticSource(WORLD * B * 10, [SyntheticField(f"f{t}", ROWS, 1.05, 1.0, pooling) for t in range(TABLES)],
                             seed=7)
    features = [Feature(f"f{t}").mod(ROWS) for t in range(TABLES)]
    cfgs = [recgo.EmbeddingBagConfig(ROWS, DIM, f"t{t}", [f"f{t}"]) for t in range(TABLES)]
    bench = Bench("pipeline_shard", argv, repeats=9)  # the parent's --quick and --repeats
    res: dict[str, Any] = {"cases": [], "format_ms": {}, "B_local": B, "pooling": pooling,
                           "threads_per_rank": recgo.num_threads()}
    for sharding in ("hash", "table_wise"):
        col = ShardedEmbeddingBagCollection(cfgs, sharding, optimizer=optim.SGD(lr=0.01), seed=0, timeout=300)
        # FORMAT per batch: after two warm batches (batches dropped at once, so the pool recycles their
        # memory), alternated, median over the runs
        fmt: dict[str, list[float]] = {"with_shard": [], "dedup_only": []}
        for _ in range(bench.repeats):
            for name, kw in (("with_shard", {"shard": col}), ("dedup_only", {"tables": recgo.pipeline.tables_of(col)})):
                p = recgo.DataPipeline(source, features, B, depth=0, **kw)
                for _ in range(2):
                    next(p)
                s0 = p.stats()["format_s"]
                for _ in range(8):
                    next(p)
                fmt[name].append((p.stats()["format_s"] - s0) / 8 * 1e3)
                p.close()
        pipe = recgo.DataPipeline(source, features, B, depth=0, shard=col)
        batches = [next(pipe) for _ in range(4)]
        copies = [_copy(b.sparse) for b in batches]
        R = torch.randn(B, TABLES * DIM, generator=torch.Generator().manual_seed(rank))
        it: dict[str, int] = {}

        def step_of(name: str, kjts: list[Any]):
            def step() -> None:
                i = it[name] = (it.get(name, 0) + 1) % len(kjts)
                (col(kjts[i]).values() * R).sum().backward()
            return step

        dist.barrier()
        c = bench.compare(sharding, {"prepared": step_of("prepared", [b.sparse for b in batches]),
                                     "plain": step_of("plain", copies)}, items=B * WORLD, warmup=2)
        res["cases"].append({"case": sharding, "times": c.times, "items": B * WORLD})
        res["format_ms"][sharding] = {k: statistics.median(v) for k, v in fmt.items()}
        pipe.close()
    if rank == 0:
        torch.save(res, os.path.join(out, "world2.pt"))
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp

    bench = Bench("pipeline_shard", description=__doc__, repeats=9)
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(_worker, args=(os.path.join(tmp, "store"), worker_argv(bench), tmp), nprocs=WORLD,
                           start_method="spawn")
        res = torch.load(os.path.join(tmp, "world2.pt"), weights_only=False)
    from harness import CaseResult

    summary: dict[str, Any] = {}
    for c in res["cases"]:
        cr = CaseResult(c["case"], c["times"], c["items"])
        bench.cases.append(cr)
        summary[f"step_speedup_prepared_vs_plain_{c['case']}"] = cr.ratio("prepared", "plain")
        summary[f"step_ms_prepared_{c['case']}"] = statistics.median(c["times"]["prepared"]) * 1e3
        summary[f"step_ms_plain_{c['case']}"] = statistics.median(c["times"]["plain"]) * 1e3
        f = res["format_ms"][c["case"]]
        summary[f"format_ms_with_shard_{c['case']}"] = f["with_shard"]
        summary[f"format_ms_dedup_only_{c['case']}"] = f["dedup_only"]
    bench.summary(**summary)
    bench.data["world2"] = res
    bench.note(f"world 2 on one machine (gloo), {res['threads_per_rank']} threads per rank, local batch {res['B_local']}, "
               f"{TABLES} tables × {ROWS} rows × dim {DIM}, bags of mean length {res['pooling']:g}; times of rank 0")
    bench.note("format_ms: the pipeline's FORMAT time per batch (depth 0, batches 3-10 of a run, median over runs) with "
               "shard= (dedup + partition by owner) and with tables only (dedup), on rank 0 while rank 1 does the same")
    bench.note_load()
    bench.write()


if __name__ == "__main__":
    main()
