"""A training script written for TorchRec, with ``DistributedModelParallel(model)`` swapped for
``recgo.distributed.shard_model(model)``, on a world of 2 gloo ranks: ``torchrec.models.dlrm.DLRM``
around TorchRec's own ``EmbeddingBagCollection`` on the meta device, its tables given their
optimizer by ``apply_optimizer_in_backward``, the dense optimizer over ``in_backward_optimizer_filter``,
a ``StepLR`` on ``model.fused_optimizer``. Every step equals TorchRec's model trained in one process
on the global batch (torch's in-backward Adagrad on the whole tables, its rate set by hand), 1e-6."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from sharded_checks import close
from spawned import spawn

torchrec = pytest.importorskip("torchrec")

WORLD, B_LOCAL, STEPS, DENSE_IN = 2, 6, 3, 5
LR_SPARSE, LR_DENSE, GAMMA = 0.1, 0.1, 0.5


def _tables() -> list[Any]:
    C = torchrec.EmbeddingBagConfig
    return [C(num_embeddings=40, embedding_dim=4, name="t_a", feature_names=["fa"]),
            C(num_embeddings=25, embedding_dim=4, name="t_b", feature_names=["fb", "fc"])]


def _batch(step: int, rank: int | None) -> tuple[torch.Tensor, Any, torch.Tensor]:
    """Dense features, a TorchRec KJT and labels: the global batch (rank None) or a rank's samples."""
    g = torch.Generator().manual_seed(700 + step)
    B = WORLD * B_LOCAL
    dense, labels = torch.randn(B, DENSE_IN, generator=g), torch.rand(B, generator=g).round()
    keys, vals, lens = [], [], []
    for t in _tables():
        for f in t.feature_names:
            ln = torch.randint(0, 4, (B,), generator=g)
            ids = (torch.rand(int(ln.sum()), generator=g) ** 2 * t.num_embeddings).long()  # skewed: repeats
            if rank is not None:
                offs = torch.cat([torch.zeros(1, dtype=torch.int64), ln.cumsum(0)])
                ids = ids[int(offs[rank * B_LOCAL]):int(offs[(rank + 1) * B_LOCAL])]
                ln = ln[rank * B_LOCAL:(rank + 1) * B_LOCAL]
            keys.append(f)
            vals.append(ids)
            lens.append(ln)
    rows = slice(None) if rank is None else slice(rank * B_LOCAL, (rank + 1) * B_LOCAL)
    kjt = torchrec.KeyedJaggedTensor(keys=keys, values=torch.cat(vals), lengths=torch.cat(lens))
    return dense[rows], kjt, labels[rows]


def _dlrm(ebc: Any) -> nn.Module:
    from torchrec.models.dlrm import DLRM

    return DLRM(embedding_bag_collection=ebc, dense_in_features=DENSE_IN, dense_arch_layer_sizes=[8, 4],
                over_arch_layer_sizes=[8, 1])


