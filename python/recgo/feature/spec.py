"""Declarative feature specs: the :class:`Feature` builder and JSON/YAML configs.

A feature names a raw input field (its own name unless ``input=`` says otherwise), the input's dtype
(``"int64"`` IDs, ``"float"`` values, or ``"bytes"`` strings) and a chain of transforms applied in
order. The canonical form, which the Go engine validates, is::

    {"name": "hist", "input": "hist", "dtype": "int64", "output": true,
     "ops": [{"op": "truncate", "n": 50, "keep": "last"}, {"op": "hash", "seed": 0},
             {"op": "mod", "n": 1000000}]}

Configs may also write each op compactly: ``"hash"``, ``{"mod": 1000000}``,
``{"truncate": {"n": 50, "keep": "last"}}`` (a scalar is the op's main parameter). ``ops`` is always a
list, even of one op. A config file's top level holds ``features`` and optionally ``max_values`` (see
:class:`recgo.feature.FeatureEngine`).
"""

from __future__ import annotations

import copy
import decimal
import math
import operator
import unicodedata
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .._config_text import load_json, load_yaml
from .._json import strict_json
from .._textfiles import read_regular
from ..errors import InvalidInputError
from ..tensors import integer

# The op names (engine/feature's opNames, plus the "mask" alias) and the parameter a scalar in the
# compact op form stands for.
_MAIN_PARAM = {
    "hash": "seed", "mod": "n", "bucketize": "boundaries", "truncate": "n", "filter": "values",
    "mask": "values", "cross": "fields", "fill_missing": "default", "position": "from",
    "recency": "reference",
}
DTYPES = ("int64", "float", "bytes")
_TOP_KEYS = {"features", "max_values"}


def check_name(what: str, name: str) -> None:
    """Refuse a name holding a character that is not printable (``str.isprintable``): a control
    character (NUL, tab, newline), a format character (zero-width space, byte order mark,
    bidirectional override), a line or paragraph separator, or a space other than the ASCII one.
    Names cross the C ABI as newline-joined C strings and end up as KeyedJaggedTensor keys. This is
    the feature engine's rule (``checkName`` in ``engine/feature``, ``unicode.IsPrint``), in its words;
    the embedding configs check their table and feature names with it. (Where this Python's Unicode
    tables are older than Go's, a character assigned in between is refused here and taken there.)

    Raises:
        InvalidInputError: naming ``what``, the name, and the first such character's code point.
    """
    for c in name:
        if not c.isprintable():
            kind = "control" if unicodedata.category(c) == "Cc" else "non-printable"
            raise InvalidInputError(f"{what} {name!r} contains the {kind} character U+{ord(c):04X}; names must be "
                                    "printable (no control characters, format characters, or separators other than "
                                    "the space)")


def _seed_bits(v: int) -> int:
    """A 64-bit seed's bits: a negative int64 one (``-1``) as its two's complement, as the reference
    hashes with it (the engine's spec takes seeds as unsigned 64-bit numbers); others as they are,
    for the engine to check."""
    return v + 2**64 if -2**63 <= v < 0 else v


def _number(v: Any) -> int | float:
    """An integer stays an exact int (IDs and int64 boundaries need all 64 bits); another real number
    becomes a float. Strings (even numeric ones) and bools are refused: a typo, not a number."""
    if isinstance(v, (bool, str, bytes)):
        raise InvalidInputError(f"expected a number, got {v!r}")
    try:
        return operator.index(v)
    except TypeError:
        try:
            return float(v)
        except (TypeError, ValueError):
            raise InvalidInputError(f"expected a number, got {type(v).__name__} {v!r}") from None


def _exact(v: Any) -> Any:
    """``v`` (an op parameter, nested lists included) with every integer-valued number from 2^53 in
    magnitude up to the int64 range ``[-2^63, 2^63)`` as an int (-2^63 is int64's minimum; 2^63 stays
    a float the engine refuses by name): JSON would carry such a float as its shortest repr
    (``1.152921504606847e+18`` for 2^60), which the engine reads digit by digit as another integer
    than the float's value the reference compares with. A ``Decimal`` (a JSON config's literal, read
    exactly) becomes that int, or else the nearest float."""
    if isinstance(v, decimal.Decimal):
        if v.is_finite() and v == v.to_integral_value() and -(2**63) <= v < 2**63:
            return int(v)
        return float(v)
    if (isinstance(v, float) and math.isfinite(v) and 2.0**53 <= abs(v)
            and -(2.0**63) <= v < 2.0**63 and v == int(v)):
        return int(v)
    if isinstance(v, list):
        return [_exact(x) for x in v]
    return v


