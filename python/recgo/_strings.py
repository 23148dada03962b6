"""Text forms of recgo's batch and output types.

``str()`` gives TorchRec's text for the same batch, character for character (its ``__str__`` of
``JaggedTensor``, ``KeyedJaggedTensor`` and ``KeyedTensor``: every value, one bracketed list per
sample), so logs and doctests written against TorchRec read the same. ``repr()`` is short whatever
the batch's size: the type, a few keys, the batch size and the shapes, never the values (a repr lands
in tracebacks and debugger panes, where a batch of a million IDs would bury the message).
"""

from __future__ import annotations

from typing import Sequence

import torch

_KEYS_SHOWN = 4  # keys a repr names before it only counts the rest


def _row(values: torch.Tensor, start: int, end: int) -> str:
    """One sample's rows as TorchRec prints them: ``[1.0, 2.0]``, or ``[[1.0, 2.0], [3.0, 4.0]]`` for 2-D rows."""
    if values.dim() == 1:
        return "[" + ", ".join(str(v) for v in values[start:end].tolist()) + "]"
    if values.dim() == 2:
        return "[" + ", ".join("[" + ", ".join(str(s) for s in r) + "]" for r in values[start:end].tolist()) + "]"
    raise ValueError("the values dimension is larger than 2, we don't support printing")  # TorchRec's error


def _samples(values: torch.Tensor, offsets: Sequence[int], first: int, last: int) -> str:
    """Samples ``first:last`` (their rows ``offsets[i]:offsets[i + 1]``) as a bracketed list of rows."""
    return "[" + ", ".join(_row(values, offsets[i], offsets[i + 1]) for i in range(first, last)) + "]"


def jagged_str(values: torch.Tensor, weights: torch.Tensor | None, offsets: torch.Tensor) -> str:
    """TorchRec's ``str(JaggedTensor)``."""
    offs = offsets.tolist()
    n = len(offs) - 1
    if weights is None:
        return "JaggedTensor({\n    " + _samples(values, offs, 0, n) + "\n})\n"
    return ('JaggedTensor({\n    "values": ' + _samples(values, offs, 0, n)
            + ',\n    "weights": ' + _samples(weights, offs, 0, n) + "\n})\n")


def keyed_jagged_str(keys: Sequence[str], values: torch.Tensor, weights: torch.Tensor | None,
                     offsets: torch.Tensor, stride: int) -> str:
    """TorchRec's ``str(KeyedJaggedTensor)``: one entry per key, its ``stride`` samples."""
    if not keys:
        return "KeyedJaggedTensor()\n"
    offs = offsets.tolist()
    parts = []
    for i, key in enumerate(keys):
        first, last = i * stride, (i + 1) * stride
        if weights is None:
            parts.append(f'    "{key}": ' + _samples(values, offs, first, last))
        else:
            parts.append(f'    "{key}"' + ': {\n        "values": ' + _samples(values, offs, first, last)
                         + ',\n        "weights": ' + _samples(weights, offs, first, last) + "\n    }")
    return "KeyedJaggedTensor({\n" + ",\n".join(parts) + "\n})\n"


def keyed_str(keys: Sequence[str], blocks: Sequence[torch.Tensor]) -> str:
    """TorchRec's ``str(KeyedTensor)``: each key's block, row by row."""
    if not keys:
        return "KeyedTensor()\n"
    parts = [f'    "{key}": ' + "[" + ", ".join(_row(r, 0, len(r)) for r in block) + "]"
             for key, block in zip(keys, blocks)]
    return "KeyedTensor({\n" + ",\n".join(parts) + "\n})\n"


def readable(*tensors: torch.Tensor | None) -> bool:
    """Whether the tensors have values to print: not on the meta device (``str()`` of a batch there is
    its ``repr()``, where TorchRec's raises)."""
    return not any(t is not None and t.is_meta for t in tensors)


def short_keys(keys: Sequence[str]) -> str:
    """The keys for a repr: all of a few, else the first ones and a count."""
    if len(keys) <= _KEYS_SHOWN:
        return repr(list(keys))
    shown = ", ".join(repr(k) for k in keys[:_KEYS_SHOWN])
    return f"[{shown}, ... {len(keys)} keys]"


def where(t: torch.Tensor) -> str:
    """``, device=...`` for a tensor off the CPU (the repr of a CPU batch leaves it out), else ``''``."""
    return "" if t.device.type == "cpu" else f", device={t.device}"
