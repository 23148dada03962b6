"""Gradients of pooled embeddings with respect to the batch's per-ID weights (TorchRec's position-weighted
features: ``PositionWeightedModule``, ``PositionWeightedModuleCollection`` and the older
``PositionWeightedProcessor`` learn one weight per position, which reaches the collection as the KJT's
``weights``).

The engine pools ``out[b, f] = Σ_i w_i · row(id_i)`` over bag ``b`` of feature ``f`` (divided by the
bag's length for MEAN), so ``∂loss/∂w_i = ⟨grad_out[b, f], row(id_i)⟩`` (over the length, for MEAN).
The engine runs on the detached weights; :func:`with_weight_grads` puts an identity
``autograd.Function`` after it whose backward gives that gradient, from the rows gathered at forward
time (a fused optimizer updates them inside the engine's backward, which runs after this one for
this call, but a later call's backward could run first).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import torch

from ..errors import InvalidInputError
from ..sparse import KeyedJaggedTensor
from ..tensors import refuse_weight_grads


class PooledFeature(NamedTuple):
    """One output feature of a pooled collection, as its weight gradient needs it."""

    key: str  # the batch key it reads
    table: torch.Tensor  # the table's weights, [rows, D] (the engine's memory)
    column: int  # the first of its output columns
    mean: bool  # MEAN pooling (else SUM)


def pooled_features(configs: Sequence[Any], tables: Sequence[torch.Tensor]) -> list[PooledFeature]:
    """Each output feature of a collection with ``configs`` (its ``EmbeddingBagConfig`` list) and those
    tables' weights, in output order."""
    out, column = [], 0
    for cfg, weight in zip(configs, tables):
        for key in cfg.feature_names:
            out.append(PooledFeature(key, weight, column, cfg.pooling_code() == 1))
            column += cfg.embedding_dim
    return out


class _PerIdWeightGrad(torch.autograd.Function):
    """Identity on the pooled output whose backward also gives the per-ID weights' gradient."""

    @staticmethod
    def forward(ctx: Any, out: torch.Tensor, weights: torch.Tensor, parts: Sequence[tuple[slice, torch.Tensor,
                torch.Tensor, int, torch.Tensor | None]]) -> torch.Tensor:
        ctx.parts, ctx.n = parts, weights.numel()
        ctx.dtype = weights.dtype
        return out.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        gw = torch.zeros(ctx.n, dtype=torch.float32)
        for where, bag, rows, column, count in ctx.parts:
            g = grad.index_select(0, bag).narrow(1, column, rows.shape[1])
            dot = (g * rows).sum(1)
            gw[where] += dot if count is None else dot / count
        return grad, gw.to(ctx.dtype), None


def with_weight_grads(out: torch.Tensor, kjt: KeyedJaggedTensor, weights: torch.Tensor,
                      features: Sequence[PooledFeature]) -> torch.Tensor:
    """``out`` (pooled from ``kjt`` with ``weights.detach()``) connected to ``weights`` in autograd: the
    backward gives ``weights`` the gradient of each lookup (see the module doc)."""
    b = kjt.stride()
    offs = kjt.offset_per_key()
    index = {k: i for i, k in enumerate(kjt.keys())}
    parts = []
    for f in features:
        i = index[f.key]
        lengths = kjt.lengths()[i * b:(i + 1) * b]
        bag = torch.repeat_interleave(torch.arange(b), lengths)
        ids = kjt.values()[offs[i]:offs[i + 1]]  # in range: the engine's forward checked them
        rows = f.table.detach().index_select(0, ids)  # now: a fused update may change them before backward
        count = lengths.index_select(0, bag).clamp(min=1).to(torch.float32) if f.mean else None
        parts.append((slice(offs[i], offs[i + 1]), bag, rows, f.column, count))
    return _PerIdWeightGrad.apply(out, weights, parts)


def batch_weights(kjt: KeyedJaggedTensor, is_weighted: bool, configs: Sequence[Any]) -> torch.Tensor | None:
    """The per-ID weights a collection of ``configs`` pools ``kjt`` with (None unless ``is_weighted``),
    checked: a weighted collection needs them, and a dynamic table's rows are not addressed by ID, so
    there no weight may require grad."""
    weights = kjt.weights_or_none() if is_weighted else None
    if is_weighted and weights is None:
        raise InvalidInputError("this collection is weighted (is_weighted=True) but the batch has no weights")
    if any(c.dynamic is not None for c in configs):
        refuse_weight_grads(weights)
    return weights
