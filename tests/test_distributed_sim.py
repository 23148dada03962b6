"""The at-scale traffic simulation (issue 13) and argument checks that need no spawned world."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

import recgo
from recgo.modules import optim
from recgo.distributed import (PeerFailureError, ShardedEmbeddingBagCollection, eq3_reduction, hash_owners,
                               simulate_traffic)
from recgo.errors import InvalidInputError, NotFoundError, RecgoError


def zipf_batches(world: int, tables: int, n: int, rows: int, seed: int) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    probs = torch.arange(1, rows + 1, dtype=torch.float64).pow(-1.1)
    return [[torch.multinomial(probs, n, replacement=True, generator=g) for _ in range(tables)] for _ in range(world)]


def brute_force(batches: list[list[torch.Tensor]], nodes: int, per: int) -> dict[str, int]:
    """Both modes' intra/inter-node IDs from the definitions, in Python loops."""
    world = nodes * per
    out = dict.fromkeys(("flat_intra", "flat_inter", "hier_intra", "hier_inter"), 0)
    for t in range(len(batches[0])):
        gathered: dict[int, set[int]] = {}
        for r in range(world):
            uniq = torch.unique(batches[r][t])
            owners = hash_owners(uniq, world).tolist()
            for x, o in zip(uniq.tolist(), owners):
                if o != r:
                    out["flat_intra" if o // per == r // per else "flat_inter"] += 1
                if o % per != r % per:
                    out["hier_intra"] += 1
                gathered.setdefault((r // per) * per + o % per, set()).add(x)
        for m, xs in gathered.items():
            owners = hash_owners(torch.tensor(sorted(xs)), world).tolist()
            out["hier_inter"] += sum(1 for o in owners if o // per != m // per)
    return out


@pytest.mark.parametrize("nodes,per", [(2, 2), (4, 3), (16, 8), (3, 1), (1, 4)])
def test_simulation_matches_brute_force_and_eq3(nodes: int, per: int) -> None:
    b = zipf_batches(nodes * per, 2, 30, 500, seed=nodes * 10 + per)
    sim = simulate_traffic(b, nodes, per)
    want = brute_force(b, nodes, per)
    assert {k: sim[k] for k in want} == want
    assert sim["lookups"] == sum(x.numel() for r in b for x in r)
    assert sim["flat_inter"] - sim["hier_inter"] == eq3_reduction(b, nodes, per)
    if nodes > 1 and per > 1:
        assert 0 < sim["retained"] < 1


def test_hash_owners_spread_and_bad_input() -> None:
    owners = hash_owners(torch.arange(100_000), 8)
    counts = torch.bincount(owners, minlength=8)
    assert counts.min() > 11_000 and counts.max() < 14_000  # ~12.5k each
    with pytest.raises(InvalidInputError, match="world size"):
        hash_owners(torch.arange(3), 0)
    with pytest.raises(InvalidInputError, match="counts cover|runs past"):
        from recgo import _lib
        from recgo._lib import I64, P
        counts = torch.tensor([[5]], dtype=torch.int64)
        vals = torch.arange(3)
        out = torch.zeros(6, dtype=torch.int64)
        _lib.call(_lib.fn("recgo_shard_simulate", [I64, I64, I64, P, P, I64, P]), 1, 1, 1, counts.data_ptr(),
                  vals.data_ptr(), 3, out.data_ptr())


@pytest.fixture()
def world1(tmp_path: Path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


CFGS = [recgo.EmbeddingBagConfig(20, 4, "a", ["fa"]), recgo.EmbeddingBagConfig(10, 2, "b", ["fb"])]


def test_bad_arguments_raise_named_errors(world1: None) -> None:
    with pytest.raises(InvalidInputError, match="sharding 'columns'"):
        ShardedEmbeddingBagCollection(CFGS, "columns")
    with pytest.raises(NotFoundError, match="'zz'"):
        ShardedEmbeddingBagCollection(CFGS, {"zz": "hash"})
    with pytest.raises(InvalidInputError, match="does not match the world"):
        ShardedEmbeddingBagCollection(CFGS, nodes=2, ranks_per_node=2)
    with pytest.raises(InvalidInputError, match="needs plan="):
        ShardedEmbeddingBagCollection(CFGS, "plan")
    with pytest.raises(InvalidInputError, match="mode"):
        ShardedEmbeddingBagCollection(CFGS, mode="ring")
    with pytest.raises(NotFoundError, match="table_ranks names table 'usr'"):
        ShardedEmbeddingBagCollection(CFGS, "table_wise", table_ranks={"usr": 0})
    with pytest.raises(InvalidInputError, match="table_ranks places table 'a', whose sharding is 'hash'"):
        ShardedEmbeddingBagCollection(CFGS, "hash", table_ranks={"a": 0})
    for bad in (-1, 0, "5"):
        with pytest.raises(InvalidInputError, match="timeout must be"):
            ShardedEmbeddingBagCollection(CFGS, timeout=bad)
    weighted = ShardedEmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 2, "w", ["fw"])], is_weighted=True)
    learned = torch.tensor([0.5, 2.0], requires_grad=True)
    batch = recgo.KeyedJaggedTensor(["fw"], torch.tensor([1, 2]), weights=learned, lengths=torch.tensor([2]))
    weighted(batch).values().sum().backward()  # refused until session 36: now ∂/∂w_i = ⟨grad, row(id_i)⟩
    rows = weighted.embedding_bags["w"].weight.detach()[weighted.locate("w", torch.tensor([1, 2]))]
    torch.testing.assert_close(learned.grad, rows.sum(1), rtol=1e-6, atol=1e-7)
    with torch.no_grad():
        assert weighted(batch).values().shape == (1, 2)
    dyn = ShardedEmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 2, "d", ["fw"], dynamic=recgo.DynamicConfig())],
                                        optimizer=optim.SGD(lr=0.1), is_weighted=True)
    with pytest.raises(InvalidInputError, match="per-ID weights"):  # rows not addressed by ID, as unsharded
        dyn(batch)
    sh = ShardedEmbeddingBagCollection(CFGS, {"a": "row_wise", "b": "data_parallel"}, seed=3)
    kjt = recgo.KeyedJaggedTensor(["fa", "fb"], torch.tensor([1, 25]), torch.tensor([1, 1]))
    with pytest.raises(InvalidInputError, match=r'table "b": id 25 out of range \[0, 10\)'):
        sh(kjt)
    with pytest.raises(InvalidInputError, match="lacks features"):
        sh(recgo.KeyedJaggedTensor(["fa"], torch.tensor([1]), torch.tensor([1])))
    # a key no table reads is ignored, its IDs never looked at (as by the unsharded collection)
    with torch.no_grad():
        plain = sh(recgo.KeyedJaggedTensor(["fa", "fb"], torch.tensor([1, 2, 3]), lengths=torch.tensor([2, 1])))
        extra = sh(recgo.KeyedJaggedTensor(["zz", "fb", "fa"], torch.tensor([10**12, 3, 1, 2]),
                                           lengths=torch.tensor([1, 1, 2])))
    assert torch.equal(plain.values(), extra.values()) and plain.keys() == extra.keys() == ["fa", "fb"]
    with pytest.raises(RecgoError, match="no shard"):
        sh.load(Path("/nonexistent-recgo-ckpt"))
    assert issubclass(PeerFailureError, RuntimeError) and issubclass(PeerFailureError, RecgoError)


