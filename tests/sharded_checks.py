"""Checks shared by the sharded-collection tests (test_distributed*.py): a tolerance for sums taken
in another order, and the comparison of a sharded collection's rows after one training step with a
single-process reference's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch


def close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    """1e-6 relative to the tensors' scale (the sharded sums add the same terms in another order)."""
    scale = max(1.0, float(b.abs().max())) if b.numel() else 1.0
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6 * scale, msg=lambda m: f"{what}: {m}")


def check_update(mine: Mapping[str, Any], ref: Mapping[str, Any], cfgs: Sequence[Any], ids: Mapping[str, torch.Tensor],
                 torch_opts: Sequence[torch.optim.Optimizer] | None, what: str) -> None:
    """After a backward: with torch optimizers, each table's gradient on this rank (the reference's rows
    ``ids[name]``) equals the reference's, then both optimizers step; then every table's rows, and a
    fused optimizer's state and step counter, equal the reference's. ``mine`` and ``ref`` map table
    names to their modules (``embedding_bags`` / ``embeddings``)."""
    if torch_opts is not None:
        for c in cfgs:
            close(mine[c.name].weight.grad, ref[c.name].weight.grad[ids[c.name]], f"{what} grad {c.name}")
        for o in torch_opts:
            o.step()
            o.zero_grad()
    for c in cfgs:
        a, b = mine[c.name], ref[c.name]
        close(a.weight.detach(), b.weight.detach()[ids[c.name]], f"{what} weights {c.name}")
        if hasattr(b, "optimizer_state"):
            close(a.optimizer_state, b.optimizer_state[ids[c.name]], f"{what} state {c.name}")
            assert int(a.optimizer_step) == int(b.optimizer_step), f"{what} optimizer step {c.name}"
