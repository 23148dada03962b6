"""Activation checkpointing over dynamic-ID tables: ``torch.utils.checkpoint`` recomputes a forward in
backward, and the recomputation reads the table as it is then. When another training forward of the
collection admitted or evicted IDs in between (gradient accumulation over checkpointed forwards), or a
checkpoint was loaded into the table, the recomputation reads rows the forward did not: values it never produced (dense gradients) and, under
``use_reentrant=True``, the gradient of an ID's pending zeros sent to the row it was given since. Such
a recomputation is refused by name (it gave those wrong gradients in silence); one whose tables' rows
are as the forward left them is exact for the rows (a fused update in between moves their weights, as
under FBGEMM's fused kernels)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable

import torch

from ..errors import InvalidInputError
from ._eager import RECOMPUTE, TRAIN

_KEEP = 64  # training forwards remembered per collection (a checkpointed region's forwards, and more)
_ADMITTED = 4  # DynamicStats' admitted among the stats export's values


def _nothing() -> None:
    pass


def check(owner: Any, mode: int, values: torch.Tensor, lengths: torch.Tensor) -> Callable[[], None]:
    """Before a forward of ``owner``'s tables over the batch (``values``, ``lengths``): refuse a
    recomputation whose training forward's rows of ``owner``'s dynamic tables changed since
    (``InvalidInputError``). Returns what to call once the forward has run (a training forward's
    remembers the rows' state it left, by the batch)."""
    if mode not in (TRAIN, RECOMPUTE):
        return _nothing
    tables = [i for i, c in enumerate(owner.embedding_bag_configs()) if c.dynamic is not None]
    if not tables:
        return _nothing
    from .. import _lib

    stats, width = _lib.fn("recgo_dynamic_stats"), _lib.const("DynamicStatsLen")
    changes = _lib.fn("recgo_dynamic_changes")
    key = (values.numel(), lengths.numel(), int(values.sum()) if values.numel() else 0,
           int(lengths.sum()) if lengths.numel() else 0)
    seen: OrderedDict[tuple[int, ...], list[int]] = owner.__dict__.setdefault("_recompute_rows", OrderedDict())

    def state() -> list[int]:
        # each table's admitted count and its changes (rows freed, checkpoints loaded: unlike the
        # evicted count, which a load restores, a load moves it on)
        out = torch.empty(len(tables), width + 1, dtype=torch.int64)
        for j, i in enumerate(tables):
            _lib.call(stats, owner._handle.value, i, out[j].data_ptr(), width)
            _lib.call(changes, owner._handle.value, i, out[j].data_ptr() + 8 * width)
        return out[:, [_ADMITTED, width]].reshape(-1).tolist()

    if mode == TRAIN:
        def remember() -> None:
            seen[key] = state()
            seen.move_to_end(key)
            if len(seen) > _KEEP:
                seen.popitem(last=False)
        return remember
    before, now = seen.get(key), state()
    if before is not None and before != now:
        pairs = zip(tables, zip(before[::2], before[1::2]), zip(now[::2], now[1::2]))
        names = [owner.embedding_bag_configs()[i].name for i, a, b in pairs if a != b]
        raise InvalidInputError(
            f"activation checkpointing: dynamic table(s) {names} admitted or evicted IDs, or loaded a checkpoint, "
            "between this forward and its recomputation in backward (another training forward of the collection "
            "ran in between, or a load): the "
            "recomputation would read rows the forward did not, and the gradients would be wrong. Run each "
            "checkpointed forward's backward before the collection's next training forward, or keep the "
            "collection's forward outside the checkpointed region")
    return _nothing
