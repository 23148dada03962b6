"""Per-ID weights that require grad in a sharded pooled collection (TorchRec's position-weighted
features: ``FeatureProcessedEmbeddingBagCollection`` with ``PositionWeightedModule`` or
``PositionWeightedModuleCollection``).

``∂loss/∂w_i = ⟨grad_out[b, f], row(id_i)⟩`` (over the bag's length for MEAN) needs each looked-up
row where the output's gradient is, at the requester. So a step whose weights require grad runs as
the sequence collection's does (``_rows``): every owner returns the rows the rank asked for (one per
distinct ID, never owner-pooled partial sums) and the rank pools them with its weights in torch ops.
Autograd then gives the weights their gradient and each lookup its row gradient ``w_i · grad_out[b,
f]``, which the engine merges per distinct row and sends to the owners as for any sequence step. A
batch whose weights do not require grad (or a forward under ``no_grad``) takes the pooled path
unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..errors import InvalidInputError
from ..modules._sequence_batch import key_counts
from ..tensors import check_tensor, refuse_weight_grads
from ._rows import RowsStep, begin_rows, key_rows

if TYPE_CHECKING:
    from ._collection import ShardedEmbeddingBagCollection


def trains_weights(weights: torch.Tensor | None) -> bool:
    """Whether autograd wants the gradient of the batch's per-ID ``weights`` in this forward."""
    return weights is not None and weights.requires_grad and torch.is_grad_enabled()


def begin(module: "ShardedEmbeddingBagCollection", key_feature: torch.Tensor, values: torch.Tensor,
          lengths: torch.Tensor, weights: torch.Tensor) -> tuple[RowsStep, torch.Tensor, torch.Tensor]:
    """Check the engine batch (one float32 weight per value; no dynamic-ID table, whose rows are not
    addressed by ID, as in the unsharded collection) and begin its rows step: the step and the checked
    values and lengths. The caller drives the step and then pools with :func:`pool`."""
    if any(c.dynamic is not None for c in module._configs):
        refuse_weight_grads(weights)
    values, lengths = (check_tensor(t, n, (torch.int64, torch.int32), ndim=1, convert_to=torch.int64)
                       for t, n in ((values, "values"), (lengths, "lengths")))
    check_tensor(weights, "weights", (torch.float32,), ndim=1)
    if weights.numel() != values.numel():
        raise InvalidInputError(f"weights: {weights.numel()} weights for {values.numel()} values (one per value)")
    return begin_rows(module, key_feature, values, lengths), values, lengths


def pool(module: "ShardedEmbeddingBagCollection", step: RowsStep, key_feature: torch.Tensor, values: torch.Tensor,
         lengths: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The ``[B, width]`` pooled output of a driven rows step: each bag's rows times their weights,
    summed (then over the bag's length, for MEAN), columns in feature order."""
    feats = key_feature.tolist()
    K = len(feats)
    B = lengths.numel() // max(1, K)
    counts = key_counts(lengths, K, values.numel())
    dims = [module._dims[f] if f >= 0 else 0 for f in feats]  # 0: a key no table reads has no rows
    parts = key_rows(module, step, feats, [n * d for n, d in zip(counts, dims)])
    per_key = weights.split(counts)
    cols: list[torch.Tensor] = [torch.zeros(B, d) for d in module._dims]
    for i, f in enumerate(feats):
        if f < 0:
            continue
        ln = lengths[i * B:(i + 1) * B]
        bag = torch.repeat_interleave(torch.arange(B), ln)
        rows = parts[i].view(counts[i], dims[i])
        pooled = torch.zeros(B, dims[i]).index_add(0, bag, rows * per_key[i].unsqueeze(1))
        if module._configs[module._feature_tables[f]].pooling_code() == 1:  # MEAN: the bag's length
            pooled = pooled / ln.clamp(min=1).to(torch.float32).unsqueeze(1)
        cols[f] = pooled
    return torch.cat(cols, 1) if cols else torch.zeros(B, 0)
