"""TorchRec calls a drop-in script makes on recgo's types: each behaves as TorchRec's does (compared
with TorchRec's own objects on the same inputs)."""

from __future__ import annotations

import pytest
import torch

import recgo

torchrec = pytest.importorskip("torchrec")
from torchrec.sparse.jagged_tensor import JaggedTensor as TJT  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TKJT  # noqa: E402


@pytest.mark.parametrize("cls,tcls", [(recgo.EmbeddingConfig, "EmbeddingConfig"),
                                      (recgo.EmbeddingBagConfig, "EmbeddingBagConfig")])
def test_table_config_accessors(cls: type, tcls: str) -> None:
    for kw in ({}, {"weight_init_min": -0.5, "weight_init_max": 0.25}):
        ours = cls(num_embeddings=64, embedding_dim=4, name="t", feature_names=["a", "b"], **kw)
        theirs = getattr(torchrec, tcls)(num_embeddings=64, embedding_dim=4, name="t", feature_names=["a", "b"], **kw)
        assert ours.get_weight_init_min() == pytest.approx(theirs.get_weight_init_min())
        assert ours.get_weight_init_max() == pytest.approx(theirs.get_weight_init_max())
        assert ours.num_features() == theirs.num_features() == 2


def test_jagged_tensor_device_and_to() -> None:
    jt = recgo.JaggedTensor(torch.tensor([1.0, 2.0, 3.0]), lengths=torch.tensor([2, 1]), weights=torch.ones(3))
    assert jt.device() == TJT(values=jt.values(), lengths=jt.lengths()).device() == torch.device("cpu")
    moved = jt.to("cpu")
    assert moved is not jt
    assert torch.equal(moved.values(), jt.values()) and torch.equal(moved.weights(), jt.weights())
    assert torch.equal(moved.lengths(), jt.lengths()) and torch.equal(moved.offsets(), jt.offsets())


def test_flatten_lengths_keeps_the_batch() -> None:
    kw = {"keys": ["a", "b"], "values": torch.tensor([1, 2, 3]), "lengths": torch.tensor([1, 0, 2, 0])}
    ours, theirs = recgo.KeyedJaggedTensor(**kw).flatten_lengths(), TKJT(**kw).flatten_lengths()
    assert ours.keys() == theirs.keys()
    assert torch.equal(ours.values(), theirs.values()) and torch.equal(ours.lengths(), theirs.lengths())


@pytest.mark.parametrize("need", [False, True])
def test_need_indices_gives_each_output_its_ids_as_weights(need: bool) -> None:
    """EmbeddingCollection(need_indices=True): as TorchRec's, each JaggedTensor's weights are its IDs."""
    cfgs = [torchrec.EmbeddingConfig(num_embeddings=20, embedding_dim=4, name="t0", feature_names=["a", "b"]),
            torchrec.EmbeddingConfig(num_embeddings=9, embedding_dim=4, name="t1", feature_names=["c"])]
    theirs = torchrec.EmbeddingCollection(tables=cfgs, device=torch.device("cpu"), need_indices=need)
    ours = recgo.EmbeddingCollection(cfgs, need_indices=need)
    ours.load_state_dict(theirs.state_dict())
    kjt = TKJT(keys=["a", "b", "c"], values=torch.tensor([3, 7, 7, 1, 8, 0]), lengths=torch.tensor([2, 0, 1, 1, 1, 1]))
    got, want = ours(kjt), theirs(kjt)
    assert ours.need_indices() == theirs.need_indices() == need
    assert list(got) == list(want)
    for k in want:
        torch.testing.assert_close(got[k].values(), want[k].values())
        assert torch.equal(got[k].lengths(), want[k].lengths())
        w, tw = got[k].weights_or_none(), want[k].weights_or_none()
        assert (w is None) == (tw is None) == (not need)
        if need:
            assert torch.equal(w, tw)
    mine = ours(recgo.KeyedJaggedTensor.from_torchrec(kjt))  # a recgo batch: recgo JaggedTensors, same weights
    if need:
        assert torch.equal(mine["c"].weights(), torch.tensor([8, 0]))
    copy = __import__("copy").deepcopy(ours)
    assert copy.need_indices() == need


