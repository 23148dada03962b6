"""Fused optimizers for recgo's embedding tables, applied row by row inside the backward pass.

Pass one to :class:`recgo.EmbeddingBagCollection` as ``optimizer=``; the engine then merges each
batch's gradient per distinct row and updates that row (and its optimizer state, kept beside the
table outside the Python heap) in the same pass, like TorchRec's fused EmbeddingBagCollection.
Hyper-parameters are checked by the engine: out-of-range values, and parameters an optimizer does not
take (``eps`` for SGD, ``beta1``/``beta2`` outside Adam/AdamW: they would be ignored), raise
``InvalidInputError``. ``weight_decay`` is torch.optim's L2 term on every optimizer but AdamW: the
gradient becomes g + wd·w before the update (applied, like the update, to the rows a batch touches).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import _lib


@dataclass(frozen=True)
class FusedOptimizer:
    """Base of the fused optimizers: the engine's kind code and hyper-parameters."""

    lr: float
    eps: float = 0.0
    beta1: float = 0.0
    beta2: float = 0.0
    weight_decay: float = 0.0

    kind = _lib.const("OptNone")

    def state_width(self, dim: int) -> int:
        """Number of float32 state values each row keeps."""
        return 0

    def params(self) -> tuple[int, float, float, float, float, float]:
        """(kind, lr, eps, beta1, beta2, weight_decay) as the C ABI takes them."""
        return (self.kind, float(self.lr), float(self.eps), float(self.beta1), float(self.beta2),
                float(self.weight_decay))


@dataclass(frozen=True)
class SGD(FusedOptimizer):
    """Plain SGD (torch.optim.SGD without momentum): w ← w − lr·(g + wd·w)."""

    kind = _lib.const("OptSGD")


@dataclass(frozen=True)
class Adagrad(FusedOptimizer):
    """Adagrad (torch.optim.Adagrad, FBGEMM EXACT_ADAGRAD): g ← g + wd·w, s ← s + g²,
    w ← w − lr·g/(√s + eps)."""

    eps: float = 1e-10
    kind = _lib.const("OptAdagrad")

    def state_width(self, dim: int) -> int:
        return dim


@dataclass(frozen=True)
class RowWiseAdagrad(FusedOptimizer):
    """Row-wise Adagrad (FBGEMM EXACT_ROWWISE_ADAGRAD): one accumulator per row, g ← g + wd·w,
    s ← s + mean(g²), w ← w − lr·g/(√s + eps)."""

    eps: float = 1e-8
    kind = _lib.const("OptRowwiseAdagrad")

    def state_width(self, dim: int) -> int:
        return 1


@dataclass(frozen=True)
class Adam(FusedOptimizer):
    """Adam with L2 weight decay, applied lazily to the rows a batch touches (like SparseAdam).

    State per row: the first moment (dim values) then the second moment (dim values); the step
    counter is per table and counts backward passes.
    """

    lr: float = 1e-3
    eps: float = 1e-8
    beta1: float = 0.9
    beta2: float = 0.999
    kind = _lib.const("OptAdam")

    def state_width(self, dim: int) -> int:
        return 2 * dim


@dataclass(frozen=True)
class AdamW(Adam):
    """AdamW: Adam with decoupled weight decay (w ← w·(1 − lr·wd)) on the touched rows."""

    weight_decay: float = 1e-2
    kind = _lib.const("OptAdamW")
