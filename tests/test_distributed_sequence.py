"""ShardedEmbeddingCollection (sequence lookups over torch.distributed) on a world of 2 gloo ranks:
hash, table-wise, row-wise and data-parallel tables, flat and hierarchical exchange, equal the
single-process recgo.EmbeddingCollection on the same global batch (rows per lookup, gradients, weights
after several fused or torch-optimizer steps, 1e-6 relative); checkpoints; bad input. One spawned world
runs every case."""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import recgo
from recgo.modules import optim
from sharded_checks import check_update, close

WORLD, B_LOCAL, STEPS = 2, 5, 3
SHARDINGS: list[Any] = ["hash", "table_wise",
                        {"item": "row_wise", "cat": "hash", "user": "data_parallel"}]
OPTS: list[Any] = [None, optim.SGD(lr=0.3), optim.Adagrad(lr=0.2)]


def configs() -> list[recgo.EmbeddingConfig]:
    C = recgo.EmbeddingConfig
    return [C(61, 4, "item", ["hist_item", "target_item"]), C(23, 8, "cat", ["hist_cat"]), C(9, 3, "user", ["user_id"])]


def global_batch(step: int) -> recgo.KeyedJaggedTensor:
    """World × local samples: skewed IDs (many repeats within and across ranks), empty histories."""
    g = torch.Generator().manual_seed(500 + step)
    B = WORLD * B_LOCAL
    keys, vals, lens = [], [], []
    for cfg in configs():
        for f in cfg.feature_names:
            ln = torch.randint(0, 6, (B,), generator=g) if f.startswith("hist") else torch.ones(B, dtype=torch.int64)
            keys.append(f)
            vals.append((torch.rand(int(ln.sum()), generator=g) ** 3 * cfg.num_embeddings).long())
            lens.append(ln)
    return recgo.KeyedJaggedTensor(keys, torch.cat(vals), lengths=torch.cat(lens))


def rank_slice(kjt: recgo.KeyedJaggedTensor, rank: int) -> tuple[recgo.KeyedJaggedTensor, dict[str, slice]]:
    """Samples [rank·local, (rank+1)·local) of every feature, and each key's value range in the global batch."""
    feats = kjt.to_dict()
    vals, lens, ranges = [], [], {}
    for k in kjt.keys():
        v, ln = feats[k].values(), feats[k].lengths()
        offs = torch.cat([torch.zeros(1, dtype=torch.int64), ln.cumsum(0)])
        lo, hi = int(offs[rank * B_LOCAL]), int(offs[(rank + 1) * B_LOCAL])
        vals.append(v[lo:hi])
        lens.append(ln[rank * B_LOCAL:(rank + 1) * B_LOCAL])
        ranges[k] = slice(lo, hi)
    return recgo.KeyedJaggedTensor(kjt.keys(), torch.cat(vals), lengths=torch.cat(lens)), ranges


