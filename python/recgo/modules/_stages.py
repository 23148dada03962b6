"""Where the embedding engine's time goes, summed over every collection of the process."""

from __future__ import annotations

import torch

from .. import _lib

STAGES = ("dedup", "pool", "group", "update")


def stage_times() -> dict[str, float]:
    """Seconds the engine has spent in each embedding stage since the library loaded (all collections):
    dedup (deduplicate and resolve IDs), pool (forward segments), group (forward kept for
    backward: contributions grouped by row), update (backward: per-row reduction and optimizer). Take differences around a
    region to see how its time splits."""
    out = torch.zeros(len(STAGES), dtype=torch.int64)
    _lib.call(_lib.fn("recgo_ebc_stage_times"), out.data_ptr(), len(STAGES))
    return {name: ns / 1e9 for name, ns in zip(STAGES, out.tolist())}
