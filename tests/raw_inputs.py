"""A model over plain tensors for the export tests: what ``torch.export`` traces when a server sends
values and lengths rather than a batch object."""

from __future__ import annotations

import torch

import recgo
from recgo import KeyedJaggedTensor


class FromRawTensors(torch.nn.Module):
    """Builds a one-key (``"f"``) batch from ``values`` and ``lengths`` and returns the collection's
    output values: the pooled ``[B, D]`` block, or feature ``f``'s sequence values for an
    ``EmbeddingCollection``. The ``* 1`` gives a fresh tensor, not one that aliases an output buffer."""

    def __init__(self, coll: torch.nn.Module) -> None:
        super().__init__()
        self.coll = coll

    def forward(self, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        out = self.coll(KeyedJaggedTensor(["f"], values, lengths=lengths))
        return (out["f"].values() if isinstance(self.coll, recgo.EmbeddingCollection) else out.values()) * 1
