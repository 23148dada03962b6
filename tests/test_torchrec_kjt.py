"""recgo.KeyedJaggedTensor against TorchRec's semantics (issue 10).

The first tests are ports of TorchRec's own ``torchrec/sparse/tests/test_keyed_jagged_tensor.py`` cases
(written afresh, same inputs and expected values, integer IDs where TorchRec used float values since
recgo's values are IDs). The property test then runs the same operations on a recgo and a TorchRec KJT
built from one random batch and requires equal results.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings, strategies as st

import recgo
from recgo import InvalidInputError, JaggedTensor, KeyedJaggedTensor, KeyedTensor, NotFoundError
from raw_inputs import FromRawTensors

VALUES = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8])
WEIGHTS = torch.tensor([1.0, 0.5, 1.5, 1.0, 0.5, 1.0, 1.0, 1.5])
OFFSETS = torch.tensor([0, 2, 2, 3, 4, 5, 8], dtype=torch.int32)
KEYS = ["index_0", "index_1"]


def _kjt() -> KeyedJaggedTensor:
    return KeyedJaggedTensor(values=VALUES, keys=KEYS, offsets=OFFSETS, weights=WEIGHTS)


def _check_two_features(j0: JaggedTensor, j1: JaggedTensor) -> None:
    assert isinstance(j0, JaggedTensor) and isinstance(j1, JaggedTensor)
    assert j0.lengths().tolist() == [2, 0, 1]
    assert j0.weights().tolist() == [1.0, 0.5, 1.5]
    assert j0.values().tolist() == [1, 2, 3]
    assert j1.lengths().tolist() == [1, 1, 3]
    assert j1.weights().tolist() == [1.0, 0.5, 1.0, 1.0, 1.5]
    assert j1.values().tolist() == [4, 5, 6, 7, 8]


def test_key_lookup() -> None:
    kjt = _kjt()
    _check_two_features(kjt["index_0"], kjt["index_1"])
    with pytest.raises(NotFoundError, match="'nope' is not in"):
        kjt["nope"]


def test_to_dict() -> None:
    d = _kjt().to_dict()
    assert list(d) == KEYS
    _check_two_features(d["index_0"], d["index_1"])
    # views, not copies (TorchRec's to_dict slices too)
    assert d["index_1"].values().data_ptr() == _kjt_values_ptr(d)


def _kjt_values_ptr(d: dict[str, JaggedTensor]) -> int:
    return d["index_0"].values().data_ptr() + 3 * 8


def test_empty() -> None:
    kjt_0 = KeyedJaggedTensor(keys=["index_0"], values=torch.tensor([]), lengths=torch.tensor([]))
    j0 = kjt_0["index_0"]
    assert j0.lengths().numel() == 0 and j0.values().numel() == 0
    kjt_1 = KeyedJaggedTensor(keys=["index_1"], values=torch.tensor([]), offsets=torch.tensor([]))
    assert kjt_1["index_1"].lengths().numel() == 0
    combined = KeyedJaggedTensor.concat([kjt_0, kjt_1])
    assert combined.keys() == ["index_0", "index_1"]
    assert combined["index_1"].values().numel() == 0
    assert KeyedJaggedTensor.empty().to_dict() == {}
    assert KeyedJaggedTensor.empty_like(_kjt()).to_dict() == {}
    assert KeyedJaggedTensor.empty_like(_kjt()).stride() == 3


def test_split() -> None:
    j0, j1 = _kjt().split([1, 1])
    assert isinstance(j0, KeyedJaggedTensor)
    assert j0.keys() == ["index_0"] and j1.keys() == ["index_1"]
    assert j0.lengths().tolist() == [2, 0, 1] and j0.weights().tolist() == [1.0, 0.5, 1.5]
    assert j0.values().tolist() == [1, 2, 3]
    assert j1.lengths().tolist() == [1, 1, 3] and j1.values().tolist() == [4, 5, 6, 7, 8]
    assert j1.weights().tolist() == [1.0, 0.5, 1.0, 1.0, 1.5]


def test_zero_split() -> None:
    j0, j1 = _kjt().split([0, 2])
    assert j0.keys() == [] and j0.lengths().numel() == 0 and j0.values().numel() == 0
    assert j0.weights().numel() == 0
    assert j0.stride() == 3
    assert j1.keys() == KEYS
    assert j1.lengths().tolist() == [2, 0, 1, 1, 1, 3]
    assert torch.equal(j1.weights(), WEIGHTS) and torch.equal(j1.values(), VALUES)
    assert j1.stride() == 3
    with pytest.raises(InvalidInputError, match="do not fit"):
        _kjt().split([2, 1])


def _three() -> KeyedJaggedTensor:
    return KeyedJaggedTensor.from_lengths_sync(
        values=VALUES, keys=["index_0", "index_1", "index_2"],
        lengths=torch.tensor([0, 2, 0, 1, 1, 1, 0, 3, 0], dtype=torch.int32), weights=WEIGHTS)


def test_permute_w_weights() -> None:
    p = _three().permute([1, 0, 2])
    assert p.keys() == ["index_1", "index_0", "index_2"]
    assert p.offset_per_key() == [0, 3, 5, 8]
    assert p.values().tolist() == [3, 4, 5, 1, 2, 6, 7, 8]
    assert p.lengths().tolist() == [1, 1, 1, 0, 2, 0, 0, 3, 0]
    assert p.weights().tolist() == [1.5, 1.0, 0.5, 1.0, 0.5, 1.0, 1.0, 1.5]


def test_permute_unweighted_and_subset() -> None:
    kjt = KeyedJaggedTensor.from_lengths_sync(values=VALUES, keys=["index_0", "index_1", "index_2"],
                                              lengths=torch.tensor([0, 2, 0, 1, 1, 1, 0, 3, 0]))
    p = kjt.permute([1, 0, 2])
    assert p.values().tolist() == [3, 4, 5, 1, 2, 6, 7, 8]
    assert p.weights_or_none() is None
    sub = kjt.permute([2, 1], indices_tensor=torch.tensor([2, 1]))
    assert sub.keys() == ["index_2", "index_1"] and sub.values().tolist() == [6, 7, 8, 3, 4, 5]


def test_permute_duplicates_is_refused_with_a_reason() -> None:
    # TorchRec repeats the key; recgo's keys are unique (a feature read by several tables is handled
    # by the EmbeddingBagCollection itself).
    with pytest.raises(InvalidInputError, match="duplicate feature names"):
        _three().permute([1, 0, 2, 1, 1])


def test_concat() -> None:
    values = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8, 9])
    keys = ["index_0", "index_1", "index_2"]
    lengths = torch.tensor([0, 2, 0, 1, 1, 1, 0, 3, 0, 0, 1, 0])
    expected = KeyedJaggedTensor.from_lengths_sync(values=values, keys=keys, lengths=lengths)
    # TorchRec's test splits the values at 4 although index_0's lengths sum to 3 (it does not check);
    # recgo checks, so the split here is at 3.
    actual = KeyedJaggedTensor.concat([
        KeyedJaggedTensor.from_lengths_sync(values=values[:3], keys=keys[:1], lengths=lengths[:4]),
        KeyedJaggedTensor.from_lengths_sync(values=values[3:], keys=keys[1:], lengths=lengths[4:]),
    ])
    with pytest.raises(InvalidInputError, match="lengths sum to 3 but there are 4 values"):
        KeyedJaggedTensor.from_lengths_sync(values=values[:4], keys=keys[:1], lengths=lengths[:4])
    assert torch.equal(expected.lengths(), actual.lengths())
    assert torch.equal(expected.offsets(), actual.offsets())
    assert torch.equal(expected.values(), actual.values())
    assert expected.length_per_key() == actual.length_per_key() == [3, 5, 1]
    with pytest.raises(InvalidInputError, match="empty list"):
        KeyedJaggedTensor.concat([])
    with pytest.raises(InvalidInputError, match="weighted and unweighted"):
        KeyedJaggedTensor.concat([_kjt().split([1, 1])[0], expected.split([0, 1, 2])[2]])
    with pytest.raises(InvalidInputError, match="variable batch size"):
        KeyedJaggedTensor.concat([expected, KeyedJaggedTensor(["x"], torch.tensor([1]), lengths=torch.tensor([1]))])


def test_length_vs_offset() -> None:
    j_offset = KeyedJaggedTensor.from_offsets_sync(values=VALUES, keys=KEYS, weights=WEIGHTS,
                                                   offsets=torch.tensor([0, 0, 2, 2, 3, 4, 5, 5, 8]))
    j_lens = KeyedJaggedTensor.from_lengths_sync(values=VALUES, keys=KEYS, weights=WEIGHTS,
                                                 lengths=torch.tensor([0, 2, 0, 1, 1, 1, 0, 3]))
    assert torch.equal(j_offset.lengths(), j_lens.lengths())
    assert torch.equal(j_offset.offsets(), j_lens.offsets())
    with pytest.raises(InvalidInputError, match="disagree"):
        KeyedJaggedTensor(KEYS, VALUES, lengths=torch.tensor([0, 2, 0, 1, 1, 1, 3, 0]),
                          offsets=torch.tensor([0, 0, 2, 2, 3, 4, 5, 5, 8]))


def test_float_lengths_offsets_throw() -> None:
    with pytest.raises(InvalidInputError, match="lengths: dtype float64"):
        KeyedJaggedTensor.from_lengths_sync(keys=["f1", "f2"], values=torch.arange(7),
                                            lengths=torch.tensor([3, 4], dtype=torch.float64))
    with pytest.raises(InvalidInputError, match="offsets: dtype float64"):
        KeyedJaggedTensor.from_offsets_sync(keys=["f1", "f2"], values=torch.arange(7),
                                            offsets=torch.tensor([0, 3, 7], dtype=torch.float64))


def test_variable_batch_per_feature_is_refused() -> None:
    # TorchRec's test_key_lookup_vb: stride_per_key_per_rank [[2], [4]] gives index_0 two samples.
    with pytest.raises(InvalidInputError, match=r"variable batch size per feature \(\[2, 4\]\)"):
        KeyedJaggedTensor(values=VALUES, keys=KEYS, offsets=OFFSETS, weights=WEIGHTS,
                          stride_per_key_per_rank=[[2], [4]])
    # the same stride for every key is an ordinary KJT
    kjt = KeyedJaggedTensor(values=VALUES, keys=KEYS, offsets=OFFSETS, stride_per_key_per_rank=[[1, 2], [3, 0]])
    assert kjt.stride() == 3 and not kjt.variable_stride_per_key()
    # malformed descriptions name the problem (a bare torch ValueError, or silence, before)
    with pytest.raises(InvalidInputError, match="stride_per_key: 1 entries for 2 keys"):
        KeyedJaggedTensor(values=VALUES, keys=KEYS, offsets=OFFSETS, stride_per_key=[3])
    with pytest.raises(InvalidInputError, match="one list of per-rank batch sizes per key"):
        KeyedJaggedTensor(values=VALUES, keys=KEYS, offsets=OFFSETS, stride_per_key_per_rank=[[3], [1, 2]])
    with pytest.raises(InvalidInputError, match="expected 2 rows"):
        KeyedJaggedTensor(values=VALUES, keys=KEYS, offsets=OFFSETS, stride_per_key_per_rank=[[3]])
    with pytest.raises(InvalidInputError, match="inverse_indices"):
        KeyedJaggedTensor(keys=["f1", "f2", "f3"], values=torch.tensor([5, 6, 7, 1, 2, 3, 0, 1]),
                          lengths=torch.tensor([3, 3, 2]), stride_per_key_per_rank=[[2], [1]],
                          inverse_indices=(["f1", "f2"], torch.tensor([[0, 1, 0], [0, 0, 0]])))
    with pytest.raises(InvalidInputError, match="variable batch size"):
        KeyedJaggedTensor.from_jt_dict({"a": JaggedTensor(torch.tensor([1]), lengths=torch.tensor([1])),
                                        "b": JaggedTensor(torch.tensor([1]), lengths=torch.tensor([1, 0]))})


def test_from_jt_dict_round_trip() -> None:
    kjt = _kjt()
    back = KeyedJaggedTensor.from_jt_dict(kjt.to_dict())
    assert back.keys() == KEYS
    assert torch.equal(back.values(), VALUES) and torch.equal(back.weights(), WEIGHTS)
    assert torch.equal(back.lengths(), kjt.lengths())
    with pytest.raises(InvalidInputError, match="no weights but others do"):
        KeyedJaggedTensor.from_jt_dict({"a": kjt["index_0"],
                                        "b": JaggedTensor(torch.tensor([1]), lengths=torch.tensor([1, 0, 0]))})


def test_stride_and_per_key_accessors() -> None:
    kjt = _kjt()
    assert kjt.stride() == 3
    assert kjt.stride_per_key() == [3, 3]
    assert kjt.length_per_key() == [3, 5]
    assert kjt.offset_per_key() == [0, 3, 8]
    assert kjt.lengths_offset_per_key() == [0, 3, 6]
    assert kjt.index_per_key() == {"index_0": 0, "index_1": 1}
    assert KeyedJaggedTensor([], torch.tensor([]), lengths=torch.tensor([]), stride=5).stride() == 5
    with pytest.raises(InvalidInputError, match="stride 4 disagrees"):
        KeyedJaggedTensor(KEYS, VALUES, offsets=OFFSETS, stride=4)
    with pytest.raises(InvalidInputError, match="length_per_key"):
        KeyedJaggedTensor(KEYS, VALUES, offsets=OFFSETS, length_per_key=[4, 4])
    with pytest.raises(InvalidInputError, match="lengths sum to 7 but there are 8"):
        KeyedJaggedTensor(KEYS, VALUES, lengths=torch.tensor([2, 0, 1, 1, 1, 2])).length_per_key()


def test_old_positional_lengths_still_work_with_a_warning() -> None:
    with pytest.warns(FutureWarning, match="pass lengths= by keyword"):
        old = KeyedJaggedTensor(KEYS, VALUES, torch.tensor([2, 0, 1, 1, 1, 3]), WEIGHTS)
    assert old.lengths().tolist() == [2, 0, 1, 1, 1, 3] and torch.equal(old.weights(), WEIGHTS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        KeyedJaggedTensor(KEYS, VALUES, WEIGHTS, torch.tensor([2, 0, 1, 1, 1, 3]))  # TorchRec order: silent


def test_integer_weights_beside_offsets_are_refused_as_weights_and_an_empty_batch_needs_no_lengths() -> None:
    """An integer ``weights`` tensor given with ``offsets`` (TorchRec's ``test_to``) was taken for recgo's old
    positional lengths and refused as "lengths and offsets disagree"; and TorchRec's empty
    ``KeyedJaggedTensor([], torch.Tensor())`` was refused for want of lengths."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InvalidInputError, match="weights: dtype int64"):
            KeyedJaggedTensor.from_offsets_sync(keys=KEYS, values=VALUES, weights=torch.arange(8),
                                                offsets=torch.tensor([0, 2, 2, 3, 4, 5, 8]))
    tr = pytest.importorskip("torchrec")
    empty = KeyedJaggedTensor([], torch.tensor([]))
    want = tr.KeyedJaggedTensor([], torch.tensor([]))
    assert empty.keys() == want.keys() == [] and empty.stride() == want.stride() == 0
    assert empty.lengths().numel() == 0 and empty.to_dict() == {}
    with pytest.raises(InvalidInputError, match="needs lengths or offsets"):
        KeyedJaggedTensor(["a"], torch.tensor([], dtype=torch.int64))


def test_dict_instead_of_kjt_points_to_the_constructors() -> None:
    ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(5, 4, "t", ["a"])], seed=0)
    with pytest.raises(InvalidInputError, match=r"from_jagged_dict.*from_jt_dict"):
        ebc({"a": torch.tensor([1])})