def _case(rank: int, world: int) -> dict[str, Any]:
    """One rank of the script, checked against the one-process reference after every step."""
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    from recgo.distributed import shard_model

    # -- the TorchRec script, DMP swapped for shard_model --
    torch.set_num_threads(1)
    torch.manual_seed(rank)  # the ranks' dense draws differ, as they may in a script
    # TorchRec's way: the tables on meta (never materialised whole), the dense part built on its device
    model = _dlrm(torchrec.EmbeddingBagCollection(tables=_tables(), device=torch.device("meta")))
    apply_optimizer_in_backward(torch.optim.Adagrad, model.sparse_arch.parameters(), {"lr": LR_SPARSE, "eps": 1e-8})
    model = shard_model(model, "hash", timeout=60)
    dense_opt = torch.optim.SGD([p for _, p in in_backward_optimizer_filter(model.named_parameters())], lr=LR_DENSE)
    sched = torch.optim.lr_scheduler.StepLR(model.fused_optimizer, step_size=1, gamma=GAMMA)
    sharded = model.module.sparse_arch.embedding_bag_collection

    # -- the reference: TorchRec's model in one process, from the rows the ranks drew --
    parts: list[Any] = [None] * WORLD
    dist.all_gather_object(parts, {t.name: (sharded.local_ids(t.name), sharded.embedding_bags[t.name].weight.detach())
                                   for t in _tables()})
    torch.manual_seed(0)
    ref = _dlrm(torchrec.EmbeddingBagCollection(tables=_tables()))
    with torch.no_grad():
        for t in _tables():
            w = ref.sparse_arch.embedding_bag_collection.embedding_bags[t.name].weight
            w.fill_(float("nan"))  # every row must come from some rank
            for p in parts:
                w[p[t.name][0]] = p[t.name][1]
        mine = dict(model.module.named_parameters())
        for n, p in ref.named_parameters():
            if not n.startswith("sparse_arch."):
                mine[n].copy_(p)  # the same dense start on both sides (and both ranks)
    apply_optimizer_in_backward(torch.optim.Adagrad, ref.sparse_arch.parameters(), {"lr": LR_SPARSE, "eps": 1e-8})
    ref_in = [o for p in ref.sparse_arch.parameters() for o in p._in_backward_optimizers]
    ref_dense = torch.optim.SGD([p for _, p in in_backward_optimizer_filter(ref.named_parameters())], lr=LR_DENSE)
    bce = nn.functional.binary_cross_entropy_with_logits
    rates = []
    for step in range(STEPS):
        for o in ref_in:
            o.param_groups[0]["lr"] = LR_SPARSE * GAMMA ** step
        ref_dense.zero_grad()
        dense, kjt, y = _batch(step, None)
        bce(ref(dense, kjt).squeeze(1), y).backward()
        ref_dense.step()

        model.fused_optimizer.zero_grad()  # hands the scheduler's rate to the tables, as TorchRec's does
        dense_opt.zero_grad()
        dense, kjt, y = _batch(step, rank)
        bce(model(dense, kjt).squeeze(1), y).backward()
        rates.append(sharded.fused_optimizer.lr)
        dense_opt.step()
        model.fused_optimizer.step()
        sched.step()
        for t in _tables():
            want = ref.sparse_arch.embedding_bag_collection.embedding_bags[t.name].weight.detach()
            close(sharded.embedding_bags[t.name].weight.detach(), want[sharded.local_ids(t.name)],
                  f"rank {rank} table {t.name} after step {step}")
        for n, p in ref.named_parameters():
            if not n.startswith("sparse_arch."):
                close(mine[n].detach(), p.detach(), f"rank {rank} {n} after step {step}")
    return {"rates": rates, "optimizer": repr(sharded.fused_optimizer)}


class _PositionWeighted(nn.Module):
    """A TorchRec model with position-weighted features: a FeatureProcessedEmbeddingBagCollection (a SUM
    and a MEAN table) whose PositionWeightedModule(s) learn one weight per position, and a linear head."""

    def __init__(self, collection: bool) -> None:
        from torchrec.modules.feature_processor_ import PositionWeightedModule, PositionWeightedModuleCollection
        from torchrec.modules.fp_embedding_modules import FeatureProcessedEmbeddingBagCollection

        super().__init__()
        tables = _tables()
        tables[1].pooling = torchrec.PoolingType.MEAN
        feats = [f for t in tables for f in t.feature_names]
        ebc = torchrec.EmbeddingBagCollection(tables=tables, is_weighted=True)
        fps = (PositionWeightedModuleCollection({f: POSITIONS for f in feats}) if collection
               else {f: PositionWeightedModule(max_feature_length=POSITIONS) for f in feats})
        self.fp = FeatureProcessedEmbeddingBagCollection(ebc, fps)
        self.head = nn.Linear(sum(t.embedding_dim * len(t.feature_names) for t in tables), 1)
        with torch.no_grad():
            for n, p in self.fp.named_parameters():
                if "position" in n:
                    p.uniform_(0.5, 1.5)

    def forward(self, kjt: Any) -> torch.Tensor:
        return self.head(self.fp(kjt).values()).squeeze(1)


