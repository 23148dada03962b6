"""recgo.distributed.shard_model and the sharded collections' module contracts on a world of one rank
(this pytest process): materialising a model built on meta, DDP over the dense part, TorchRec's
collections, refused shared tables, casts and reset_parameters. The two-rank checks (a model sharded
from meta trains as one process does; state dicts per rank) are in test_distributed_sequence.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import recgo
from recgo.modules import optim
from sharded_batches import SHARDING, configs, global_batch
from spawned import one_rank


def test_shard_model_materialises_the_dense_part_and_wraps_it_in_ddp(tmp_path: Path) -> None:
    from recgo.distributed import ShardedEmbeddingBagCollection, ShardedEmbeddingCollection, shard_model

    class Raw(torch.nn.Module):  # a meta parameter no reset_parameters() initialises
        def __init__(self) -> None:
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(3))

    with torch.device("meta"):
        model = torch.nn.ModuleDict({
            "ebc": recgo.EmbeddingBagCollection(configs(), optimizer=optim.SGD(lr=0.1), seed=2),
            "ec": recgo.EmbeddingCollection([recgo.EmbeddingConfig(20, 4, "s", ["s1"])], optimizer=optim.SGD(lr=0.1)),
            "att": torch.nn.MultiheadAttention(4, 2), "mlp": torch.nn.Linear(4, 2), "raw": Raw()})
    with one_rank(tmp_path), pytest.warns(UserWarning, match=r"\['raw'\] had parameters on the meta device"):
        wrapped = shard_model(model, {**SHARDING, "tp": "hash"}, timeout=30)
        assert isinstance(wrapped, torch.nn.parallel.DistributedDataParallel) and wrapped.module is model
        # as DMP's: the tables' fused optimizers for torch's schedulers, one group per collection
        assert [(g["name"], g["lr"]) for g in wrapped.fused_optimizer.param_groups] == [("ebc", 0.1), ("ec", 0.1)]
        wrapped.fused_optimizer.param_groups[1]["lr"] = 0.01
        wrapped.fused_optimizer.step()
        assert model["ec"].fused_optimizer == optim.SGD(lr=0.01) and model["ebc"].fused_optimizer == optim.SGD(lr=0.1)
        assert isinstance(model["ebc"], ShardedEmbeddingBagCollection) and isinstance(model["ec"], ShardedEmbeddingCollection)
        assert not any(t.is_meta for t in (*model.parameters(), *model.buffers()))
        # MultiheadAttention's in-projection has only _reset_parameters (xavier: not zeros, not garbage)
        w = model["att"].in_proj_weight.detach()
        assert 0 < float(w.abs().max()) <= (6 / (4 + 12)) ** 0.5 + 1e-6 and bool(torch.isfinite(model["mlp"].weight).all())
        ref = recgo.EmbeddingBagCollection(configs(), seed=2)
        for c in configs():
            assert torch.equal(model["ebc"].embedding_bags[c.name].weight.detach(),
                               ref.embedding_bags[c.name].weight.detach()[model["ebc"].local_ids(c.name)])
        assert model["ebc"]._grad_scale == 1.0  # world 1: division by 1


def test_a_model_left_unwrapped_has_the_fused_optimizer_too(tmp_path: Path) -> None:
    """Without dense parameters (or with ddp=False) shard_model returns the model itself, as DDP refuses
    one without them; it had no fused_optimizer, so StepLR(model.fused_optimizer) failed where DMP's
    wrapper has one."""
    from recgo.distributed import shard_model

    for ddp, dense in ((True, False), (False, True)):
        with torch.device("meta"):
            model = torch.nn.ModuleDict({"ebc": recgo.EmbeddingBagCollection(configs(), optimizer=optim.Adagrad(lr=0.1))})
            if dense:
                model["mlp"] = torch.nn.Linear(4, 2)
        with one_rank(tmp_path):
            sharded = shard_model(model, {**SHARDING, "tp": "hash"}, ddp=ddp, timeout=30)
            assert sharded is model
            sched = torch.optim.lr_scheduler.StepLR(sharded.fused_optimizer, step_size=1, gamma=0.5)
            sched.step()
            sharded.fused_optimizer.step()  # (applies the groups' rates, as in the test above)
            assert model["ebc"].fused_optimizer == optim.Adagrad(lr=0.05)
            bare = torch.nn.ModuleDict({"mlp": torch.nn.Linear(2, 2)})
            assert shard_model(bare, ddp=False).fused_optimizer is None  # no table: none, as DMP's


def test_shard_model_refuses_shared_tables_and_non_modules(tmp_path: Path) -> None:
    from recgo.distributed import ShardedEmbeddingBagCollection, shard_model
    from recgo.errors import InvalidInputError, NotFoundError

    ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(20, 4, "s", ["item"])], optimizer=optim.SGD(lr=0.1))
    model = torch.nn.ModuleDict({"ebc": ebc, "ec": recgo.EmbeddingCollection([recgo.EmbeddingConfig(20, 4, "s", ["h"])],
                                                                             share=ebc)})
    with one_rank(tmp_path):
        with pytest.raises(InvalidInputError, match="ec: this EmbeddingCollection looks up the tables of another"):
            shard_model(model)
        with pytest.raises(InvalidInputError, match="expected an nn.Module, got list"):
            shard_model([ebc])  # type: ignore[arg-type]
        with pytest.raises(NotFoundError, match=r"sharding names tables \['nope'\], which no collection"):
            shard_model(torch.nn.ModuleDict({"ebc": ebc}), {"s": "hash", "nope": "row_wise"})
        # a built collection as the whole model, no dense part: its rows, no DDP
        alone = shard_model(recgo.EmbeddingBagCollection(configs(), seed=4), "hash", timeout=30)
        assert isinstance(alone, ShardedEmbeddingBagCollection)
        assert torch.equal(alone.embedding_bags["th"].weight.detach(),
                           recgo.EmbeddingBagCollection(configs(), seed=4).embedding_bags["th"].weight.detach()[
                               alone.local_ids("th")])


def test_shard_model_takes_torchrec_collections(tmp_path: Path) -> None:
    """A model written with TorchRec's collections: on meta each rank draws its rows; built, it takes them."""
    torchrec = pytest.importorskip("torchrec")
    from recgo.distributed import ShardedEmbeddingBagCollection, ShardedEmbeddingCollection, shard_model

    bag = torchrec.EmbeddingBagConfig(num_embeddings=30, embedding_dim=4, name="t", feature_names=["f"])
    seq = torchrec.EmbeddingConfig(num_embeddings=20, embedding_dim=4, name="s", feature_names=["g"])
    with torch.device("meta"):
        meta = torch.nn.ModuleDict({"ebc": torchrec.EmbeddingBagCollection(tables=[bag]),
                                    "ec": torchrec.EmbeddingCollection(tables=[seq]), "lin": torch.nn.Linear(4, 1)})
    built = torchrec.EmbeddingBagCollection(tables=[bag])
    with one_rank(tmp_path):
        shard_model(meta, "hash", optimizer=optim.SGD(lr=0.1), timeout=30)
        assert isinstance(meta["ebc"], ShardedEmbeddingBagCollection) and isinstance(meta["ec"], ShardedEmbeddingCollection)
        w = meta["ebc"].embedding_bags["t"].weight.detach()
        assert 0 < float(w.abs().max()) <= (1 / 30) ** 0.5  # TorchRec's default init bounds
        sh = shard_model(built, "row_wise", optimizer=optim.SGD(lr=0.1), timeout=30)
        assert torch.equal(sh.embedding_bags["t"].weight.detach(), built.embedding_bags["t"].weight.detach()[sh.local_ids("t")])