# -- the same operations on recgo's and TorchRec's KJT ----------------------------------------------

@st.composite
def batches(draw: st.DrawFn) -> tuple[list[str], torch.Tensor, torch.Tensor, torch.Tensor | None]:
    nkeys = draw(st.integers(1, 4))
    b = draw(st.integers(1, 4))  # TorchRec itself fails on B = 0 with keys
    lengths = torch.tensor(draw(st.lists(st.integers(0, 3), min_size=nkeys * b, max_size=nkeys * b)),
                           dtype=torch.int64)
    n = int(lengths.sum())
    values = torch.tensor(draw(st.lists(st.integers(0, 50), min_size=n, max_size=n)), dtype=torch.int64)
    weights = torch.rand(n) if draw(st.booleans()) else None
    return [f"f{i}" for i in range(nkeys)], values, lengths, weights


@settings(max_examples=40, deadline=None)
@given(batches(), st.randoms(use_true_random=False))
def test_same_results_as_torchrec(batch, rnd) -> None:
    tr = pytest.importorskip("torchrec")
    keys, values, lengths, weights = batch
    ours = KeyedJaggedTensor(keys, values, weights, lengths)
    theirs = tr.KeyedJaggedTensor(keys=keys, values=values, weights=weights, lengths=lengths)

    def same(a: KeyedJaggedTensor, b) -> None:
        assert a.keys() == b.keys()
        assert torch.equal(a.values(), b.values()) and torch.equal(a.lengths(), b.lengths().long())
        if a.keys():  # TorchRec's key-less split gives empty offsets, recgo's [0]
            assert torch.equal(a.offsets(), b.offsets().long())
        assert (a.weights_or_none() is None) == (b.weights_or_none() is None)
        if a.weights_or_none() is not None:
            assert torch.equal(a.weights(), b.weights())
        assert a.stride() == b.stride()
        assert a.length_per_key() == b.length_per_key() and a.offset_per_key() == b.offset_per_key()
        for k in a.keys():
            ja, jb = a[k], b[k]
            assert torch.equal(ja.values(), jb.values()) and torch.equal(ja.lengths(), jb.lengths().long())
            assert torch.equal(ja.offsets(), jb.offsets().long())

    same(ours, theirs)
    same(recgo.sparse.as_kjt(theirs), theirs)
    same(KeyedJaggedTensor.from_torchrec(ours.to_torchrec()), theirs)
    perm = rnd.sample(range(len(keys)), rnd.randint(1, len(keys)))
    same(ours.permute(perm), theirs.permute(perm))
    cut = rnd.randint(0, len(keys))
    segs = [cut, len(keys) - cut]
    for a, b in zip(ours.split(segs), theirs.split(segs)):
        same(a, b)
    same(KeyedJaggedTensor.concat(ours.split(segs)), tr.KeyedJaggedTensor.concat(theirs.split(segs)))
    same(KeyedJaggedTensor.from_jt_dict(ours.to_dict()), tr.KeyedJaggedTensor.from_jt_dict(theirs.to_dict()))
    same(KeyedJaggedTensor.from_offsets_sync(keys, values, ours.offsets(), weights),
         tr.KeyedJaggedTensor.from_offsets_sync(keys, values, theirs.offsets(), weights))


