"""The sequence (unpooled) collection's forward and backward as ``torch.library`` custom ops.

``recgo::ec_forward`` gathers one row per ID through the engine and returns one ``[n_k, D_k]``
tensor per KJT key plus a context id; its autograd formula calls ``recgo::ec_backward``, which
merges the gradient per distinct row and either applies the fused optimizer (returning a zero
gradient for the collection's anchor tensor, which keeps the op alive in compiled backward graphs)
or returns each used table's distinct rows and their gradients. Both have fake implementations, so
``torch.compile`` traces through the collection: a single-key collection's output has the batch's
value count as its length; with several keys each key's count is a data-dependent size.

In eager mode, with nothing tracing or intercepting the call, the collection calls its engine without
these ops (``_eager.py``); both paths run the same module methods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ._ops import dense_in_op, module as _module, module_for
from ._second_order import first_order
from ._sequence_batch import either

if TYPE_CHECKING:
    from .sequence import EmbeddingCollection


def module(key: int) -> "EmbeddingCollection":
    """The live EmbeddingCollection registered under ``key`` (its engine handle; the registry of
    ``_ops``, whose keys are unique engine handles across both collection types)."""
    return _module(key)  # type: ignore[return-value]


@torch.library.custom_op("recgo::ec_forward", mutates_args=())
def ec_forward(key: int, keep: bool, key_feature: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor,
               dims: list[int], params: list[torch.Tensor], frozen: list[bool],
               train: bool) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Per key (KJT order, ``dims[k]`` its embedding dim) its ``[n_k, D_k]`` rows, and the ticket owning
    the saved context (id 0 without ``keep``; see ``_contexts.py``). ``frozen`` marks, per used table,
    those a fused backward leaves out; ``train`` is the module's mode when the call was traced (as
    ``recgo::ebc_forward``'s)."""
    m = module_for(key, params)
    outs, ticket = m._run_forward(key_feature, values, lengths, dims, keep, train, owner=m._contexts.ticket)
    return outs, m._contexts.ticket(0) if ticket is None else ticket


@ec_forward.register_fake
def _(key: int, keep: bool, key_feature: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor,
      dims: list[int], params: list[torch.Tensor], frozen: list[bool],
      train: bool) -> tuple[list[torch.Tensor], torch.Tensor]:
    if len(dims) == 1:
        sizes: list[Any] = [values.shape[0]]
    else:
        ctx = torch.library.get_ctx()
        sizes = [ctx.new_dynamic_size() for _ in dims]
    outs = [values.new_empty((n, d), dtype=torch.float32) for n, d in zip(sizes, dims)]
    return outs, values.new_empty((1,), dtype=torch.int64)


@torch.library.custom_op("recgo::ec_backward", mutates_args=())
def ec_backward(key: int, ctx_id: torch.Tensor, grads: list[torch.Tensor], skip: list[bool]) -> list[torch.Tensor]:
    """Fused: applies the optimizer (leaving out the used tables ``skip`` marks, or none when it is
    empty), returns ``[zeros(())]``. Dense gradients: one weight-shaped gradient per used table.
    Sparse: ``[rows_t, grads_t, ...]`` per used table."""
    m = module(key)
    raw = m._run_backward(int(ctx_id.item()), grads, list(skip) or None)
    if m._fused:
        return [torch.zeros((), dtype=torch.float32)]
    return m._grads_from(raw) if dense_in_op(m) else raw  # type: ignore[return-value]


@ec_backward.register_fake
def _(key: int, ctx_id: torch.Tensor, grads: list[torch.Tensor], skip: list[bool]) -> list[torch.Tensor]:
    m = module(key)
    if m._fused:
        return [ctx_id.new_empty((), dtype=torch.float32)]
    if dense_in_op(m):
        return [ctx_id.new_empty(shape, dtype=torch.float32) for shape in m._grad_shapes()]
    ctx = torch.library.get_ctx()
    out = []
    for d in m._table_dims:
        u = ctx.new_dynamic_size()
        out += [ctx_id.new_empty((u,), dtype=torch.int64), ctx_id.new_empty((u, d), dtype=torch.float32)]
    return out


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[list[torch.Tensor], torch.Tensor]) -> None:
    ctx.key, ctx.frozen = inputs[0], list(inputs[7]) if any(inputs[7]) else None
    # which table each output belongs to, to skip the tables whose outputs the loss leaves out; not
    # while compiling (reading the values would make data-dependent sizes), where AOTAutograd hands
    # zeros for unused outputs anyway
    kf = inputs[2]
    ctx.key_feature = kf.tolist() if type(kf) is torch.Tensor and not torch.compiler.is_compiling() else None
    ctx.dims = [o.shape for o in output[0]]
    ctx.save_for_backward(output[1])


def _backward(ctx: Any, grads: list[torch.Tensor | None], _grad_ctx: Any) -> tuple[Any, ...]:
    (ctx_id,) = ctx.saved_tensors
    filled = [g if g is not None else torch.zeros(s, dtype=torch.float32) for g, s in zip(grads, ctx.dims)]
    m = module(ctx.key)
    skip = m._skipped(ctx.key_feature, [g is None for g in grads]) if ctx.key_feature is not None else None
    skip = either(ctx.frozen, skip)

    def run() -> Any:
        raw = torch.ops.recgo.ec_backward(ctx.key, ctx_id, filled, skip or [])
        return m._without(raw if dense_in_op(m) else m._grads_from(raw), skip)

    return None, None, None, None, None, None, first_order(grads, run), None, None


ec_forward.register_autograd(_backward, setup_context=_setup_context)
