"""Train a small model whose embedding tables are sharded across ranks with recgo.distributed.

Run on one machine with two processes (gloo on CPU):

    torchrun --nproc-per-node 2 examples/train_distributed.py
    torchrun --nproc-per-node 4 examples/train_distributed.py --nodes 2 --mode hierarchical

Each rank takes its share of the cores: under torchrun recgo sizes its Go workers at import from
LOCAL_WORLD_SIZE (as torchrun sets OMP_NUM_THREADS=1 for torch); started some other way, call
recgo.share_cores(ranks per machine), which sizes torch's threads and recgo's alike.

The model is written as for TorchRec and built on the meta device; recgo.distributed.shard_model
(recgo's DistributedModelParallel) shards its embedding collection and puts the rest under DDP. Each
rank feeds its own samples; the embedding tables are hash-sharded (the "small" table is replicated;
"users" is a dynamic-ID table, which takes any int64 user ID and gives it a row on its owner when it
first arrives),
the dense MLP is replicated with its gradients averaged by DDP, and each rank's embedding gradients
are divided by the world size, as DMP does. A checkpoint of the
shards is written at the end and loaded back (it could be loaded on another world size).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

import recgo
from recgo.distributed import shard_model
from recgo.modules import optim


def batch(step: int, rank: int, size: int, tables: list[recgo.EmbeddingBagConfig]) -> tuple[recgo.KeyedJaggedTensor, torch.Tensor]:
    """A synthetic batch of `size` samples (skewed IDs, 1–4 per bag) with 0/1 labels from a planted model:
    each ID has a hidden score (the same on every rank), and a sample is clicked with probability
    sigmoid(2 × the mean score of its IDs), so the loss has something to fall to."""
    g = torch.Generator().manual_seed(step * 1000 + rank)
    keys, vals, lens = [], [], []
    score = torch.zeros(size)
    for i, t in enumerate(tables):
        hidden = torch.randn(t.num_embeddings, generator=torch.Generator().manual_seed(i))  # per table, fixed
        for f in t.feature_names:
            ln = torch.randint(1, 5, (size,), generator=g)
            ids = (torch.rand(int(ln.sum()), generator=g) ** 4 * t.num_embeddings).long()
            keys.append(f)
            vals.append(ids)
            lens.append(ln)
            score += torch.zeros(size).index_add_(0, torch.repeat_interleave(torch.arange(size), ln), hidden[ids]) / ln
    n_features = sum(len(t.feature_names) for t in tables)
    labels = torch.bernoulli(torch.sigmoid(2 * score / n_features ** 0.5), generator=g)
    return recgo.KeyedJaggedTensor(keys, torch.cat(vals), lengths=torch.cat(lens)), labels


class Model(nn.Module):
    """Every feature's pooled embedding, concatenated, through an MLP to one logit."""

    def __init__(self, tables: list[recgo.EmbeddingBagConfig]) -> None:
        super().__init__()
        self.ebc = recgo.EmbeddingBagCollection(tables, optimizer=optim.RowWiseAdagrad(lr=0.05), seed=0)
        width = sum(t.embedding_dim * len(t.feature_names) for t in tables)
        self.mlp = nn.Sequential(nn.Linear(width, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, kjt: recgo.KeyedJaggedTensor) -> torch.Tensor:
        return self.mlp(self.ebc(kjt).values()).squeeze(1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=256, help="samples per rank")
    p.add_argument("--mode", choices=["flat", "hierarchical"], default="flat")
    p.add_argument("--nodes", type=int, default=1, help="how many nodes the ranks form (ranks per node = world / nodes)")
    args = p.parse_args()

    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    tables = [
        # a dynamic-ID table: up to 200,000 users per rank, the stalest evicted when a shard is full
        recgo.EmbeddingBagConfig(200_000, 32, "users", ["user_id"], dynamic=recgo.DynamicConfig(eviction="lru")),
        recgo.EmbeddingBagConfig(100_000, 32, "item_table", ["item_id", "clicked_items"], pooling="mean"),
        recgo.EmbeddingBagConfig(100, 32, "small", ["category"]),
    ]
    # Built on the meta device, as for TorchRec's DistributedModelParallel: no rank ever holds the
    # whole tables. shard_model replaces the collection by a sharded one (each rank initialises only
    # its rows), materialises the MLP and wraps the model in DDP over its dense parameters.
    with torch.device("meta"):
        model = Model(tables)
    model = shard_model(model, {"users": "hash", "item_table": "hash", "small": "data_parallel"}, mode=args.mode,
                        nodes=args.nodes, ranks_per_node=world // args.nodes, timeout=30)
    ebc = model.module.ebc  # the ShardedEmbeddingBagCollection
    opt = torch.optim.Adam(model.module.mlp.parameters(), lr=1e-3)
    # The tables' fused optimizer under a torch scheduler, as with DMP's model.fused_optimizer: a
    # 10-step warm-up of their learning rate (zero_grad hands each step's rate to the shards).
    warmup = torch.optim.lr_scheduler.LinearLR(model.fused_optimizer, start_factor=0.1, total_iters=10)
    t0 = time.perf_counter()
    losses: list[float] = []
    for step in range(args.steps):
        kjt, labels = batch(step, rank, args.batch, tables)
        logits = model(kjt)
        loss = nn.functional.binary_cross_entropy_with_logits(logits, labels)
        opt.zero_grad()
        model.fused_optimizer.zero_grad()
        loss.backward()  # the embedding rows are updated on their owners inside this call
        opt.step()
        model.fused_optimizer.step()  # nothing left to update; the scheduler expects it before its own step
        warmup.step()
        losses.append(loss.item())
        if rank == 0 and ((step + 1) % 20 == 0 or step == args.steps - 1):
            t = ebc.traffic()
            recent = losses[-20:]
            print(f"step {step}: mean loss of the last {len(recent)} steps {sum(recent) / len(recent):.4f}; "
                  f"in its last step this rank sent {t['ids_intra'] + t['ids_inter']} IDs, returned {t['vecs_intra'] + t['vecs_inter']} "
                  f"vectors ({t['pooled_vecs']} of them pooled partials; {t['bytes']} bytes)", flush=True)
    if rank == 0:
        print(f"{args.steps} steps in {time.perf_counter() - t0:.2f} s on {world} ranks ({args.mode}); "
              f"the tables' learning rate after the warm-up: {ebc.fused_optimizer.lr:g}")
    ckpt = os.environ.get("RECGO_EXAMPLE_CKPT") or os.path.join(tempfile.gettempdir(), "recgo-train-distributed")
    ebc.save(ckpt)  # every rank writes its shards
    dist.barrier()
    ebc.load(ckpt)  # any world size can load them back
    if rank == 0:
        print(f"checkpoint written to {ckpt} and loaded back")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
