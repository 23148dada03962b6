"""Checks shared by the sharded-collection tests (test_distributed*.py): a tolerance for sums taken
in another order, the comparison of a sharded collection's rows after one training step with a
single-process reference's, and a few such steps on random batches."""

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


def sequence_losses(want: Mapping[str, Any], got: Mapping[str, Any], mine: Any, ranges: Mapping[str, slice],
                    step: int, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Check a sharded sequence collection's outputs ``got`` (this rank's batch ``mine``) against the
    single-process ones ``want`` (the global batch; ``ranges`` each key's values of this rank in it):
    rows and lengths per output key (``feature@table`` reads key ``feature``). Returns the two losses
    of one random projection per key, the rank's slice of the reference's, for the backward."""
    loss_ref, loss = torch.zeros(()), torch.zeros(())
    for i, k in enumerate(want):
        key = k.split("@")[0]
        rows = want[k].values()
        close(got[k].values(), rows[ranges[key]].detach(), f"{what} step {step} rows {k}")
        assert torch.equal(got[k].lengths(), mine[key].lengths()), f"{what} step {step} lengths {k}"
        R = torch.randn(rows.shape, generator=torch.Generator().manual_seed(10 * step + i))
        loss_ref = loss_ref + (rows * R).sum()
        loss = loss + (got[k].values() * R[ranges[key]]).sum()
    return loss_ref, loss


def check_steps(sh: Any, ref: Any, cfgs: Sequence[Any], rank: int, world: int, what: str, steps: int = 3) -> None:
    """``steps`` training steps of the pooled sharded collection ``sh`` on this rank's slice of random
    global batches (sharded_batches.global_batch over ``cfgs``' features) against the single-process
    ``ref`` on the whole batches: the initial rows (and optimizer state), the pooled outputs, and after each backward the
    gradients and rows (a torch SGD step on both when ``sh`` has no fused optimizer) or the fused
    optimizer's updated rows and state (:func:`check_update`)."""
    from sharded_batches import B_LOCAL, global_batch, local_batch

    ids = {c.name: sh.local_ids(c.name) for c in cfgs}
    for c in cfgs:  # (close, not equal: rows loaded from a sharded checkpoint took the sharded steps)
        close(sh.embedding_bags[c.name].weight.detach(), ref.embedding_bags[c.name].weight.detach()[ids[c.name]],
              f"{what} initial rows {c.name}")
    torch_opts = None
    if sh.fused_optimizer is None:
        torch_opts = (torch.optim.SGD(ref.parameters(), lr=0.3), torch.optim.SGD(sh.parameters(), lr=0.3))
    mine = slice(rank * B_LOCAL, (rank + 1) * B_LOCAL)
    for step in range(steps):
        kjt = global_batch(step, world, cfgs=list(cfgs))
        pooled_ref = ref(kjt).values()
        pooled = sh(local_batch(kjt, rank)).values()
        close(pooled, pooled_ref[mine].detach(), f"{what} step {step} pooled")
        R = torch.randn(pooled_ref.shape, generator=torch.Generator().manual_seed(step))
        (pooled_ref * R).sum().backward()
        (pooled * R[mine]).sum().backward()
        check_update(sh.embedding_bags, ref.embedding_bags, cfgs, ids, torch_opts, f"{what} step {step}")
