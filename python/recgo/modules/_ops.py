"""The embedding collection's forward and backward as ``torch.library`` custom ops.

``recgo::ebc_forward`` pools a batch through the engine and returns the output and a context id;
its registered autograd formula calls ``recgo::ebc_backward``, which merges the gradient per distinct
row and either applies the fused optimizer (returning a zero gradient for the collection's anchor
tensor, which keeps the op alive in compiled backward graphs) or returns each table's distinct rows
and their gradients. Both ops have fake implementations, so ``torch.compile`` traces through the
collection instead of breaking the graph. The ops find their module through a registry keyed by the
collection's engine handle; the context of a forward pass is owned by the context-id output (a
ticket, see ``_contexts.py``), which the autograd formula saves: it lives as long as the graph.

In eager mode, with nothing tracing or intercepting the call, the collection calls its engine without
these ops (``_eager.py``); both paths run the same module methods.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Optional

import torch

from ..errors import InvalidInputError
from ._second_order import first_order

if TYPE_CHECKING:
    from .embedding import EmbeddingBagCollection

_MODULES: dict[int, "weakref.ref[EmbeddingBagCollection]"] = {}


def register(module: "EmbeddingBagCollection", key: int) -> None:
    """Make ``module`` reachable from the ops under ``key`` (its engine handle)."""
    _MODULES[key] = weakref.ref(module)
    weakref.finalize(module, _MODULES.pop, key, None)


def module(key: int) -> "EmbeddingBagCollection":
    """The live module registered under ``key``."""
    ref = _MODULES.get(key)
    m = ref() if ref is not None else None
    if m is None:
        raise InvalidInputError(f"recgo: the collection behind engine handle {key} no longer exists (a "
                                "torch.export program of a recgo collection runs only while the collection "
                                "it was exported from lives, in that process)")
    return m


def module_for(key: int, params: list[torch.Tensor]) -> Any:
    """The live module under ``key``, after checking that ``params`` are its parameters (the same
    memory). A ``torch.export`` program names its collection by engine handle, a number that another
    process gives to whichever collection it builds first: a program saved and loaded there would
    silently look up that collection's rows, not its own weights."""
    m = module(key)
    want = m._params()
    if len(want) != len(params) or any(p.data_ptr() != w.data_ptr() or p.shape != w.shape
                                       for p, w in zip(params, want) if w.numel()):
        raise InvalidInputError(
            f"recgo: this call's parameters are not those of the collection it names (engine handle {key}): "
            "a torch.export program of a recgo collection runs on the live collection it was exported "
            "from, in that process; saved and loaded elsewhere it cannot find its tables (its weights are "
            "not in the program: the engine holds them). Save the model's state_dict, rebuild the model "
            "where it is to run and export it there")
    return m


@torch.library.custom_op("recgo::ebc_forward", mutates_args=())
def ebc_forward(key: int, keep: bool, key_feature: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor,
                weights: Optional[torch.Tensor], params: list[torch.Tensor],
                frozen: list[bool], train: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Pooled ``[B, width]`` output and the ticket owning the saved context (id 0 when ``keep`` is false).
    ``frozen`` marks, per table, those a fused backward leaves out (a list of one flag per table: torch's
    custom ops take an empty list for a list of tensors). ``train``: the module's mode when the call was
    traced, so an exported eval program admits no ID to a dynamic table even if the module is put back
    in training."""
    m = module_for(key, params)
    out, ticket = m._lookup(key_feature, values, lengths, weights, keep, train, owner=m._contexts.ticket)
    return out, m._contexts.ticket(0) if ticket is None else ticket


@ebc_forward.register_fake
def _(key: int, keep: bool, key_feature: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor,
      weights: Optional[torch.Tensor], params: list[torch.Tensor],
      frozen: list[bool], train: bool) -> tuple[torch.Tensor, torch.Tensor]:
    m = module(key)
    batch = lengths.shape[0] // max(1, key_feature.shape[0])
    return (lengths.new_empty((batch, m._width), dtype=torch.float32),
            lengths.new_empty((1,), dtype=torch.int64))


def dense_in_op(m: Any) -> bool:
    """Whether the backward op returns each table's dense weight gradient itself (static shapes, so a
    compiled backward needs no data-dependent sizes, which ``torch.compile`` without ``fullgraph=True``
    refuses) rather than its distinct rows and their gradients (sparse gradients: their count is the
    data's)."""
    return m._dense_grads


@torch.library.custom_op("recgo::ebc_backward", mutates_args=())
def ebc_backward(key: int, ctx_id: torch.Tensor, grad: torch.Tensor, frozen: list[bool]) -> list[torch.Tensor]:
    """Fused: applies the optimizer (leaving out the tables ``frozen`` marks), returns
    ``[zeros(())]``. Dense gradients: one weight-shaped gradient per table. Sparse: ``[rows_t, grads_t,
    ...]`` per table."""
    m = module(key)
    raw = m._run_backward(int(ctx_id.item()), grad, list(frozen) if any(frozen) else None)
    if m._optimizer is not None:
        return [torch.zeros((), dtype=torch.float32)]
    return m._grads_from(raw) if dense_in_op(m) else raw  # type: ignore[return-value]


@ebc_backward.register_fake
def _(key: int, ctx_id: torch.Tensor, grad: torch.Tensor, frozen: list[bool]) -> list[torch.Tensor]:
    m = module(key)
    if m._optimizer is not None:
        return [grad.new_empty(())]
    if dense_in_op(m):
        return [grad.new_empty(shape) for shape in m._grad_shapes()]
    ctx = torch.library.get_ctx()
    out = []
    for cfg in m._configs:
        u = ctx.new_dynamic_size()
        out += [grad.new_empty((u,), dtype=torch.int64), grad.new_empty((u, cfg.embedding_dim))]
    return out


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, torch.Tensor]) -> None:
    ctx.key, ctx.frozen = inputs[0], inputs[7]
    ctx.save_for_backward(output[1])


def _backward(ctx: Any, grad: torch.Tensor, _grad_ctx: Any) -> tuple[Any, ...]:
    (ctx_id,) = ctx.saved_tensors
    m = module(ctx.key)

    def run() -> Any:
        raw = torch.ops.recgo.ebc_backward(ctx.key, ctx_id, grad, ctx.frozen)
        return raw if dense_in_op(m) else m._grads_from(raw)

    return None, None, None, None, None, None, first_order([grad], run), None, None


ebc_forward.register_autograd(_backward, setup_context=_setup_context)