def test_need_indices_is_the_third_positional_parameter_as_in_torchrec() -> None:
    import inspect

    cfgs = [torchrec.EmbeddingConfig(num_embeddings=10, embedding_dim=4, name="t", feature_names=["b"])]
    assert recgo.EmbeddingCollection(cfgs, None, True).need_indices() == \
        torchrec.EmbeddingCollection(cfgs, None, True).need_indices() is True
    theirs = list(inspect.signature(torchrec.EmbeddingCollection).parameters)[:3]
    assert list(inspect.signature(recgo.EmbeddingCollection).parameters)[:3] == theirs
    with pytest.raises(recgo.InvalidInputError, match="optimizer="):  # the old third parameter, positionally
        recgo.EmbeddingCollection(cfgs, None, recgo.modules.optim.SGD(lr=0.1))  # type: ignore[arg-type]


def test_need_indices_must_be_a_bool() -> None:
    with pytest.raises(recgo.InvalidInputError, match="need_indices"):
        recgo.EmbeddingCollection([recgo.EmbeddingConfig(5, 2, "t", ["a"])], need_indices="yes")  # type: ignore[arg-type]


def test_a_weights_only_torchrec_state_dict_loads_strictly_into_fused_collections() -> None:
    """TorchRec's fused tables save only weights (their optimizer state goes through
    fused_optimizer.state_dict()): such a state dict loads with strict=True into fused recgo collections,
    directly or nested in a model, leaving the optimizer state as it was; a checkpoint with one table's
    optimizer entries and not another's is still refused."""
    from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection

    cfg = [torchrec.EmbeddingBagConfig(num_embeddings=10, embedding_dim=4, name=n, feature_names=[f])
           for n, f in (("t", "a"), ("u", "b"))]
    theirs = FusedEmbeddingBagCollection(tables=cfg, optimizer_type=torch.optim.Adagrad,
                                         optimizer_kwargs={"lr": 0.1}, device=torch.device("cpu"))
    sd = theirs.state_dict()
    assert sorted(sd) == ["embedding_bags.t.weight", "embedding_bags.u.weight"]
    ours = recgo.EmbeddingBagCollection(cfg, optimizer=recgo.modules.optim.Adagrad(lr=0.1), seed=3)
    state = ours.embedding_bags["t"].optimizer_state.clone()
    assert not ours.load_state_dict(sd).missing_keys
    for n in ("t", "u"):
        assert torch.equal(ours.embedding_bags[n].weight, sd[f"embedding_bags.{n}.weight"])
    assert torch.equal(ours.embedding_bags["t"].optimizer_state, state)
    model = torch.nn.ModuleDict({"sparse": recgo.EmbeddingBagCollection(cfg, optimizer=recgo.modules.optim.SGD(lr=1.0)),
                                 "seq": recgo.EmbeddingCollection(
                                     [torchrec.EmbeddingConfig(num_embeddings=10, embedding_dim=4, name="s",
                                                               feature_names=["h"])],
                                     optimizer=recgo.modules.optim.Adagrad(lr=0.1))})
    seq_w = torch.randn(10, 4)
    nested = {f"sparse.{k}": v for k, v in sd.items()} | {"seq.embeddings.s.weight": seq_w}
    model.load_state_dict(nested)  # strict
    assert torch.equal(model["seq"].embeddings["s"].weight, seq_w)
    partial = dict(ours.state_dict())
    del partial["embedding_bags.u.optimizer_state"], partial["embedding_bags.u.optimizer_step"]
    partial.pop("embedding_bags.t.optimizer_step")
    with pytest.raises(RuntimeError, match=r"Missing key\(s\).*embedding_bags\.t\.optimizer_step"):
        ours.load_state_dict(partial)