def test_size_in_bytes_and_pin_memory_as_torchrecs() -> None:
    """``size_in_bytes`` counts what TorchRec's counts for the same batch; ``pin_memory`` is the batch
    (pinned where an accelerator is present), so TorchRec code that calls either keeps working."""
    kjt = KeyedJaggedTensor(["a", "b"], torch.tensor([1, 2, 3]), torch.tensor([0.5, 1.0, 2.0]),
                            lengths=torch.tensor([2, 0, 1, 0]))
    jt = JaggedTensor(torch.arange(6.0).view(3, 2), lengths=torch.tensor([1, 2]))
    # values (3 × 8) + weights (3 × 4) + lengths (4 × 8); offsets only once computed
    assert kjt.size_in_bytes() == 3 * 8 + 3 * 4 + 4 * 8
    assert jt.size_in_bytes() == 6 * 4 + 2 * 8
    tr = pytest.importorskip("torchrec.sparse.jagged_tensor")
    theirs = tr.KeyedJaggedTensor(["a", "b"], torch.tensor([1, 2, 3]), torch.tensor([0.5, 1.0, 2.0]),
                                  lengths=torch.tensor([2, 0, 1, 0]))
    assert kjt.size_in_bytes() == theirs.size_in_bytes()
    pinned = kjt.pin_memory()
    assert pinned.keys() == kjt.keys() and torch.equal(pinned.values(), kjt.values())
    assert torch.equal(pinned.lengths(), kjt.lengths()) and torch.equal(pinned.weights(), kjt.weights())
    if not torch.cuda.is_available():
        assert pinned is kjt