def test_sharded_casts_raise_and_conversions_keep_engine_memory(tmp_path: Path) -> None:
    """A cast (or share_memory, which would move the shards off engine memory) would leave the engine
    updating memory the parameter no longer shows: it raises; a conversion that keeps float32 CPU
    tensors (to_empty, .float()) keeps the shards as they are; reset_parameters draws the seeded rows
    again."""
    from recgo.distributed import ShardedEmbeddingBagCollection
    from recgo.errors import InvalidInputError

    with one_rank(tmp_path):
        sh = ShardedEmbeddingBagCollection(configs(), {**SHARDING, "tp": "hash"}, optimizer=optim.SGD(lr=0.5), seed=6,
                                           timeout=30)
        first = {c.name: sh.embedding_bags[c.name].weight.detach().clone() for c in configs()}
        for cast, what in ((lambda m: m.double(), "float64"), (lambda m: m.half(), "float16"),
                           (lambda m: m.to("meta"), "meta"), (lambda m: m.share_memory(), "shared memory")):
            with pytest.raises(InvalidInputError, match=what):
                cast(sh)
        weight = sh.embedding_bags["th"].weight
        for keep in (lambda m: m.to_empty(device="cpu"), lambda m: m.float()):
            assert keep(sh) is sh and sh.embedding_bags["th"].weight is weight
        kjt = global_batch(0, 1)
        sh(kjt).values().sum().backward()  # the engine's update shows in the parameter
        assert not torch.equal(weight.detach(), first["th"])
        sh.reset_parameters()
        for c in configs():
            assert torch.equal(sh.embedding_bags[c.name].weight.detach(), first[c.name]), c.name


