"""The sharded-collection tests' tables and batches (test_distributed.py, test_shard_model.py): five
small tables, one per sharding type (the hash table serves two features), and duplicate-heavy global
batches with the slice of them each rank trains on."""

from __future__ import annotations

from typing import Any

import torch

import recgo

B_LOCAL = 4  # samples per rank
SHARDING = {"th": "hash", "tt": "table_wise", "tr": "row_wise", "td": "data_parallel", "tp": "plan"}


def configs() -> list[recgo.EmbeddingBagConfig]:
    C = recgo.EmbeddingBagConfig
    return [C(61, 4, "th", ["h1", "h2"]), C(40, 8, "tt", ["t1"], pooling="mean"), C(45, 3, "tr", ["r1"]),
            C(12, 5, "td", ["d1"]), C(30, 4, "tp", ["p1"], pooling="mean")]


def global_batch(step: int, world: int, local: int = B_LOCAL, weighted: bool = False,
                 max_len: int = 5, cfgs: list[Any] | None = None) -> recgo.KeyedJaggedTensor:
    """A duplicate-heavy global batch of world × local samples over the features of ``cfgs`` (default
    :func:`configs`; skewed IDs, empty bags included; weighted: per-ID weights in [0.25, 1.75))."""
    g = torch.Generator().manual_seed(1000 + step)
    keys, vals, lens = [], [], []
    B = world * local
    for cfg in cfgs or configs():
        for f in cfg.feature_names:
            ln = torch.randint(0, max_len, (B,), generator=g)
            ids = (torch.rand(int(ln.sum()), generator=g) ** 3 * cfg.num_embeddings).long()
            keys.append(f)
            vals.append(ids)
            lens.append(ln)
    values = torch.cat(vals)
    weights = 0.25 + 1.5 * torch.rand(values.numel(), generator=g) if weighted else None
    return recgo.KeyedJaggedTensor(keys, values, lengths=torch.cat(lens), weights=weights)


def local_slice(kjt: recgo.KeyedJaggedTensor, rank: int,
                local: int = B_LOCAL) -> tuple[recgo.KeyedJaggedTensor, dict[str, slice]]:
    """Samples [rank·local, (rank+1)·local) of every feature (weights too, when it has them), and each
    key's value range in the global batch."""
    feats = kjt.to_dict()
    vals, lens, wts, ranges = [], [], [], {}
    for k in kjt.keys():
        v, ln = feats[k].values(), feats[k].lengths()
        offs = torch.cat([torch.zeros(1, dtype=torch.int64), ln.cumsum(0)])
        lo, hi = int(offs[rank * local]), int(offs[(rank + 1) * local])
        vals.append(v[lo:hi])
        lens.append(ln[rank * local:(rank + 1) * local])
        if kjt.weights_or_none() is not None:
            wts.append(feats[k].weights()[lo:hi])
        ranges[k] = slice(lo, hi)
    return recgo.KeyedJaggedTensor(kjt.keys(), torch.cat(vals), lengths=torch.cat(lens),
                                   weights=torch.cat(wts) if wts else None), ranges


def local_batch(kjt: recgo.KeyedJaggedTensor, rank: int, local: int = B_LOCAL) -> recgo.KeyedJaggedTensor:
    """Samples [rank·local, (rank+1)·local) of every feature (weights too, when it has them)."""
    return local_slice(kjt, rank, local)[0]
