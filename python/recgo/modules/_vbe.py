"""TorchRec's variable-batch KeyedJaggedTensors (VBE) in recgo's embedding collections (the pooled and
sequence ones, unsharded and sharded: each rank pads its own batch).

A TorchRec batch may give each feature its own batch size (``stride_per_key_per_rank``; a feature's
samples are its ranks' samples in rank order) and, for deduplicated features, ``inverse_indices``
(``(keys, [F, B] tensor)``: row ``i`` maps each of the B output samples to a sample of feature
``keys[i]``), e.g. one user's features once per request, expanded to every candidate. TorchRec's
``EmbeddingBagCollection`` pools each feature over its own batch and expands its pooled rows with
the inverse indices into a ``[B, ΣD]`` output; its ``EmbeddingCollection`` ignores them and gives
each feature's JaggedTensor over the feature's own batch.

recgo's :class:`~recgo.KeyedJaggedTensor` has one batch size, so :func:`variable_batch` turns such a
batch into a uniform one padded with empty bags to the largest per-feature batch (empty bags add no
values and cost the engine nothing); the collection runs on it as on any batch, then
:func:`expand_pooled` index-selects each feature's pooled rows (autograd scatter-adds the gradients
back onto the padded output, whose padding rows get none, so torch and fused optimizers see exactly
the gradients of the explicitly expanded batch; a bag no inverse index points to is still looked
up, so its rows count as touched, as in FBGEMM's kernels: decay and optimizer state move them) and :func:`trim_sequence` drops the padding of the
sequence outputs. A batch without variable strides or inverse indices never comes here.

recgo's own KeyedJaggedTensor keeps refusing variable batches: the planner, pipelines, feature
transforms and ``torch.export``'s pytree take it as one batch size, so a variable one would need
each of them to handle or refuse it.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import torch

from ..errors import InvalidInputError
from ..jagged import JaggedTensor
from ..sparse import KeyedJaggedTensor, _is_torchrec_kjt


class VariableBatch(NamedTuple):
    """A TorchRec variable-batch input as a padded uniform recgo batch."""

    kjt: KeyedJaggedTensor             # every key padded with empty bags to the largest batch
    strides: dict[str, int]            # per key its own batch size
    inverse: dict[str, torch.Tensor] | None  # per key of the inverse indices its row (int64), None without
    batch: int                         # the inverse indices' columns (without: the padded batch size)


def variable_batch(features: Any, pooled: bool = True) -> VariableBatch | None:
    """The padded form of a TorchRec KJT with variable strides per key or inverse indices; None for
    any other batch (the common path, untouched). A sequence collection (``pooled=False``) neither
    reads nor checks the inverse indices, as TorchRec's ``EmbeddingCollection``."""
    if not _is_torchrec_kjt(features):
        return None
    inverse = features.inverse_indices_or_none()
    if inverse is None and not features.variable_stride_per_key():
        return None
    if inverse is not None and _numel(inverse) == 0:
        inverse = None  # TorchRec's EmbeddingBagCollection skips an empty one too
    keys = list(features.keys())
    strides = [int(s) for s in features.stride_per_key()] if keys else []
    lengths = features.lengths()
    if lengths.device.type != "cpu":
        raise InvalidInputError(f"variable batch: the lengths are on {lengths.device}; padding the features to one "
                                "batch size reads them, so pass a CPU batch")
    if lengths.dim() != 1 or lengths.numel() != sum(strides):
        raise InvalidInputError(f"variable batch: {lengths.numel()} lengths for the per-key batch sizes {strides} "
                                f"(need {sum(strides)})")
    b = max(strides, default=0)
    if any(s != b for s in strides):
        padded = torch.zeros(len(keys), b, dtype=torch.int64)
        padded[torch.arange(b) < torch.tensor(strides).unsqueeze(1)] = lengths.to(torch.int64)
        lengths = padded.view(-1)
    kjt = KeyedJaggedTensor(keys, features.values(), features.weights_or_none(), lengths=lengths, stride=b)
    per_key = dict(zip(keys, strides))
    if inverse is None or not pooled:
        return VariableBatch(kjt, per_key, None, b)
    names, table = _inverse_parts(inverse)
    return VariableBatch(kjt, per_key, dict(zip(names, table.unbind(0))), int(table.shape[1]))


def _numel(inverse: Any) -> int:
    t = inverse[1] if isinstance(inverse, (tuple, list)) and len(inverse) == 2 else None
    return t.numel() if isinstance(t, torch.Tensor) else -1


