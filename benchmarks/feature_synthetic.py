"""Synthetic feature configs and batches shaped like a production ranking model's inputs.

Used by the fusion report (Table-2 style), ``tests/test_feature.py`` and ``benchmarks/features.py``;
it lives beside the benchmarks, outside the installed package. A config of
``n`` fields mixes, in fixed proportions, single-valued categorical IDs (hash, mod), behaviour
sequences with long-tailed lengths (truncate, hash, mod; some filter first), multi-hot bags (filter,
fill_missing, hash, mod), dense floats (bucketize, hash, mod) and crosses of two categorical fields
(cross, mod): chains of two to five transforms, as in RecIS §3.1.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from recgo.feature import Feature


def synthetic_features(n: int, seed: int = 0) -> list[Feature]:
    """``n`` features (raw inputs named ``c*``, ``s*``, ``m*``, ``d*``; crosses ``x*``)."""
    rng = random.Random(seed)
    feats: list[Feature] = []
    cats: list[str] = []
    kinds = ["cat"] * 55 + ["seq"] * 15 + ["multi"] * 10 + ["dense"] * 12 + ["cross"] * 8
    for i in range(n):
        kind = kinds[(i * 37) % len(kinds)] if i >= 2 else "cat"
        if kind == "cross" and len(cats) < 2:
            kind = "cat"
        buckets = rng.choice([10**3, 10**4, 10**5, 10**6])
        if kind == "cat":
            f = Feature(f"c{i}").hash(seed=i).mod(buckets)
            cats.append(f.name)
        elif kind == "seq":
            f = Feature(f"s{i}")
            if rng.random() < 0.3:
                f.filter([0])
            f.truncate(rng.choice([20, 50, 100]), keep="last").hash().mod(buckets)
        elif kind == "multi":
            f = Feature(f"m{i}").filter(range=(0, 1 << 40), mode="keep").fill_missing(0).hash(seed=1).mod(buckets)
        elif kind == "dense":
            bounds = sorted(rng.sample(range(-50, 1000), 15))
            f = Feature(f"d{i}", dtype="float").bucketize(bounds).hash(seed=2).mod(1000)
        else:
            a, b = rng.sample(cats, 2)
            f = Feature(f"x{i}").cross(a, b, seed=3).mod(buckets)
        feats.append(f)
    return feats


def synthetic_batch(features: list[Feature], batch_size: int, seed: int = 0,
                    mean_seq: float = 8.0) -> tuple[dict[str, Any], list[str]]:
    """A raw batch for ``features``: ``{input: tensor or (values, lengths)}``, plus the names of the
    int64 inputs (which a KeyedJaggedTensor can carry). Sequence lengths are log-normal (long tail,
    capped at 500); multi-hot bags hold 0–5 IDs; IDs are Zipf-like."""
    g = torch.Generator().manual_seed(seed)
    batch: dict[str, Any] = {}
    ints: list[str] = []
    mu = float(torch.log(torch.tensor(mean_seq))) - 0.72  # sigma 1.2: E = exp(mu + sigma^2/2)
    for f in features:
        if f.ops and f.ops[0]["op"] == "cross":
            continue
        name = f.input or f.name
        if f.dtype == "float":
            batch[name] = torch.randn(batch_size, generator=g, dtype=torch.float32) * 300 + 200
            continue
        if name.startswith("s"):
            lens = torch.exp(torch.randn(batch_size, generator=g) * 1.2 + mu).floor().clamp(max=500).to(torch.int64)
        elif name.startswith("m"):
            lens = torch.randint(0, 6, (batch_size,), generator=g)
        else:
            lens = torch.ones(batch_size, dtype=torch.int64)
        n = int(lens.sum())
        vals = (torch.rand(n, generator=g) ** -1.2).to(torch.int64)  # Pareto-like ID popularity
        batch[name] = (vals, lens)
        ints.append(name)
    return batch, ints
