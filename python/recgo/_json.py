"""Strict JSON for the specs the Go engine reads: NaN and infinities are refused with the place they are,
and so is text with no UTF-8 form."""

from __future__ import annotations

import json
import math
from typing import Any

from .errors import InvalidInputError


def nonfinite(value: Any, path: str = "") -> tuple[str, float] | None:
    """The first NaN or infinite float in a JSON-able ``value`` as (where, number), or None. ``where``
    reads like ``a.b[0]``; a list element that is a dict with a string ``name`` shows it:
    ``fields['u']``."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, value)
    if isinstance(value, dict):
        items = [(f"{path}.{k}" if path else str(k), v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        items = [(f"{path}[{v['name']!r}]" if isinstance(v, dict) and isinstance(v.get("name"), str)
                  else f"{path}[{i}]", v) for i, v in enumerate(value)]
    else:
        return None
    for where, v in items:
        if (bad := nonfinite(v, where)) is not None:
            return bad
    return None


def strict_json(value: Any, what: str) -> str:
    """``value`` as strict JSON; a NaN or infinite number raises InvalidInputError naming ``what`` and
    where in it the number is, anything else JSON cannot hold names ``what`` and the value's type."""
    bad = nonfinite(value)
    if bad is not None:
        raise InvalidInputError(f"{what}: {bad[0]} is {bad[1]} (NaN and infinities are not allowed)")
    try:
        out = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what}: a parameter is not JSON-encodable: {exc}") from exc
    try:  # Go reads UTF-8: a lone surrogate has no UTF-8 form (Go's decoder would make it U+FFFD)
        out.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = out[max(0, exc.start - 20):exc.end + 20]
        raise InvalidInputError(f"{what}: {bad!r} is not valid Unicode text (a lone surrogate)") from None
    return out