def test_world1_is_the_single_process_collection(world1: None) -> None:
    """A one-rank world: the same pooled output and torch-optimizer gradients as EmbeddingBagCollection."""
    ref = recgo.EmbeddingBagCollection(CFGS, seed=3)
    sh = ShardedEmbeddingBagCollection(CFGS, {"a": "hash", "b": "table_wise"}, seed=3)
    kjt = recgo.KeyedJaggedTensor(["fa", "fb"], torch.tensor([1, 2, 1, 7, 7]), torch.tensor([2, 1, 1, 1]))
    a, b = sh(kjt).values(), ref(kjt).values()
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    a.sum().backward()
    b.sum().backward()
    for c in CFGS:
        ids = sh.local_ids(c.name)
        torch.testing.assert_close(sh.embedding_bags[c.name].weight.grad, ref.embedding_bags[c.name].weight.grad[ids])
    t = sh.traffic()
    assert t["requested"] == 3 and t["lookups"] == 3 and t["ids_inter"] == 0 and t["bytes"] == 0


def test_world1_trained_weights_of_a_shared_key_and_a_variable_batch(world1: None) -> None:
    """Per-ID weights that require grad through a key two tables read (SUM and MEAN), and through a
    TorchRec variable batch with inverse indices: outputs and weight gradients equal the unsharded
    collection's."""
    C = recgo.EmbeddingBagConfig
    cfgs = [C(20, 4, "s", ["fa", "fb"]), C(20, 3, "m", ["fa"], pooling="mean")]
    ref = recgo.EmbeddingBagCollection(cfgs, seed=3, is_weighted=True)
    sh = ShardedEmbeddingBagCollection(cfgs, {"s": "hash", "m": "row_wise"}, seed=3, is_weighted=True)
    batches = [recgo.KeyedJaggedTensor(["fa", "fb"], torch.tensor([1, 2, 1, 7, 7, 3]), lengths=torch.tensor([3, 0, 2, 1]),
                                       weights=torch.tensor([0.5, 2.0, 1.5, 0.25, 1.0, 3.0]))]
    tr = pytest.importorskip("torchrec")
    batches.append(tr.KeyedJaggedTensor(keys=["fa", "fb"], values=torch.tensor([1, 2, 1, 7, 7]),
                                        lengths=torch.tensor([2, 1, 1, 1]), weights=torch.tensor([0.5, 2.0, 1.5, 0.25, 1.0]),
                                        stride_per_key_per_rank=[[2], [2]],
                                        inverse_indices=(["fa", "fb"], torch.tensor([[0, 1, 0], [1, 0, 1]]))))
    for kjt in batches:
        grads = []
        for m in (ref, sh):
            w = kjt.weights().detach().clone().requires_grad_()
            batch = (recgo.KeyedJaggedTensor(kjt.keys(), kjt.values(), lengths=kjt.lengths(), weights=w)
                     if isinstance(kjt, recgo.KeyedJaggedTensor) else
                     tr.KeyedJaggedTensor(keys=kjt.keys(), values=kjt.values(), lengths=kjt.lengths(), weights=w,
                                          stride_per_key_per_rank=kjt.stride_per_key_per_rank(),
                                          inverse_indices=kjt.inverse_indices()))
            out = m(batch).values()
            (out * torch.arange(out.numel()).view(out.shape)).sum().backward()
            grads.append((out.detach(), w.grad))
        for a, b in zip(*grads):
            torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)