POSITIONS = 4  # > the longest bag of _batch


def _position_weighted_phase(rank: int, world: int) -> int:
    """shard_model on TorchRec models with trained position weights (each kind of processor, hash and
    row-wise / table-wise tables, Adagrad in the backward as apply_optimizer_in_backward gives it) trains
    as the unsharded recgo model (recgo.from_torchrec) does on the global batch: after every step the
    position weights, the head and every table's rows equal (1e-6)."""
    import copy

    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    import recgo
    from recgo.distributed import shard_model

    bce = nn.functional.binary_cross_entropy_with_logits
    for collection, sharding in ((False, "hash"), (True, {"t_a": "row_wise", "t_b": "table_wise"})):
        torch.manual_seed(5)  # the same model on every rank
        model = _PositionWeighted(collection)
        ref = copy.deepcopy(model)  # (a copy drops the in-backward optimizers: each gets its own)
        for m in (model, ref):
            apply_optimizer_in_backward(torch.optim.Adagrad, m.fp._embedding_bag_collection.parameters(),
                                        {"lr": LR_SPARSE, "eps": 1e-8})
        ref = recgo.from_torchrec(ref)
        model = shard_model(model, sharding, timeout=60)
        sharded = model.module.fp._embedding_bag_collection
        dense = {n.removeprefix("module."): p for n, p in model.named_parameters() if "_embedding_bag_collection" not in n}
        assert any("position" in n for n in dense), list(dense)
        opts = [torch.optim.SGD(list(ps), lr=LR_DENSE) for ps in
                (dense.values(), [p for n, p in ref.named_parameters() if "_embedding_bag_collection" not in n])]
        what = f"{'collection' if collection else 'modules'} {sharding}"
        for step in range(STEPS):
            for o in opts:
                o.zero_grad()
            _, kjt, y = _batch(step, None)
            bce(ref(kjt), y).backward()
            _, kjt, y = _batch(step, rank)
            bce(model(kjt), y).backward()
            for o in opts:
                o.step()
            for n, p in ref.named_parameters():
                if "_embedding_bag_collection" in n:
                    table = n.split(".")[-2]
                    close(sharded.embedding_bags[table].weight.detach(), p.detach()[sharded.local_ids(table)],
                          f"rank {rank} {what} table {table} after step {step}")
                else:
                    close(dense[n].detach(), p.detach(), f"rank {rank} {what} {n} after step {step}")
    return 2


def _world(rank: int, world: int) -> dict[str, Any]:
    """The DLRM script, then the position-weighted phase, each reporting its own error."""
    out: dict[str, Any] = {}
    for name, phase in (("dlrm", _case), ("position", _position_weighted_phase)):
        try:
            out[name] = phase(rank, world)
        except BaseException as exc:
            import traceback

            out[name] = {"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"}
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return spawn(_world, WORLD, tmp_path_factory.mktemp("torchrec"))


def test_torchrec_dlrm_script_with_shard_model_trains_as_one_process(world: list[dict[str, Any]]) -> None:
    for r, res in enumerate(world):
        assert "error" not in res, f"rank {r}: {res['error']}"
        res = res["dlrm"]
        assert "error" not in res, f"rank {r}: {res['error']}"
        assert res["rates"] == [LR_SPARSE * GAMMA ** s for s in range(STEPS)], res
        assert res["optimizer"].startswith("Adagrad(lr=0.025") and "eps=1e-08" in res["optimizer"], res


def test_shard_model_trains_torchrec_position_weights_as_the_unsharded_model(world: list[dict[str, Any]]) -> None:
    """Refused by shard_model until session 36 (the sharded collections gave per-ID weights no gradient)."""
    for r, res in enumerate(world):
        assert "error" not in res, f"rank {r}: {res['error']}"
        got = res["position"]
        assert got == 2, f"rank {r}: {got['error'] if isinstance(got, dict) else got}"