def _inverse_parts(inverse: Any) -> tuple[list[str], torch.Tensor]:
    """``(keys, [len(keys), B] int64 tensor)`` of TorchRec's ``inverse_indices``, checked."""
    if (not isinstance(inverse, (tuple, list)) or len(inverse) != 2 or isinstance(inverse[0], str)
            or not isinstance(inverse[0], Sequence) or not isinstance(inverse[1], torch.Tensor)):
        raise InvalidInputError("inverse_indices: expected (keys, tensor of shape [len(keys), batch size]), got "
                                f"{type(inverse).__name__}")
    names, table = [str(k) for k in inverse[0]], inverse[1]
    if table.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise InvalidInputError(f"inverse_indices: expected an integer tensor, got {table.dtype}")
    if table.dim() != 2 or table.shape[0] != len(names):
        raise InvalidInputError(f"inverse_indices: shape {list(table.shape)} is not [{len(names)}, batch size] "
                                f"(one row per key of {names})")
    if table.device.type != "cpu":
        raise InvalidInputError(f"inverse_indices: on {table.device}; recgo's collections read CPU batches")
    return names, table.to(torch.int64)


def pooled_index(vb: VariableBatch, feature_keys: Sequence[str]) -> tuple[list[torch.Tensor] | None, int]:
    """How the padded pooled output becomes the collection's: per output feature (``feature_keys``:
    the batch key each reads) the rows its key's inverse indices take, checked to point into the
    key's own batch, and the output's batch size. Without inverse indices (None), the features the
    collection reads must share one batch size, the output's (its first rows of the padded one).
    Checked before the lookup runs (a fused training forward must not start on a batch that fails)."""
    read = list(dict.fromkeys(feature_keys))
    absent = [k for k in read if k not in vb.strides]
    if absent:
        raise InvalidInputError(f"the batch lacks features {absent} (its keys: {list(vb.strides)})")
    if vb.inverse is None:
        sizes = {k: vb.strides[k] for k in read}
        if len(set(sizes.values())) > 1:
            raise InvalidInputError(
                f"variable batch size per feature ({sizes}) without inverse_indices: a pooled collection gives "
                "one [B, ΣD] output, so every feature needs B rows (TorchRec's EmbeddingBagCollection cannot "
                "concatenate them either); give inverse_indices mapping the B samples to each feature's rows, or "
                "use an EmbeddingCollection (per-feature outputs)")
        return None, next(iter(sizes.values()), vb.batch)
    missing = [k for k in read if k not in vb.inverse]
    if missing:
        raise InvalidInputError(f"inverse_indices: no row for the features {missing} the collection reads (its "
                                f"keys: {list(vb.inverse)})")
    for k in read:
        idx, s = vb.inverse[k], vb.strides[k]
        bad = (idx < 0) | (idx >= s)
        if bool(bad.any()):
            j = int(bad.nonzero()[0])
            raise InvalidInputError(f"inverse_indices: feature {k!r} has {s} samples but its inverse index "
                                    f"{j} is {int(idx[j])}")
    return [vb.inverse[k] for k in feature_keys], vb.batch


def expand_pooled(out: torch.Tensor, index: list[torch.Tensor] | None, dims: Sequence[int], batch: int) -> torch.Tensor:
    """The ``[batch, ΣD]`` output from the padded one, ``out``: each feature's column block, its rows
    taken by ``index`` (one split, one index_select per feature, one cat: backward is a cat of
    index_adds); without ``index``, the first ``batch`` rows."""
    if out.is_meta:
        return torch.empty(batch, out.shape[1], device="meta", dtype=out.dtype)
    if index is None:
        return out if out.shape[0] == batch else out[:batch]
    if not index:
        return out.new_empty(batch, 0)
    return torch.cat([part.index_select(0, idx) for part, idx in zip(out.split(list(dims), 1), index)], 1)


def trim_sequence(res: dict[str, JaggedTensor], vb: VariableBatch, key_of: dict[str, str]) -> dict[str, JaggedTensor]:
    """The sequence outputs over each feature's own batch: the padding's lengths dropped (its bags are
    empty, so the values stay as they are). ``key_of`` gives each output's batch key."""
    b = vb.kjt.stride()
    out = {}
    for name, jt in res.items():
        s = vb.strides[key_of[name]]
        if s == b:
            out[name] = jt
            continue
        trimmed = JaggedTensor.__new__(JaggedTensor)
        trimmed._values, trimmed._weights, trimmed._lengths, trimmed._offsets = (
            jt._values, jt._weights, jt._lengths[:s], None if jt._offsets is None else jt._offsets[:s + 1])
        out[name] = trimmed
    return out
