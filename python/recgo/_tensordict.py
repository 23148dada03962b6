"""TensorDict batches (``tensordict``), which TorchRec's collections also take: one nested jagged
tensor (``torch.nested``, ``layout=torch.jagged``) of IDs per feature, converted as TorchRec's
``maybe_td_to_kjt`` converts them (keys in the TensorDict's order, no weights)."""

from __future__ import annotations

import sys
from typing import Any

import torch

from .errors import InvalidInputError


def is_tensordict(features: Any) -> bool:
    """Whether ``features`` is a TensorDict (False without importing ``tensordict`` when no one has)."""
    td = sys.modules.get("tensordict")
    return td is not None and isinstance(features, td.TensorDictBase)


def tensordict_parts(features: Any) -> tuple[list[str], torch.Tensor, torch.Tensor, int]:
    """The keys, concatenated IDs, lengths (feature-major) and batch size of a TensorDict of nested
    jagged ID tensors; anything else under a key raises InvalidInputError naming it."""
    keys = [str(k) for k in features.keys()]
    values, lengths = [], []
    for k in keys:
        v = features[k]
        if not (isinstance(v, torch.Tensor) and v.is_nested and v.layout == torch.jagged and v.dim() == 2):
            shown = f"a {v.layout} tensor of {v.dim()} dimensions" if isinstance(v, torch.Tensor) else type(v).__name__
            raise InvalidInputError(f"features: TensorDict key {k!r} holds {shown}; expected a nested jagged tensor of "
                                    "IDs, one bag per sample (torch.nested.nested_tensor(..., layout=torch.jagged))")
        if v.lengths() is not None:  # bags with holes between them (a narrowed nested tensor)
            v = v.contiguous()
        offsets = v.offsets()
        values.append(v.values()[int(offsets[0]):int(offsets[-1])])
        lengths.append(offsets.diff())
    batches = {int(x.numel()) for x in lengths}
    if len(batches) > 1:
        raise InvalidInputError(f"features: the TensorDict's keys have different batch sizes {sorted(batches)}; "
                                "every feature needs one bag per sample")
    size = batches.pop() if batches else (int(features.batch_size[0]) if len(features.batch_size) else 0)
    empty = torch.empty(0, dtype=torch.int64)
    return keys, torch.cat(values) if values else empty, torch.cat(lengths) if lengths else empty, size