def test_shard_model_takes_the_optimizer_apply_optimizer_in_backward_gave(tmp_path: Path) -> None:
    """A TorchRec model whose tables got their optimizer from apply_optimizer_in_backward (as for
    DistributedModelParallel) is sharded with the same fused update, FBGEMM's defaults filling in what
    the kwargs leave out; it then trains as a recgo collection built with that optimizer."""
    torchrec = pytest.importorskip("torchrec")
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    from recgo.distributed import shard_model
    from recgo.errors import InvalidInputError

    bag = torchrec.EmbeddingBagConfig(num_embeddings=30, embedding_dim=4, name="t", feature_names=["f"])
    seq = torchrec.EmbeddingConfig(num_embeddings=20, embedding_dim=4, name="s", feature_names=["g"])
    ebc, ec = torchrec.EmbeddingBagCollection(tables=[bag]), torchrec.EmbeddingCollection(tables=[seq])
    apply_optimizer_in_backward(torch.optim.Adagrad, ebc.parameters(), {"lr": 0.1})
    apply_optimizer_in_backward(torchrec.optim.RowWiseAdagrad, ec.parameters(), {"lr": 0.05, "eps": 1e-6})
    ref = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(30, 4, "t", ["f"])], optimizer=optim.Adagrad(lr=0.1, eps=1e-8))
    ref.load_state_dict({"embedding_bags.t.weight": ebc.embedding_bags["t"].weight.detach().clone()}, strict=False)
    model = torch.nn.ModuleDict({"ebc": ebc, "ec": ec})
    with one_rank(tmp_path):
        shard_model(model, "row_wise", timeout=30)
        assert model["ebc"].fused_optimizer == optim.Adagrad(lr=0.1, eps=1e-8)
        assert model["ec"].fused_optimizer == optim.RowWiseAdagrad(lr=0.05, eps=1e-6)
        g = torch.Generator().manual_seed(5)
        for _ in range(3):
            kjt = recgo.KeyedJaggedTensor(["f"], torch.randint(0, 30, (24,), generator=g), lengths=torch.full((8,), 3))
            w = torch.randn(8, 4, generator=g)
            (model["ebc"](kjt).values() * w).sum().backward()
            (ref(kjt).values() * w).sum().backward()
        got = model["ebc"].embedding_bags["t"].weight.detach()
        torch.testing.assert_close(got, ref.embedding_bags["t"].weight.detach()[model["ebc"].local_ids("t")],
                                   rtol=1e-6, atol=1e-7)
        dense = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(30, 4, "t", ["f"])], seed=1)
        apply_optimizer_in_backward(torch.optim.SGD, dense.parameters(), {"lr": 0.3})  # a recgo one, the same way
        assert shard_model(dense, "hash", timeout=30).fused_optimizer == optim.SGD(lr=0.3)
        other = torchrec.EmbeddingBagCollection(tables=[bag])
        apply_optimizer_in_backward(torch.optim.SGD, other.parameters(), {"lr": 0.1})
        with pytest.raises(InvalidInputError, match="differs from SGD"):
            shard_model(other, "hash", optimizer=optim.Adagrad(lr=0.1), timeout=30)
        with pytest.raises(InvalidInputError, match="optimizer=None differs from SGD"):  # not dropped silently
            shard_model(other, "hash", optimizer=None, timeout=30)
        # DMP's FBGEMM kernels ignore an in-backward SGD/Adagrad weight_decay on CPU: so do the shards
        # (they applied it: the losses left DMP's from the second step), with a warning; a caller's
        # optimizer keeps its own
        decayed = torchrec.EmbeddingBagCollection(tables=[bag])
        apply_optimizer_in_backward(torch.optim.Adagrad, decayed.parameters(), {"lr": 0.1, "weight_decay": 0.5})
        with pytest.warns(UserWarning, match="DistributedModelParallel ignores on CPU"):
            assert shard_model(decayed, "hash", timeout=30).fused_optimizer == optim.Adagrad(lr=0.1, eps=1e-8)
        decayed = torchrec.EmbeddingBagCollection(tables=[bag])
        apply_optimizer_in_backward(torch.optim.Adagrad, decayed.parameters(), {"lr": 0.1, "weight_decay": 0.5})
        mine = optim.Adagrad(lr=0.1, eps=1e-8, weight_decay=0.5)
        assert shard_model(decayed, "hash", optimizer=mine, timeout=30).fused_optimizer == mine


