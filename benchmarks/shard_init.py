"""Building a sharded table: peak memory and time per rank, on two gloo ranks.

One hash-sharded table of 8M × 64 float32 (2 GiB whole, about 1 GiB per rank), built three ways in
fresh spawned worlds: the direct constructor with a seed, ``from_ebc`` of a collection built on the
meta device, and, for scale, what a rank holds if it draws the whole table first (the draw, the
shard, and the gathered copy of its rows: the construction before the chunked draw). Each rank
reports its peak RSS (``ru_maxrss``, the process's own high-water mark, so every variant runs in new
processes) and the seconds its construction took.

    python benchmarks/shard_init.py [--quick]   (results/shard_init.*; --quick: 1M rows)
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

WORLD, DIM = 2, 64


def _worker(rank: int, port: int, how: str, rows: int, out: str) -> None:
    import torch.distributed as dist

    import recgo
    from recgo.distributed import ShardedEmbeddingBagCollection
    from recgo.modules import optim

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    cfg = [recgo.EmbeddingBagConfig(rows, DIM, "big", ["f"])]
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    if how == "from_meta":
        with torch.device("meta"):
            ebc = recgo.EmbeddingBagCollection(cfg, optimizer=optim.SGD(lr=0.1), seed=0)
        sh = ShardedEmbeddingBagCollection.from_ebc(ebc, "hash", timeout=300)
    elif how == "direct":
        sh = ShardedEmbeddingBagCollection(cfg, "hash", optimizer=optim.SGD(lr=0.1), seed=0, timeout=300)
    else:  # whole_table: draw every row, keep this rank's
        sh = ShardedEmbeddingBagCollection(cfg, "hash", optimizer=optim.SGD(lr=0.1), seed=0, timeout=300, _init=False)
        full = torch.empty(rows, DIM).uniform_(*cfg[0].init_bounds(), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            sh.embedding_bags["big"].weight.copy_(full[sh.local_ids("big")])
        del full
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    torch.save({"peak_gib": peak / 2**20, "base_gib": base / 2**20, "seconds": seconds,
                "shard_rows": sh.embedding_bags["big"].weight.shape[0]}, os.path.join(out, f"{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


def run(how: str, rows: int) -> list[dict]:
    import torch.multiprocessing as mp

    from recgo.train.distributed import free_port

    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(_worker, args=(free_port(), how, rows, tmp), nprocs=WORLD, start_method="spawn")
        return [torch.load(os.path.join(tmp, f"{r}.pt")) for r in range(WORLD)]


def main() -> None:
    from harness import Bench

    bench = Bench("shard_init", description=__doc__)
    rows = 1_000_000 if bench.quick else 8_000_000
    whole = rows * DIM * 4 / 2**30
    summary: dict[str, float] = {"table_gib": whole}
    lines = ["| construction | peak RSS per rank (GiB) | before (GiB) | seconds | shard rows |", "|---|---:|---:|---:|---:|"]
    for how in ("direct", "from_meta", "whole_table"):
        got = run(how, rows)
        peak = max(g["peak_gib"] for g in got)
        secs = max(g["seconds"] for g in got)
        summary[f"peak_rss_gib_{how}"] = peak
        summary[f"seconds_{how}"] = secs
        lines.append(f"| {how} | {peak:.2f} | {got[0]['base_gib']:.2f} | {secs:.1f} | "
                     f"{', '.join(str(g['shard_rows']) for g in got)} |")
        print(f"  {how}: peak {peak:.2f} GiB per rank, {secs:.1f} s", flush=True)
    summary["peak_rss_ratio_whole_over_direct"] = summary["peak_rss_gib_whole_table"] / summary["peak_rss_gib_direct"]
    bench.summary(**summary)
    bench.note(f"one hash-sharded table of {rows:,} × {DIM} float32 ({whole:.2f} GiB whole) on {WORLD} gloo ranks; "
               "peak RSS = the rank process's high-water mark (ru_maxrss), each construction in fresh processes")
    bench.write("\n".join(["## Per construction", "", *lines, ""]))


if __name__ == "__main__":
    main()
