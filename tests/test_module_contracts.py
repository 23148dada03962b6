"""The collections' module-level contracts found missing by the modules probe: EmbeddingCollection's
TorchRec parity (unused keys, output order, empty feature_names, init_fn/data_type; the meta device is test_meta_device.py's),
its copies, and for both collections: swapped weights (functional_call), freezing a fused
collection, casts, a retained graph's second backward, and a dynamic table's strict=False load."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from torch import nn

import recgo
from recgo import EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig, KeyedJaggedTensor
from recgo.errors import InvalidInputError
from recgo.modules import _eager, optim


def kjt(keys: list[str], values: list[int], lengths: list[int]) -> KeyedJaggedTensor:
    return KeyedJaggedTensor(keys, torch.tensor(values), lengths=torch.tensor(lengths))


def ec_two(**kw) -> EmbeddingCollection:
    return EmbeddingCollection([EmbeddingConfig(10, 4, "t0", ["a"]), EmbeddingConfig(10, 4, "t1", ["b"])], seed=1, **kw)


# -- EmbeddingCollection: TorchRec parity --------------------------------------------------------

def test_ec_ignores_unused_keys_and_returns_config_order_like_torchrec() -> None:
    torchrec = pytest.importorskip("torchrec")
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TKJT

    batch = TKJT(keys=["user_id", "b", "a"], values=torch.tensor([5, 1, 2, 3]), lengths=torch.tensor([1, 0, 1, 1, 1, 0]))
    ours = ec_two()
    theirs = torchrec.EmbeddingCollection(tables=[
        torchrec.EmbeddingConfig(num_embeddings=10, embedding_dim=4, name="t0", feature_names=["a"]),
        torchrec.EmbeddingConfig(num_embeddings=10, embedding_dim=4, name="t1", feature_names=["b"])])
    theirs.load_state_dict(ours.state_dict())
    got, want = ours(batch), theirs(batch)
    assert list(got) == list(want) == ["a", "b"]
    for k in want:
        torch.testing.assert_close(got[k].values(), want[k].values(), rtol=0, atol=0)
        assert torch.equal(got[k].lengths(), want[k].lengths())
    # one KJT feeding a pooled and a sequence collection, each ignoring the other's keys
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(10, 4, "u", ["user_id"])], seed=0)
    assert ebc(batch).keys() == ["user_id"]


def test_ec_unused_keys_train_and_count_like_the_used_ones() -> None:
    ec = ec_two(optimizer=optim.SGD(lr=1.0))
    w0 = ec.embeddings.t0.weight.detach().clone()
    batch = kjt(["z", "a", "b"], [9, 3, 4], [1, 1, 1])
    assert ec.lookup_stats(batch) == {"t0": (1, 1), "t1": (1, 1)}
    sum(jt.values().sum() for jt in ec(batch).values()).backward()
    want = w0.clone()
    want[3] -= 1.0
    torch.testing.assert_close(ec.embeddings.t0.weight.detach(), want, rtol=0, atol=0)


def test_ec_empty_feature_names_is_one_feature_named_after_the_table() -> None:
    ec = EmbeddingCollection([EmbeddingConfig(10, 4, "item", [])], seed=0)
    assert ec.feature_names() == ["item"]
    out = ec(kjt(["item"], [2, 7], [1, 1]))["item"].values()
    torch.testing.assert_close(out, ec.embeddings.item.weight.detach()[[2, 7]], rtol=0, atol=0)


def test_ec_config_init_fn_and_data_type() -> None:
    torchrec = pytest.importorskip("torchrec")
    const = EmbeddingCollection([EmbeddingConfig(10, 4, "item", ["h"], init_fn=lambda w: nn.init.constant_(w, 0.5))])
    assert torch.equal(const.embeddings.item.weight.detach(), torch.full((10, 4), 0.5))
    tr = torchrec.EmbeddingConfig(num_embeddings=10, embedding_dim=4, name="item", feature_names=["h"],
                                  init_fn=lambda w: nn.init.constant_(w, 0.25))
    assert torch.equal(EmbeddingCollection([tr]).embeddings.item.weight.detach(), torch.full((10, 4), 0.25))
    # TorchRec's default init_fn (uniform over the same bounds) is recgo's own draw, so seed= still holds
    default = torchrec.EmbeddingConfig(num_embeddings=10, embedding_dim=4, name="item", feature_names=["h"])
    assert torch.equal(EmbeddingCollection([default], seed=3).embeddings.item.weight,
                       EmbeddingCollection([EmbeddingConfig(10, 4, "item", ["h"])], seed=3).embeddings.item.weight)
    fp16 = torchrec.EmbeddingConfig(num_embeddings=10, embedding_dim=4, name="item", feature_names=["h"],
                                    data_type=torchrec.DataType.FP16)
    for cfg in (fp16, EmbeddingConfig(10, 4, "item", ["h"], data_type="fp16")):
        with pytest.raises(InvalidInputError, match="(?i)data_type fp16 is not supported"):
            EmbeddingCollection([cfg])
    owner = EmbeddingBagCollection([EmbeddingBagConfig(10, 4, "item", ["i"])], seed=0)
    with pytest.raises(InvalidInputError, match="init_fn with share="):
        EmbeddingCollection([EmbeddingConfig(10, 4, "item", ["h"], init_fn=nn.init.zeros_)], share=owner)


def test_ec_refuses_what_torchrec_configs_ask_for_and_recgo_cannot_honour() -> None:
    torchrec = pytest.importorskip("torchrec")
    virtual = torchrec.EmbeddingConfig(num_embeddings=10, embedding_dim=4, name="item", feature_names=["h"],
                                       use_virtual_table=True)
    with pytest.raises(InvalidInputError, match=r"use_virtual_table.*EmbeddingConfig\(dynamic=recgo.DynamicConfig"):
        EmbeddingCollection([virtual])
    pos = torchrec.EmbeddingConfig(num_embeddings=10, embedding_dim=4, name="item", feature_names=["h"], need_pos=True)
    with pytest.raises(InvalidInputError, match="need_pos is not supported"):
        EmbeddingCollection([pos])
    with pytest.raises(InvalidInputError, match="need_pos is not supported"):
        EmbeddingConfig.from_torchrec(pos)


def test_ec_config_pickled_under_its_earlier_module_still_loads() -> None:
    """EmbeddingConfig moved from recgo.modules.sequence to recgo.modules.config; copies pickled
    before name the old module, which still exports it."""
    cfg = EmbeddingConfig(10, 4, "item", ["h"])
    old = pickle.dumps(cfg, protocol=0).replace(b"recgo.modules.config", b"recgo.modules.sequence")
    assert b"recgo.modules.sequence" in old
    assert pickle.loads(old) == cfg


# -- EmbeddingCollection: copies -------------------------------------------------------------------

def _trained_ec() -> EmbeddingCollection:
    ec = ec_two(optimizer=optim.Adagrad(lr=0.5))
    sum(jt.values().sum() for jt in ec(kjt(["a", "b"], [1, 2, 3], [2, 1])).values()).backward()
    ec.eval()
    ec.note = "user attribute"
    return ec


def _same(a: nn.Module, b: nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


@pytest.mark.parametrize("how", ["deepcopy", "pickle", "torch.save"])
def test_ec_copies_are_independent(how: str) -> None:
    a = _trained_ec()
    if how == "deepcopy":
        b = copy.deepcopy(a)
    elif how == "pickle":
        b = pickle.loads(pickle.dumps(a))
    else:
        buf = io.BytesIO()
        torch.save(a, buf)
        buf.seek(0)
        b = torch.load(buf, weights_only=False)
    assert b._handle.value != a._handle.value and b.ebc is not a.ebc
    _same(a, b)
    assert not b.training and b.note == "user attribute"
    batch = kjt(["a", "b"], [1, 4], [1, 1])
    torch.testing.assert_close(a(batch)["a"].values(), b(batch)["a"].values(), rtol=0, atol=0)
    b.train()
    b(batch)["a"].values().sum().backward()  # trains the copy only
    assert not torch.equal(a.embeddings.t0.weight, b.embeddings.t0.weight)
    assert int(a.embeddings.t0.optimizer_step) == 1 and int(b.embeddings.t0.optimizer_step) == 2


def test_ec_copy_with_a_shared_owner_copies_the_owner_once() -> None:
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(10, 4, "item", ["i"])], optimizer=optim.SGD(lr=0.1), seed=0)
    model = nn.ModuleDict({"seq": EmbeddingCollection([EmbeddingConfig(10, 4, "item", ["h"])], share=ebc),
                           "pooled": ebc})
    for new in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert new["seq"].ebc is new["pooled"] and new["pooled"] is not ebc
        assert new["seq"].embeddings.item is new["pooled"].embedding_bags.item
        _same(model, new)
    swa = torch.optim.swa_utils.AveragedModel(model)
    swa.update_parameters(model)
    torch.testing.assert_close(swa.module["seq"].embeddings.item.weight.detach(), ebc.embedding_bags.item.weight.detach())


# -- both collections: swapped weights, freezing, casts --------------------------------------------

def _both(optimizer: object = None) -> list[tuple[nn.Module, str, KeyedJaggedTensor]]:
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(10, 4, "t", ["a"])], optimizer=optimizer, seed=1)
    ec = EmbeddingCollection([EmbeddingConfig(10, 4, "t", ["a"])], optimizer=optimizer, seed=1)
    batch = kjt(["a"], [1, 3], [1, 1])
    return [(ebc, "embedding_bags.t.weight", batch), (ec, "embeddings.t.weight", batch)]


def _out(m: nn.Module, batch: KeyedJaggedTensor) -> torch.Tensor:
    out = m(batch)
    return out.values() if isinstance(m, EmbeddingBagCollection) else out["a"].values()


@pytest.mark.parametrize("i", [0, 1])
def test_functional_call_is_refused_and_leaves_the_weights(i: int) -> None:
    m, key, batch = _both()[i]
    before = m.state_dict()[key].clone()
    alt = torch.zeros(10, 4)
    with pytest.raises(InvalidInputError, match="functional_call"):
        torch.func.functional_call(m, {key: alt}, (batch,))
    assert torch.equal(m.state_dict()[key], before) and not alt.any()
    assert alt.data_ptr() != m.state_dict()[key].data_ptr()
    torch.func.functional_call(m, dict(m.named_parameters()), (batch,))  # its own weights: fine


@pytest.mark.parametrize("i", [0, 1])
def test_a_frozen_fused_collection_does_not_update(i: int) -> None:
    m, key, batch = _both(optim.SGD(lr=1.0))[i]
    assert all(p.requires_grad for p in m.parameters())  # as TorchRec's fused tables
    step = key.rpartition(".")[0] + ".optimizer_step"
    w0 = m.state_dict()[key].clone()
    m.requires_grad_(False)
    lin = nn.Linear(4, 1)
    lin(_out(m, batch)).sum().backward()
    assert torch.equal(m.state_dict()[key], w0) and int(m.state_dict()[step]) == 0
    assert len(m._contexts) == 0
    m.requires_grad_(True)
    lin(_out(m, batch)).sum().backward()
    assert not torch.equal(m.state_dict()[key], w0) and int(m.state_dict()[step]) == 1


@pytest.mark.parametrize("i", [0, 1])
@pytest.mark.parametrize("cast,match", [(lambda m: m.half(), "torch.float16"), (lambda m: m.bfloat16(), "bfloat16"),
                                        (lambda m: m.double(), "float64"), (lambda m: m.to("meta"), "meta"),
                                        (lambda m: m.share_memory(), "shared memory")])
def test_casts_of_a_built_collection_are_refused(i: int, cast, match: str) -> None:
    m, key, batch = _both()[i]
    w0 = m.state_dict()[key].clone()
    with pytest.raises(InvalidInputError, match=match):
        cast(nn.Sequential(m))  # also inside a model
    w = m.state_dict()[key]
    assert w.dtype == torch.float32 and w.device.type == "cpu" and torch.equal(w, w0)
    m.float().to("cpu")  # no-ops
    torch.testing.assert_close(_out(m, batch), w0[[1, 3]], rtol=0, atol=0)


def test_to_empty_of_a_built_collection_keeps_engine_memory() -> None:
    m, key, batch = _both()[0]
    engine = m._storage[0][0].data_ptr()
    m.to_empty(device="cpu")
    assert m.state_dict()[key].data_ptr() == engine
    m.reset_parameters()
    _out(m, batch)


# -- a retained graph's second backward, on the custom-op path ------------------------------------

@pytest.mark.parametrize("i", [0, 1])
def test_retain_graph_on_the_custom_op_path(i: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_eager, "allowed", lambda *tensors: False)  # what compile/dispatch modes see
    m, key, batch = _both()[i]
    out = _out(m, batch)
    out.sum().backward(retain_graph=True)
    (3 * out).sum().backward()
    grad = dict(m.named_parameters())[key].grad
    assert torch.equal(grad[1], torch.full((4,), 4.0)) and torch.equal(grad[3], torch.full((4,), 4.0))
    del out
    assert len(m._contexts) == 0


# -- dynamic-ID tables: strict=False ---------------------------------------------------------------

def test_dynamic_table_missing_from_a_partial_checkpoint_is_reported() -> None:
    def make() -> EmbeddingBagCollection:
        return EmbeddingBagCollection([EmbeddingBagConfig(8, 4, "dyn", ["u"], dynamic=recgo.DynamicConfig()),
                                       EmbeddingBagConfig(10, 4, "fix", ["i"])], optimizer=optim.SGD(lr=0.1))

    full = make().state_dict()
    fixed_only = {k: v for k, v in full.items() if k.startswith("embedding_bags.fix.")}
    res = make().load_state_dict(fixed_only, strict=False)
    assert "embedding_bags.dyn.weight" in res.missing_keys and not res.unexpected_keys
    with pytest.raises(RuntimeError, match="Missing key"):
        make().load_state_dict(fixed_only)
    no_weight = {k: v for k, v in full.items() if k != "embedding_bags.dyn.weight"}
    with pytest.raises(InvalidInputError, match="lacks embedding_bags.dyn.weight"):
        make().load_state_dict(no_weight, strict=False)
    no_map = {k: v for k, v in full.items() if ".dynamic_" not in k}
    with pytest.raises(InvalidInputError, match="lacks the dynamic-table entries"):
        make().load_state_dict(no_map, strict=False)


@pytest.mark.parametrize("i", [0, 1])
def test_assign_load_nested_in_a_model_copies_back(i: int) -> None:
    """load_state_dict(assign=True) of a model holding a collection: the values go into engine memory
    (a post-hook of the collection, which runs for nested loads too), so the next forward reads them."""
    m, key, batch = _both(optim.Adagrad(lr=0.1))[i]
    model = nn.Sequential(m)
    sd = {("0." + k): v.clone() for k, v in m.state_dict().items()}
    sd["0." + key] = torch.full((10, 4), 2.0)
    model.load_state_dict(sd, assign=True)
    owner = m.ebc if isinstance(m, EmbeddingCollection) else m
    assert dict(m.named_parameters())[key].data_ptr() == owner._storage[0][0].data_ptr()
    torch.testing.assert_close(_out(m, batch), torch.full((2, 4), 2.0), rtol=0, atol=0)
    bad = dict(sd)
    bad["0." + key.rpartition(".")[0] + ".optimizer_step"] = torch.tensor([-1])
    with pytest.raises(InvalidInputError, match="not an optimizer step"):
        m.load_state_dict({k[2:]: v for k, v in bad.items()})


@pytest.mark.parametrize("i", [0, 1])
def test_gradient_only_contexts_under_saved_tensor_hooks(i: int) -> None:
    """The eager node keeps its context through saved-tensor hooks (save_on_cpu, non-reentrant
    activation checkpointing) and frees it at the end of a backward without retain_graph."""
    m, key, batch = _both()[i]
    with torch.autograd.graph.save_on_cpu():
        out = _out(m, batch)
    out.sum().backward(retain_graph=True)
    assert len(m._contexts) == 1
    out.sum().backward()
    assert len(m._contexts) == 0
    ck = torch.utils.checkpoint.checkpoint(lambda b: _out(m, b) * 2, batch, use_reentrant=False)
    ck.sum().backward()
    grad = dict(m.named_parameters())[key].grad
    assert torch.equal(grad[1], torch.full((4,), 4.0)) and torch.equal(grad[3], torch.full((4,), 4.0))
    assert len(m._contexts) == 0


@pytest.mark.parametrize("build", [
    lambda: recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 4, "t", ["f"])],
                                         optimizer=optim.SGD(lr=0.1), sparse_grad=True),
    lambda: recgo.EmbeddingCollection([recgo.EmbeddingConfig(10, 4, "t", ["f"])],
                                      optimizer=optim.SGD(lr=0.1), sparse_grad=True),
])
def test_sparse_grad_with_a_fused_optimizer_is_refused(build) -> None:
    with pytest.raises(InvalidInputError, match="sparse_grad=True applies to optimizer=None"):
        build()


def test_model_apply_initialisers_reach_the_tables_as_torchrecs_do() -> None:
    """TorchRec's tables are nn.EmbeddingBag (pooled) and nn.Embedding (sequence) modules, which
    model.apply initialisers look for; recgo's per-table modules were plain modules, skipped without
    a word. The initialiser writes the engine's memory: the lookups see it."""
    pooled = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 4, "t", ["f"], pooling="mean")])
    seq = recgo.EmbeddingCollection([recgo.EmbeddingConfig(10, 4, "s", ["g"])])

    def init(m: nn.Module) -> None:
        if isinstance(m, nn.EmbeddingBag):
            nn.init.constant_(m.weight, 0.5)
        elif isinstance(m, nn.Embedding):
            nn.init.constant_(m.weight, 0.25)

    nn.ModuleDict({"pooled": pooled, "seq": seq}).apply(init)
    bag = pooled.embedding_bags["t"]
    assert (bag.num_embeddings, bag.embedding_dim, bag.mode) == (10, 4, "mean")
    out = pooled(recgo.KeyedJaggedTensor(["f"], torch.tensor([1, 2]), lengths=torch.tensor([2])))
    assert torch.equal(out.values(), torch.full((1, 4), 0.5))
    got = seq(recgo.KeyedJaggedTensor(["g"], torch.tensor([3]), lengths=torch.tensor([1])))["g"].values()
    assert torch.equal(got, torch.full((1, 4), 0.25)) and isinstance(seq.embeddings["s"], nn.Embedding)
