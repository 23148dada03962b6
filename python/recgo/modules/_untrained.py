"""The warning for tables that collect gradients nothing applies.

A collection without a fused optimizer gives its weights gradients for a torch optimizer; a script
that hands only the dense parameters to its optimizer trains no table, silently. The check counts
backward passes after which no table moved and warns once past a gradient-accumulation length.
"""

from __future__ import annotations

import warnings
from typing import Iterable

import torch

#: Backward passes in a row without an update before the warning (above usual accumulation lengths).
WARN_AFTER = 32


class UntrainedCheck:
    """One collection's count of backward passes that left every table unchanged."""

    def __init__(self) -> None:
        self.untouched = 0  # backward passes in a row that left every table's weight unchanged
        self.backwards = 0  # backward passes since the last check
        self.versions: list[int] | None = None
        self.probe: tuple[torch.Tensor, int, torch.Tensor] | None = None  # a row the last backward touched
        self.warned = False

    def backward(self, touched: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Count a backward pass; ``touched``: each table's weight and the rows it gave gradients."""
        self.backwards += 1
        for weight, rows in touched:
            if rows.numel() and 0 <= int(rows[0]) < weight.shape[0]:
                r = int(rows[0])
                self.probe = (weight, r, weight[r].detach().clone())
                return

    def check(self, params: list[torch.Tensor]) -> None:
        """Before a training forward: warn once when backward passes keep accumulating gradients into
        weights nothing updates (``optimizer=None`` and the parameters left out of every torch optimizer)."""
        versions = [p._version for p in params]
        if self.versions is not None and self.backwards > 0:
            # torch's fused optimizers and updates through .data leave _version alone: a row the last
            # backward put a gradient on tells those apart from no update at all
            probe = self.probe
            moved = probe is not None and not torch.equal(probe[0][probe[1]], probe[2])
            self.untouched = self.untouched + self.backwards if versions == self.versions and not moved else 0
        self.versions, self.backwards, self.probe = versions, 0, None
        if self.untouched >= WARN_AFTER and not self.warned:
            self.warned = True
            warnings.warn(
                f"EmbeddingBagCollection(optimizer=None): {self.untouched} backward passes put gradients on the "
                "tables' weights but nothing updated them, so the tables do not train. Give the collection's "
                "parameters to a torch optimizer and step it, or pass a fused optimizer, e.g. "
                "optimizer=recgo.modules.optim.Adagrad(lr=0.01).", UserWarning, stacklevel=3)
