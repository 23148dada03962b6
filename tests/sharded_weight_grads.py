"""A phase of the spawned worlds of test_distributed.py: per-ID weights that require grad (position
weights, as TorchRec's ``PositionWeightedModule`` makes them) through a sharded pooled collection,
against the single-process weighted collection on the global batch."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

import recgo
from recgo.modules import optim
from sharded_batches import B_LOCAL, SHARDING, configs, global_batch, local_slice
from sharded_checks import check_update, close

MAX_LEN, STEPS, LR = 6, 3, 0.2


def positions(kjt: recgo.KeyedJaggedTensor) -> torch.Tensor:
    """Each value's position in its bag (capped at MAX_LEN − 1), as PositionWeightedModule indexes."""
    lengths = kjt.lengths()
    starts = torch.repeat_interleave(lengths.cumsum(0) - lengths, lengths)
    return (torch.arange(lengths.sum()) - starts).clamp(max=MAX_LEN - 1)


def weighted(kjt: recgo.KeyedJaggedTensor, pw: torch.Tensor) -> tuple[recgo.KeyedJaggedTensor, torch.Tensor]:
    """``kjt`` with weights ``pw[position]`` (which require grad through ``pw``), and those weights."""
    w = pw.index_select(0, positions(kjt))
    if w.requires_grad:
        w.retain_grad()
    return recgo.KeyedJaggedTensor(kjt.keys(), kjt.values(), lengths=kjt.lengths(), weights=w), w


def weight_grad_cases(rank: int, world: int, modes: list[tuple[str, int, int]], plan_path: str | None = None) -> int:
    """For each (mode, nodes, ranks per node) of ``modes``, owner pooling forced or auto, a fused
    Adagrad and a torch SGD over the shards: STEPS steps of mixed SUM / MEAN tables of every sharding
    type ("plan" from ``plan_path``, else table-wise) whose per-ID weights are a learned position weight
    vector. Pooled outputs, per-ID weight gradients, table gradients or updated rows, and the position
    weights after each SGD step (their gradient summed over the ranks) equal the single-process
    collection's (1e-6 relative). Returns the cases run."""
    from recgo.distributed import ShardedEmbeddingBagCollection
    from recgo.planner import Plan

    cfgs = configs()
    sharding = SHARDING if plan_path is not None else {**SHARDING, "tp": "table_wise"}
    plan = Plan.load(plan_path) if plan_path is not None else None
    cases = 0
    for mode, nodes, per_node in modes:
        for returns, opt in (("pooled", optim.Adagrad(lr=LR)), ("auto", None)):
            ref = recgo.EmbeddingBagCollection(cfgs, optimizer=opt, seed=5, is_weighted=True)
            sh = ShardedEmbeddingBagCollection(cfgs, sharding, mode=mode, nodes=nodes, ranks_per_node=per_node,
                                               optimizer=opt, plan=plan, seed=5, timeout=60, is_weighted=True,
                                               owner_pooling=returns)
            ids = {c.name: sh.local_ids(c.name) for c in cfgs}
            pw_ref = torch.linspace(0.5, 1.5, MAX_LEN).requires_grad_()
            pw = pw_ref.detach().clone().requires_grad_()
            torch_opts = None
            if opt is None:
                torch_opts = (torch.optim.SGD(ref.parameters(), lr=LR), torch.optim.SGD(sh.parameters(), lr=LR))
            what = f"{mode} owner_pooling={returns} {opt}"
            for step in range(STEPS):
                glob = global_batch(step, world, weighted=False, max_len=MAX_LEN + 2)
                local, ranges = local_slice(glob, rank)
                kjt_ref, w_ref = weighted(glob, pw_ref)
                kjt, w = weighted(local, pw)
                pooled_ref = ref(kjt_ref).values()
                pooled = sh(kjt).values()
                mine = slice(rank * B_LOCAL, (rank + 1) * B_LOCAL)
                close(pooled, pooled_ref[mine].detach(), f"{what} step {step} pooled")
                R = torch.randn(pooled_ref.shape, generator=torch.Generator().manual_seed(step))
                (pooled_ref * R).sum().backward()
                (pooled * R[mine]).sum().backward()
                per_key = dict(zip(glob.keys(), w_ref.grad.split(glob.length_per_key())))  # ranges: within a key
                want = torch.cat([per_key[k][ranges[k]] for k in glob.keys()])
                close(w.grad, want, f"{what} step {step} per-ID weight gradients")
                check_update(sh.embedding_bags, ref.embedding_bags, cfgs, ids, torch_opts, f"{what} step {step}")
                dist.all_reduce(pw.grad, group=sh.groups.world)  # each rank's samples' share
                close(pw.grad, pw_ref.grad, f"{what} step {step} position-weight gradient")
                with torch.no_grad():
                    for p in (pw, pw_ref):
                        p -= LR * p.grad
                        p.grad = None
                close(pw.detach(), pw_ref.detach(), f"{what} step {step} position weights")
            cases += 1
    return cases


def pooled_partials(rank: int, world: int) -> tuple[int, int]:
    """The partial sums owners returned for one step over a collection with owner pooling forced, its
    weights plain and then requiring grad: plain weights keep the pooled path (owners pool), trained
    ones bring rows back (none pooled)."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    sh = ShardedEmbeddingBagCollection(configs(), {**SHARDING, "tp": "table_wise"}, optimizer=optim.SGD(lr=0.1),
                                       seed=5, timeout=60, is_weighted=True, owner_pooling="pooled")
    local = local_slice(global_batch(0, world, max_len=MAX_LEN + 2), rank)[0]
    out = []
    for pw in (torch.linspace(0.5, 1.5, MAX_LEN), torch.linspace(0.5, 1.5, MAX_LEN).requires_grad_()):
        sh(weighted(local, pw)[0]).values().sum().backward()
        got: list[Any] = [None] * world
        dist.all_gather_object(got, sh.traffic()["pooled_vecs"])
        out.append(sum(got))
    return out[0], out[1]