def test_sharded_set_fused_optimizer_follows_a_schedule(tmp_path: Path) -> None:
    """A learning-rate schedule on the sharded tables: set_fused_optimizer between steps gives the
    weights the unsharded collection reaches under the same schedule; another kind is refused."""
    from recgo.distributed import ShardedEmbeddingBagCollection
    from recgo.errors import InvalidInputError

    ref = recgo.EmbeddingBagCollection(configs(), optimizer=optim.Adagrad(lr=0.1), seed=6)
    with one_rank(tmp_path):
        sh = ShardedEmbeddingBagCollection.from_ebc(ref, {**SHARDING, "tp": "hash"}, timeout=30)
        width = sum(c.embedding_dim * len(c.feature_names) for c in configs())
        g = torch.Generator().manual_seed(1)
        for step in range(4):
            for m in (ref, sh):
                m.set_fused_optimizer(optim.Adagrad(lr=0.1 * 0.5 ** step))
            kjt = global_batch(step, 1)
            w = torch.randn(kjt.stride(), width, generator=g)
            (sh(kjt).values() * w).sum().backward()
            (ref(kjt).values() * w).sum().backward()
        assert sh.fused_optimizer == optim.Adagrad(lr=0.1 * 0.5 ** 3)
        for c in configs():
            torch.testing.assert_close(sh.embedding_bags[c.name].weight.detach(),
                                       ref.embedding_bags[c.name].weight.detach()[sh.local_ids(c.name)],
                                       rtol=1e-6, atol=1e-7)
        with pytest.raises(InvalidInputError, match="kind cannot change"):
            sh.set_fused_optimizer(optim.SGD(lr=0.1))
        with pytest.raises(InvalidInputError, match="learning rate"):
            sh.set_fused_optimizer(optim.Adagrad(lr=-1.0))
        assert sh.fused_optimizer == optim.Adagrad(lr=0.1 * 0.5 ** 3)


def test_torchrecs_sparse_dist_pipeline_drives_a_sharded_model(tmp_path: Path) -> None:
    """TorchRec's golden script trains with TrainPipelineSparseDist(model, optimizer, device); it traces
    the model it is given, and failed on shard_model's DDP wrapper ('Proxy object cannot be iterated').
    Now it runs, and its losses equal a plain loop's over the same batches."""
    tr = pytest.importorskip("torchrec")
    from torch.distributed.optim import _apply_optimizer_in_backward as apply_optimizer_in_backward
    from torchrec.datasets.random import RandomRecDataset
    from torchrec.distributed import TrainPipelineSparseDist
    from torchrec.models.dlrm import DLRM, DLRMTrain
    from torchrec.optim.keyed import KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    from recgo.distributed import shard_model

    def build() -> tuple[torch.nn.Module, Any]:
        torch.manual_seed(0)
        cfgs = [tr.EmbeddingBagConfig(name=f"t_{f}", embedding_dim=8, num_embeddings=50, feature_names=[f])
                for f in ("c0", "c1")]
        m = DLRMTrain(DLRM(embedding_bag_collection=tr.EmbeddingBagCollection(tables=cfgs), dense_in_features=3,
                           dense_arch_layer_sizes=[8, 8], over_arch_layer_sizes=[8, 1]))
        apply_optimizer_in_backward(tr.optim.RowWiseAdagrad, m.model.sparse_arch.parameters(), {"lr": 0.1})
        model = shard_model(m)
        opt = KeyedOptimizerWrapper(dict(in_backward_optimizer_filter(model.named_parameters())),
                                    lambda p: torch.optim.Adagrad(p, lr=0.1))
        return model, opt

    def batches() -> Any:
        return iter(RandomRecDataset(keys=["c0", "c1"], batch_size=8, hash_size=50, ids_per_feature=2,
                                     num_dense=3, manual_seed=7, num_batches=4))

    with one_rank(tmp_path):
        model, opt = build()
        pipe = TrainPipelineSparseDist(model, opt, torch.device("cpu"))
        it = batches()
        piped = [float(pipe.progress(it)[0]) for _ in range(4)]
        model, opt = build()
        plain = []
        for batch in batches():
            opt.zero_grad()
            loss = model(batch)[0]
            loss.backward()
            opt.step()
            plain.append(float(loss))
    assert piped == pytest.approx(plain, rel=1e-6)


