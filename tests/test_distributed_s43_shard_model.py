"""Session 43: every return of ``shard_model`` carries ``.module``, ``.plan`` and ``.fused_optimizer``,
as TorchRec's ``DistributedModelParallel`` does. Before, only the DDP wrapper had ``.module`` (the
model itself, returned with ``ddp=False``, for a model without dense parameters, or a collection given
alone, had none) and no return had ``.plan``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import recgo
from recgo.modules import optim
from spawned import one_rank

SHARDING = {"a": "hash", "b": "table_wise"}
PLAN = {"a": "hash", "b": "table_wise"}


def _ebc() -> recgo.EmbeddingBagCollection:
    return recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(20, 4, "a", ["fa"]),
                                         recgo.EmbeddingBagConfig(10, 4, "b", ["fb"])],
                                        optimizer=optim.Adagrad(lr=0.1), seed=3)


class _Own(nn.Module):
    """A model whose own submodule is named ``module`` (its forward uses it)."""

    def __init__(self) -> None:
        super().__init__()
        self.ebc = _ebc()
        self.module = nn.Linear(8, 1)

    def forward(self, kjt: Any) -> torch.Tensor:
        return self.module(self.ebc(kjt).values())


def _paths() -> dict[str, tuple[nn.Module, dict[str, Any]]]:
    """shard_model's return paths: (model, keyword arguments)."""
    return {"ddp wrapper": (nn.ModuleDict({"ebc": _ebc(), "mlp": nn.Linear(8, 1)}), {}),
            "ddp=False": (nn.ModuleDict({"ebc": _ebc(), "mlp": nn.Linear(8, 1)}), {"ddp": False}),
            "no dense parameters": (nn.ModuleDict({"ebc": _ebc()}), {}),
            "a collection alone": (_ebc(), {})}


@pytest.mark.parametrize("path", list(_paths()))
def test_every_return_of_shard_model_has_module_plan_and_fused_optimizer(tmp_path: Path, path: str) -> None:
    from recgo.distributed import ShardedEmbeddingBagCollection, shard_model
    from recgo.distributed._model import ShardedModel
    from recgo.modules.optim import CollectionOptimizer

    model, kw = _paths()[path]
    with one_rank(tmp_path):
        out = shard_model(model, SHARDING, timeout=30, **kw)
        inner = out.module
        assert isinstance(out, ShardedModel) == (path == "ddp wrapper"), type(out)
        if path == "ddp wrapper":
            assert inner is model and out is not model
        elif path == "a collection alone":
            assert isinstance(out, ShardedEmbeddingBagCollection) and inner is out
        else:
            assert out is model and inner is model
            assert "module" not in dict(model.named_children()) and "module" not in model.state_dict()  # not a child
        where = "" if path == "a collection alone" else "ebc"
        assert out.plan == {where: PLAN}, out.plan
        assert isinstance(inner.get_submodule(where), ShardedEmbeddingBagCollection)
        if path == "a collection alone":  # its own property: the fused optimizer's settings
            assert out.fused_optimizer == optim.Adagrad(lr=0.1)
        else:
            assert isinstance(out.fused_optimizer, CollectionOptimizer)
        kjt = recgo.KeyedJaggedTensor(["fa", "fb"], torch.tensor([1, 2, 3]), lengths=torch.tensor([2, 1]))
        pooled = inner.get_submodule(where)(kjt).values()
        assert pooled.shape == (1, 8)


def test_a_model_with_its_own_module_attribute_keeps_it(tmp_path: Path) -> None:
    """``model.module`` is the model's own submodule (its forward uses it), not replaced by the model."""
    from recgo.distributed import shard_model

    model = _Own()
    with one_rank(tmp_path):
        out = shard_model(model, SHARDING, ddp=False, timeout=30)
        assert out is model and isinstance(out.module, nn.Linear)
        assert out.plan == {"ebc": PLAN}
        kjt = recgo.KeyedJaggedTensor(["fa", "fb"], torch.tensor([1, 2, 3]), lengths=torch.tensor([2, 1]))
        assert out(kjt).shape == (1, 1)
