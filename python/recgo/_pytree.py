"""recgo's batch and output types as ``torch.utils._pytree`` nodes, as TorchRec registers its own: so
``torch.export`` (and other pytree users) can take a :class:`KeyedJaggedTensor` input and give a
:class:`KeyedTensor` or :class:`JaggedTensor` output. The tensors are the children; keys and layout
the context: a batch's keys (its batch size only when it has none, so an export with a dynamic batch
takes any), a pooled output's keys and widths (ints: a width that is a dynamic dim of ``torch.export``
is refused, see :func:`_width`). Unflattening goes through the constructors' dtype, device and shape
checks (a ``tree_map`` that casts the leaves to bfloat16 or moves them to another device gets the same
conversion or error as the constructor gives, never misread memory); those checks read no values, so
tracers' stand-ins pass them (a KeyedTensor's are made only outside ``torch.export`` and
``torch.compile``, whose symbolic shapes they would guard on).

The contexts are tuples (hashable, as guards and caches want them); ``torch.export.save`` writes them
as JSON, where a tuple becomes a list, so each type registers the pair of functions that write its
context as JSON and read it back as the same tuples: a loaded program's input spec then equals the
spec of the batch it is called with (without them it refused its own input type)."""

from __future__ import annotations

import json
from typing import Any

import torch
import torch.fx._pytree as fx_pytree
import torch.utils._pytree as pytree

from .errors import InvalidInputError
from .jagged import JaggedTensor, _int_tensor
from .keyed import KeyedTensor, ReadyDict
from .sparse import KeyedJaggedTensor, as_kjt

_FIELDS = ("_values", "_weights", "_lengths", "_offsets")  # the children of both jagged types


# A field not set yet reads as None: torch.export, on a data-dependent error inside a constructor,
# flattens the caller's locals (the half-built object among them) to suggest a fix, and an
# AttributeError there replaced the error it was explaining.
def _fields(obj: Any, names: tuple[str, ...]) -> list[Any]:
    return [getattr(obj, n, None) for n in names]


def _keyed(obj: Any, names: tuple[str, ...]) -> list[tuple[Any, Any]]:
    return [(pytree.GetAttrKey(n), getattr(obj, n, None)) for n in names]


def _kjt_context(k: KeyedJaggedTensor) -> tuple[tuple[str, ...], int | None]:
    keys = tuple(getattr(k, "_keys", ()))
    return keys, None if keys else getattr(k, "_stride", None)


def _kjt_context_from_json(text: str) -> tuple[tuple[str, ...], int | None]:
    keys, stride = json.loads(text)
    return tuple(str(k) for k in keys), None if stride is None else int(stride)


def _width(key: str, w: Any) -> Any:
    """A key's width as the context keeps it: an int. A traced width that is not a constant (a dynamic
    dim of ``torch.export``) is refused: the spec is fixed when the program is made, so a width kept
    there stays the example's (the program read later outputs under it, and ``torch.export.save``
    cannot write it)."""
    if isinstance(w, torch.SymInt):
        fixed = w.node.maybe_as_int()
        if fixed is None:
            raise InvalidInputError(
                f"KeyedTensor key {key!r} has a dynamic width ({w}): a KeyedTensor's widths are part of its "
                "tree spec, fixed when the program is made; keep that width static (no torch.export.Dim on "
                "it), or give the values and widths as tensors instead of a KeyedTensor")
        return fixed
    return w


def _kt_context(t: KeyedTensor) -> tuple[Any, ...]:
    # (keys, lengths), and the key dim only where it is not the pooled layout's 1, so programs
    # exported before key_dim=0 existed keep their context
    keys, widths = tuple(getattr(t, "_keys", ())), getattr(t, "_length_per_key", ())
    base = (keys, tuple(_width(k, w) for k, w in zip(keys, widths)))
    key_dim = getattr(t, "_key_dim", 1)
    return base if key_dim == 1 else (*base, key_dim)


def _kt_context_from_json(text: str) -> tuple[Any, ...]:
    keys, lengths, *dim = json.loads(text)
    return (tuple(str(k) for k in keys), tuple(int(n) for n in lengths), *(int(d) for d in dim))


def _jt_context_from_json(text: str) -> None:
    return None  # a JaggedTensor's context is None


def _to_json(context: Any) -> str:
    """A context as JSON text (tuples written as lists; the ``*_from_json`` functions make them tuples)."""
    return json.dumps(context)


def _kjt_unflatten(children: Any, context: Any) -> KeyedJaggedTensor:
    values, weights, lengths, _offsets = children  # offsets follow from the lengths
    return KeyedJaggedTensor(list(context[0]), values, weights, lengths=lengths, stride=context[1])


def _jt_unflatten(children: Any, context: Any) -> JaggedTensor:
    values, weights, lengths, offsets = children
    if not isinstance(values, torch.Tensor) or values.dim() == 0:
        raise InvalidInputError("JaggedTensor: values must be a tensor with at least one dimension")
    jt = JaggedTensor.__new__(JaggedTensor)  # the constructor also reads the lengths' values: not here
    jt._values, jt._weights = values, weights
    jt._lengths = None if lengths is None else _int_tensor(lengths, "lengths")
    jt._offsets = None if offsets is None else _int_tensor(offsets, "offsets")
    return jt