def test_buffer_copy_like_torchrec() -> None:
    """empty_like(device=) gives a buffer of the batch's shapes; copy_ fills it in place, as TorchRec's
    pipelines do; a buffer of other keys or shapes is refused before anything is overwritten."""
    src = _kjt()
    buf = KeyedJaggedTensor.empty_like(src, device="cpu")
    assert buf.keys() == src.keys() and buf.lengths().tolist() == src.lengths().tolist()
    values_ptr = buf.values().data_ptr()
    other = KeyedJaggedTensor(src.keys(), src.values() + 10, src.weights() * 2, lengths=src.lengths())
    buf.length_per_key()  # a cache that must follow the new batch
    assert buf.copy_(other) is buf
    assert buf.values().data_ptr() == values_ptr
    assert buf.values().tolist() == other.values().tolist()
    assert buf.weights().tolist() == other.weights().tolist()
    assert buf["index_1"].values().tolist() == other["index_1"].values().tolist()
    shorter = KeyedJaggedTensor(src.keys(), src.values()[:-1], src.weights()[:-1],
                                lengths=torch.tensor([2, 0, 1, 1, 1, 2]))
    before = buf.values().clone()
    with pytest.raises(InvalidInputError, match="values has shape"):
        buf.copy_(shorter)
    assert torch.equal(buf.values(), before)
    with pytest.raises(InvalidInputError, match="only the source has weights|only this one has weights"):
        buf.copy_(KeyedJaggedTensor(src.keys(), src.values(), lengths=src.lengths()))
    with pytest.raises(InvalidInputError, match="keys"):
        buf.copy_(src.permute([1, 0]))
    # on the meta device, the batch's shapes there, as TorchRec's empty_like (refused before session 36)
    trj = pytest.importorskip("torchrec.sparse.jagged_tensor")
    meta, theirs = (cls.empty_like(cls(keys=src.keys(), values=src.values(), weights=src.weights(),
                                       lengths=src.lengths()), device=torch.device("meta"))
                    for cls in (KeyedJaggedTensor, trj.KeyedJaggedTensor))
    assert meta.values().is_meta and meta.keys() == theirs.keys() and meta.stride() == theirs.stride()
    assert meta.values().shape == theirs.values().shape and meta.lengths().shape == theirs.lengths().shape
    nbytes = buf.size_in_bytes()
    assert buf.clear_storage() == nbytes and buf.values().untyped_storage().nbytes() == 0