def test_shard_model_applies_a_torchrec_sharding_plan(tmp_path: Path) -> None:
    """DMP's plan= (a TorchRec ShardingPlan) is applied: each table sharded as the plan says (it was
    ignored, every table hash-sharded without a word); kinds recgo lacks, and a plan beside a sharding
    that does not use it, raise."""
    tr = pytest.importorskip("torchrec")
    from torchrec.distributed.types import EmbeddingModuleShardingPlan, ParameterSharding, ShardingPlan

    from recgo.distributed import ShardedEmbeddingBagCollection, shard_model

    tables = [tr.EmbeddingBagConfig(name=f"t{i}", embedding_dim=4, num_embeddings=20, feature_names=[f"f{i}"])
              for i in range(3)]

    def planned(kinds: list[str]) -> Any:
        """A model and a plan as TorchRec's planner writes them (built by hand: on CPU TorchRec's own
        planner offers neither row-wise nor every kind recgo must refuse)."""
        model = torch.nn.Sequential(tr.EmbeddingBagCollection(tables=tables))
        entries = EmbeddingModuleShardingPlan({t.name: ParameterSharding(sharding_type=k, compute_kernel="fused",
                                                                          ranks=[0]) for t, k in zip(tables, kinds)})
        return model, ShardingPlan(plan={"0": entries})

    with one_rank(tmp_path):
        model, plan = planned(["table_wise", "row_wise", "data_parallel"])
        sharded = shard_model(model, plan=plan, ddp=False)
        assert sharded[0]._sharding_names == ["table_wise", "row_wise", "data_parallel"]
        model, plan = planned(["column_wise", "table_wise", "table_wise"])
        with pytest.raises(recgo.InvalidInputError, match="'column_wise', which recgo does not have"):
            shard_model(model, plan=plan)
        model, plan = planned(["table_wise"] * 3)
        with pytest.raises(recgo.InvalidInputError, match="give one of them"):
            shard_model(model, "hash", plan=plan)
        with pytest.raises(recgo.InvalidInputError, match="no table's sharding is 'plan'"):
            ShardedEmbeddingBagCollection(configs(), "hash", plan=object())