def _numbers(op: str, what: str, vs: Any) -> list[int | float]:
    """A list of numbers given as a list, tuple, range or 1-d tensor/array (a string or a lone number
    is refused, not split into characters or raised as a TypeError)."""
    if isinstance(vs, (str, bytes)) or not isinstance(vs, Iterable) or getattr(vs, "ndim", 1) != 1:
        raise InvalidInputError(f"{op}: {what} must be a sequence of numbers, got {type(vs).__name__} {vs!r}")
    return [_number(v) for v in vs]


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
        if input is not None and (not isinstance(input, str) or not input):
            # an empty name read the input of the feature's own name, in silence
            raise InvalidInputError(f"feature {name!r}: input must be a non-empty string (leave it out to read the "
                                    f"input named {name!r}), got {type(input).__name__} {input!r}")
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise InvalidInputError(f"feature {name!r}: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        if not isinstance(output, bool):
            raise InvalidInputError(f"feature {name!r}: output must be true or false, got {type(output).__name__} {output!r}")
        self.name = name
        self.input = input
        self.dtype = dtype
        self.output = output
        self.ops: list[dict[str, Any]] = []

    def _integer(self, op: str, param: str, v: Any) -> int:
        """``v`` as an int; a float or a bool would be truncated silently (``mod(1.5)`` turning every
        ID into 0), so it raises."""
        return integer(f"feature {self.name!r}: {op} {param}", v)

    def _seed(self, op: str, seed: Any) -> int:
        """A 64-bit seed (see :func:`_seed_bits`)."""
        return _seed_bits(self._integer(op, "seed", seed))

    def _add(self, op: str, **params: Any) -> "Feature":
        self.ops.append({"op": op, **{k: _exact(v) for k, v in params.items() if v is not None}})
        return self

    def hash(self, seed: int = 0) -> "Feature":
        """XXH64 of each int64 ID (8 little-endian bytes) or byte string, with a 64-bit ``seed`` (a
        negative one as its two's complement: ``hash(-1)`` is ``hash(2**64 - 1)``). The seed is not a
        bucket count: follow with ``mod(n)`` for ``n`` buckets."""
        return self._add("hash", seed=self._seed("hash", seed))

    def mod(self, n: int) -> "Feature":
        """Floor modulo ``x mod n`` in ``[0, n)`` (``torch.remainder``)."""
        return self._add("mod", n=self._integer("mod", "n", n))

    def bucketize(self, boundaries: Sequence[int | float]) -> "Feature":
        """Bucket index = number of boundaries ``<= x`` (``torch.bucketize(right=True)``), the
        boundaries strictly increasing. An int64 field compares exactly in int64: integer boundaries
        stay exact ints (``2**53 + 1``, nanosecond timestamps), and each must be an integer in int64's
        range. A float field compares in float64."""
        return self._add("bucketize", boundaries=_numbers("bucketize", "boundaries", boundaries))

    def truncate(self, n: int, keep: str = "first") -> "Feature":
        """Keep the first (``keep="first"``) or last (``keep="last"``) ``n`` values of each bag."""
        return self._add("truncate", n=self._integer("truncate", "n", n), keep=keep)

    def filter(self, values: Iterable[float] | None = None, *, range: tuple[float, float] | None = None,
               mode: str = "drop") -> "Feature":
        """Drop (``mode="drop"``) or keep (``mode="keep"``) the values in ``values`` or in
        ``[lo, hi)``: IDs compare exactly as int64, a float field's values (before ``bucketize``) in
        float64; a NaN is in no set and no range. Per-ID weights stay with their values."""
        if range is not None:
            range = _numbers("filter", "range", range)  # type: ignore[assignment]
            if len(range) != 2:
                raise InvalidInputError(f"filter: range must be (lo, hi), got {len(range)} numbers")
        return self._add("filter", values=None if values is None else _numbers("filter", "values", values),
                         range=range, mode=mode)

    mask = filter

    def cross(self, *fields: str, seed: int = 0) -> "Feature":
        """Per sample, the Cartesian product of two to eight features (the first most significant),
        each tuple hashed as XXH64(le64(x1) || le64(x2) || ..., seed); a tuple's weight is the
        product of its weighted fields' weights. Must be the first op; the feature then has no
        input. (``cross(a, b, seed)`` with a positional seed is accepted too.)"""
        names = list(fields)
        if len(names) >= 3 and not isinstance(names[-1], str) and seed == 0:
            seed = names.pop()
        for f in names:
            if not isinstance(f, str):
                raise InvalidInputError(f"feature {self.name!r}: cross fields are feature names, got {f!r}")
        return self._add("cross", fields=names, seed=self._seed("cross", seed))

    def position(self, start: str = "first") -> "Feature":
        """Each value's index in its bag, counted from the first (``start="first"``: 0, 1, ...) or
        from the last (``start="last"``: the latest event is 0) — a sequence's position feature."""
        return self._add("position", **{"from": start})

    def recency(self, reference: str) -> "Feature":
        """``reference[sample] - value`` for each value: the time since each event, given a
        timestamp sequence and the raw input ``reference`` holding one reference time per sample
        (e.g. the request time). Follow it with ``bucketize`` to get recency buckets."""
        return self._add("recency", reference=reference)

    def fill_missing(self, default: int = 0) -> "Feature":
        """Turn each empty bag into the one-value bag ``[default]``."""
        return self._add("fill_missing", default=self._integer("fill_missing", "default", default))

    def to_dict(self) -> dict[str, Any]:
        """The canonical spec entry (what the Go engine receives)."""
        d: dict[str, Any] = {"name": self.name, "ops": copy.deepcopy(self.ops)}
        if self.ops and self.ops[0]["op"] == "cross":
            if self.input is not None or self.dtype != "int64":
                raise InvalidInputError(f"feature {self.name!r}: a cross feature reads the features it crosses, so "
                                        f"input={self.input!r} / dtype={self.dtype!r} would be ignored: leave them out")
        else:
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
        ops = d.get("ops")
        if ops is None:
            ops = []
        if isinstance(ops, (str, bytes, Mapping)) or not isinstance(ops, Sequence):
            hint = f"[{ops}]" if isinstance(ops, str) else f"[{dict(ops)!r}]" if isinstance(ops, Mapping) else "[...]"
            raise InvalidInputError(f"feature {d['name']!r}: field 'ops' must be a list of ops, got a "
                                    f"{type(ops).__name__} {ops!r} (for one op write ops: {hint})")
        for i, op in enumerate(ops):
            op = _canonical_op(d["name"], i, op)
            seed = op.get("seed")
            if op["op"] in ("hash", "cross") and isinstance(seed, int) and not isinstance(seed, bool):
                op["seed"] = _seed_bits(seed)  # -1 as the builder's hash(-1); anything else the engine checks
            f.ops.append(op)
        return f

    def __repr__(self) -> str:
        chain = "".join(f".{o['op']}({', '.join(f'{k}={v!r}' for k, v in o.items() if k != 'op')})" for o in self.ops)
        return f"Feature({self.name!r}){chain}"


def _canonical_op(feature: str, index: int, op: Any) -> dict[str, Any]:
    where = f"feature {feature!r} op {index}"
    if isinstance(op, str):
        return {"op": op}
    if isinstance(op, Mapping) and "op" in op:
        if not isinstance(op["op"], str):
            raise InvalidInputError(f"{where}: field 'op' must be an op name, got {op['op']!r}")
        return {k: _exact(v) for k, v in op.items()}
    if isinstance(op, Mapping) and len(op) == 1:
        (name, params), = op.items()
        if not isinstance(name, str) or name not in _MAIN_PARAM:
            raise InvalidInputError(f"{where}: unknown op {name!r} (known: {', '.join(_MAIN_PARAM)})")
        if isinstance(params, Mapping):
            if "op" in params:
                raise InvalidInputError(f"{where}: {name!r} parameters cannot hold another 'op'")
            return {"op": name, **{k: _exact(v) for k, v in params.items()}}
        if params is None:
            return {"op": name}
        return {"op": name, _MAIN_PARAM[name]: _exact(params)}
    raise InvalidInputError(f"{where}: cannot read op {op!r} (write a name, {{name: parameter}} or {{op: name, ...}})")


def load_features(source: str | Path | Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[Feature]:
    """Read features from a JSON or YAML file (by suffix), a parsed ``{"features": [...]}`` mapping,
    or a list of entries."""
    return load_config(source)[0]


def load_config(source: str | Path | Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> tuple[list[Feature], dict[str, Any]]:
    """:func:`load_features`, plus the config's engine options (``{"max_values": ...}`` when given)."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        raw = read_regular(path, "feature config")
        try:
            text = raw.decode()
        except UnicodeDecodeError as exc:
            raise InvalidInputError(f"feature config {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
        # numbers exactly (9007199254740993.0 is 2^53 + 1, not the float 2^53), a repeated key refused
        if path.suffix.lower() in (".yaml", ".yml"):
            source = load_yaml(text, str(path), exact=True)
        else:
            source = load_json(text, str(path))
    options: dict[str, Any] = {}
    if isinstance(source, Mapping):
        if "features" not in source:
            raise InvalidInputError("feature config needs a top-level 'features' list")
        unknown = set(source) - _TOP_KEYS
        if unknown:
            raise InvalidInputError(f"feature config: unknown top-level keys {sorted(unknown)} (known: {sorted(_TOP_KEYS)})")
        if "max_values" in source:
            options["max_values"] = _exact(source["max_values"])  # a JSON 1e6 is Decimal('1E+6')
        source = source["features"]
    if isinstance(source, (str, bytes)) or not isinstance(source, Sequence):
        raise InvalidInputError(f"feature config: expected a list of features, got {type(source).__name__}")
    return [Feature.from_dict(d) for d in source], options


def spec_json(features: Sequence[Feature], fuse: bool = True, max_values: int | None = None) -> str:
    """The JSON spec the Go engine compiles (``fuse=False`` plans one call per op, field by field;
    ``max_values`` bounds every buffer a batch needs, see :class:`recgo.feature.FeatureEngine`)."""
    doc: dict[str, Any] = {"features": [f.to_dict() for f in features]}
    if not fuse:
        doc["unfused"] = True
    if max_values is not None:
        if isinstance(max_values, bool) or not isinstance(max_values, int) or max_values <= 0:
            raise InvalidInputError(f"max_values must be a positive integer, got {max_values!r}")
        doc["max_values"] = max_values
    return strict_json(doc, "feature spec")
