"""JSON documents across the planner's exports: out with a retry on size, in with finite numbers only."""

from __future__ import annotations

import ctypes
import json
import math
from typing import Any

from ..errors import InvalidInputError


def _nonfinite(value: Any, path: str) -> tuple[str, float] | None:
    """The first NaN or infinite number in ``value`` as (path, number), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return path, value
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = ((f"[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for k, v in items:
        sub = f"{path}{k}" if str(k).startswith("[") else f"{path}.{k}" if path else str(k)
        found = _nonfinite(v, sub)
        if found:
            return found
    return None


def bytes_arg(value: Any, what: str) -> tuple[ctypes.Array, int]:
    """``value`` as a JSON byte buffer and its length; a NaN or infinity raises InvalidInputError
    naming its field (JSON cannot carry them)."""
    found = _nonfinite(value, "")
    if found:
        raise InvalidInputError(f"{what}: {found[0]} is {found[1]}; it must be a finite number")
    data = json.dumps(value).encode()
    return ctypes.create_string_buffer(data, len(data)), len(data)
