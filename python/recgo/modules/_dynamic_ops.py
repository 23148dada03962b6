"""``recgo.dynamic.lookup`` as a ``torch.library`` custom op, for ``torch.export``.

The lookup calls the engine on the IDs' memory; a non-strict export runs it on fake tensors, which
have none (it failed with torch's ``GuardOnDataDependentSymNode`` inside recgo's pointer helper, so a
managed-collision collection that returns its remapped features did not export). As an op with a fake
implementation (one row per ID) the program records the call and makes it on the live collection when
it runs, which it names by engine handle as the embedding ops do (``_ops.module_for``).
"""

from __future__ import annotations

import torch

from .. import dynamic
from ._ops import module_for


@torch.library.custom_op("recgo::dynamic_rows", mutates_args=())
def dynamic_rows(key: int, table: int, ids: torch.Tensor, train: bool, params: list[torch.Tensor]) -> torch.Tensor:
    """The rows of int64 ``ids`` in dynamic table ``table`` of the pooled collection under ``key``
    (``recgo.dynamic.lookup``; ``params`` are the collection's, checked as the embedding ops check)."""
    return dynamic._resolve(module_for(key, params), table, ids, train)


@dynamic_rows.register_fake
def _(key: int, table: int, ids: torch.Tensor, train: bool, params: list[torch.Tensor]) -> torch.Tensor:
    return torch.empty_like(ids)
