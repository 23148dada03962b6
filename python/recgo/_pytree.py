"""recgo's batch and output types as ``torch.utils._pytree`` nodes, as TorchRec registers its own: so
``torch.export`` (and other pytree users) can take a :class:`KeyedJaggedTensor` input and give a
:class:`KeyedTensor` or :class:`JaggedTensor` output. The tensors are the children; keys and layout
the context. Unflattening skips the constructors' checks: the tensors are the flattened ones (or the
tracer's stand-ins for them), whose layout was checked when the object was built."""

from __future__ import annotations

from typing import Any

import torch.utils._pytree as pytree

from .jagged import JaggedTensor
from .keyed import KeyedTensor
from .sparse import KeyedJaggedTensor

_KJT_FIELDS = ("_values", "_weights", "_lengths", "_offsets")
_JT_FIELDS = ("_values", "_weights", "_lengths", "_offsets")


def _fields(obj: Any, names: tuple[str, ...]) -> list[Any]:
    return [getattr(obj, n) for n in names]


def _keyed(obj: Any, names: tuple[str, ...]) -> list[tuple[Any, Any]]:
    return [(pytree.GetAttrKey(n), getattr(obj, n)) for n in names]


def _kjt_unflatten(children: Any, context: Any) -> KeyedJaggedTensor:
    kjt = KeyedJaggedTensor.__new__(KeyedJaggedTensor)
    kjt._values, kjt._weights, kjt._lengths, kjt._offsets = children
    kjt._keys, kjt._stride = list(context[0]), context[1]
    kjt._length_per_key = kjt._offset_per_key = kjt._jt_dict = None
    return kjt


def _jt_unflatten(children: Any, context: Any) -> JaggedTensor:
    jt = JaggedTensor.__new__(JaggedTensor)
    jt._values, jt._weights, jt._lengths, jt._offsets = children
    return jt


def _kt_unflatten(children: Any, context: Any) -> KeyedTensor:
    return KeyedTensor._over(context[0], context[1], children[0])


def register() -> None:
    """Register the three types (once; a second call changes nothing)."""
    if KeyedJaggedTensor in pytree.SUPPORTED_NODES:
        return
    pytree.register_pytree_node(
        KeyedJaggedTensor, lambda k: (_fields(k, _KJT_FIELDS), (tuple(k._keys), k._stride)), _kjt_unflatten,
        serialized_type_name="recgo.KeyedJaggedTensor",
        flatten_with_keys_fn=lambda k: (_keyed(k, _KJT_FIELDS), (tuple(k._keys), k._stride)))
    pytree.register_pytree_node(
        JaggedTensor, lambda j: (_fields(j, _JT_FIELDS), None), _jt_unflatten,
        serialized_type_name="recgo.JaggedTensor",
        flatten_with_keys_fn=lambda j: (_keyed(j, _JT_FIELDS), None))
    pytree.register_pytree_node(
        KeyedTensor, lambda t: ([t._values], (tuple(t._keys), tuple(t._length_per_key))), _kt_unflatten,
        serialized_type_name="recgo.KeyedTensor",
        flatten_with_keys_fn=lambda t: ([(pytree.GetAttrKey("_values"), t._values)],
                                        (tuple(t._keys), tuple(t._length_per_key))))