def test_accessors_torchrec_pipelines_call() -> None:
    """stride_per_key_per_rank, record_stream, size_in_bytes, embedding_names_by_table and
    JaggedTensor.empty(device=, weights_dtype=) were missing (AttributeError / TypeError)."""
    kw = {"keys": ["a", "b"], "values": torch.tensor([1, 2, 3]), "lengths": torch.tensor([1, 0, 2, 0])}
    ours, theirs = recgo.KeyedJaggedTensor(**kw), TKJT(**kw)
    assert ours.stride_per_key_per_rank() == theirs.stride_per_key_per_rank()
    for x in (ours, ours["a"], recgo.KeyedTensor(["a"], [2], torch.ones(3, 2))):
        x.record_stream(None)  # CPU tensors: nothing to record (TorchRec's pipelines call it)
    with pytest.raises(recgo.InvalidInputError, match="no inverse_indices"):
        ours.inverse_indices()
    tkt = torchrec.KeyedTensor(keys=["a", "b"], length_per_key=[2, 4], values=torch.ones(3, 6))
    assert recgo.KeyedTensor(["a", "b"], [2, 4], torch.ones(3, 6)).size_in_bytes() == tkt.size_in_bytes()
    cfgs = [torchrec.EmbeddingConfig(num_embeddings=20, embedding_dim=4, name="t0", feature_names=["a", "b"]),
            torchrec.EmbeddingConfig(num_embeddings=9, embedding_dim=4, name="t1", feature_names=["c", "a"])]
    assert recgo.EmbeddingCollection(cfgs).embedding_names_by_table() == \
        torchrec.EmbeddingCollection(tables=cfgs, device=torch.device("cpu")).embedding_names_by_table()
    e = recgo.JaggedTensor.empty(is_weighted=True, device="meta", values_dtype=torch.float32,
                                 weights_dtype=torch.float64)
    t = TJT.empty(is_weighted=True, device=torch.device("meta"), values_dtype=torch.float32,
                  weights_dtype=torch.float64)
    assert (e.values().device, e.values().dtype, e.weights().dtype) == (t.values().device, t.values().dtype,
                                                                       t.weights().dtype)


def test_padding_off_the_cpu_and_lengths_given_as_numpy_or_tensors() -> None:
    """offsets() and to_padded built their indices on the CPU: a meta collection's output (or a CUDA
    JaggedTensor) could not be padded; a NumPy or 0-d tensor length was refused. TorchRec takes both."""
    np = pytest.importorskip("numpy")
    ec = recgo.EmbeddingCollection([recgo.EmbeddingConfig(12, 4, "t0", ["a"])], device="meta")
    out = ec(recgo.KeyedJaggedTensor(["a"], torch.tensor([3, 3, 0]), lengths=torch.tensor([0, 3])))["a"]
    padded, mask = out.to_padded(4)
    assert (padded.shape, padded.device, mask.shape) == ((2, 4, 4), torch.device("meta"), (2, 4))
    vals, lengths = torch.randn(5, 4), torch.tensor([2, 0, 3])
    meta = recgo.JaggedTensor(vals, lengths=lengths).to("meta")
    want = TJT(values=vals, lengths=lengths).to(torch.device("meta"))
    assert meta.offsets().shape == want.offsets().shape and meta.offsets().device.type == "meta"
    assert meta.to_padded_dense(3).shape == want.to_padded_dense(3).shape
    cpu = recgo.JaggedTensor(vals, lengths=lengths)
    for n in (np.int64(2), torch.tensor(2)):
        assert torch.equal(cpu.to_padded_dense(n), TJT(values=vals, lengths=lengths).to_padded_dense(n))