def test_shard_model_takes_a_torchrec_fused_collection(world1: None) -> None:
    tr = pytest.importorskip("torchrec")
    from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection

    from recgo.distributed import shard_model
    from recgo.modules import optim
    tables = [tr.EmbeddingBagConfig(name="a", embedding_dim=4, num_embeddings=20, feature_names=["fa"])]
    fused = FusedEmbeddingBagCollection(tables=tables, optimizer_type=torch.optim.Adagrad,
                                        optimizer_kwargs={"lr": 0.2}, device=torch.device("cpu"))
    model = shard_model(nn.ModuleDict({"e": fused}), ddp=False)
    sh = model["e"]
    assert isinstance(sh, ShardedEmbeddingBagCollection) and sh.fused_optimizer == optim.Adagrad(lr=0.2, eps=1e-8)  # FBGEMM's eps
    assert torch.equal(sh.embedding_bags["a"].weight, fused.state_dict()["embedding_bags.a.weight"])


def test_shard_model_converts_a_managed_collision_collection(world1: None) -> None:
    """A trained TorchRec managed-collision collection in a model: shard_model turns it into dynamic-ID
    tables (MCH state carried over) and shards them; the model goes on as TorchRec's."""
    pytest.importorskip("torchrec")
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TKJT

    from managed_collision import managed_collection
    from recgo.distributed import shard_model
    from recgo.modules.managed import ManagedCollisionEmbeddingBagCollection

    def batch() -> TKJT:
        return TKJT.from_lengths_sync(keys=["f"], values=torch.tensor([5, 10**12, 7, -3]), lengths=torch.tensor([2, 2]))
    ref, mine = managed_collection(False), managed_collection(False)
    for m in (ref, mine):
        m.train()
        m(batch())[0].values().pow(2).sum().backward()
    model = shard_model(nn.ModuleDict({"mc": mine}), ddp=False, gradient_division=False)
    assert isinstance(model["mc"], ManagedCollisionEmbeddingBagCollection)
    assert isinstance(model["mc"].ebc, ShardedEmbeddingBagCollection)
    for step in range(2):
        (a, _), (b, _) = model["mc"](batch()), ref(batch())
        torch.testing.assert_close(a.values(), b.values(), rtol=1e-5, atol=1e-6, msg=f"step {step}")
        a.values().pow(2).sum().backward()
        b.values().pow(2).sum().backward()


