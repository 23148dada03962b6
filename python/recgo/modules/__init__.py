"""recgo's torch modules (TorchRec's ``torchrec.modules`` layer): embedding collections (pooled and
sequence) and their
fused optimizers."""

from __future__ import annotations

from . import optim
from ._checkpoint import load_checkpoint, load_state, save_checkpoint, save_state
from .convert import from_torchrec, to_torchrec
from ._stages import stage_times
from .embedding import EmbeddingBagCollection, EmbeddingBagConfig
from .sequence import EmbeddingCollection, EmbeddingConfig
from . import _dynamic_ops  # noqa: F401  # registers recgo::dynamic_rows: a saved program naming it loads
from .optim import SGD, Adagrad, Adam, AdamW, FusedOptimizer, RowWiseAdagrad

__all__ = [
    "Adagrad",
    "Adam",
    "AdamW",
    "EmbeddingBagCollection",
    "EmbeddingBagConfig",
    "EmbeddingCollection",
    "EmbeddingConfig",
    "FusedOptimizer",
    "from_torchrec",
    "RowWiseAdagrad",
    "SGD",
    "load_checkpoint",
    "load_state",
    "optim",
    "save_checkpoint",
    "save_state",
    "stage_times",
    "to_torchrec",
]
