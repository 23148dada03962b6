"""The pieces of a sharded collection's step: a table's local shard module, a step's engine handle
with its traffic, and the autograd node that runs the backward exchange."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from .. import _lib
from ..errors import InvalidInputError
from ..modules._second_order import first_order
from ..tensors import check_tensor, ptr
from .._rank_tags import RANK_TAG, SHARD_IDS

if TYPE_CHECKING:
    from ._collection import ShardedEmbeddingBagCollection


class _Shard(nn.Module):
    """One table's local shard: ``weight`` [local rows, dim] (and the fused optimizer's state)."""

    def __init__(self, weight: torch.Tensor, requires_grad: bool, state: torch.Tensor | None, step: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=requires_grad)
        if state is not None:
            self.register_buffer("optimizer_state", state)
        self.register_buffer("optimizer_step", step)

    def __getattr__(self, name: str) -> Any:
        # The state dict names a shard's entries with its rank (``<table>.rank<r>_of_<w>.weight``, see
        # _state.rank_keys) and adds entries made at save time (``shard_ids``, a dynamic table's
        # ``dynamic_*``); torch's state-dict utilities (torch.distributed.checkpoint.state_dict's
        # get_model_state_dict) walk every key's names as attributes. The tag resolves to the shard
        # itself, a made entry to None (nothing is stored under it).
        if RANK_TAG.fullmatch(name):
            return self
        if name == SHARD_IDS or name.startswith("dynamic_"):
            return None
        return super().__getattr__(name)


class _Step:
    """A step's engine handle, the bytes its exchanges sent, per group, and the tables frozen when its
    forward ran (``frozen``: None when none was; the backward leaves them out)."""

    __slots__ = ("handle", "traffic", "frozen")

    def __init__(self, handle: _lib.Handle) -> None:
        self.handle = handle
        self.traffic: dict[str, int] = {}
        self.frozen: list[bool] | None = None

    def begin_backward(self, grad: torch.Tensor, scale: float, fused: bool, unused: list[bool] | None) -> None:
        """Hand the pooled output's gradient ([B, width]) to the engine, which queues the backward
        exchange, ``scale`` times it (a pooled output is one tensor: every table is used, ``unused`` is
        None)."""
        grad = check_tensor(grad, "grad_output", (torch.float32, torch.float64), ndim=2, convert_to=torch.float32)
        frozen = _lib.ByteFlags(self.frozen)
        _lib.call(_lib.fn("recgo_shard_backward"), self.handle.value, ptr(grad), grad.numel(), scale, int(fused),
                  *frozen.args)


class _Lookup(torch.autograd.Function):
    """The output of a step whose forward exchange already ran (the collection's ``_output``: pooled
    bags, or one row per lookup); backward runs the gradient exchange and the owners' fused updates
    (the anchor's zero gradient keeps the node alive), or returns each shard's merged gradient."""

    @staticmethod
    def forward(ctx: Any, module: "ShardedEmbeddingBagCollection", step: _Step, size: int,
                anchor: torch.Tensor, *weights: torch.Tensor) -> torch.Tensor:
        ctx.module, ctx.step = module, step
        return module._output(step, size)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        if ctx.step is None:  # a graph kept by retain_graph=True, backward again
            raise InvalidInputError(
                "a sharded collection's output takes one backward: its gradient exchange ran with every rank "
                "(and, with a fused optimizer, updated the rows), so backward(retain_graph=True) followed by a "
                "second backward is not supported; sum the losses and call backward once")
        grads = first_order([grad], lambda: ctx.module._backward(ctx.step, grad))
        ctx.step = None
        return (None, None, None, *grads)