def test_shard_model_takes_dmps_spellings(tmp_path: Path) -> None:
    """bert4rec's DMP call — module=, device=, sharders=[EmbeddingCollectionSharder(fused_params)] — ports
    as is: the sharder's fused optimizer becomes the tables' (it raised TypeError naming the wrong class,
    and without the sharder the tables silently lost their optimizer); DMP's other arguments and
    unknown ones raise by name."""
    tr = pytest.importorskip("torchrec")
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.embedding import EmbeddingCollectionSharder

    from recgo.distributed import shard_model

    def model() -> torch.nn.Module:
        return torch.nn.ModuleDict({"ec": tr.EmbeddingCollection(tables=[tr.EmbeddingConfig(
            name="item", embedding_dim=4, num_embeddings=20, feature_names=["item"])]), "out": torch.nn.Linear(4, 1)})

    sharder = EmbeddingCollectionSharder({"optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD, "learning_rate": 0.02})
    with one_rank(tmp_path):
        sharded = shard_model(module=model(), device=torch.device("cpu"), sharders=[sharder])
        assert sharded.module["ec"].fused_optimizer == optim.RowWiseAdagrad(lr=0.02, eps=1e-8)
        with pytest.raises(recgo.InvalidInputError, match="CPU memory"):
            shard_model(model(), device="meta")
        with pytest.raises(recgo.InvalidInputError, match="init_data_parallel= has no recgo counterpart"):
            shard_model(model(), init_data_parallel=False)
        with pytest.raises(recgo.InvalidInputError, match=r"unknown arguments \['shardin'\]"):
            shard_model(model(), shardin="hash")
        # SGD takes no eps: FBGEMM ignores it, so does the conversion (it raised)
        sgd = EmbeddingCollectionSharder({"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": 0.1, "eps": 1e-8})
        assert shard_model(model(), sharders=[sgd]).module["ec"].fused_optimizer == optim.SGD(lr=0.1)
        # TorchRec's intro notebook passes a sharder with quantized comms: ignored, with a warning (it was silent)
        from torchrec.distributed.fbgemm_qcomm_codec import CommType, QCommsConfig, get_qcomm_codecs_registry

        fp16 = EmbeddingCollectionSharder(qcomm_codecs_registry=get_qcomm_codecs_registry(
            qcomms_config=QCommsConfig(forward_precision=CommType.FP16, backward_precision=CommType.BF16)))
        with pytest.warns(UserWarning, match="qcomm_codecs_registry .* recgo exchanges float32"):
            shard_model(model(), sharders=[fp16])
        # the wrapper pickles as its module does: a sharded one refuses by name (a PicklingError before)
        import pickle

        with pytest.raises(recgo.InvalidInputError, match="cannot be copied or pickled"):
            pickle.dumps(sharded)
        # no sharded collection: the state on dst alone; a dst outside the world raises
        from recgo.distributed import gather_state_dict

        lin = torch.nn.Linear(2, 1)
        assert gather_state_dict(lin).keys() == lin.state_dict().keys()
        with pytest.raises(recgo.InvalidInputError, match="dst 1"):
            gather_state_dict(lin, dst=1)


def test_a_sharded_table_of_odd_width_that_no_sample_uses(tmp_path: Path) -> None:
    """A table of width 20 (not a multiple of the vector width) whose bags are all empty in a batch:
    the sharded step pools it from no rows, and the kernels' column split sliced past them (an
    InternalError: slice bounds out of range)."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    cfgs = [recgo.EmbeddingBagConfig(100, 20, "a", ["fa"]), recgo.EmbeddingBagConfig(100, 20, "b", ["fb"])]
    kjt = recgo.KeyedJaggedTensor(["fa", "fb"], torch.tensor([1, 2, 3]), lengths=torch.tensor([2, 1, 0, 0]))
    with one_rank(tmp_path):
        out = ShardedEmbeddingBagCollection(cfgs, "hash", seed=1)(kjt).values()
    assert out.shape == (2, 40) and torch.equal(out[:, 20:], torch.zeros(2, 20))
    assert torch.allclose(out, recgo.EmbeddingBagCollection(cfgs, seed=1)(kjt).values())


@pytest.mark.parametrize("meta", [False, True])
def test_a_frozen_table_stays_frozen_when_sharded(tmp_path: Path, meta: bool) -> None:
    """A table frozen with requires_grad_(False) came back trainable in the sharded collection
    (shard_model, from_ebc, from_ec), so a torch optimizer over the parameters that require grad
    trained it; a fused sharded collection trained it silently (before session 31), then refused it
    (sessions 31 and 32), and now leaves it frozen while its fused optimizer trains the others."""
    from recgo.distributed import shard_model

    def build(fused: bool) -> torch.nn.ModuleDict:
        opt = optim.SGD(lr=0.5) if fused else None
        with torch.device("meta" if meta else "cpu"):
            m = torch.nn.ModuleDict({
                "ebc": recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(20, 4, "a", ["fa"]),
                                                     recgo.EmbeddingBagConfig(20, 4, "b", ["fb"])], optimizer=opt, seed=1),
                "ec": recgo.EmbeddingCollection([recgo.EmbeddingConfig(20, 4, "s", ["g"]),
                                                 recgo.EmbeddingConfig(20, 4, "u", ["h"])], optimizer=opt, seed=1)})
        m["ebc"].embedding_bags["a"].weight.requires_grad_(False)
        m["ec"].embeddings["s"].weight.requires_grad_(False)
        return m

    kjt = recgo.KeyedJaggedTensor(["fa", "fb", "g", "h"], torch.tensor([1, 2, 3, 4, 5, 6, 7, 8]),
                                  lengths=torch.ones(8, dtype=torch.int64))
    with one_rank(tmp_path):
        model = shard_model(build(False), "hash", ddp=False, timeout=30)
        assert {n: p.requires_grad for n, p in model.named_parameters()} == {
            "ebc.embedding_bags.a.weight": False, "ebc.embedding_bags.b.weight": True,
            "ec.embeddings.s.weight": False, "ec.embeddings.u.weight": True}
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
        ec_out = model["ec"](kjt)
        (model["ebc"](kjt).values().sum() + sum(ec_out[k].values().sum() for k in ec_out)).backward()
        opt.step()
        changed = {n: not torch.equal(p.detach(), before[n]) for n, p in model.named_parameters()}
        assert changed == {"ebc.embedding_bags.a.weight": False, "ebc.embedding_bags.b.weight": True,
                           "ec.embeddings.s.weight": False, "ec.embeddings.u.weight": True}
        fused = shard_model(build(True), "hash", ddp=False, timeout=30)
        assert {n: p.requires_grad for n, p in fused.named_parameters()} == {
            "ebc.embedding_bags.a.weight": False, "ebc.embedding_bags.b.weight": True,
            "ec.embeddings.s.weight": False, "ec.embeddings.u.weight": True}
        before = {k: v.clone() for k, v in fused.state_dict().items()}
        ec_out = fused["ec"](kjt)
        (fused["ebc"](kjt).values().sum() + sum(ec_out[k].values().sum() for k in ec_out)).backward()
        changed = {k.split(".rank")[0] for k, v in fused.state_dict().items()
                   if k.endswith("weight") and not torch.equal(v, before[k])}
        assert changed == {"ebc.embedding_bags.b", "ec.embeddings.u"}


def test_sharding_keeps_the_training_flag_and_the_users_hooks(tmp_path: Path) -> None:
    """shard_model left the sharded collections in training mode under an eval model and dropped the
    forward hooks registered on the collection it replaced."""
    from recgo.distributed import shard_model

    model = torch.nn.ModuleDict({"ebc": recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(20, 4, "a", ["fa"])],
                                                                       seed=1)}).eval()
    seen: list[tuple[int, ...]] = []
    handle = model["ebc"].register_forward_hook(lambda mod, args, out: seen.append(tuple(out.values().shape)))
    kjt = recgo.KeyedJaggedTensor(["fa"], torch.tensor([1, 2, 3]), lengths=torch.tensor([2, 1]))
    with one_rank(tmp_path):
        sharded = shard_model(model, "hash", ddp=False, timeout=30)
        assert not sharded["ebc"].training
        with torch.no_grad():
            sharded["ebc"](kjt)
        assert seen == [(2, 4)]
        handle.remove()  # the user's handle still removes it
        with torch.no_grad():
            sharded["ebc"](kjt)
        assert seen == [(2, 4)]


def test_the_wrapper_names_and_trains_as_dmps(tmp_path: Path) -> None:
    """As TorchRec's DMP: state_dict / named_parameters without DDP's ``module.`` prefix (they had it),
    a load_state_dict of those keys, a dense head the forward leaves unused (DDP's reduction failed at
    the second step: DMP builds DDP with static_graph=True), ddp_kwargs for DDP's other arguments; and a
    second backward through a sharded output is a named error (a bare AttributeError before)."""
    from recgo.distributed import shard_model
    from recgo.errors import InvalidInputError

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(20, 4, "a", ["fa"])],
                                                    optimizer=optim.SGD(lr=0.1), seed=1)
            self.main, self.aux = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)  # aux: not in this forward

        def forward(self, kjt: recgo.KeyedJaggedTensor) -> torch.Tensor:
            return self.main(self.ebc(kjt).values()).sum()

    kjt = recgo.KeyedJaggedTensor(["fa"], torch.arange(4), lengths=torch.ones(4, dtype=torch.int64))
    with one_rank(tmp_path):
        m = shard_model(M(), "hash", timeout=30)
        names = sorted(n for n, _ in m.named_parameters())
        assert names == sorted(n for n, _ in m.module.named_parameters()) and "main.weight" in names
        sd = {k: v.clone() for k, v in m.state_dict().items()}
        assert "main.weight" in sd and not any(k.startswith("module.") for k in sd)
        assert not any(k.startswith("module.") for k, _ in m.named_buffers())
        opt = torch.optim.SGD([p for n, p in m.named_parameters() if not n.startswith("ebc.")], lr=0.1)
        for _ in range(3):
            m(kjt).backward()
            opt.step()
            opt.zero_grad()
        assert not torch.equal(m.state_dict()["main.weight"], sd["main.weight"])
        m.load_state_dict(sd)
        assert torch.equal(m.module.main.weight, sd["main.weight"])
        loss = m(kjt)
        loss.backward(retain_graph=True)
        with pytest.raises(InvalidInputError, match="a sharded collection's output takes one backward"):
            loss.backward()
        with pytest.raises(InvalidInputError, match=r"ddp_kwargs \['no_such_argument'\]"):
            shard_model(M(), "hash", timeout=30, ddp_kwargs={"no_such_argument": 1})


def test_a_weighted_collection_stays_weighted_when_sharded(tmp_path: Path) -> None:
    """from_ebc (and so shard_model) dropped is_weighted: a weighted collection, TorchRec's or recgo's,
    built or on meta, was sharded unweighted and pooled the batch's IDs without their weights, silently."""
    torchrec = pytest.importorskip("torchrec")
    from recgo.distributed import shard_model

    bag = torchrec.EmbeddingBagConfig(num_embeddings=30, embedding_dim=4, name="t", feature_names=["f"])
    kjt = recgo.KeyedJaggedTensor(["f"], torch.tensor([1, 2, 2, 7]), torch.tensor([0.5, 2.0, -1.0, 3.0]),
                                  lengths=torch.tensor([2, 0, 2]))
    sources = {"torchrec": torchrec.EmbeddingBagCollection(tables=[bag], is_weighted=True),
               "recgo": recgo.EmbeddingBagCollection([bag], is_weighted=True, seed=1)}
    with one_rank(tmp_path):
        for name, src in sources.items():
            with torch.no_grad():
                want = src(kjt.to_torchrec() if name == "torchrec" else kjt).values()
            sharded = shard_model(src, "row_wise", optimizer=optim.SGD(lr=0.1), timeout=30)
            assert sharded.is_weighted(), name
            torch.testing.assert_close(sharded(kjt).values(), want)
        with torch.device("meta"):
            meta = torchrec.EmbeddingBagCollection(tables=[bag], is_weighted=True)
        assert shard_model(meta, "hash", optimizer=optim.SGD(lr=0.1), timeout=30).is_weighted()



def test_shard_model_runs_torchs_sparse_embeddings_on_one_gloo_thread(tmp_path: Path) -> None:
    """A dense part with ``nn.EmbeddingBag(sparse=True)``: DDP's own group runs gloo on one thread
    (torch 2.14's concurrent sparse all-reduces corrupt the heap), and a ``process_group`` of the
    user's that runs more threads gets a warning naming ``sparse_ddp_group``."""
    import warnings

    import torch.distributed as dist

    from recgo.distributed import shard_model, sparse_ddp_group

    def model(sparse: bool = True) -> torch.nn.Module:
        return torch.nn.ModuleDict({"ebc": recgo.EmbeddingBagCollection(configs(), optimizer=optim.SGD(lr=0.1)),
                                    "bag": torch.nn.EmbeddingBag(10, 4, sparse=sparse), "mlp": torch.nn.Linear(4, 1)})

    def threads(wrapped: Any) -> int:
        return wrapped.process_group._get_backend(torch.device("cpu")).options._threads

    with one_rank(tmp_path):
        assert threads(shard_model(model(), "hash", timeout=30)) == 1
        assert threads(shard_model(model(sparse=False), "hash", timeout=30)) == 2  # gloo's default: dense only
        with pytest.warns(UserWarning, match=r"process_group runs gloo on 2 threads.*sparse_ddp_group"):
            shard_model(model(), "hash", timeout=30, ddp_kwargs={"process_group": dist.new_group([0])})
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert threads(shard_model(model(), "hash", timeout=30,
                                       ddp_kwargs={"process_group": sparse_ddp_group(30)})) == 1


class _TwoHeads(torch.nn.Module):
    """A pooled collection under two heads, of which each forward uses one."""

    def __init__(self) -> None:
        super().__init__()
        cfg = [recgo.EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=10, feature_names=["f"])]
        self.ebc = recgo.EmbeddingBagCollection(cfg, optimizer=optim.SGD(lr=0.1))
        self.a, self.b = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)

    def forward(self, kjt: recgo.KeyedJaggedTensor, use_b: bool) -> torch.Tensor:
        x = self.ebc(kjt).values()
        return (self.b(x) if use_b else self.a(x)).sum()


def test_ddps_unused_parameters_error_is_not_called_a_dead_peer(tmp_path: Path) -> None:
    """Session 46: a forward leaving parameters unused under ``static_graph=False`` without
    ``find_unused_parameters`` makes DDP's next forward raise its own error, which the wrapper
    reported as a PeerFailureError ("a peer died"); it is DDP's RuntimeError now, with a note naming
    shard_model's ddp_kwargs, and the model trains with them."""
    from recgo.distributed import PeerFailureError, shard_model

    kjt = recgo.KeyedJaggedTensor.from_lengths_sync(keys=["f"], values=torch.tensor([1, 2]), lengths=torch.tensor([1, 1]))
    with one_rank(tmp_path):
        model = shard_model(_TwoHeads(), ddp_kwargs={"static_graph": False})
        model(kjt, False).backward()
        with pytest.raises(RuntimeError, match="Expected to have finished reduction") as caught:
            model(kjt, True)
        assert not isinstance(caught.value, PeerFailureError)
        assert "'find_unused_parameters': True" in "".join(caught.value.__notes__)
        model = shard_model(_TwoHeads(), ddp_kwargs={"static_graph": False, "find_unused_parameters": True})
        for step in range(3):
            model(kjt, step % 2 == 1).backward()
