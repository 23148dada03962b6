"""A feature several tables read, sharded (test_distributed_sequence.py runs it in its spawned world):
the pooled and the sequence sharded collections against the single-process ones, whose outputs key
such a feature ``feature@table`` (TorchRec's embedding names)."""

from __future__ import annotations

from typing import Any

import torch

import recgo
from recgo.modules import optim
from sharded_batches import local_slice
from sharded_checks import check_update, close, sequence_losses

B_LOCAL, STEPS = 3, 3


def _tables(cls: Any) -> list[Any]:
    # "h" is read by three tables (hash, table-wise, row-wise), "t" by two
    return [cls(61, 4, "th", ["h", "g"]), cls(64, 8, "tt", ["t", "h"]), cls(70, 3, "tr", ["h", "t"])]


def _batch(step: int, world: int, weighted: bool) -> recgo.KeyedJaggedTensor:
    g = torch.Generator().manual_seed(70 + step)
    B = world * B_LOCAL
    keys, vals, lens = ["g", "h", "t", "unread"], [], []
    for _ in keys:
        ln = torch.randint(0, 4, (B,), generator=g)
        vals.append((torch.rand(int(ln.sum()), generator=g) ** 3 * 61).long())
        lens.append(ln)
    values = torch.cat(vals)
    weights = 0.5 + torch.rand(values.numel(), generator=g) if weighted else None
    return recgo.KeyedJaggedTensor(keys, values, lengths=torch.cat(lens), weights=weights)


def _slice(kjt: recgo.KeyedJaggedTensor, rank: int) -> tuple[recgo.KeyedJaggedTensor, dict[str, slice]]:
    return local_slice(kjt, rank, B_LOCAL)


def shared_feature_case(rank: int, world: int) -> dict[str, Any]:
    """Train STEPS steps of each collection beside the single-process one; returns the output keys and
    how many steps were checked (each check raises on a difference)."""
    from recgo.distributed import ShardedEmbeddingBagCollection, ShardedEmbeddingCollection

    sharding = {"th": "hash", "tt": "table_wise", "tr": "row_wise"}
    out: dict[str, Any] = {"checked": 0}
    for weighted in (False, True):
        cfgs = _tables(recgo.EmbeddingBagConfig)
        opt = optim.Adagrad(lr=0.2)
        ref = recgo.EmbeddingBagCollection(cfgs, optimizer=opt, seed=5, is_weighted=weighted)
        sh = ShardedEmbeddingBagCollection(cfgs, sharding, optimizer=opt, seed=5, timeout=60, is_weighted=weighted)
        ids = {c.name: sh.local_ids(c.name) for c in cfgs}
        # fused shards are marked as DMP marks them, so torchrec's in_backward_optimizer_filter leaves them out
        out["marked"] = all(hasattr(p, "_in_backward_optimizers") for p in sh.parameters())
        for step in range(STEPS):
            kjt = _batch(step, world, weighted)
            want, got = ref(kjt), sh(_slice(kjt, rank)[0])
            out["pooled_keys"] = got.keys()
            assert got.keys() == want.keys() and sh.feature_names() == want.keys(), (got.keys(), want.keys())
            what = f"pooled weighted={weighted} step {step}"
            w = want.values()
            close(got.values(), w[rank * B_LOCAL:(rank + 1) * B_LOCAL].detach(), what)
            R = torch.randn(w.shape, generator=torch.Generator().manual_seed(step))
            (w * R).sum().backward()
            (got.values() * R[rank * B_LOCAL:(rank + 1) * B_LOCAL]).sum().backward()
            check_update(sh.embedding_bags, ref.embedding_bags, cfgs, ids, None, what)
            out["checked"] += 1
    cfgs = _tables(recgo.EmbeddingConfig)
    ref_s = recgo.EmbeddingCollection(cfgs, optimizer=optim.SGD(lr=0.3), seed=6)
    sh_s = ShardedEmbeddingCollection.from_ec(ref_s, sharding, timeout=60)
    ids = {c.name: sh_s.local_ids(c.name) for c in cfgs}
    for step in range(STEPS):
        kjt = _batch(step, world, False)
        mine, ranges = _slice(kjt, rank)
        want_s, got_s = ref_s(kjt), sh_s(mine)
        out["sequence_keys"] = list(got_s)
        assert list(got_s) == list(want_s), (list(got_s), list(want_s))
        loss_ref, loss = sequence_losses(want_s, got_s, mine, ranges, step, "sequence")
        loss_ref.backward()
        loss.backward()
        check_update(sh_s.embeddings, ref_s.embeddings, cfgs, ids, None, f"sequence step {step}")
        out["checked"] += 1
    # traced with torch.fx inside a model that iterates its output (a leaf whose output is a dict)
    model = torch.nn.ModuleDict({"ec": sh_s})
    graph = torch.fx.symbolic_trace(_Summed(sh_s))
    mine = _slice(_batch(9, world, False), rank)[0]
    with torch.no_grad():
        want_sum = sum(jt.values().sum() for jt in model["ec"](mine).values())
        out["traced_equal"] = bool(torch.equal(graph(mine), want_sum))
    return out


