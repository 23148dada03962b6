"""recgo's main job: train ranking models end to end with recgo, TorchRec or plain PyTorch embeddings.

``python -m recgo train`` (or :func:`train`) builds the same model on each backend — same data, same
initial weights, same optimizers — trains it, evaluates AUC and log loss on a held-out split every N
steps, and writes a side-by-side report. Models: :class:`~recgo.train.models.DLRM`,
:class:`~recgo.train.models.DCNv2` (Criteo-format data or the planted synthetic default) and
:class:`~recgo.train.models.BST` (Taobao UserBehavior sequences).
"""

from __future__ import annotations

from .loop import MODELS, TrainConfig, Trainer, make_source
from .metrics import auc, log_loss
from .run import train

__all__ = ["MODELS", "TrainConfig", "Trainer", "auc", "log_loss", "make_source", "train"]
