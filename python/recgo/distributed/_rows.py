"""Steps that bring one row per lookup back to the requesting rank (the engine's sequence steps), shared
by :class:`ShardedEmbeddingCollection` and the pooled collection's per-ID weights that require grad
(``_weighted``): begin and drive such a step, read its rows out one tensor per batch key (through
autograd when a shard trains), and hand their gradient back to the engine."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, Sequence

import torch

from .. import _lib
from ..modules._second_order import first_order
from ..modules._sequence_batch import unused_tables
from ..tensors import check_tensor, ptr
from ._exchange import drive
from ._step import _Step

if TYPE_CHECKING:
    from ._collection import ShardedEmbeddingBagCollection


class RowsStep(_Step):
    """A step whose rows come back one per lookup: the exchange's handle (``handle``) and the sequence
    side's (``seq``)."""

    __slots__ = ("seq",)

    def __init__(self, handle: _lib.Handle, seq: _lib.Handle) -> None:
        super().__init__(handle)
        self.seq = seq

    def gather(self, total: int) -> torch.Tensor:
        """The step's rows, one per lookup, back to back in batch-key order (``total`` values)."""
        out = torch.empty(total, dtype=torch.float32)
        _lib.call(_lib.fn("recgo_shard_seq_gather"), self.seq.value, ptr(out), out.numel())
        return out

    def begin_backward(self, grad: torch.Tensor, scale: float, fused: bool, unused: list[bool] | None) -> None:
        """Hand the rows' gradient (:meth:`gather`'s layout) to the engine, which merges it per distinct
        row and queues the backward exchange; ``unused`` marks the tables none of whose outputs this
        rank's loss used (a table no rank used takes no step), ``frozen`` those frozen."""
        grad = check_tensor(grad, "grad_output", (torch.float32, torch.float64), ndim=1, convert_to=torch.float32)
        flags, frozen = _lib.ByteFlags(unused), _lib.ByteFlags(self.frozen)
        _lib.call(_lib.fn("recgo_shard_seq_backward"), self.seq.value, ptr(grad), grad.numel(), scale,
                  int(fused), *flags.args, *frozen.args)


def begin_rows(module: "ShardedEmbeddingBagCollection", key_feature: torch.Tensor, values: torch.Tensor,
               lengths: torch.Tensor) -> RowsStep:
    """Begin a rows step of ``module`` on the engine batch (``values`` and ``lengths`` int64, checked),
    whose forward exchange the caller then drives (:func:`drive_rows`)."""
    step, seq = _lib.H(0), _lib.H(0)
    return _lib.call_making(_lib.fn("recgo_shard_seq_begin"), [step, seq], module._handle.value, ptr(key_feature),
                            key_feature.numel(), ptr(values), values.numel(), ptr(lengths), lengths.numel(),
                            ctypes.byref(step), ctypes.byref(seq),
                            then=lambda: RowsStep(_lib.Handle(step.value), _lib.Handle(seq.value)))


def drive_rows(module: "ShardedEmbeddingBagCollection", step: RowsStep) -> None:
    """Run a rows step's forward exchange (rows travel whole: no owner pooling, no narrowed wire)."""
    drive(step.handle, module._groups, step.traffic)


def key_rows(module: "ShardedEmbeddingBagCollection", step: RowsStep, feats: list[int],
             sizes: list[int]) -> Sequence[torch.Tensor]:
    """The step's rows, one flat tensor per batch key (``sizes`` values each, KJT order; ``feats`` each
    key's feature index): through autograd when a shard it updates requires grad, else read out at once."""
    shards = module._graph_weights(step)
    if shards is not None:
        return _KeyLookup.apply(module, step, feats, sizes, module._anchor, *shards)
    out = step.gather(sum(sizes))
    module._record(step)
    return out.split(sizes)


class _KeyLookup(torch.autograd.Function):
    """A rows step's rows as one tensor per batch key, so that autograd leaves out the gradient of
    a key the loss did not use: a table none of whose keys reached the loss on any rank takes no
    optimizer step, as torch's optimizers skip a parameter without a gradient (a fused update with
    zeros would still move Adam's rows, decay them and count a step)."""

    @staticmethod
    def forward(ctx: Any, module: "ShardedEmbeddingBagCollection", step: RowsStep, feats: list[int],
                sizes: list[int], anchor: torch.Tensor, *weights: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.module, ctx.step, ctx.feats, ctx.sizes = module, step, feats, sizes
        ctx.set_materialize_grads(False)
        # views of one buffer, as torch.split's (an in-place change of one raises, as it does on TorchRec's)
        return tuple(step.gather(sum(sizes)).split(sizes))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:
        m = ctx.module
        missing = [g is None for g in grads]
        unused = unused_tables(ctx.feats, missing, m._feature_tables, range(len(m._configs)))
        flat = torch.cat([torch.zeros(n, dtype=torch.float32) if g is None else g.reshape(-1).to(torch.float32)
                          for g, n in zip(grads, ctx.sizes)]) if grads else torch.zeros(0)
        out = first_order([g for g in grads if g is not None], lambda: m._backward(ctx.step, flat, unused))
        ctx.step = None
        return (None, None, None, None, *out)
