"""Strict readers of config text, JSON and YAML alike: a key given twice in one mapping is refused
(both libraries kept the last one silently), and with ``exact`` every non-integer number literal is
read as a ``decimal.Decimal`` (as written, so an integer-valued literal past 2^53 keeps its digits;
YAML read it as a float, JSON as a Decimal, and the same config gave two engines)."""

from __future__ import annotations

import decimal
import functools
import json
from typing import Any

from .errors import InvalidInputError, require_extra


def first_line(exc: BaseException) -> str:
    """A parser's reason on one line (a RecursionError's says the nesting is too deep)."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return " ".join(str(exc).split())


def _unique_pairs(what: str, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object from its pairs, refusing a key given twice."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise InvalidInputError(f"{what}: key {k!r} is given twice in one object")
        out[k] = v
    return out


def load_json(text: str, what: str) -> Any:
    """``text`` as JSON, non-integer literals as Decimals, a repeated key refused.

    Raises:
        InvalidInputError: invalid JSON (naming ``what``), or a key given twice in one object.
    """
    try:
        return json.loads(text, parse_float=decimal.Decimal,
                          object_pairs_hook=functools.partial(_unique_pairs, what))
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InvalidInputError(f"{what}: invalid JSON: {first_line(exc)}") from exc


@functools.lru_cache(maxsize=2)
def _loader(yaml: Any, exact: bool) -> Any:
    """A ``yaml.SafeLoader`` that refuses a repeated key and, with ``exact``, reads floats as Decimals."""

    class Strict(yaml.SafeLoader):  # type: ignore[misc,name-defined]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # "<<" merges another mapping, whose keys this one may override
                key = self.construct_object(key_node, deep=deep)
                try:
                    repeated = key in seen
                except TypeError:  # unhashable: the base class names it
                    break
                if repeated:
                    raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice in one mapping",
                                                            key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    if exact:
        def exact_float(loader: Any, node: Any) -> Any:
            value = loader.construct_yaml_float(node)
            try:
                d = decimal.Decimal(loader.construct_scalar(node).replace("_", ""))
            except decimal.InvalidOperation:  # .inf, .nan, sexagesimal: the float
                return value
            return d if d.is_finite() and float(d) == value else value

        Strict.add_constructor("tag:yaml.org,2002:float", exact_float)
    return Strict


def load_yaml(text: str | bytes, what: str, exact: bool = False) -> Any:
    """``text`` as YAML (safe tags only), a repeated key refused; with ``exact``, floats as Decimals.

    Raises:
        InvalidInputError: invalid YAML (naming ``what``), or a key given twice in one mapping.
        MissingExtraError: PyYAML is not installed.
    """
    yaml: Any = require_extra("yaml", "yaml", f"reading the YAML {what}")
    try:
        return yaml.load(text, Loader=_loader(yaml, exact))  # noqa: S506 (a SafeLoader subclass)
    except (yaml.YAMLError, RecursionError) as exc:  # RecursionError: nesting too deep for the parser
        raise InvalidInputError(f"{what}: not valid YAML: {first_line(exc)}") from exc
