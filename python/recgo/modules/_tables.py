"""The per-table modules of recgo's collections: each holds one table's parameter and buffers (the
engine's memory, or meta stand-ins) under the state-dict names TorchRec uses, as the embedding module
class TorchRec's collections hold (``nn.EmbeddingBag`` pooled, ``nn.Embedding`` sequence)."""

from __future__ import annotations

import torch
from torch import nn

_MODES = ("sum", "mean")  # nn.EmbeddingBag's mode per pooling code


def _hold(table: nn.Module, weight: torch.Tensor, requires_grad: bool, state: torch.Tensor, step: torch.Tensor) -> None:
    """Give a table module its parameter and buffers (the engine's memory, or meta stand-ins) and the
    attributes torch's embedding modules have, without the weight their constructors allocate."""
    nn.Module.__init__(table)
    table.num_embeddings, table.embedding_dim = int(weight.shape[0]), int(weight.shape[1])
    table.padding_idx, table.max_norm, table.norm_type = None, None, 2.0
    table.scale_grad_by_freq, table.sparse = False, False
    table.weight = nn.Parameter(weight, requires_grad=requires_grad)
    if state.numel():
        table.register_buffer("optimizer_state", state)
    if step.numel():
        table.register_buffer("optimizer_step", step)


class _Table(nn.EmbeddingBag):
    """One pooled table's parameter and buffers (state_dict keys ``embedding_bags.<name>.weight``): an
    ``nn.EmbeddingBag``, as TorchRec's tables are, so ``model.apply`` initialisers that look for one
    reach it (they write the weight in place, which is the engine's memory). The collection pools
    through the engine, never through this module's ``forward``; a direct call ``table(ids, offsets)``
    is ``nn.EmbeddingBag``'s, with TorchRec's ``include_last_offset=True``: ``offsets`` holds B+1
    entries, the last the number of IDs, and gives B bags."""

    def __init__(self, weight: torch.Tensor, requires_grad: bool, state: torch.Tensor, step: torch.Tensor,
                 mode: str = "sum") -> None:
        _hold(self, weight, requires_grad, state, step)
        self.mode, self.include_last_offset = mode, True


class _SequenceTable(nn.Embedding):
    """One sequence table's parameter and buffers (``embeddings.<name>.weight``): an ``nn.Embedding``,
    as TorchRec's ``EmbeddingCollection`` tables are (see :class:`_Table`)."""

    def __init__(self, weight: torch.Tensor, requires_grad: bool, state: torch.Tensor, step: torch.Tensor,
                 mode: str = "sum") -> None:
        _hold(self, weight, requires_grad, state, step)
        self._freeze = False
