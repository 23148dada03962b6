"""The collections' eager path: their engine calls without the custom ops' dispatch.

A ``torch.library`` custom op has a fixed cost per call in eager mode (argument schema checks,
pytree flattening of the list arguments, the autograd wrapper and two redispatches) that a training
step pays in forward and again in backward, and that dominates a small step (docs/sequence.md). When nothing needs
the op — not ``torch.compile`` or ``torch.export`` tracing, no ``TorchDispatchMode`` active, plain
tensors — a collection calls its engine directly: through :class:`_Lookup`, an
``autograd.Function``, when the forward keeps a context for backward, or plainly when it does not.
Both paths run the same module methods, so their results are the same; the custom ops stay the
path compile, export, dispatch modes and tensor subclasses see.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from .. import _lib
from .._lib import Handle
from ..errors import InvalidInputError
from ._contexts import NO_CONTEXT
from ._second_order import first_order

#: Runs a forward: returns the outputs and the handle of the context it kept (``ContextStore.own``).
Forward = Callable[[], "tuple[list[torch.Tensor], Handle]"]
#: Runs a backward: takes the context's handle (and frees it when the backward runs ``once``) and one
#: gradient per output, returns one gradient per parameter.
Backward = Callable[[Handle, "list[torch.Tensor]"], "list[torch.Tensor | None]"]


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def allowed(*tensors: torch.Tensor | None) -> bool:
    """Whether the eager path may serve a call with these inputs (see the module docstring)."""
    if torch.compiler.is_compiling() or _get_current_dispatch_mode() is not None:
        return False
    return all(t is None or type(t) in _PLAIN for t in tensors)


def warn_fused_export(keep: bool, fused: bool) -> None:
    """Warn when ``torch.export`` traces a fused collection's training forward: the exported program
    lifts the op's anchor as a constant, so its backward never reaches the fused update (the tables
    stayed as they were, without a word)."""
    if keep and fused and torch.compiler.is_exporting():
        warnings.warn("torch.export of a model with a fused recgo collection in training: the exported "
                      "program's backward does not run the fused update (the tables do not train); export "
                      "the eval model (model.eval(), torch.no_grad()) for inference, and train the eager or "
                      "torch.compile'd model", UserWarning, stacklevel=4)


def lookup(forward: Forward, backward: Backward, params: Sequence[torch.Tensor], once: bool) -> list[torch.Tensor]:
    """Run ``forward`` under autograd: its outputs, whose gradients ``backward`` turns into the
    parameters' (the context handle it returns is kept for that backward). ``once``: the backward
    consumes the context (a fused update), so the graph's backward runs once; otherwise it only reads
    it, and the context is freed when the graph's saved tensors are (at the end of a backward without
    ``retain_graph``), so ``retain_graph=True`` allows another backward."""
    return list(_Lookup.apply(forward, backward, once, *params))


def _alias(t: torch.Tensor) -> torch.Tensor:
    """``t``'s memory as a tensor that is not a view, so that the output may be modified in place
    (autograd refuses that for a Function's view outputs)."""
    if not t._is_view():
        return t
    return torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), t.storage_offset(), t.shape, t.stride())


#: What a gradient-only node saves, only to learn when autograd frees the graph's saved tensors.
_MARK = torch.empty(0)


def _free_if_released(ctx: Any) -> None:
    """At the end of a gradient-only backward's graph task: free the node's context unless the graph
    was retained (its saved tensors still there: ``retain_graph=True``, another backward may come)."""
    try:
        ctx._raw_saved_tensors  # noqa: B018  # raises once autograd released them; unpacks nothing
    except RuntimeError:
        handle, ctx.handle = ctx.handle, None
        if handle is not None:
            handle.free()


class _Lookup(torch.autograd.Function):
    """A collection's forward with its engine context kept for its backward.

    The node (``ctx``) holds the context's handle: the graph owns the context, which is freed by the
    (fused, ``once``) backward or, when the graph is dropped without one, with the node. No ticket
    tensor is needed (the custom ops need one: a compiled graph saves tensors only). A gradient-only
    backward only reads the context; once the graph task ends it frees the context unless the graph
    was retained (``retain_graph=True``: the node's saved marker tensor is still there), so the
    retained graph may run backward again. Gradients are not materialised
    (autograd would build a zero tensor per unused output on each backward); the unused outputs get
    theirs here."""

    @staticmethod
    def forward(ctx: Any, forward: Forward, backward: Backward, once: bool,
                *params: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs, handle = forward()
        ctx.backward, ctx.once, ctx.handle = backward, once, handle
        if not once:
            ctx.save_for_backward(_MARK)  # tells _free_if_released whether the graph was retained
        ctx.shapes = [o.shape for o in outs]
        ctx.set_materialize_grads(False)
        return tuple(_alias(o) for o in outs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:
        if ctx.once:
            handle, ctx.handle = ctx.handle, None  # taken once: a second backward of the graph finds none
        else:
            handle = ctx.handle
            if handle is None:
                ctx._raw_saved_tensors  # noqa: B018  # released: torch's error for a second backward
            else:
                torch.autograd.Variable._execution_engine.queue_callback(lambda: _free_if_released(ctx))
        if handle is None:
            raise InvalidInputError(NO_CONTEXT)
        filled = [g if g is not None else torch.zeros(s, dtype=torch.float32) for g, s in zip(grads, ctx.shapes)]
        missing = [g is None for g in grads]  # outputs the loss did not use (a sequence collection skips their tables)
        run = (lambda: ctx.backward(handle, filled, missing)) if any(missing) else (lambda: ctx.backward(handle, filled))
        return (None, None, None, *first_order(grads, run))


#: The forward exports' ``train`` argument (the library's constants, capi/contexts.go): an evaluation
#: forward, a training one, and the recomputation of a training forward in backward.
EVAL, TRAIN, RECOMPUTE = (_lib.const(f"Forward{n}") for n in ("Eval", "Train", "Recompute"))


def forward_mode(training: bool, train: bool | None = None) -> int:
    """How a forward looks dynamic tables up: ``train`` if given, else the module's ``training`` mode,
    gives TRAIN (admit new IDs, advance the clocks) or EVAL; a training forward run inside a backward
    pass is RECOMPUTE. That is ``torch.utils.checkpoint`` recomputing the forward: the first forward
    counted the batch already, so the recomputation admits nothing and keeps the clocks, and reads the
    rows that forward read (an ID without a row pools zeros, as there, not an eval ``default``)."""
    train = training if train is None else train
    if not train:
        return EVAL
    return TRAIN if torch._C._current_graph_task_id() == -1 else RECOMPUTE