def test_jagged_buffer_copy_like_torchrec() -> None:
    jt = JaggedTensor(torch.arange(5.0), torch.ones(5), lengths=torch.tensor([2, 3]))
    empty = JaggedTensor.empty_like(jt)
    assert empty.values().numel() == 0 and empty.weights().dtype == torch.float32
    buf = JaggedTensor.empty_like(jt, device="cpu")
    buf.offsets()
    src = JaggedTensor(torch.arange(5.0) * 3, torch.full((5,), 0.5), lengths=torch.tensor([4, 1]))
    buf.copy_(src)
    assert buf.values().tolist() == src.values().tolist() and buf.weights().tolist() == [0.5] * 5
    assert buf.lengths().tolist() == [4, 1] and buf.offsets().tolist() == [0, 4, 5]
    with pytest.raises(InvalidInputError, match="shape"):
        buf.copy_(JaggedTensor(torch.arange(4.0), torch.ones(4), lengths=torch.tensor([2, 2])))


def test_keyed_tensor_layout_arguments() -> None:
    values = torch.randn(2, 5)
    kt = KeyedTensor(["a", "b"], [2, 3], values, offset_per_key=[0, 2, 5], index_per_key={"a": 0, "b": 1})
    assert torch.equal(kt["b"], values[:, 2:])
    with pytest.raises(InvalidInputError, match="offset_per_key"):
        KeyedTensor(["a", "b"], [2, 3], values, offset_per_key=[0, 3, 5])
    with pytest.raises(InvalidInputError, match="index_per_key"):
        KeyedTensor(["a", "b"], [2, 3], values, index_per_key={"a": 1, "b": 0})


