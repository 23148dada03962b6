"""Declarative feature specs: the :class:`Feature` builder and JSON/YAML configs.

A feature names a raw input field (its own name unless ``input=`` says otherwise), the input's dtype
(``"int64"`` IDs, ``"float"`` values, or ``"bytes"`` strings) and a chain of transforms applied in
order. The canonical form, which the Go engine validates, is::

    {"name": "hist", "input": "hist", "dtype": "int64", "output": true,
     "ops": [{"op": "truncate", "n": 50, "keep": "last"}, {"op": "hash", "seed": 0},
             {"op": "mod", "n": 1000000}]}

Configs may also write each op compactly: ``"hash"``, ``{"mod": 1000000}``,
``{"truncate": {"n": 50, "keep": "last"}}`` (a scalar is the op's main parameter).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..errors import InvalidInputError, RecgoIOError

# The parameter a scalar in the compact op form stands for.
_MAIN_PARAM = {
    "hash": "seed", "mod": "n", "bucketize": "boundaries", "truncate": "n", "filter": "values",
    "mask": "values", "cross": "fields", "fill_missing": "default",
}


class Feature:
    """One feature and its transform chain, built by chaining methods::

        Feature("hist").truncate(50, keep="last").hash().mod(10**6)
        Feature("price", dtype="float").bucketize([1, 10, 100])
        Feature("user_x_item").cross("user", "item").mod(10**6)

    Each method appends one op and returns the feature. The engine validates the chain (Go), so a
    bad op raises :class:`recgo.InvalidInputError` when the :class:`FeatureEngine` is built.
    """

    def __init__(self, name: str, input: str | None = None, dtype: str = "int64", output: bool = True) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"Feature name must be a non-empty string, got {name!r}")
        self.name = name
        self.input = input
        self.dtype = dtype
        self.output = bool(output)
        self.ops: list[dict[str, Any]] = []

    def _add(self, op: str, **params: Any) -> "Feature":
        self.ops.append({"op": op, **{k: v for k, v in params.items() if v is not None}})
        return self

    def hash(self, seed: int = 0) -> "Feature":
        """XXH64 of each int64 ID (8 little-endian bytes) or byte string, with a 64-bit ``seed``."""
        return self._add("hash", seed=int(seed))

    def mod(self, n: int) -> "Feature":
        """Floor modulo ``x mod n`` in ``[0, n)`` (``torch.remainder``)."""
        return self._add("mod", n=int(n))

    def bucketize(self, boundaries: Sequence[float]) -> "Feature":
        """Bucket index = number of boundaries ``<= x`` (``torch.bucketize(right=True)``)."""
        return self._add("bucketize", boundaries=[float(b) for b in boundaries])

    def truncate(self, n: int, keep: str = "first") -> "Feature":
        """Keep the first (``keep="first"``) or last (``keep="last"``) ``n`` values of each bag."""
        return self._add("truncate", n=int(n), keep=keep)

    def filter(self, values: Iterable[int] | None = None, *, range: tuple[int, int] | None = None,
               mode: str = "drop") -> "Feature":
        """Drop (``mode="drop"``) or keep (``mode="keep"``) the IDs in ``values`` or in ``[lo, hi)``."""
        return self._add("filter", values=None if values is None else [int(v) for v in values],
                         range=None if range is None else [int(range[0]), int(range[1])], mode=mode)

    mask = filter

    def cross(self, a: str, b: str, seed: int = 0) -> "Feature":
        """Per sample, the Cartesian product of features ``a`` and ``b`` (a-major), each pair hashed
        as XXH64(le64(x) || le64(y), seed). Must be the first op; the feature then has no input."""
        return self._add("cross", fields=[a, b], seed=int(seed))

    def fill_missing(self, default: int = 0) -> "Feature":
        """Turn each empty bag into the one-value bag ``[default]``."""
        return self._add("fill_missing", default=int(default))

    def to_dict(self) -> dict[str, Any]:
        """The canonical spec entry (what the Go engine receives)."""
        d: dict[str, Any] = {"name": self.name, "ops": copy.deepcopy(self.ops)}
        if not (self.ops and self.ops[0]["op"] == "cross"):
            d["input"] = self.input or self.name
            d["dtype"] = self.dtype
        if not self.output:
            d["output"] = False
        return d

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "Feature":
        """Parse one config entry (canonical or compact op form)."""
        if not isinstance(d, Mapping) or "name" not in d:
            raise InvalidInputError(f"feature config entry needs a 'name': {d!r}")
        unknown = set(d) - {"name", "input", "dtype", "output", "ops"}
        if unknown:
            raise InvalidInputError(f"feature {d['name']!r}: unknown keys {sorted(unknown)}")
        f = Feature(d["name"], d.get("input"), d.get("dtype", "int64"), d.get("output", True))
        for op in d.get("ops") or []:
            f.ops.append(_canonical_op(d["name"], op))
        return f

    def __repr__(self) -> str:
        chain = "".join(f".{o['op']}({', '.join(f'{k}={v!r}' for k, v in o.items() if k != 'op')})" for o in self.ops)
        return f"Feature({self.name!r}){chain}"


def _canonical_op(feature: str, op: Any) -> dict[str, Any]:
    if isinstance(op, str):
        return {"op": op}
    if isinstance(op, Mapping) and "op" in op:
        return dict(op)
    if isinstance(op, Mapping) and len(op) == 1:
        (name, params), = op.items()
        if isinstance(params, Mapping):
            return {"op": name, **params}
        if params is None:
            return {"op": name}
        if name not in _MAIN_PARAM:
            raise InvalidInputError(f"feature {feature!r}: unknown op {name!r}")
        return {"op": name, _MAIN_PARAM[name]: params}
    raise InvalidInputError(f"feature {feature!r}: cannot read op {op!r}")


def load_features(source: str | Path | Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[Feature]:
    """Read features from a JSON or YAML file (by suffix), a parsed ``{"features": [...]}`` mapping,
    or a list of entries."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        try:
            text = path.read_text()
        except OSError as exc:
            raise RecgoIOError(f"cannot read feature config {path}: {exc}") from exc
        if path.suffix in (".yaml", ".yml"):
            from ..errors import require_extra

            source = require_extra("yaml", "yaml", f"reading the YAML feature config {path}").safe_load(text)
        else:
            try:
                source = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{path}: invalid JSON: {exc}") from exc
    if isinstance(source, Mapping):
        if "features" not in source:
            raise InvalidInputError("feature config needs a top-level 'features' list")
        source = source["features"]
    if not isinstance(source, Sequence):
        raise InvalidInputError(f"feature config: expected a list of features, got {type(source).__name__}")
    return [Feature.from_dict(d) for d in source]


def spec_json(features: Sequence[Feature], fuse: bool = True) -> str:
    """The JSON spec the Go engine compiles (``fuse=False`` plans one call per op, field by field)."""
    doc: dict[str, Any] = {"features": [f.to_dict() for f in features]}
    if not fuse:
        doc["unfused"] = True
    return json.dumps(doc)
