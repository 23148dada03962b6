"""recgo's KeyedJaggedTensor, JaggedTensor and KeyedTensor against TorchRec's own classes on the same
inputs, where a TorchRec user swapping the import would see a difference: batches on the meta device,
``str()`` (and a short ``repr()``), and flattening against an exported program's tree spec with keys in
another order (``torch.fx._pytree.tree_flatten_spec``, which ``torch.export.unflatten``'s modules pass values
between submodules with).
"""

from __future__ import annotations

import pytest
import torch
import torch.fx._pytree as fx_pytree
import torch.utils._pytree as pytree

import recgo
from recgo import InvalidInputError, JaggedTensor, KeyedJaggedTensor, KeyedTensor

pytest.importorskip("torchrec")
from torchrec.sparse import jagged_tensor as trj  # noqa: E402

META = torch.device("meta")
KEYS = ["index_0", "index_1", "index_2", "index_3"]


def _both(cls: str, **kw):
    """The same arguments to recgo's class and TorchRec's."""
    return getattr(recgo, cls)(**kw), getattr(trj, cls)(**kw)


def test_a_meta_batch_is_taken_as_torchrecs_and_refused_by_the_engine() -> None:
    """TorchRec's test_meta_device_compatibility, with IDs: recgo refused every meta tensor."""
    lengths = torch.tensor([2, 0, 1, 1, 1, 3, 0, 2], device=META)
    offsets = torch.tensor([0, 2, 2, 3, 4, 5, 8, 8, 10], device=META)
    values, weights = torch.arange(10, device=META), torch.ones(10, device=META)
    mine, theirs = _both("KeyedJaggedTensor", keys=KEYS, values=values, weights=weights, lengths=lengths)
    mine.sync()
    mine.unsync()
    # no lengths to read: TorchRec's stand-in per-key counts, and per-key views of those sizes
    assert mine.length_per_key() == theirs.length_per_key() == [4, 2, 2, 2]
    assert mine.offset_per_key() == theirs.offset_per_key()
    mine_d, theirs_d = mine.to_dict(), theirs.to_dict()
    assert list(mine_d) == list(theirs_d) == KEYS
    for k in KEYS:
        assert mine_d[k].values().is_meta and mine_d[k].values().shape == theirs_d[k].values().shape
        assert mine_d[k].lengths().shape == theirs_d[k].lengths().shape
    back = KeyedJaggedTensor.from_jt_dict(mine_d)
    assert back.keys() == KEYS and back.stride() == theirs.stride() == 2 and back.values().is_meta
    for kjt in (KeyedJaggedTensor.from_lengths_sync(keys=KEYS, values=values, weights=weights, lengths=lengths),
                KeyedJaggedTensor.from_offsets_sync(keys=KEYS, values=values, weights=weights, offsets=offsets),
                KeyedJaggedTensor(KEYS, torch.arange(10), torch.ones(10),
                                  lengths=torch.tensor([2, 0, 1, 1, 1, 3, 0, 2])).to("meta")):
        assert kjt.lengths().is_meta and kjt.offsets().is_meta and kjt.stride() == 2
        assert [kjt.split([1, 3])[1].keys(), kjt.permute([3, 0]).keys()] == [KEYS[1:], ["index_3", "index_0"]]
    empty = KeyedJaggedTensor.from_lengths_sync(keys=[], values=torch.tensor([], device=META),
                                                lengths=torch.tensor([], device=META))
    assert empty.keys() == [] and empty.device().type == "meta"
    # moved to meta, a batch keeps its per-key counts, as TorchRec's does (its per-key views keep their sizes)
    real = dict(keys=KEYS[:2], values=torch.arange(8), lengths=torch.tensor([2, 0, 1, 1, 1, 3]))
    moved, theirs_moved = KeyedJaggedTensor(**real).to("meta"), trj.KeyedJaggedTensor(**real).sync().to(META)
    assert moved.length_per_key() == theirs_moved.length_per_key() == [3, 5]
    assert moved["index_1"].values().shape == theirs_moved["index_1"].values().shape == (5,)
    with pytest.raises(InvalidInputError, match="length_per_key"):
        KeyedJaggedTensor(KEYS[:2], torch.arange(8, device=META), lengths=torch.ones(6, dtype=torch.int64, device=META),
                          length_per_key=[3, 6])
    jt = JaggedTensor(torch.ones(10, 3, device=META), lengths=lengths, offsets=offsets)
    assert jt.lengths().is_meta and jt.stride() == 8
    # a collection on the CPU reads the batch's memory, which a meta batch has none of; one on meta
    # gives the output's shape
    cfg = [recgo.EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=10, feature_names=KEYS)]
    with pytest.raises(InvalidInputError, match="meta.*CPU memory"):
        recgo.EmbeddingBagCollection(cfg)(mine)
    out = recgo.EmbeddingBagCollection(cfg, device="meta")(mine)
    assert out.values().is_meta and out.values().shape == (2, 16)
    with pytest.raises(InvalidInputError, match="meta device: it has no values"):
        mine.to("cpu")
    with pytest.raises(InvalidInputError, match="disagree"):
        JaggedTensor(torch.ones(3, device=META), lengths=torch.tensor([1, 2], device=META),
                     offsets=torch.tensor([0, 3], device=META))


