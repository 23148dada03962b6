"""RecShard-shaped synthetic models (RM1/RM2/RM3) with skew, coverage and pooling fitted to real samples.

The paper's models have ~400 tables of dim 64 whose hash sizes double from RM1 to RM3; pooling,
coverage and power-law skew vary widely per table. :func:`fit_real_samples` measures those three
facts on real samples in a directory the caller names (Criteo and Avazu columns for skew and
coverage, MovieLens and Taobao per-user histories for multi-hot pooling; the benchmarks pass the
repository's ``../shared/data``); :func:`rm_profile` draws each table's facts from them, or from
:data:`PAPER_DEFAULTS` without samples, and builds the profile analytically in Go
(``planner.Synthetic``). Nothing here resolves paths relative to the installed package.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ._profile import Profile

#: Bytes of embeddings of RM1; RM2 and RM3 double the hash sizes each (≈ 318, 636, 1272 GB).
RM1_BYTES = 318e9
RM_SCALE = {"rm1": 1, "rm2": 2, "rm3": 4}


def power_law_exponent(counts: Counter | list[int], max_rank: int = 2000) -> float | None:
    """Least-squares slope of log(count) vs log(rank) over the ranks with count ≥ 2 (None if < 5)."""
    c = sorted(counts.values() if isinstance(counts, Counter) else counts, reverse=True)
    pts = [(math.log(r + 1), math.log(v)) for r, v in enumerate(c[:max_rank]) if v >= 2]
    if len(pts) < 5:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    sxy = sum((p[0] - mx) * (p[1] - my) for p in pts)
    return -sxy / sxx if sxx > 0 else None


@dataclass
class Fitted:
    """Per-table facts measured on real samples, to draw synthetic tables from."""

    alphas: list[float] = field(default_factory=list)
    coverages: list[float] = field(default_factory=list)
    poolings: list[float] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


#: The paper-typical spread of skew, coverage and pooling, for models drawn without real samples.
PAPER_DEFAULTS = Fitted(alphas=[0.6, 0.8, 0.9, 1.0, 1.1, 1.2], coverages=[0.05, 0.2, 0.5, 0.9, 1.0],
                        poolings=[1, 1, 2, 5, 10, 20, 50], sources=["defaults (no samples)"])


def fit_real_samples(data_dir: str | Path) -> Fitted:
    """Measure skew, coverage and pooling on whatever real samples exist under ``data_dir``
    (:data:`PAPER_DEFAULTS` when there are none)."""
    data_dir = Path(data_dir)
    f = Fitted()
    criteo = data_dir / "criteo" / "criteo_dac_train_head10109.txt"
    if criteo.exists():
        cols = [Counter() for _ in range(26)]
        n = 0
        for line in criteo.open(encoding="ascii", errors="replace"):
            fields = line.rstrip("\n").split("\t")
            n += 1
            for j, v in enumerate(fields[14:40]):
                if v:
                    cols[j][v] += 1
        for c in cols:
            a = power_law_exponent(c)
            if a is not None:
                f.alphas.append(a)
            f.coverages.append(sum(c.values()) / n)
            f.poolings.append(1.0)
        f.sources.append(criteo.name)
    avazu = data_dir / "avazu" / "avazu_train_rows00001-08999.csv"
    if avazu.exists():
        with avazu.open() as fh:
            rows = list(csv.DictReader(fh))
        for col in ("site_id", "site_domain", "app_id", "device_id", "device_ip", "device_model", "C14", "C17"):
            a = power_law_exponent(Counter(r[col] for r in rows))
            if a is not None:
                f.alphas.append(a)
        f.sources.append(avazu.name)
    for path, user_col, item_col, header in (
        (data_dir / "movielens" / "ratings.csv", 0, 1, True),
        (data_dir / "taobao" / "taobao_UserBehavior_head.csv", 0, 1, False),
    ):
        if not path.exists():
            continue
        per_user: Counter = Counter()
        items: Counter = Counter()
        with path.open() as fh:
            reader = csv.reader(fh)
            if header:
                next(reader)
            for r in reader:
                per_user[r[user_col]] += 1
                items[r[item_col]] += 1
        a = power_law_exponent(items)
        if a is not None:
            f.alphas.append(a)
        # Histories truncated to the last 50 events, as recommendation pipelines do.
        f.poolings.extend(float(min(v, 50)) for v in per_user.values())
        f.sources.append(path.name)
    if not f.alphas:  # no data: the paper-typical spread
        return Fitted(list(PAPER_DEFAULTS.alphas), list(PAPER_DEFAULTS.coverages), list(PAPER_DEFAULTS.poolings),
                      [f"defaults (no samples under {data_dir})"])
    if not f.coverages:  # only Criteo's columns measure coverage: the paper's spread stands in for it
        f.coverages = list(PAPER_DEFAULTS.coverages)
        f.sources.append("default coverages (no Criteo sample)")
    return f


def _spread(values: list[float], k: int) -> list[float]:
    """k quantiles of values (a compact, deterministic stand-in for the empirical distribution)."""
    s = sorted(values)
    if not s:
        from ..errors import InvalidInputError

        raise InvalidInputError("synthetic model: no fitted values to draw from")
    return [s[min(len(s) - 1, int((i + 0.5) * len(s) / k))] for i in range(k)]


def rm_spec(name: str, fitted: Fitted, tables: int = 397, seed: int = 1, steps: int = 16,
            size_scale: float = 1.0) -> dict:
    """The Go ``planner.SyntheticSpec`` of RM1/RM2/RM3 (same tables, hash sizes × 1/2/4).

    ``size_scale`` shrinks every model (e.g. tables/397 for a smaller model with the same pressure
    on a proportionally smaller cluster).
    """
    if name not in RM_SCALE:
        from ..errors import InvalidInputError

        raise InvalidInputError(f"synthetic model {name!r}: expected one of {sorted(RM_SCALE)}")
    scale = RM_SCALE[name] * size_scale
    # Half the tables one-hot (pooling 1, as Criteo/Avazu columns), half multi-hot (user histories).
    multi = [p for p in fitted.poolings if p > 1] or [1.0]
    # A fit that measured none of a fact (e.g. only MovieLens: no coverage) draws it from the paper's spread.
    alphas = fitted.alphas or PAPER_DEFAULTS.alphas
    poolings = [1.0] * 16 + _spread(multi, 16)
    # Coverage: the measured columns plus the paper's long tail of rarely present features.
    coverages = _spread(fitted.coverages or PAPER_DEFAULTS.coverages, 16) + [0.01, 0.02, 0.05, 0.1, 0.2, 0.3]
    return {"tables": tables, "dim": 64, "elem_bytes": 4, "total_bytes": RM1_BYTES * scale,
            "min_rows": 1e3, "max_rows": 1e8, "alphas": _spread(alphas, 16), "coverages": coverages,
            "poolings": poolings, "touched_min": 0.2, "steps": steps, "seed": seed}


def rm_profile(name: str, fitted: Fitted | None = None, tables: int = 397, seed: int = 1,
               size_scale: float = 1.0) -> Profile:
    """The profile of synthetic model ``name`` ("rm1", "rm2" or "rm3"), its tables' facts drawn from
    ``fitted`` (default :data:`PAPER_DEFAULTS`; see :func:`fit_real_samples`)."""
    return Profile.synthetic(rm_spec(name, fitted or PAPER_DEFAULTS, tables, seed, size_scale=size_scale))
