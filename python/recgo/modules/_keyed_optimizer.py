"""CollectionOptimizer as a TorchRec ``KeyedOptimizer``, so ``CombinedOptimizer([it, dense])`` takes
it unnamed, as it takes DMP's ``fused_optimizer``. Imported only when ``torchrec`` already is."""

from __future__ import annotations

import torch
from torchrec.optim.keyed import KeyedOptimizer

from .optim import CollectionOptimizer


class KeyedCollectionOptimizer(CollectionOptimizer, KeyedOptimizer):
    """A :class:`CollectionOptimizer` that TorchRec's ``isinstance(..., KeyedOptimizer)`` checks accept.

    It keeps :class:`CollectionOptimizer`'s ``state_dict`` (the hyper-parameters under
    ``param_groups``, as torch's) and ``add_param_group`` (torch's while building, refused after)
    where ``KeyedOptimizer`` would replace them: it has no keyed parameters, and its state dict loads
    into a plain ``CollectionOptimizer`` and back.
    """

    add_param_group = CollectionOptimizer.add_param_group
