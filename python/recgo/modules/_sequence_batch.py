"""How a KeyedJaggedTensor's keys and lengths become a sequence collection's outputs, shared by
:class:`recgo.EmbeddingCollection` and :class:`recgo.distributed.ShardedEmbeddingCollection`: the
per-key value counts (checked before outputs are sized by them), the key plan, and the
``{feature: JaggedTensor}`` results (engine outputs, meta shapes, ``need_indices``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from ..errors import InvalidInputError
from ..jagged import JaggedTensor
from ..sparse import KeyedJaggedTensor, _is_torchrec_kjt, as_kjt


def key_counts(lengths: torch.Tensor, keys: int, values: int | None) -> list[int]:
    """How many values each of a KJT's ``keys`` keys has (its lengths summed per key), checked before
    outputs are sized by them: no length is negative and, with ``values``, they add up to it.

    Raises:
        InvalidInputError: a negative length, or lengths that do not add up to ``values``.
    """
    if not keys:
        return []
    if lengths.numel() % keys:
        raise InvalidInputError(f"batch: {lengths.numel()} lengths for {keys} keys (not the same number per key)")
    if lengths.numel() and int(lengths.min()) < 0:
        at = int(lengths.argmin())
        raise InvalidInputError(f"batch: lengths[{at}] is {int(lengths[at])}, a negative length")
    if values is not None and lengths.numel() and int(lengths.max()) > values:  # (before sums that could wrap)
        at = int(lengths.argmax())
        raise InvalidInputError(f"batch: lengths[{at}] is {int(lengths[at])}, more than the batch's {values} values")
    counts = lengths.view(keys, -1).sum(1).tolist()
    if min(counts) < 0:  # a key's lengths wrapped int64
        raise InvalidInputError(f"batch: key {counts.index(min(counts))}'s lengths add up past 2^63 - 1")
    if values is not None and sum(counts) != values:
        raise InvalidInputError(f"batch: the lengths add up to {sum(counts)}, the batch has {values} values")
    return counts


def unused_tables(key_feature: Any, missing: Any, feature_tables: Any, tables: Any) -> list[bool] | None:
    """Per table of ``tables`` (table indices), whether the loss used none of its outputs: ``missing``
    marks the outputs (one per batch key, ``key_feature`` its feature index, −1 for a key no table
    reads) whose gradient autograd left out, and ``feature_tables`` gives each feature's table. None
    when every table has a used output."""
    if not any(missing):
        return None
    used = {feature_tables[f] for f, m in zip(key_feature, missing) if f >= 0 and not m}
    skip = [t not in used for t in tables]
    return skip if any(skip) else None


def either(a: list[bool] | None, b: list[bool] | None) -> list[bool] | None:
    """Per table, whether ``a`` or ``b`` marks it (None: neither marks any): the tables a backward
    leaves out, frozen ones and those the loss did not use."""
    if a is None or b is None:
        return a if b is None else b
    return [x or y for x, y in zip(a, b)]


class KeyPlan(NamedTuple):
    """How a KJT's keys reach the engine (``EmbeddingCollection._keys``)."""

    key_feature: torch.Tensor   # per used key (KJT order) its feature index
    dims: list[int]             # per used key its embedding dim
    select: list[int] | None    # the KJT positions of the used keys, None when every key is used
    keys: list[str]             # the used keys, KJT order (the engine's output order)
    order: list[int]            # positions in ``keys`` of the collection's features, config order


def jagged(values: torch.Tensor, lengths: torch.Tensor) -> JaggedTensor:
    """A JaggedTensor whose lengths are known to match (the engine produced the values): skips the
    checks that read tensor values, so the result stays traceable under ``torch.compile``."""
    jt = JaggedTensor.__new__(JaggedTensor)
    jt._values, jt._weights, jt._lengths, jt._offsets = values, None, lengths, None
    return jt


def results(outs: list[torch.Tensor], lengths: torch.Tensor, plan: KeyPlan) -> dict[str, JaggedTensor]:
    """``{feature: JaggedTensor}`` in config order from the engine's per-key outputs (KJT order) and
    the batch's lengths."""
    keys = plan.keys
    if len(keys) == 1:  # its lengths are the batch's (one slicing op fewer)
        return {keys[0]: jagged(outs[0], lengths)}
    B = lengths.shape[0] // max(1, len(keys))
    return {keys[i]: jagged(outs[i], lengths[i * B:(i + 1) * B]) for i in plan.order}


def meta_results(kjt: KeyedJaggedTensor, plan: KeyPlan) -> dict[str, JaggedTensor]:
    """The output's shapes on the meta device (no lookups): per feature ``[n, D]`` meta values with
    the batch's lengths."""
    lengths = kjt.lengths()
    if lengths.device.type != "cpu":
        raise InvalidInputError(
            f"forward on the meta device: the batch's lengths are on {lengths.device}; the output sizes "
            "come from their values, so pass a CPU batch (or materialise the collection with to_empty)")
    counts = key_counts(lengths, len(plan.keys), kjt.values().numel())
    return results([torch.empty(n, d, device="meta", dtype=torch.float32) for n, d in zip(counts, plan.dims)], lengths, plan)


def with_indices(res: dict[str, JaggedTensor], features: Any, key_of: dict[str, str]) -> dict[str, JaggedTensor]:
    """``need_indices``: each output's weights are its feature's IDs as the batch gave them (TorchRec's
    ``EmbeddingCollection(need_indices=True)``); ``key_of`` gives each output's batch key."""
    ids = as_kjt(features).to_dict(compute_offsets=False)
    out = {}
    for k, jt in res.items():
        with_ids = JaggedTensor.__new__(JaggedTensor)
        with_ids._values, with_ids._weights, with_ids._lengths, with_ids._offsets = (
            jt._values, ids[key_of[k]].values(), jt._lengths, jt._offsets)
        out[k] = with_ids
    return out


def torchrec_dtypes(features: Any) -> tuple[torch.dtype, torch.dtype] | None:
    """A TorchRec batch's (lengths, values) dtypes, which its outputs keep (:func:`as_torchrec`); None for
    recgo's batch."""
    if not _is_torchrec_kjt(features):
        return None
    lengths = features.lengths_or_none()
    return (features.offsets() if lengths is None else lengths).dtype, features.values().dtype


def as_torchrec(res: dict[str, JaggedTensor], dtypes: tuple[torch.dtype, torch.dtype]) -> dict[str, Any]:
    """TorchRec JaggedTensors of ``res`` with the batch's dtypes (:func:`torchrec_dtypes`): lengths as the
    batch's, ``need_indices``' IDs as its values, as TorchRec's ``EmbeddingCollection`` returns them (an
    int32 batch gave int64 ones)."""
    lengths_dtype, ids_dtype = dtypes
    out = {}
    for k, jt in res.items():
        cast = JaggedTensor.__new__(JaggedTensor)
        cast._values, cast._weights, cast._lengths, cast._offsets = (
            jt._values, None if jt._weights is None else jt._weights.to(ids_dtype), jt.lengths().to(lengths_dtype),
            jt.offsets().to(lengths_dtype))
        out[k] = cast.to_torchrec()
    return out
