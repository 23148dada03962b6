"""Session 43: sharded collections under ``torch.utils.checkpoint`` (``use_reentrant=False``) behave as
the single-process ones (``modules/_recompute.py``): a checkpointed model over a sharded collection
with a dynamic-ID table trains as the unsharded model does (dense gradients, rows, statistics; the
recomputation in backward admits nothing), and a recomputation after another training forward
admitted IDs in between (gradient accumulation over checkpointed forwards) is refused on every rank,
naming the table, as the unsharded collection refuses it. Before, the sharded recomputation read the
rows as they were then and gave the dense gradients of values its forward never produced, silently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.utils.checkpoint import checkpoint

import recgo
from recgo import dynamic
from recgo.errors import InvalidInputError
from recgo.modules import optim
from sharded_checks import close
from spawned import ok, spawn

B = 3  # bags per rank


def _tables(sequence: bool) -> list[Any]:
    dyn = recgo.DynamicConfig(min_count=2, seed=3, init_min=-0.5, init_max=0.5)
    if sequence:
        return [recgo.EmbeddingConfig(100, 4, "t", ["f"], dynamic=dyn)]
    return [recgo.EmbeddingBagConfig(100, 4, "t", ["f"], dynamic=dyn), recgo.EmbeddingBagConfig(20, 4, "c", ["g"])]


def _build(sequence: bool, sharded: bool) -> tuple[Any, torch.nn.Linear]:
    opt = optim.Adagrad(lr=0.2)
    if sharded:
        from recgo.distributed import ShardedEmbeddingBagCollection, ShardedEmbeddingCollection

        cls = ShardedEmbeddingCollection if sequence else ShardedEmbeddingBagCollection
        coll = cls(_tables(sequence), "hash", optimizer=opt, seed=4, timeout=60)
    else:
        cls = recgo.EmbeddingCollection if sequence else recgo.EmbeddingBagCollection
        coll = cls(_tables(sequence), optimizer=opt, seed=4)
    torch.manual_seed(0)
    return coll, torch.nn.Linear(4 if sequence else 8, 3)


def _batch(ids: list[list[int]], sequence: bool) -> recgo.KeyedJaggedTensor:
    """Bags of feature ``f`` (and, pooled, feature ``g``: each bag's first ID mod 20)."""
    vals = [torch.tensor([i for b in ids for i in b], dtype=torch.int64)]
    lens = [torch.tensor([len(b) for b in ids])]
    if not sequence:
        vals.append(torch.tensor([b[0] % 20 for b in ids if b], dtype=torch.int64))
        lens.append(torch.tensor([int(bool(b)) for b in ids]))
    return recgo.KeyedJaggedTensor(["f"] if sequence else ["f", "g"], torch.cat(vals), lengths=torch.cat(lens))


def _loss(coll: Any, dense: torch.nn.Linear, kjt: recgo.KeyedJaggedTensor, scale: torch.Tensor,
          sequence: bool) -> torch.Tensor:
    """tanh(dense(embeddings)) weighted by ``scale`` (its rows: the bags', or the IDs' in sequence)."""
    x = coll(kjt)["f"].values() if sequence else coll(kjt).values()
    return (torch.tanh(dense(x)) * scale[:len(x)]).sum()


def _global(step: int) -> list[list[int]]:
    """The global batch of a step: 2·B bags over 12 IDs, so that IDs reach min_count over the steps."""
    g = torch.Generator().manual_seed(40 + step)
    return [torch.randint(1, 13, (int(n),), generator=g).tolist() for n in torch.randint(1, 4, (2 * B,), generator=g)]


def _scale(bags: list[list[int]], sequence: bool, lo: int, hi: int) -> torch.Tensor:
    """The loss weights of bags [lo, hi) (per ID in sequence): the same numbers in both runs."""
    rows = [(b, k) for b in range(lo, hi) for k in range(len(bags[b]))] if sequence else [(b, 0) for b in range(lo, hi)]
    return torch.tensor([[1.0 + b + 0.5 * k, -0.5 - k, 0.25 * (b + 1)] for b, k in rows])


def _trains(rank: int, world: int, sequence: bool) -> dict[str, Any]:
    """Three checkpointed steps of the sharded model on each rank's bags against the plain unsharded
    model on the global batch: summed dense gradients, rows and stats equal."""
    ref, ref_dense = _build(sequence, sharded=False)
    sh, dense = _build(sequence, sharded=True)
    held = 0
    for step in range(3):
        bags = _global(step)
        mine = bags[rank * B:(rank + 1) * B]
        _loss(ref, ref_dense, _batch(bags, sequence), _scale(bags, sequence, 0, 2 * B), sequence).backward()
        scale = _scale(bags, sequence, rank * B, (rank + 1) * B)
        run = checkpoint(lambda k, s=scale: _loss(sh, dense, k, s, sequence), _batch(mine, sequence),
                         use_reentrant=False)
        run.backward()
        grad = dense.weight.grad.clone()
        dist.all_reduce(grad)
        close(grad, ref_dense.weight.grad, f"step {step}: dense gradient")
        dense.zero_grad()
        ref_dense.zero_grad()
        ids = torch.arange(1, 13)
        rows, want = sh.locate("t", ids), dynamic.lookup(ref, "t", ids)
        mine_ids = sh.owners("t", ids) == rank
        assert torch.equal(rows[mine_ids] >= 0, want[mine_ids] >= 0), f"step {step}: admitted otherwise"
        have = rows >= 0
        shard, whole = sh.embedding_bags["t"], (ref.embeddings if sequence else ref.embedding_bags)["t"]
        close(shard.weight.detach()[rows[have]], whole.weight.detach()[want[have]], f"step {step}: rows")
        close(shard.optimizer_state[rows[have]], whole.optimizer_state[want[have]], f"step {step}: state")
        held = int(have.sum())
    owner = getattr(ref, "_owner", ref)
    return {"stats": dynamic.stats(sh, "t"), "ref": dynamic.stats(owner, "t"), "held": held}


@pytest.mark.parametrize("sequence", [False, True])
def test_checkpointed_sharded_model_trains_as_the_unsharded_one(tmp_path: Path, sequence: bool) -> None:
    res = spawn(_trains, 2, tmp_path, sequence, wait=180)
    ok(res)
    ref = res[0]["ref"]
    assert ref.admitted > 0 and ref.step == 3, ref  # the recomputations counted nothing
    assert sum(r["stats"].rows for r in res) == ref.rows and sum(r["stats"].admitted for r in res) == ref.admitted
    assert all(r["stats"].step == ref.step for r in res) and all(r["held"] > 0 for r in res), res


def _accumulate(m: Any, dense: torch.nn.Linear, batches: list[recgo.KeyedJaggedTensor],
                scales: list[torch.Tensor], sequence: bool) -> str:
    """Two checkpointed forwards, then the first one's backward: its recomputation follows the second
    forward's admissions. Returns the error's message ("" if none)."""
    losses = [checkpoint(lambda k, s=s: _loss(m, dense, k, s, sequence), b, use_reentrant=False)
              for b, s in zip(batches, scales)]
    try:
        losses[0].backward()
        return ""
    except InvalidInputError as exc:
        return str(exc)


def _refuses(rank: int, world: int, sequence: bool) -> dict[str, Any]:
    """The second forward admits IDs only rank 0's shard owns: both ranks refuse the first forward's
    recomputation, as the unsharded collection does; nothing changed, and a plain step after it trains
    as the unsharded model's."""
    ref, ref_dense = _build(sequence, sharded=False)
    sh, dense = _build(sequence, sharded=True)
    cand = torch.arange(1, 200)
    a, b = cand[sh.owners("t", cand) == 0][:2].tolist()  # rank 0's IDs
    first = [[a], [b]]  # global bags: one per rank, each sighting once
    second = [[a, b], [a]]  # the second sighting: admitted (min_count 2) on rank 0's shard
    scales = [_scale(x, sequence, 0, 2) for x in (first, second)]
    out = {"ref": _accumulate(ref, ref_dense, [_batch(x, sequence) for x in (first, second)], scales, sequence)}
    out["sharded"] = _accumulate(sh, dense, [_batch(x[rank:rank + 1], sequence) for x in (first, second)],
                                 [s[rank:rank + 1] if not sequence else _scale(x, sequence, rank, rank + 1)
                                  for s, x in zip(scales, (first, second))], sequence)
    owner = getattr(ref, "_owner", ref)
    out["stats"], out["ref_stats"] = dynamic.stats(sh, "t"), dynamic.stats(owner, "t")
    # a plain step after the refusal: both ranks step together, as the unsharded model
    bags = _global(7)
    _loss(ref, ref_dense, _batch(bags, sequence), _scale(bags, sequence, 0, 2 * B), sequence).backward()
    _loss(sh, dense, _batch(bags[rank * B:(rank + 1) * B], sequence), _scale(bags, sequence, rank * B, (rank + 1) * B),
          sequence).backward()
    ids = torch.tensor([a, b, *range(1, 13)])
    rows, want = sh.locate("t", ids), dynamic.lookup(ref, "t", ids)
    have = rows >= 0
    shard, whole = sh.embedding_bags["t"], (ref.embeddings if sequence else ref.embedding_bags)["t"]
    close(shard.weight.detach()[rows[have]], whole.weight.detach()[want[have]], "rows after the refusal")
    out["held"] = int(have.sum())
    return out


@pytest.mark.parametrize("sequence", [False, True])
def test_recomputation_after_another_forward_admitted_is_refused_on_every_rank(tmp_path: Path, sequence: bool) -> None:
    res = spawn(_refuses, 2, tmp_path, sequence, wait=180)
    ok(res)
    said = "admitted or evicted IDs, or loaded a checkpoint, between this forward and its recomputation"
    for r, out in enumerate(res):
        assert said in out["ref"] and "['t']" in out["ref"], out["ref"]  # the unsharded collection's refusal
        assert out["stats"].step == out["ref_stats"].step == 2, out  # the refused recomputation stepped nothing
    assert said in res[0]["sharded"] and "['t']" in res[0]["sharded"], res[0]["sharded"]
    # rank 1's shard admitted nothing: it refuses with rank 0, naming it and (shortened) its reason
    assert "rank 0 refused its batch" in res[1]["sharded"], res[1]["sharded"]
    assert "refused its batch of step 3: activation checkpointing" in res[1]["sharded"], res[1]["sharded"]
    assert res[0]["stats"].rows == res[0]["ref_stats"].rows == 2 and res[1]["stats"].rows == 0
    assert res[0]["held"] > 0
