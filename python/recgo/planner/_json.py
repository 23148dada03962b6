"""JSON documents across the planner's exports: out with a retry on size, in with finite numbers only."""

from __future__ import annotations

import ctypes
from typing import Any

from .._json import strict_json


def bytes_arg(value: Any, what: str) -> tuple[ctypes.Array, int]:
    """``value`` as a JSON byte buffer and its length; a NaN or infinity raises InvalidInputError
    naming its field (JSON cannot carry them)."""
    data = strict_json(value, what).encode()
    return ctypes.create_string_buffer(data, len(data)), len(data)
