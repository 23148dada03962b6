"""How often plain torch's ``DistributedDataParallel`` over sparse gradients crashes a gloo rank on the
CPU, with gloo's default group (two worker threads) and with the one-thread group the training job's
``torch`` backend uses (:func:`recgo.distributed.sparse_ddp_group`).

No recgo engine is loaded: the ranks train 26 ``nn.EmbeddingBag(sparse=True)`` tables (200 or 7 rows,
dim 4, bags of 0-3 IDs, batch 128 per rank) and a linear layer under DDP with torch's Adagrad, the
torch backend's shape. Each world (two spawned processes) runs ``--steps`` steps; the two arms
alternate world by world until each has run ``--worlds`` worlds. A crash is a rank that dies on a
signal (torch 2.14 aborts with "malloc(): unaligned tcache chunk detected" or segfaults inside
``AsyncSparseAllreduceWork``'s coalesce, both gloo threads in it).

``summary``: per arm the worlds and steps run, the crashes, and steps per crash.

    python benchmarks/sparse_ddp_crash.py [--quick] [--worlds N] [--steps N]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Bench  # noqa: E402

ROWS = (200, 7)
TABLES, DIM, BATCH, DENSE = 26, 4, 128, 13


def _rank(rank: int, world: int, port: int, steps: int, one_thread: bool) -> None:
    import torch.distributed as dist
    from torch import nn

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    group = None
    if one_thread:
        from recgo.distributed import sparse_ddp_group

        group = sparse_ddp_group(120.0)
    gen = torch.Generator().manual_seed(rank)
    rows = [ROWS[t % 3 == 0] for t in range(TABLES)]

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bags = nn.ModuleList([nn.EmbeddingBag(n, DIM, mode="sum", sparse=True) for n in rows])
            self.top = nn.Linear(TABLES * DIM + DENSE, 1)

        def forward(self, ids: list[torch.Tensor], offsets: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
            pooled = [b(i, o) for b, i, o in zip(self.bags, ids, offsets)]
            return self.top(torch.cat([*pooled, x], 1)).squeeze(1)

    model = nn.parallel.DistributedDataParallel(Model(), process_group=group)
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05, eps=1e-8)
    for _ in range(steps):
        ids, offsets = [], []
        for n in rows:
            lengths = torch.randint(0, 4, (BATCH,), generator=gen)
            offsets.append(torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]]))
            ids.append(torch.randint(0, n, (int(lengths.sum()),), generator=gen))
        y = torch.rand(BATCH, generator=gen).round()
        logits = model(ids, offsets, torch.randn(BATCH, DENSE, generator=gen))
        loss = nn.functional.binary_cross_entropy_with_logits(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    dist.destroy_process_group()


def _world(steps: int, one_thread: bool) -> str | None:
    """Run one world; the crash (how a rank died) or None."""
    import torch.multiprocessing as mp

    from recgo.train.distributed import free_port

    try:
        mp.start_processes(_rank, args=(2, free_port(), steps, one_thread), nprocs=2, start_method="spawn",
                           join=True)
    except mp.ProcessExitedException as exc:
        return str(exc)
    return None


def main(argv: list[str] | None = None) -> None:
    def options(p: Any) -> None:
        p.add_argument("--worlds", type=int, default=None, help="worlds per arm (default 20; 2 with --quick)")
        p.add_argument("--steps", type=int, default=None, help="steps per world (default 400; 20 with --quick)")

    bench = Bench("sparse_ddp_crash", argv, __doc__, options=options)
    worlds = bench.args.worlds or (2 if bench.quick else 20)
    steps = bench.args.steps or (20 if bench.quick else 400)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # two ranks on few cores: no spinning OpenMP teams
    arms = {"gloo_default_two_threads": False, "one_thread_group": True}
    runs: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
    t0 = time.monotonic()
    for w in range(worlds):
        for arm, one in arms.items():
            start = time.monotonic()
            crash = _world(steps, one)
            runs[arm].append({"seconds": round(time.monotonic() - start, 1), "crash": crash})
            print(f"  world {w + 1}/{worlds} {arm}: {'CRASH ' + crash if crash else 'ok'} "
                  f"({(time.monotonic() - t0) / 60:.1f} min)", flush=True)
    figures: dict[str, Any] = {"steps_per_world": steps}
    for arm, rs in runs.items():
        crashes = sum(r["crash"] is not None for r in rs)
        figures[arm] = {"worlds": len(rs), "steps": len(rs) * steps, "crashes": crashes,
                        "steps_per_crash": round(len(rs) * steps / crashes) if crashes else None}
    bench.summary(**figures)
    bench.data["worlds"] = runs
    bench.data["torch"] = torch.__version__
    bench.note_load()
    bench.note("a crashed world counts its steps as run: the crash may come at any step of it")
    bench.write()


if __name__ == "__main__":
    main()