VALUES = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8])
WEIGHTS = torch.tensor([1.0, 0.5, 1.5, 1.0, 0.5, 1.0, 1.0, 1.5])
OFFSETS = torch.tensor([0, 2, 2, 3, 4, 5, 8])


@pytest.mark.parametrize("cls, kw", [
    ("JaggedTensor", dict(values=torch.tensor([1.0, 2.0, 3.0, 4.0]), lengths=torch.tensor([1, 0, 3]))),
    ("JaggedTensor", dict(values=VALUES.float(), weights=WEIGHTS, offsets=OFFSETS)),
    ("JaggedTensor", dict(values=torch.arange(6.0).view(3, 2), lengths=torch.tensor([2, 1]))),
    ("KeyedJaggedTensor", dict(keys=KEYS[:2], values=VALUES, offsets=OFFSETS)),
    ("KeyedJaggedTensor", dict(keys=KEYS[:2], values=VALUES, weights=WEIGHTS, offsets=OFFSETS)),
    ("KeyedJaggedTensor", dict(keys=[], values=torch.tensor([], dtype=torch.int64))),
    ("KeyedTensor", dict(keys=["dense_0", "dense_1"], length_per_key=[1, 2],
                         values=torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]))),
    ("KeyedTensor", dict(keys=[], length_per_key=[], values=torch.Tensor())),
])
def test_str_is_torchrecs_text(cls: str, kw: dict) -> None:
    """``str()`` printed ``JaggedTensor(batch=4, values=(6,))``; TorchRec's prints every sample."""
    mine, theirs = _both(cls, **kw)
    assert str(mine) == str(theirs)


def test_repr_is_short_for_a_wide_batch() -> None:
    keys = [f"f{i}" for i in range(1000)]
    kjt = KeyedJaggedTensor(keys, torch.arange(2000), torch.ones(2000), lengths=torch.full((2000,), 1))
    assert repr(kjt) == ("KeyedJaggedTensor(keys=['f0', 'f1', 'f2', 'f3', ... 1000 keys], batch=2, values=2000, "
                         "weighted)")
    kt = KeyedTensor(keys, [1] * 1000, torch.zeros(2, 1000))
    assert repr(kt) == "KeyedTensor(keys=['f0', 'f1', 'f2', 'f3', ... 1000 keys], shape=(2, 1000))"
    assert repr(kjt["f7"]) == "JaggedTensor(batch=2, values=(2,), weighted)"
    meta = kjt.to("meta")
    assert str(meta) == repr(meta).replace("weighted)", "weighted, device=meta)")  # TorchRec's str raises


def test_str_of_a_batch_whose_lengths_do_not_add_up_says_so() -> None:
    """The constructor checks no sums (as TorchRec's); str() printed the bags cut short, [[1, 2], [3]]."""
    kjt = KeyedJaggedTensor(["f"], torch.tensor([1, 2, 3]), lengths=torch.tensor([2, 2]))
    assert str(kjt) == "KeyedJaggedTensor(keys=['f'], batch=2, values=3; its lengths add up to 4: not a batch of these values)"
    with pytest.raises(recgo.InvalidInputError, match="lengths sum to 4 but there are 3 values"):
        kjt.to_dict()


