"""A fused collection replicated by DistributedDataParallel is refused (``modules/_replicated.py``).

Swapping TorchRec's imports for recgo's and keeping ``DistributedModelParallel`` (TorchRec's planner
skips recgo's collections, and DMP wraps the whole model in DDP), or wrapping a model in DDP as it is,
left each rank's fused tables training on its own samples: the copies drifted apart without an error
(found by session 45's porting pass). The training forward now raises naming ``shard_model``; a
collection without a fused optimizer (DDP all-reduces its gradients) or one DDP is told to ignore
trains as before, and one rank is no replication."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import recgo
from recgo.errors import InvalidInputError
from recgo.modules import optim
from spawned import one_rank, spawn

WORLD = 2


class _Model(nn.Module):
    """A collection (pooled or sequence) and a linear layer over its output."""

    def __init__(self, sequence: bool, fused: bool) -> None:
        super().__init__()
        opt = optim.SGD(lr=0.5) if fused else None
        if sequence:
            self.ec = recgo.EmbeddingCollection([recgo.EmbeddingConfig(
                name="t", embedding_dim=3, num_embeddings=20, feature_names=["f"])], optimizer=opt, seed=1)
        else:
            self.ec = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(
                name="t", embedding_dim=3, num_embeddings=20, feature_names=["f"])], optimizer=opt, seed=1)
        self.sequence = sequence
        self.lin = nn.Linear(3, 1)

    def forward(self, kjt: Any) -> torch.Tensor:
        out = self.ec(kjt)
        x = out["f"].values() if self.sequence else out.values()
        return self.lin(x).sum()


def _batch(rank: int) -> recgo.KeyedJaggedTensor:
    return recgo.KeyedJaggedTensor.from_lengths_sync(["f"], torch.tensor([rank, 3 + rank, 7]), torch.tensor([2, 1]))


def _step(model: nn.Module, rank: int) -> None:
    model(_batch(rank)).backward()


def _ranks(rank: int, world: int) -> dict[str, Any]:
    torch.manual_seed(0)
    out: dict[str, Any] = {}
    for sequence in (False, True):
        kind = "sequence" if sequence else "pooled"
        ddp = nn.parallel.DistributedDataParallel(_Model(sequence, fused=True))
        try:
            _step(ddp, rank)
            out[f"{kind} fused"] = "ran"
        except InvalidInputError as exc:
            out[f"{kind} fused"] = str(exc)
        with torch.no_grad():  # no backward to come: nothing is updated, nothing refused
            ddp(_batch(rank))
        # dense gradients: DDP all-reduces them, and the replicas stay equal after an SGD step
        dense = nn.parallel.DistributedDataParallel(_Model(sequence, fused=False))
        sgd = torch.optim.SGD(dense.parameters(), lr=0.5)
        _step(dense, rank)
        sgd.step()
        w = dense.module.ec.state_dict()[f"{'embeddings' if sequence else 'embedding_bags'}.t.weight"].clone()
        gathered = [torch.empty_like(w) for _ in range(world)]
        dist.all_gather(gathered, w)
        out[f"{kind} dense replicas equal"] = all(torch.equal(g, gathered[0]) for g in gathered)
        # the collection's parameters ignored by DDP: the user keeps them apart on purpose
        model = _Model(sequence, fused=True)
        ignored = [n for n, _ in model.named_parameters() if n.startswith("ec.")]
        nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ignored)
        _step(nn.parallel.DistributedDataParallel(model), rank)
        out[f"{kind} ignored"] = "ran"
    try:
        from torchrec.distributed.model_parallel import DistributedModelParallel
    except ImportError:
        return out
    dmp = DistributedModelParallel(_Model(False, fused=True), device=torch.device("cpu"))
    try:
        _step(dmp, rank)
        out["torchrec dmp"] = "ran"
    except InvalidInputError as exc:
        out["torchrec dmp"] = str(exc)
    return out


def test_ddp_refuses_a_replicated_fused_collection(tmp_path: Path) -> None:
    results = spawn(_ranks, WORLD, tmp_path)
    for rank, res in enumerate(results):
        assert "error" not in res, f"rank {rank}: {res['error']}"
        for kind in ("pooled", "sequence"):
            msg = res[f"{kind} fused"]
            assert "run inside DistributedDataParallel over 2 ranks" in msg and "shard_model" in msg, (rank, kind, msg)
            assert "['t']" in msg
            assert res[f"{kind} dense replicas equal"] is True, (rank, kind)
            assert res[f"{kind} ignored"] == "ran", (rank, kind)
        if importlib.util.find_spec("torchrec") is not None:  # DMP kept around the model: its DDP replicates it
            assert "shard_model" in res["torchrec dmp"], (rank, res["torchrec dmp"])


def test_one_rank_is_no_replication(tmp_path: Path) -> None:
    """DDP over one rank keeps one copy: the fused collection trains under it, its rows moved by the step."""
    with one_rank(tmp_path):
        model = _Model(False, fused=True)
        before = model.ec.embedding_bags["t"].weight.detach().clone()
        _step(nn.parallel.DistributedDataParallel(model), 0)
        assert not torch.equal(model.ec.embedding_bags["t"].weight.detach(), before)
