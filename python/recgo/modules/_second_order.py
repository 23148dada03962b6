"""Gradients that refuse a double backward instead of silently lacking one.

recgo's lookups compute their weight gradients in the engine, outside autograd, so a backward run
with ``create_graph=True`` would return gradients with no history: a gradient penalty built on them
would back-propagate as if its second-order term were zero. torch's own ``embedding_bag`` raises
``NotImplementedError`` there. :func:`first_order` marks such gradients so that differentiating them
raises :class:`~recgo.errors.InvalidInputError` (first-order uses of ``create_graph=True`` still work).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from ..errors import InvalidInputError

DOUBLE_BACKWARD = ("recgo's embedding lookups have no double backward: a gradient of the embedding weights "
                   "taken with create_graph=True cannot be differentiated again (torch's embedding_bag has "
                   "none either); compute second-order terms on the dense part only")


class _NoDoubleBackward(torch.autograd.Function):
    """A gradient (copied) whose backward raises: it stands for a term autograd cannot follow."""

    @staticmethod
    def forward(ctx: Any, grad: torch.Tensor, *incoming: torch.Tensor) -> torch.Tensor:
        return grad.clone()

    @staticmethod
    def backward(ctx: Any, *_: Any) -> Any:
        raise InvalidInputError(DOUBLE_BACKWARD)


def first_order(incoming: Sequence[torch.Tensor | None], run: Callable[[], Sequence[Any]]) -> list[Any]:
    """The gradients ``run`` computes (a backward's results, computed without autograd recording:
    they are opaque to it), unchanged, unless autograd records this backward (``create_graph=True``)
    and one of the ``incoming`` gradients has history: then every floating-point gradient is tied to
    them through a node whose backward raises."""
    live = [g for g in incoming if isinstance(g, torch.Tensor) and g.requires_grad] if torch.is_grad_enabled() else []
    with torch.no_grad():
        grads = list(run())
    if not live:
        return grads
    return [_NoDoubleBackward.apply(g, *live) if isinstance(g, torch.Tensor) and g.is_floating_point() else g
            for g in grads]