class _Summed(torch.nn.Module):
    """Sums every output of a sequence collection, iterating its dict."""

    def __init__(self, ec: torch.nn.Module) -> None:
        super().__init__()
        self.ec = ec

    def forward(self, kjt: Any) -> torch.Tensor:
        return sum(jt.values().sum() for jt in self.ec(kjt).values())


def shared_feature_pipeline_case(rank: int, world: int) -> dict[str, Any]:
    """TrainPipeline over a sharded collection with a feature two tables list, against the same steps
    on the unsharded collection fed the whole batch (the pipeline refused both: "feature is in two
    tables"); and DataPipeline(shard=) of such a collection names why it cannot partition."""
    from recgo.data import SyntheticField, SyntheticSource
    from recgo.distributed import ShardedEmbeddingBagCollection
    from recgo.feature import Feature

    source = SyntheticSource(64 * world, [SyntheticField("u", 300, 1.1), SyntheticField("i", 500, 1.0, 0.9)],
                             dense=2, seed=11)
    features = [Feature("u").hash().mod(200), Feature("i").fill_missing(0).mod(300)]
    C = recgo.EmbeddingBagConfig
    cfgs = [C(name="t_ui", embedding_dim=4, num_embeddings=300, feature_names=["u", "i"]),
            C(name="t_u2", embedding_dim=4, num_embeddings=300, feature_names=["u"])]
    sh = ShardedEmbeddingBagCollection(cfgs, "hash", optimizer=optim.SGD(lr=0.1), seed=3, timeout=60)
    ref = recgo.EmbeddingBagCollection(cfgs, optimizer=optim.SGD(lr=0.1), seed=3)
    out: dict[str, Any] = {}
    try:
        recgo.DataPipeline(source, features, 16, shard=sh)
    except recgo.InvalidInputError as exc:
        out["shard_error"] = str(exc)
    pooled = []
    tp = recgo.TrainPipeline(torch.nn.ModuleDict({"ebc": sh}), None, source, features, 16,
                             forward=lambda m, b: m["ebc"](b.sparse).values().sum(1),
                             loss_fn=lambda o, y: o.pow(2).sum())
    whole = recgo.DataPipeline(source, features, 16 * world, rank=0, world_size=1)
    for batch in whole:  # the same rows, all ranks' samples in one batch
        loss = tp.progress()
        pooled.append(float(loss))
        ref(batch.sparse).values().sum(1).pow(2).sum().backward()
    ids = {c.name: sh.local_ids(c.name) for c in cfgs}
    for c in cfgs:
        close(sh.embedding_bags[c.name].weight.detach(), ref.embedding_bags[c.name].weight.detach()[ids[c.name]],
              f"pipeline weights {c.name}")
    out["steps"] = len(pooled)
    return out