def _kt_unflatten(children: Any, context: Any) -> KeyedTensor:
    values = children[0]
    # checked as the constructor checks a tensor (a tree_map that changes the values' shape raises here,
    # not at a later read); traced (torch.export, torch.compile) the shapes may be symbolic, which the
    # checks would guard on, and other leaves (fx proxies, the specs torch maps leaves to) are kept
    if isinstance(values, torch.Tensor) and not torch.compiler.is_compiling():
        return KeyedTensor(context[0], context[1], values, *context[2:])
    return KeyedTensor._over(context[0], context[1], values, *context[2:])


def _kjt_flatten_spec(k: Any, spec: Any) -> list[Any]:
    """The leaves of batch ``k`` in the layout of ``spec`` (``torch.fx._pytree.tree_flatten_spec``, which
    the modules of ``torch.export.unflatten`` pass values between submodules with): a batch of the spec's
    keys in another order is permuted to the spec's order (TorchRec's passes its tensors on as they are,
    read under the wrong keys); other keys raise."""
    k = as_kjt(k)
    keys = list(spec.context[0])
    if k._keys != keys:
        if sorted(k._keys) != sorted(keys):
            raise InvalidInputError(f"this program was exported for a KeyedJaggedTensor with keys {keys}; "
                                    f"the batch has keys {k._keys}")
        k = k.permute([k._keys.index(key) for key in keys])
    return _fields(k, _FIELDS)


def _kt_flatten_spec(t: Any, spec: Any) -> list[Any]:
    """A KeyedTensor's values in the layout of ``spec``: keys in another order are regrouped into the
    spec's order, as TorchRec's ``_kt_flatten_spec`` does (``torch.export`` may reorder a KeyedTensor's
    keys); keys or widths that differ raise."""
    keys, widths = list(spec.context[0]), list(spec.context[1])
    key_dim = spec.context[2] if len(spec.context) > 2 else 1
    mine = dict(zip(t.keys(), t.length_per_key()))
    same_order = list(t.keys()) == keys
    # the widths are checked in the spec's key order too: its values are read back by the spec's widths
    if (t.key_dim() != key_dim or (list(t.length_per_key()) != widths if same_order else
                                   sorted(mine) != sorted(keys) or any(mine[k] != w for k, w in zip(keys, widths)))):
        dims = "" if t.key_dim() == key_dim else f" laid along dim {t.key_dim()} (expected {key_dim})"
        raise InvalidInputError(f"expected a KeyedTensor with keys {keys} of widths {widths}, got keys "
                                f"{t.keys()} of widths {t.length_per_key()}{dims}")
    if same_order:
        return [t.values()]
    return [KeyedTensor.regroup([t], [keys])[0]]


def _ready_flatten(d: ReadyDict) -> tuple[list[Any], list[Any]]:
    return list(d.values()), list(d.keys())


def _ready_unflatten(children: Any, context: Any) -> ReadyDict:
    return ReadyDict(zip(context, children))


def register() -> None:
    """Register the four types (once; a second call changes nothing). A :class:`ReadyDict` (a sharded
    ``EmbeddingCollection``'s output) is a dict to pytree users: unregistered, it was one leaf, so
    ``DistributedDataParallel``'s output hooks and ``torch.export`` saw none of its tensors."""
    if KeyedJaggedTensor in pytree.SUPPORTED_NODES:
        return
    pytree.register_pytree_node(
        KeyedJaggedTensor, lambda k: (_fields(k, _FIELDS), _kjt_context(k)), _kjt_unflatten,
        serialized_type_name="recgo.KeyedJaggedTensor",
        to_dumpable_context=_to_json, from_dumpable_context=_kjt_context_from_json,
        flatten_with_keys_fn=lambda k: (_keyed(k, _FIELDS), _kjt_context(k)))
    pytree.register_pytree_node(
        JaggedTensor, lambda j: (_fields(j, _FIELDS), None), _jt_unflatten,
        serialized_type_name="recgo.JaggedTensor",
        to_dumpable_context=_to_json, from_dumpable_context=_jt_context_from_json,
        flatten_with_keys_fn=lambda j: (_keyed(j, _FIELDS), None))
    pytree.register_pytree_node(
        KeyedTensor, lambda t: ([t._values], _kt_context(t)), _kt_unflatten,
        serialized_type_name="recgo.KeyedTensor",
        to_dumpable_context=_to_json, from_dumpable_context=_kt_context_from_json,
        flatten_with_keys_fn=lambda t: ([(pytree.GetAttrKey("_values"), t._values)], _kt_context(t)))
    pytree.register_pytree_node(
        ReadyDict, _ready_flatten, _ready_unflatten, serialized_type_name="recgo.ReadyDict",
        to_dumpable_context=_to_json, from_dumpable_context=json.loads,
        flatten_with_keys_fn=lambda d: ([(pytree.MappingKey(k), v) for k, v in d.items()], list(d.keys())))
    fx_pytree.register_pytree_flatten_spec(KeyedJaggedTensor, _kjt_flatten_spec)
    fx_pytree.register_pytree_flatten_spec(JaggedTensor, lambda j, spec: _fields(j, _FIELDS))
    fx_pytree.register_pytree_flatten_spec(KeyedTensor, _kt_flatten_spec)
    fx_pytree.register_pytree_flatten_spec(ReadyDict, lambda d, spec: [d[k] for k in spec.context])