def _cases(rank: int, ckpt: str) -> dict[str, Any]:
    from recgo.distributed import ShardedEmbeddingCollection
    from recgo.errors import InvalidInputError, NotFoundError

    cfgs = configs()
    checked = 0
    for mode, nodes in (("flat", 1), ("hierarchical", 2)):
        for sharding in SHARDINGS:
            for opt in OPTS:
                what = f"{mode} {sharding} {opt}"
                ref = recgo.EmbeddingCollection(cfgs, optimizer=opt, seed=7)
                sh = ShardedEmbeddingCollection.from_ec(ref, sharding, mode=mode, nodes=nodes, timeout=60)
                ids = {c.name: sh.local_ids(c.name) for c in cfgs}
                torch_opts = None
                if opt is None:
                    torch_opts = [torch.optim.Adagrad(m.parameters(), lr=0.2) for m in (ref, sh)]
                for step in range(STEPS):
                    kjt = global_batch(step)
                    mine, ranges = rank_slice(kjt, rank)
                    want, got = ref(kjt), sh(mine)
                    assert list(got) == kjt.keys()
                    loss_ref, loss = torch.zeros(()), torch.zeros(())
                    for i, k in enumerate(kjt.keys()):
                        w = want[k].values()
                        close(got[k].values(), w[ranges[k]].detach(), f"{what} step {step} rows {k}")
                        assert torch.equal(got[k].lengths(), mine.to_dict()[k].lengths())
                        R = torch.randn(w.shape, generator=torch.Generator().manual_seed(10 * step + i))
                        loss_ref = loss_ref + (w * R).sum()
                        loss = loss + (got[k].values() * R[ranges[k]]).sum()
                    loss_ref.backward()
                    loss.backward()
                    check_update(sh.embeddings, ref.embeddings, cfgs, ids, torch_opts, f"{what} step {step}")
                    checked += 1
                    t = sh.traffic()
                    assert t["requested"] > 0 and t["pooled_vecs"] == 0  # rows, never owner partial sums
    # state_dict names, checkpoint round trip (save on 2 ranks, load into a fresh collection)
    ref = recgo.EmbeddingCollection(cfgs, optimizer=optim.Adagrad(lr=0.2), seed=3)
    sh = ShardedEmbeddingCollection.from_ec(ref, "hash", timeout=60)
    assert all(k.startswith("embeddings.") for k in sh.state_dict())
    mine, _ = rank_slice(global_batch(0), rank)
    sum(v.values().sum() for v in sh(mine).values()).backward()
    sh.save(ckpt)
    dist.barrier()
    other = ShardedEmbeddingCollection(cfgs, "hash", optimizer=optim.Adagrad(lr=0.2), seed=11, timeout=60)
    other.load(ckpt)
    for c in cfgs:
        assert torch.equal(other.embeddings[c.name].weight, sh.embeddings[c.name].weight)
        assert torch.equal(other.embeddings[c.name].optimizer_state, sh.embeddings[c.name].optimizer_state)
    with torch.no_grad():
        out = sh(mine)
        assert not out["hist_item"].values().requires_grad
    # bad input, on every rank alike (so no rank waits in an exchange)
    errors = {}
    bad = {"unknown": recgo.KeyedJaggedTensor(["nope"], torch.tensor([1]), lengths=torch.tensor([1])),
           "missing": recgo.KeyedJaggedTensor(["hist_item"], torch.tensor([1]), lengths=torch.tensor([1])),
           "range": recgo.KeyedJaggedTensor(mine.keys(), torch.cat([torch.tensor([61]), mine.values()[1:]]),
                                            lengths=mine.lengths()),
           "negative": recgo.KeyedJaggedTensor(mine.keys(), torch.cat([torch.tensor([-1]), mine.values()[1:]]),
                                               lengths=mine.lengths())}
    for name, kjt in bad.items():
        try:
            sh(kjt)
        except (InvalidInputError, NotFoundError) as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"
    for kw in ({"owner_pooling": "pooled"}, {"wire_dtype": "fp16"}):
        try:
            ShardedEmbeddingCollection(cfgs, "hash", **kw)
        except InvalidInputError as exc:
            errors[next(iter(kw))] = str(exc)
    sh.check_peers(30)  # every rank is still in step after the refused batches
    return {"checked": checked, "errors": errors}


def _entry(rank: int, store: str, out: str, ckpt: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    try:
        res = _cases(rank, ckpt)
    except BaseException as exc:  # report to the parent instead of tearing the world down
        res = {"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"}
    torch.save(res, os.path.join(out, f"{rank}.pt"))
    dist.destroy_process_group()


def test_sharded_sequence_equals_one_process(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    mp.start_processes(_entry, args=(str(tmp_path / "store"), str(out), str(tmp_path / "ck")), nprocs=WORLD,
                       start_method="spawn", join=True)
    for r in range(WORLD):
        res = torch.load(out / f"{r}.pt", weights_only=False)
        assert "error" not in res, f"rank {r}: {res['error']}"
        assert res["checked"] == 2 * len(SHARDINGS) * len(OPTS) * STEPS
        errs = res["errors"]
        assert "NotFoundError" in errs["unknown"] and "nope" in errs["unknown"]
        assert "InvalidInputError" in errs["missing"] and "lacks features" in errs["missing"]
        assert "InvalidInputError" in errs["range"] and "61" in errs["range"]
        assert "InvalidInputError" in errs["negative"] and "-1" in errs["negative"]
        assert "pooled lookups only" in errs["owner_pooling"] and "pooled lookups only" in errs["wire_dtype"]
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["shard-0-of-2.pt", "shard-1-of-2.pt"]


def test_needs_an_initialised_process_group() -> None:
    from recgo.distributed import ShardedEmbeddingCollection
    from recgo.errors import InvalidInputError

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    with pytest.raises(InvalidInputError, match="init_process_group"):
        ShardedEmbeddingCollection(configs(), "hash", optimizer=optim.SGD(lr=0.1))
