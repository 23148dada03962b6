"""torch.fx tracing of recgo's modules: each collection is one leaf of the traced graph.

A TorchRec model is traced with ``torch.fx.symbolic_trace`` (or ``torchrec.fx.symbolic_trace``) to
rewrite or inspect its dense half. recgo's collections run in Go, not in torch ops, so their insides
cannot be traced; traced as a leaf (``call_module``), the graph calls the very module at run time,
which keeps its tables, optimizer and engine state, and the dense ops around it trace as usual.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

import torch.fx

from ..errors import InvalidInputError
from ..keyed import KeyedTensor
from ._export_sizes import call_size_oblivious, exporting

F = TypeVar("F", bound=Callable[..., Any])


class _TracedKeyedTensor(torch.fx.Proxy, KeyedTensor):
    """A pooled collection's traced output: a ``torch.fx.Proxy`` for the ``call_module`` node that is
    also a recgo KeyedTensor over the node's values.

    As a KeyedTensor, model code reads its keys, iterates ``to_dict()`` and slices ``kt[key]`` while
    tracing (and ``isinstance`` checks hold); as a Proxy, functions that ``torch.fx.wrap`` makes leaves of
    the graph, such as TorchRec's ``KeyedTensor.regroup`` helpers, find it among their arguments and are
    recorded as calls on the module's real output, instead of running on the traced values (where their
    device checks cannot be traced)."""

    def __init__(self, node: torch.fx.Node, tracer: torch.fx.proxy.TracerBase, kt: KeyedTensor) -> None:
        torch.fx.Proxy.__init__(self, node, tracer)
        self._keys, self._length_per_key, self._values, self._key_dim = (
            kt._keys, kt._length_per_key, kt._values, kt._key_dim)

    # torch.fx.Proxy's own versions of these would record graph nodes instead of answering as a KeyedTensor
    keys = KeyedTensor.keys
    __getitem__ = KeyedTensor.__getitem__

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"traced {KeyedTensor.__repr__(self)}"


def _proxy_in(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.fx.Proxy | None:
    for a in args:
        if isinstance(a, torch.fx.Proxy):
            return a
    for a in kwargs.values():
        if isinstance(a, torch.fx.Proxy):
            return a
    return None


def traced_as_leaf(forward: F) -> F:
    """Wrap a module's ``forward`` so that, called with a ``torch.fx.Proxy`` during symbolic tracing,
    it records one ``call_module`` node for the module instead of running on the proxy. The result is
    the module's ``_traced_output(node)`` when it defines one (an output of the same structure over
    the node: a KeyedTensor over its values, a dict of its entries, so that code iterating the output
    traces; a KeyedTensor is returned as a :class:`_TracedKeyedTensor`), else the node. Under
    ``torch.jit.trace`` it raises (:func:`refuse_jit_trace`)."""

    @functools.wraps(forward)
    def wrapper(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if torch.jit.is_tracing():
            refuse_jit_trace(self)
        proxy = _proxy_in(args, kwargs)
        if proxy is None:
            if exporting():  # a dynamic batch that may be one in the exported program
                return call_size_oblivious(forward, self, *args, **kwargs)
            return forward(self, *args, **kwargs)
        tracer = proxy.tracer
        path = tracer.path_of_module(self)
        if not path:
            raise InvalidInputError(
                f"torch.fx: a {type(self).__name__} cannot be the root of a trace (its lookups run in Go, not in "
                "torch ops); trace a model that holds it, where it is one call_module leaf")
        node = tracer.create_proxy("call_module", path, args, kwargs)
        shape = getattr(self, "_traced_output", None)
        out = shape(node) if shape is not None else node
        return _TracedKeyedTensor(node.node, tracer, out) if isinstance(out, KeyedTensor) else out

    return wrapper  # type: ignore[return-value]


_ROUTES = ("use torch.compile for training, or torch.export of the eval model for inference, or "
           "recgo.to_torchrec(model) for TorchRec's own modules with the same weights")


def refuse_jit_trace(module: torch.nn.Module) -> None:
    """A collection's forward under ``torch.jit.trace`` (or ``torch.onnx.export``, which traces so)
    raises: the tracer records torch ops, and the lookup runs in Go, so the traced graph made the pooled
    output from nothing: an empty tensor, which failed the tracer's own check in the first layer after
    it and, with ``check_trace=False``, went on as an empty result for every batch."""
    raise InvalidInputError(
        f"torch.jit.trace: a recgo {type(module).__name__} cannot be traced by TorchScript (its lookups run in Go, "
        f"which the tracer does not record: the traced module would give empty outputs); {_ROUTES}")


def refuse_script(module: torch.nn.Module) -> torch.nn.Module:
    """``__prepare_scriptable__`` of recgo's collections: ``torch.jit.script`` of a model holding one
    raises by name, instead of TorchScript's compiler failing inside the Python forward with an error
    pointing at the wrong file and line."""
    raise InvalidInputError(
        f"torch.jit.script: a recgo {type(module).__name__} cannot be TorchScripted (its lookups run in Go "
        f"through Python); {_ROUTES}")