@pytest.mark.parametrize("fused_source", [False, True])
def test_sharding_a_trained_torchrec_collection_keeps_its_optimizer_state(world1: None, fused_source: bool) -> None:
    """shard_model of a TorchRec collection that has trained (in-backward row-wise Adagrad, or a fused
    Adagrad collection) takes its accumulators along: the sharded collection goes on as TorchRec's."""
    tr = pytest.importorskip("torchrec")
    from torch.distributed.optim import _apply_optimizer_in_backward as apply_optimizer_in_backward
    from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TKJT

    from recgo.distributed import shard_model
    tables = [tr.EmbeddingBagConfig(name="a", embedding_dim=4, num_embeddings=20, feature_names=["fa"])]

    def build() -> nn.Module:
        torch.manual_seed(3)
        if fused_source:
            return FusedEmbeddingBagCollection(tables=tables, optimizer_type=torch.optim.Adagrad,
                                               optimizer_kwargs={"lr": 0.2}, device=torch.device("cpu"))
        m = tr.EmbeddingBagCollection(tables=tables)
        apply_optimizer_in_backward(tr.optim.RowWiseAdagrad, m.parameters(), {"lr": 0.2, "eps": 1e-8})
        return m

    def batch(step: int) -> TKJT:
        g = torch.Generator().manual_seed(step)
        return TKJT.from_lengths_sync(["fa"], torch.randint(0, 20, (6,), generator=g), torch.tensor([2, 4]))
    ref, mine = build(), build()
    for m in (ref, mine):
        for step in range(2):
            m(batch(step)).values().pow(2).sum().backward()
    sh = shard_model(nn.ModuleDict({"e": mine}), ddp=False, gradient_division=False)["e"]
    for step in range(2, 5):
        a, b = sh(batch(step)).values(), ref(batch(step)).values()
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"step {step}")
        a.pow(2).sum().backward()
        b.pow(2).sum().backward()


def test_dynamic_tables_shard_by_id_and_copies_are_refused_by_name(world1: None) -> None:
    import copy
    import pickle

    from recgo.distributed import ShardedEmbeddingCollection, shard_model
    from recgo.modules import optim
    dyn = recgo.DynamicConfig(min_count=1)
    with pytest.raises(InvalidInputError, match=r"shard by ID.*\{'u': 'row_wise'\}"):
        ShardedEmbeddingBagCollection([recgo.EmbeddingBagConfig(100, 4, "u", ["uid"], dynamic=dyn)], "row_wise",
                                      optimizer=optim.SGD(lr=0.1))
    with pytest.raises(InvalidInputError, match=r"dynamic-ID tables \['s'\] need a fused optimizer"):
        ShardedEmbeddingCollection([recgo.EmbeddingConfig(100, 4, "s", ["hist"], dynamic=dyn)])
    # an unsharded collection's admitted IDs, rows, optimizer state and step carry over (from_ebc and
    # shard_model), and both go on alike
    kjt = recgo.KeyedJaggedTensor(["uid"], torch.tensor([5, 10**12, -7, 5]), lengths=torch.tensor([1, 3]))
    ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(100, 4, "u", ["uid"], dynamic=dyn)],
                                       optimizer=optim.Adagrad(lr=0.1))
    ebc(kjt).values().sum().backward()
    with torch.device("meta"):  # a model built for sharding: its dynamic table starts empty on every rank
        on_meta = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(100, 4, "u", ["uid"], dynamic=dyn)],
                                               optimizer=optim.Adagrad(lr=0.1))
    fresh = shard_model(nn.ModuleDict({"e": on_meta}), ddp=False)["e"]
    assert isinstance(fresh, ShardedEmbeddingBagCollection) and len(fresh.local_ids("u")) == 0
    assert torch.equal(fresh(kjt).values(), recgo.EmbeddingBagCollection(on_meta.embedding_bag_configs(),
                                                                          optimizer=optim.Adagrad(lr=0.1))(kjt).values())
    for sharded in (ShardedEmbeddingBagCollection.from_ebc(ebc, "hash"),
                    shard_model(nn.ModuleDict({"e": copy.deepcopy(ebc)}), ddp=False)["e"]):
        assert isinstance(sharded, ShardedEmbeddingBagCollection)
        assert int(sharded.embedding_bags["u"].optimizer_step) == 1
        assert sorted(sharded.local_ids("u").tolist()) == [-7, 5, 10**12]
        with pytest.raises(InvalidInputError, match="use its own save"):
            recgo.dynamic.save(sharded, "u", "/nonexistent/u.bin")
        fixed = ShardedEmbeddingBagCollection([recgo.EmbeddingBagConfig(100, 4, "u", ["uid"])], "hash",
                                              optimizer=optim.Adagrad(lr=0.1))
        with pytest.raises(InvalidInputError, match="as a dynamic-ID table"):
            fixed.load_state_dict(sharded.state_dict())
        twin = copy.deepcopy(ebc)
        for _ in range(2):
            a, b = sharded(kjt).values(), twin(kjt).values()
            assert torch.equal(a, b)
            a.sum().backward()
            b.sum().backward()
    sh = ShardedEmbeddingBagCollection(CFGS, "hash", seed=0)
    for copier in (copy.deepcopy, pickle.dumps):
        with pytest.raises(InvalidInputError, match="cannot be copied or pickled.*save\\(\\)"):
            copier(sh)
