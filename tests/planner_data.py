"""The planner tests' small tables and their skewed batches (shared by test_planner*.py)."""

from __future__ import annotations

import torch

import recgo
from recgo import planner as P

TABLES = [P.TableSpec("a", 300, 8), P.TableSpec("b", 2000, 16), P.TableSpec("c", 40, 8)]


def batches(seed: int = 0, n: int = 6, batch: int = 64) -> list[recgo.KeyedJaggedTensor]:
    """n batches of 0–2 IDs per bag and table, IDs skewed towards low rows (u⁴ · rows)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        vals, lens = [], []
        for t in TABLES:
            ln = torch.randint(0, 3, (batch,), generator=g)
            vals.append((torch.rand(int(ln.sum()), generator=g) ** 4 * t.rows).long())
            lens.append(ln)
        out.append(recgo.KeyedJaggedTensor([t.name for t in TABLES], torch.cat(vals), lengths=torch.cat(lens)))
    return out
