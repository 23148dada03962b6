"""What ``recgo.from_torchrec`` puts in place of TorchRec's ``ManagedCollisionEmbeddingBagCollection``
and ``ManagedCollisionEmbeddingCollection``: a collection of dynamic-ID tables, called as TorchRec's
module is.

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
from ..sparse import KeyedJaggedTensor, _is_torchrec_kjt, as_kjt
from ._trace import traced_as_leaf


class _Managed(nn.Module):
    """A recgo collection of dynamic-ID tables (pooled or sequence), held under the subclass's ``_attr``
    name, called as TorchRec's managed-collision module: ``forward(features)`` returns
    ``(output, remapped)``, ``remapped`` being None, or with ``return_remapped_features`` each ID's row in
    its table (−1 for an ID without one) in a KeyedJaggedTensor of the input's keys and lengths.

    Args:
        collection: the recgo collection (every table a dynamic-ID table).
        input_hash: per feature, ``(input_hash_func, input_hash_size)`` applied to its IDs first (TorchRec's
            MCH ``preprocess``); features without an entry take their IDs as they come.
        return_remapped_features: as TorchRec's argument.
    """

    _attr = ""  # the collection's attribute name (TorchRec's module names it so): "ebc" or "ec"
    _configs = ""  # the collection's config accessor

    def __init__(self, collection: nn.Module, input_hash: dict[str, tuple[Callable[..., torch.Tensor], int]],
                 return_remapped_features: bool = False) -> None:
        super().__init__()
        setattr(self, self._attr, collection)
        self._input_hash = dict(input_hash)
        self._return_remapped_features = bool(return_remapped_features)
        self._tables = {f: c.name for c in self._table_configs() for f in c.feature_names}  # feature → table

    def _table_configs(self) -> list[Any]:
        return list(getattr(getattr(self, self._attr), self._configs)())

    @traced_as_leaf
    def forward(self, features: Any) -> tuple[Any, KeyedJaggedTensor | None]:
        """Look ``features`` up (recgo or TorchRec KJT); see the class doc for the pair returned (of
        TorchRec's types for a TorchRec input, as TorchRec's module returns)."""
        torchrec_in = _is_torchrec_kjt(features)
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
            if torchrec_in:  # the collection then answers in TorchRec's types
                features = features.to_torchrec()
        coll = getattr(self, self._attr)
        out = coll(features)
        if not self._return_remapped_features:
            return out, None
        kjt = as_kjt(features)
        rows = [dynamic.lookup(coll, self._tables[k], kjt[k].values()) if k in self._tables else kjt[k].values()
                for k in kjt.keys()]
        remapped = KeyedJaggedTensor(kjt.keys(), torch.cat(rows), lengths=kjt.lengths(), weights=kjt.weights_or_none())
        return out, remapped.to_torchrec() if torchrec_in else remapped


class ManagedCollisionEmbeddingBagCollection(_Managed):
    """TorchRec's ``ManagedCollisionEmbeddingBagCollection`` as dynamic-ID tables: an
    :class:`EmbeddingBagCollection` (``ebc``) returning ``(pooled, remapped)`` (see ``_Managed``)."""

    _attr, _configs = "ebc", "embedding_bag_configs"

    def embedding_bag_configs(self) -> list[Any]:
        """The tables' configs."""
        return self._table_configs()


class ManagedCollisionEmbeddingCollection(_Managed):
    """TorchRec's ``ManagedCollisionEmbeddingCollection`` as dynamic-ID tables: an
    :class:`EmbeddingCollection` (``ec``) returning ``({feature: JaggedTensor}, remapped)`` (see
    ``_Managed``)."""

    _attr, _configs = "ec", "embedding_configs"

    def embedding_configs(self) -> list[Any]:
        """The tables' configs."""
        return self._table_configs()