def test_batch_types_are_pytree_nodes_and_a_model_exports() -> None:
    """recgo's KJT, JaggedTensor and KeyedTensor flatten to their tensors and back (as TorchRec
    registers its own), so torch.export takes a recgo batch: it refused the type before."""
    import torch.utils._pytree as pytree

    kjt = _kjt()
    leaves, spec = pytree.tree_flatten(kjt)
    assert all(x is None or isinstance(x, torch.Tensor) for x in leaves) and len(leaves) == 4
    back = pytree.tree_unflatten(leaves, spec)
    assert back.keys() == kjt.keys() and back.stride() == kjt.stride()
    assert back["index_1"].values().tolist() == kjt["index_1"].values().tolist()
    jt = JaggedTensor(torch.arange(3.0), lengths=torch.tensor([1, 2]))
    assert pytree.tree_unflatten(*pytree.tree_flatten(jt)).lengths().tolist() == [1, 2]
    kt = KeyedTensor(["a", "b"], [1, 2], torch.randn(2, 3))
    assert torch.equal(pytree.tree_unflatten(*pytree.tree_flatten(kt))["b"], kt["b"])
    # leaves mapped to other dtypes or devices go through the constructor's conversions and checks (the
    # engine read bfloat16 weights as float32 memory when unflattening skipped them)
    cast = pytree.tree_map(lambda t: t.to(torch.bfloat16) if t.is_floating_point() else t.to(torch.int32), kjt)
    assert cast.weights().dtype == torch.float32 and cast.values().dtype == torch.int64
    assert cast.weights().tolist() == kjt.weights().tolist()
    # to the meta device, as TorchRec's KJT goes: the shapes there (the engine refuses it, see test_meta_kjt)
    meta = pytree.tree_map(lambda t: t.to("meta"), kjt)
    assert meta.values().is_meta and meta.keys() == kjt.keys() and meta.stride() == kjt.stride()

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(
                num_embeddings=10, embedding_dim=4, name="t", feature_names=["f"])], seed=0)
            self.top = torch.nn.Linear(4, 1)

        def forward(self, batch: KeyedJaggedTensor) -> torch.Tensor:
            return self.top(self.ebc(batch).values())

    model = Model().eval()
    batch = KeyedJaggedTensor(["f"], torch.tensor([1, 2, 3]), lengths=torch.tensor([2, 1]))
    exported = torch.export.export(model, (batch,), strict=False)
    other = KeyedJaggedTensor(["f"], torch.tensor([4, 5, 6]), lengths=torch.tensor([1, 2]))
    assert torch.equal(exported.module()(other), model(other))
    # a dynamic batch size: the tree spec holds the keys, not the batch size
    n, b = torch.export.Dim("N", min=2, max=1000), torch.export.Dim("B", min=2, max=100)
    dynamic = torch.export.export(model, (batch,), dynamic_shapes={"batch": [{0: n}, None, {0: b}, None]}, strict=False)
    three = KeyedJaggedTensor(["f"], torch.tensor([4, 5, 6, 7]), lengths=torch.tensor([1, 2, 1]))
    assert torch.allclose(dynamic.module()(three), model(three))


