"""What ``recgo.from_torchrec`` puts in place of TorchRec's ``ManagedCollisionEmbeddingBagCollection``:
a collection of dynamic-ID tables, called as TorchRec's module is.

TorchRec maps IDs outside a table's range with a managed-collision (MCH) module in front of a fixed
table. A recgo dynamic-ID table maps any int64 ID to a row itself, with the same bound and eviction
policy, so the MCH module has no counterpart: the collection takes the IDs as they come (after the MCH
module's ``input_hash_func``, when it had one).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from .. import dynamic
from ..sparse import KeyedJaggedTensor, as_kjt
from .embedding import EmbeddingBagCollection


class ManagedCollisionEmbeddingBagCollection(nn.Module):
    """An :class:`EmbeddingBagCollection` of dynamic-ID tables called as TorchRec's
    ``ManagedCollisionEmbeddingBagCollection``: ``forward(features)`` returns ``(pooled, remapped)``,
    ``remapped`` being None, or with ``return_remapped_features`` each ID's row in its table (−1 for an
    ID without one) in a KeyedJaggedTensor of the input's keys and lengths.

    Args:
        ebc: the collection (``ebc`` attribute); every table a dynamic-ID table.
        input_hash: per feature, ``(input_hash_func, input_hash_size)`` applied to its IDs first (TorchRec's
            MCH ``preprocess``); features without an entry take their IDs as they come.
        return_remapped_features: as TorchRec's argument.
    """

    def __init__(self, ebc: EmbeddingBagCollection, input_hash: dict[str, tuple[Callable[..., torch.Tensor], int]],
                 return_remapped_features: bool = False) -> None:
        super().__init__()
        self.ebc = ebc
        self._input_hash = dict(input_hash)
        self._return_remapped_features = bool(return_remapped_features)

    def embedding_bag_configs(self) -> list[Any]:
        """The tables' configs."""
        return self.ebc.embedding_bag_configs()

    def forward(self, features: Any) -> tuple[Any, KeyedJaggedTensor | None]:
        """Pool ``features`` (recgo or TorchRec KJT); see the class doc for the pair returned."""
        if self._input_hash:
            kjt = as_kjt(features)
            parts = []
            for k in kjt.keys():
                v = kjt[k].values()
                if k in self._input_hash:
                    func, size = self._input_hash[k]
                    v = func(v, size)
                parts.append(v)
            features = KeyedJaggedTensor(kjt.keys(), torch.cat(parts), lengths=kjt.lengths(),
                                         weights=kjt.weights_or_none())
        pooled = self.ebc(features)
        if not self._return_remapped_features:
            return pooled, None
        kjt = as_kjt(features)
        table = {f: c.name for c in self.ebc.embedding_bag_configs() for f in c.feature_names}
        rows = [dynamic.lookup(self.ebc, table[k], kjt[k].values()) if k in table else kjt[k].values()
                for k in kjt.keys()]
        return pooled, KeyedJaggedTensor(kjt.keys(), torch.cat(rows), lengths=kjt.lengths())
