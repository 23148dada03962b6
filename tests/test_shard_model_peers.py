"""shard_model's DDP wrapper when a peer is lost: the dense part's collectives (DDP's sync before the
forward, its bucket all-reduces in the backward) run on a group of their own with the collections'
timeout and fail with recgo's PeerFailureError (they raised gloo's bare RuntimeError), and a comm hook
the user registers still reduces the buckets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

import recgo
from recgo.modules import optim


class _Dense(torch.nn.Module):
    """A collection and a linear layer: shard_model wraps the layer in DDP."""

    def __init__(self) -> None:
        super().__init__()
        self.ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(30, 4, "t", ["f"])],
                                                optimizer=optim.SGD(lr=0.1), seed=1)
        self.lin = torch.nn.Linear(4, 1)

    def forward(self, kjt: recgo.KeyedJaggedTensor) -> torch.Tensor:
        return self.lin(self.ebc(kjt).values()).sum()


DDP_TIMEOUT = 5.0


def _dead_peer_at_ddp(rank: int, world: int) -> dict[str, Any]:
    """Two good steps, then rank 1 dies: rank 0's next forward meets it first in DDP's sync before the
    forward, which ran on the default group (30 minutes' timeout, a bare gloo RuntimeError)."""
    import os
    import time

    from recgo.distributed import PeerFailureError, shard_model

    model = shard_model(_Dense(), "hash", timeout=DDP_TIMEOUT)
    kjt = recgo.KeyedJaggedTensor(["f"], torch.tensor([1, 2, 3, 4]), lengths=torch.tensor([2, 2]))
    for _ in range(2):
        model(kjt).backward()
    if rank == 1:
        os._exit(3)
    t0 = time.monotonic()
    try:
        model(kjt)
    except PeerFailureError as exc:
        return {"type": "PeerFailureError", "seconds": time.monotonic() - t0, "message": str(exc)}
    return {"type": None}


def test_a_dead_peer_fails_ddps_sync_within_the_timeout(tmp_path: Path) -> None:
    from spawned import spawn

    got = spawn(_dead_peer_at_ddp, 2, tmp_path, wait=120, expect=[0])[0]
    assert got.get("type") == "PeerFailureError", got
    assert got["seconds"] < DDP_TIMEOUT + 5 and "DistributedDataParallel" in got["message"], got


class _DenseOnly(_Dense):
    """``_Dense`` whose forward, given dense inputs ``x``, runs the linear layer alone: its backward's
    only collective is then DDP's all-reduce."""

    def forward(self, kjt: recgo.KeyedJaggedTensor, x: torch.Tensor | None = None) -> torch.Tensor:
        return super().forward(kjt) if x is None else self.lin(x).sum()


def _dead_peer_at_ddp_backward(rank: int, world: int) -> dict[str, Any]:
    """A step whose dense gradients average over the ranks, again under a comm hook the user registers,
    then rank 1 dies between its forward and its backward: rank 0's all-reduce in the backward meets it
    (its error reached backward() as gloo's bare RuntimeError)."""
    import os
    import time

    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from recgo.distributed import PeerFailureError, shard_model

    model = shard_model(_DenseOnly(), "hash", timeout=DDP_TIMEOUT)
    kjt = recgo.KeyedJaggedTensor(["f"], torch.tensor([1, 2, 3, 4]), lengths=torch.tensor([2, 2]))
    x = torch.full((2, 4), rank + 1.0)  # d(sum lin(x))/dW = Σ rows of x: 2 and 4 on ranks 0 and 1
    lin = model.module.lin
    out: dict[str, Any] = {"grads": []}
    calls: list[int] = []

    def counted(state, bucket):  # type: ignore[no-untyped-def]  # (DDP checks the annotations)
        calls.append(bucket.index())
        return default_hooks.allreduce_hook(state, bucket)

    for step in range(2):
        if step == 1:
            model.register_comm_hook(model.process_group, counted)
        lin.zero_grad()
        model(kjt, x).backward()
        out["grads"].append((lin.weight.grad.unique().tolist(), lin.bias.grad.tolist()))
    out["hook_calls"] = list(calls)
    loss = model(kjt, x)
    if rank == 1:
        os._exit(3)
    t0 = time.monotonic()
    try:
        loss.backward()
    except PeerFailureError as exc:
        return out | {"type": "PeerFailureError", "seconds": time.monotonic() - t0, "message": str(exc)}
    except Exception as exc:
        return out | {"type": type(exc).__name__, "message": str(exc)}
    return out | {"type": None}


def test_a_dead_peer_fails_ddps_backward_all_reduce_with_peer_failure_error(tmp_path: Path) -> None:
    from spawned import spawn

    got = spawn(_dead_peer_at_ddp_backward, 2, tmp_path, wait=120, expect=[0])[0]
    assert got.get("grads") == [([3.0], [2.0])] * 2, got  # the mean of the ranks' gradients, hook or not
    assert got["hook_calls"] == [0], got
    assert got.get("type") == "PeerFailureError", got
    assert got["seconds"] < DDP_TIMEOUT + 5, got
    assert "rank 0: the dense part's DistributedDataParallel all-reduce in the backward failed" in got["message"], got