def test_kjt_takes_torchrecs_precomputed_layouts() -> None:
    """TorchRec's constructor keywords lengths_offset_per_key, offset_per_key, index_per_key and jt_dict
    raised TypeError; they are now taken (and checked against the lengths, as length_per_key is)."""
    kw = {"keys": ["a", "b"], "values": torch.tensor([1, 2, 3]), "lengths": torch.tensor([1, 0, 2, 0])}
    theirs = TKJT(**kw)
    layouts = {"lengths_offset_per_key": theirs.lengths_offset_per_key(), "offset_per_key": theirs.offset_per_key(),
               "index_per_key": {k: i for i, k in enumerate(theirs.keys())}, "length_per_key": theirs.length_per_key()}
    ours = recgo.KeyedJaggedTensor(**kw, **layouts, jt_dict=None)
    assert ours.offset_per_key() == theirs.offset_per_key()
    with pytest.raises(recgo.InvalidInputError, match=r"offset_per_key \[0, 2, 3\] disagrees"):
        recgo.KeyedJaggedTensor(**kw, offset_per_key=[0, 2, 3])


def test_table_module_called_directly_takes_torchrec_offsets() -> None:
    """A collection's table module is an nn.EmbeddingBag with include_last_offset=False, where
    TorchRec's has True: the same (ids, offsets) gave 3 bags from recgo's table and 2 from
    TorchRec's. The state dict (names, shapes) and the collection's own forward are unchanged."""
    cfg = torchrec.EmbeddingBagConfig(name="t", embedding_dim=2, num_embeddings=10, feature_names=["a"])
    theirs = torchrec.EmbeddingBagCollection(tables=[cfg])
    ours = recgo.from_torchrec(theirs)
    t_table, r_table = theirs.embedding_bags["t"], ours.embedding_bags["t"]
    assert r_table.include_last_offset is t_table.include_last_offset is True
    ids, offsets = torch.tensor([1, 2, 3]), torch.tensor([0, 1, 3])
    got = r_table(ids, offsets)
    assert got.shape == (2, 2)
    torch.testing.assert_close(got, t_table(ids, offsets))
    w = r_table.weight.detach()
    torch.testing.assert_close(got, torch.stack([w[1], w[2] + w[3]]))
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}
    kjt = recgo.KeyedJaggedTensor(["a"], ids, lengths=torch.tensor([1, 2]))
    torch.testing.assert_close(ours(kjt).values(), theirs(kjt.to_torchrec()).values())


def test_kjt_to_dict_takes_compute_offsets() -> None:
    """to_dict(compute_offsets=False) raised TypeError; TorchRec's signature is
    to_dict(compute_offsets: bool = True): with it, each JaggedTensor's offsets are there at once."""
    kw = {"keys": ["a", "b"], "values": torch.tensor([1, 2, 3]), "lengths": torch.tensor([1, 0, 2, 0])}
    lazy = recgo.KeyedJaggedTensor(**kw).to_dict(compute_offsets=False)
    want = TKJT(**kw).to_dict(compute_offsets=False)
    assert list(lazy) == list(want) == ["a", "b"]
    for k in lazy:
        assert lazy[k].offsets_or_none() is None
        assert lazy[k].values().tolist() == want[k].values().tolist()
        assert lazy[k].lengths().tolist() == want[k].lengths().tolist()
        assert lazy[k].offsets().tolist() == want[k].offsets().tolist()
    eager, want = recgo.KeyedJaggedTensor(**kw).to_dict(), TKJT(**kw).to_dict(compute_offsets=True)
    for k, offsets in (("a", [0, 1, 1]), ("b", [0, 2, 2])):
        got = eager[k].offsets_or_none()
        assert got is not None and got.tolist() == want[k].offsets_or_none().tolist() == offsets


def test_jagged_tensor_empty_dtypes_as_torchrec() -> None:
    """JaggedTensor.empty() gave int64 values where TorchRec's gives torch's default float dtype."""
    for kw in ({}, {"is_weighted": True}, {"is_weighted": True, "values_dtype": torch.int32},
               {"is_weighted": True, "weights_dtype": torch.float64}):
        ours, theirs = recgo.JaggedTensor.empty(**kw), TJT.empty(**kw)
        assert ours.values().dtype == theirs.values().dtype, kw
        assert ours.values().shape == theirs.values().shape == (0,)
        assert (ours.weights_or_none() is None) == (theirs.weights_or_none() is None)
        if theirs.weights_or_none() is not None:
            assert ours.weights().dtype == theirs.weights().dtype, kw
        assert ours.lengths().numel() == 0
    assert recgo.JaggedTensor.empty().values().dtype == torch.float32


