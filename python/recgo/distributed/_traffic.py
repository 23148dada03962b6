"""A sharded collection's traffic counters: each step's, read from the engine, and their sums."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .. import _lib
from ..tensors import ptr

if TYPE_CHECKING:
    from ._step import _Step

#: The engine's per-table counters, in the order ``recgo_shard_counters`` writes them.
COUNTERS = ("ids_intra", "ids_inter", "vecs_intra", "vecs_inter", "grads_intra", "grads_inter",
            "requested", "lookups", "replica_rows", "pooled_vecs", "pooled_grads")


def record(step: "_Step", tables: list[str], total: dict[str, Any]) -> dict[str, Any]:
    """The step's counters per table and bytes per group (``{"tables": ..., "bytes": ...}``), also
    added into ``total`` (the same layout, summed since construction)."""
    n = len(tables)
    raw = torch.empty(len(COUNTERS) * n, dtype=torch.int64)
    _lib.call(_lib.fn("recgo_shard_counters"), step.handle.value, ptr(raw), raw.numel())
    rows = raw.view(len(COUNTERS), n).tolist()  # one conversion, not one tensor index per counter
    per_table = {name: {k: rows[i][t] for i, k in enumerate(COUNTERS)} for t, name in enumerate(tables)}
    last = {"tables": per_table, "bytes": dict(step.traffic)}
    for name, cs in per_table.items():
        acc = total.setdefault("tables", {}).setdefault(name, dict.fromkeys(COUNTERS, 0))
        for k, v in cs.items():
            acc[k] += v
    for g, b in last["bytes"].items():
        total.setdefault("bytes", {}).setdefault(g, 0)
        total["bytes"][g] += b
    return last


def summed(src: dict[str, Any]) -> dict[str, int]:
    """The counters of ``src`` (:func:`record`'s layout) summed over tables, plus ``bytes`` over groups."""
    out = dict.fromkeys(COUNTERS, 0)
    for cs in src.get("tables", {}).values():
        for k, v in cs.items():
            out[k] += v
    out["bytes"] = sum(src.get("bytes", {}).values())
    return out