def test_keyed_tensor_in_another_key_order_flattens_to_the_exported_spec_as_torchrec() -> None:
    """TorchRec's test_pytree: a KeyedTensor whose keys came back reordered is regrouped into the spec's
    order (recgo raised torch's "Real spec ... is different" RuntimeError)."""
    a, b = torch.tensor([[1.0, 1.0]]).T, torch.tensor([[2.0, 2.0], [3.0, 3.0]]).T
    for cls in (KeyedTensor, trj.KeyedTensor):
        kt = cls.from_tensor_list(["dense_0", "dense_1"], [a, b])
        _, spec = pytree.tree_flatten(kt)
        swapped = cls.from_tensor_list(["dense_1", "dense_0"], [b, a])
        flat = fx_pytree.tree_flatten_spec(swapped, spec)
        assert torch.equal(flat[0], kt.values())
        back = pytree.tree_unflatten(flat, spec)
        assert back.keys() == ["dense_0", "dense_1"] and torch.equal(back["dense_1"], b)
    _, spec = pytree.tree_flatten(KeyedTensor.from_tensor_list(["dense_0", "dense_1"], [a, b]))
    with pytest.raises(InvalidInputError, match="widths"):
        fx_pytree.tree_flatten_spec(KeyedTensor(["dense_1", "dense_0"], [1, 2], torch.zeros(2, 3)), spec)


def test_a_batch_in_another_key_order_flattens_permuted_to_the_exported_spec() -> None:
    """TorchRec passes a KJT's tensors on as they are whatever its keys (read under the wrong keys);
    recgo permutes a batch of the same keys into the spec's order and refuses other keys."""
    kjt = KeyedJaggedTensor(KEYS[:2], VALUES, WEIGHTS, offsets=OFFSETS)
    _, spec = pytree.tree_flatten(kjt)
    swapped = kjt.permute([1, 0])
    values, weights, lengths, _ = fx_pytree.tree_flatten_spec(swapped, spec)
    assert torch.equal(values, kjt.values()) and torch.equal(weights, kjt.weights())
    assert torch.equal(lengths, kjt.lengths())
    with pytest.raises(InvalidInputError, match="exported for a KeyedJaggedTensor with keys"):
        fx_pytree.tree_flatten_spec(KeyedJaggedTensor(["x", "y"], VALUES, offsets=OFFSETS), spec)


def test_a_module_regrouping_its_keyed_tensor_inputs_traces_with_fx_as_torchrecs() -> None:
    """TorchRec's test_regroup_fxable / test_regroup_as_dict_fxable: ``regroup`` is one graph call
    (recgo's iterated the traced inputs and failed with fx's TraceError)."""
    groups, names = [["dense_0", "sparse_1", "dense_2"], ["dense_1", "sparse_0"]], ["g0", "g1"]

    class Regroup(torch.nn.Module):
        def __init__(self, cls: type) -> None:
            super().__init__()
            self.cls = cls

        def forward(self, inputs: list, as_dict: bool) -> object:
            if as_dict:
                return self.cls.regroup_as_dict(inputs, groups, names)
            return self.cls.regroup(inputs, groups)

    dense, sparse = [torch.randn(2, 3) for _ in range(3)], [torch.randn(2, 3) for _ in range(2)]
    mine = [KeyedTensor.from_tensor_list(["dense_0", "dense_1", "dense_2"], dense),
            KeyedTensor.from_tensor_list(["sparse_0", "sparse_1"], sparse)]
    theirs = [kt.to_torchrec() for kt in mine]
    for as_dict in (False, True):
        traced = torch.fx.symbolic_trace(Regroup(KeyedTensor), concrete_args={"as_dict": as_dict})
        want = Regroup(trj.KeyedTensor)(theirs, as_dict)
        got = traced(mine, as_dict)
        for w, g in zip(want.values() if as_dict else want, got.values() if as_dict else got):
            assert torch.equal(w, g)
        if as_dict:
            assert list(got) == names


@pytest.mark.parametrize("build", ["kjt", "jt"])
def test_building_a_batch_from_traced_inputs_says_what_to_do(build: str) -> None:
    """TorchRec's batch types trace when a module builds one from its inputs (they hold the Proxies);
    recgo's check their tensors, so tracing refuses, now saying why and what to do instead (before, a bare
    "expected a torch.Tensor, got Proxy")."""

    class Build(torch.nn.Module):
        def __init__(self, mod: object) -> None:
            super().__init__()
            self.mod = mod

        def forward(self, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            if build == "kjt":
                return self.mod.KeyedJaggedTensor(["f"], values, lengths=lengths).values()
            return self.mod.JaggedTensor(values, lengths=lengths).values()

    values, lengths = torch.tensor([1, 2, 3]), torch.tensor([2, 1])
    assert torch.equal(torch.fx.symbolic_trace(Build(trj))(values, lengths), values)
    with pytest.raises(InvalidInputError, match="build the batch outside the traced module"):
        torch.fx.symbolic_trace(Build(recgo))