def test_kjt_takes_two_dimensional_lengths_as_torchrec() -> None:
    """Lengths laid out [F, B] (TorchRec's inference batches; its flatten_lengths and permute read
    them so) were refused; they are the F·B lengths row by row. A [B, F] layout is refused by name."""
    keys, values = ["f1", "f2", "f3"], torch.tensor([1, 2, 3, 4, 5, 6])
    lengths2d = torch.tensor([[1, 1], [1, 0], [2, 1]])
    ours, theirs = recgo.KeyedJaggedTensor(keys, values, lengths=lengths2d), TKJT(keys, values, lengths=lengths2d)
    assert ours.lengths().tolist() == theirs.flatten_lengths().lengths().tolist() == [1, 1, 1, 0, 2, 1]
    assert ours.stride() == theirs.stride() == 2
    assert ours.length_per_key() == theirs.length_per_key() == [2, 1, 3]
    per_key = theirs.to_dict()  # (TorchRec's __getitem__ slices 2-D lengths as if they were flat: not compared)
    for k in keys:
        flat = theirs.flatten_lengths()[k]
        assert ours[k].lengths().tolist() == per_key[k].lengths().tolist() == flat.lengths().tolist()
        assert ours[k].values().tolist() == per_key[k].values().tolist()
    assert recgo.KeyedJaggedTensor.from_torchrec(theirs).lengths().tolist() == [1, 1, 1, 0, 2, 1]
    # a recgo collection takes TorchRec's batch with 2-D lengths, as TorchRec's collection does
    tables = [torchrec.EmbeddingBagConfig(name="t1", embedding_dim=4, num_embeddings=10, feature_names=["f1", "f2"]),
              torchrec.EmbeddingBagConfig(name="t2", embedding_dim=8, num_embeddings=20, feature_names=["f3"])]
    tebc = torchrec.EmbeddingBagCollection(tables=tables)
    rebc = recgo.from_torchrec(tebc)
    torch.testing.assert_close(rebc(theirs).values(), tebc(theirs).values())
    with pytest.raises(recgo.InvalidInputError, match=r"not \[F, B\]"):
        recgo.KeyedJaggedTensor(keys, values, lengths=lengths2d.T)


def test_configs_convert_to_torchrecs_and_rebuild_its_modules() -> None:
    """torchrec.EmbeddingBagCollection(tables=recgo_ebc.embedding_bag_configs()) failed on a bare
    AssertionError (recgo's configs keep init_fn None); to_torchrec() gives TorchRec's configs, and
    the module built from them has the same tables."""
    tr = pytest.importorskip("torchrec")
    ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 4, "a", ["fa"], pooling="mean"),
                                        recgo.EmbeddingBagConfig(7, 8, "b", ["fb", "fc"])])
    cfgs = [c.to_torchrec() for c in ebc.embedding_bag_configs()]
    assert [type(c) for c in cfgs] == [tr.EmbeddingBagConfig] * 2
    assert cfgs[0].pooling == tr.PoolingType.MEAN and cfgs[1].pooling == tr.PoolingType.SUM
    theirs = tr.EmbeddingBagCollection(tables=cfgs)
    assert {k: tuple(v.shape) for k, v in theirs.state_dict().items()} == {
        k: tuple(v.shape) for k, v in ebc.state_dict().items() if k.endswith(".weight")}
    ec = recgo.EmbeddingCollection([recgo.EmbeddingConfig(5, 4, "s", ["h"])])
    (seq,) = [c.to_torchrec() for c in ec.embedding_configs()]
    assert isinstance(seq, tr.EmbeddingConfig) and seq.num_embeddings == 5 and seq.feature_names == ["h"]
    tr.EmbeddingCollection(tables=[seq])
    with pytest.raises(recgo.InvalidInputError, match="dynamic-ID table has no TorchRec config"):
        recgo.EmbeddingBagConfig(10, 4, "d", ["fd"], dynamic=recgo.DynamicConfig()).to_torchrec()
