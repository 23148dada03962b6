"""The sequence model's embedding work against both of TorchRec's CPU paths, on the sample's and on
catalog-sized tables.

The main job's TorchRec backend for sequences is what the issue and TorchRec's docs name for one
process: ``EmbeddingCollection`` + ``apply_optimizer_in_backward``. On CPU that collection is a set of
``nn.Embedding`` modules with dense gradients (its fused sibling is CUDA-only), so every step costs the
whole table. A TorchRec user on CPU may instead wrap the collection in ``DistributedModelParallel`` on
a world of one process: the sharded module runs FBGEMM's fused table-batched kernels with the optimizer
in backward, whose cost follows the lookups. This benchmark times, interleaved, one embedding-only step
of the BST model's sparse half (the Taobao sample's batches: lookups of the five keys, the summed
history's padded view, target and user, a fixed linear function of them, backward, fused Adagrad) for

* ``recgo``: recgo's ``EmbeddingCollection`` with its fused Adagrad;
* ``torchrec_ec``: TorchRec's ``EmbeddingCollection`` + ``apply_optimizer_in_backward(Adagrad)``;
* ``torchrec_dmp1``: TorchRec's ``DistributedModelParallel`` over the same collection on a gloo world
  of 1, its planner's plan, Adagrad fused by the sharder (``recgo.train.distributed.build_torchrec``),

on the sample's own vocabulary (55,368 items) and on the whole UserBehavior dataset's
(``TrainConfig.catalog``: 4,162,024 items). ``end_to_end.py`` times whole training steps.

    python benchmarks/torchrec_cpu_paths.py [--quick]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _steps import embedding_only_loss, embedding_only_step, first_batches  # noqa: E402
from harness import DATA as SAMPLES, Bench  # noqa: E402

from recgo.train import TrainConfig, make_source  # noqa: E402
from recgo.train.backends import SparseArch, SparseOptim, initial_weights  # noqa: E402
from recgo.train.loop import _tables  # noqa: E402

TAOBAO = SAMPLES / "taobao" / "taobao_UserBehavior_head.csv"


def _steps(cfg: TrainConfig) -> tuple[dict[str, "callable"], dict[str, str], int]:
    """One embedding-only step per variant on the config's first batches (same weights everywhere),
    TorchRec's plan and the item table's rows."""
    import torchrec

    from recgo.train import distributed as D

    source = make_source(cfg)
    tables = _tables(source)
    weights = initial_weights(tables, cfg.dim, cfg.seed)
    optim = SparseOptim("adagrad", cfg.sparse_lr)
    batches = first_batches(source)
    d = cfg.dim
    loss = embedding_only_loss(batches[0].size, d, cfg.max_len)
    dmp, plan = D.build_torchrec(tables, d, optim, weights, D.World(0, 1), pooled=False)
    kjts = [torchrec.KeyedJaggedTensor(keys=x.sparse.keys(), values=x.sparse.values(), lengths=x.sparse.lengths())
            for x in batches]
    state = [0]

    def dmp_step() -> None:
        i = state[0] % len(kjts)
        state[0] += 1
        out = dmp(kjts[i])
        out = out.wait() if hasattr(out, "wait") else out
        loss({k: out[k] for k in out.keys()}).backward()

    steps = {b: embedding_only_step(SparseArch(b, tables, d, optim, weights, pooled=False), batches, d, cfg.max_len)
             for b in ("recgo", "torchrec")}
    return {"recgo": steps["recgo"], "torchrec_ec": steps["torchrec"], "torchrec_dmp1": dmp_step}, plan, \
        source.table_rows["item"]


def main() -> None:
    bench = Bench("torchrec_cpu_paths", description=__doc__, repeats=7)
    if not TAOBAO.exists():
        raise SystemExit(f"{TAOBAO} not found: this benchmark needs the Taobao sample")
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29541")
    dist.init_process_group("gloo", rank=0, world_size=1)
    q = bench.quick
    summary: dict[str, float] = {}
    try:
        for catalog in (False, True):
            cfg = TrainConfig(model="bst", data=str(TAOBAO), batch_size=256 if q else 1024, dim=16 if q else 64,
                              max_len=20 if q else 50, seed=0, catalog=catalog)
            tag = "catalog" if catalog else "sample"
            steps, plan, item_rows = _steps(cfg)
            res = bench.compare(f"{tag}_embedding_only", steps, items=cfg.batch_size, warmup=2)
            for other in ("torchrec_ec", "torchrec_dmp1"):
                summary[f"{tag}_vs_{other}"] = res.ratio("recgo", other)
            bench.note(f"{tag}: B {cfg.batch_size}, D {cfg.dim}, history cap {cfg.max_len}, item table "
                       f"{item_rows:,} rows; TorchRec's planner placed {plan}")
            steps.clear()
    finally:
        dist.destroy_process_group()
    bench.summary(**summary)
    bench.note("one step = the five keys' lookups, bst_inputs (summed history, its padded view, target, user), a "
               "fixed random linear function of them, backward and the fused Adagrad update (inside backward on "
               "every variant)")
    bench.write()


if __name__ == "__main__":
    main()