def test_script_refuses_by_name_and_a_fused_training_export_warns() -> None:
    """torch.jit.script of a model with a recgo collection failed inside TorchScript's compiler,
    naming the wrong file; torch.export of a fused collection in training gave a program whose
    backward never updates the tables, without a word."""
    from recgo.modules import optim

    for coll in (recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 4, "t", ["f"])]),
                 recgo.EmbeddingCollection([recgo.EmbeddingConfig(10, 4, "t", ["f"])])):
        with pytest.raises(InvalidInputError, match=f"a recgo {type(coll).__name__} cannot be TorchScripted"):
            torch.jit.script(torch.nn.ModuleDict({"c": coll}))
    fused = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 4, "t", ["f"])], optimizer=optim.SGD(lr=0.5))
    batch = KeyedJaggedTensor(["f"], torch.tensor([1, 2]), lengths=torch.tensor([1, 1]))
    with pytest.warns(UserWarning, match="backward does not run the fused update"):
        torch.export.export(fused, (batch,), strict=False)
    import warnings

    fused.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad():
            torch.export.export(fused, (batch,), strict=False)  # the eval export: no warning


@pytest.mark.parametrize("kind", ["ebc", "fused", "ec"])
def test_a_saved_export_refuses_to_run_on_another_collections_tables(tmp_path, kind: str) -> None:
    """An exported program names its collection by engine handle; the tables live in the engine, not
    in the program. Saved and loaded in a new process, the handle named whichever collection that
    process built first, and the program silently pooled its rows (found by a probe). Loading in
    this process gives the same situation: parameters that are not the named collection's."""
    from recgo.modules import optim

    if kind == "ec":
        coll: torch.nn.Module = recgo.EmbeddingCollection([recgo.EmbeddingConfig(10, 4, "t", ["f"])], seed=0)
    else:
        coll = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 4, "t", ["f"])], seed=0,
                                            optimizer=optim.SGD(lr=0.1) if kind == "fused" else None)

    model = FromRawTensors(coll).eval()
    args = (torch.tensor([1, 2, 3]), torch.tensor([2, 1]))
    with torch.no_grad():
        want = model(*args)
        exported = torch.export.export(model, args, strict=False)
        assert torch.equal(exported.module()(*args), want)  # in place, on the live collection: as eager
        torch.export.save(exported, tmp_path / "p.pt2")
        loaded = torch.export.load(tmp_path / "p.pt2")
        with pytest.raises(InvalidInputError, match="not those of the collection it names"):
            loaded.module()(*args)
