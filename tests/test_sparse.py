"""recgo's KeyedJaggedTensor / KeyedTensor: layout, validation and TorchRec round trips."""

from __future__ import annotations

import pytest
import torch

import recgo
from recgo.sparse import as_kjt


def _kjt() -> recgo.KeyedJaggedTensor:
    # two features, batch 3: f0 = [[1, 2], [], [3]], f1 = [[4], [5, 6, 7], []]
    return recgo.KeyedJaggedTensor(
        ["f0", "f1"], torch.tensor([1, 2, 3, 4, 5, 6, 7]), lengths=torch.tensor([2, 0, 1, 1, 3, 0], dtype=torch.int32)
    )


def test_layout_accessors() -> None:
    kjt = _kjt()
    assert kjt.keys() == ["f0", "f1"]
    assert kjt.stride() == 3
    assert kjt.length_per_key() == [3, 4]
    assert kjt.lengths().dtype == torch.int64
    assert kjt.offsets().tolist() == [0, 2, 2, 3, 4, 7, 7]
    d = kjt.to_dict()
    assert isinstance(d["f1"], recgo.JaggedTensor)
    assert d["f1"].values().tolist() == [4, 5, 6, 7]
    assert d["f1"].lengths().tolist() == [1, 3, 0]
    assert kjt.weights_or_none() is None


def test_from_offsets_and_jagged_dict_agree() -> None:
    a = recgo.KeyedJaggedTensor(["f0", "f1"], torch.tensor([1, 2, 3, 4, 5, 6, 7]),
                                offsets=torch.tensor([0, 2, 2, 3, 4, 7, 7]))
    b = recgo.KeyedJaggedTensor.from_jagged_dict({
        "f0": (torch.tensor([1, 2, 3]), torch.tensor([2, 0, 1])),
        "f1": (torch.tensor([4, 5, 6, 7]), torch.tensor([1, 3, 0])),
    })
    for x in (a, b):
        assert torch.equal(x.values(), _kjt().values())
        assert torch.equal(x.lengths(), _kjt().lengths())


def test_non_contiguous_inputs_just_work() -> None:
    vals = torch.arange(14)[::2]  # a strided view
    kjt = recgo.KeyedJaggedTensor(["f0", "f1"], vals, lengths=torch.tensor([2, 0, 1, 1, 3, 0]))
    assert kjt.values().is_contiguous()
    assert kjt.values().tolist() == [0, 2, 4, 6, 8, 10, 12]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(keys=["a", "a"], values=torch.tensor([1]), lengths=torch.tensor([1, 0])), "duplicate"),
        (dict(keys=["a"], values=torch.tensor([1.0]), lengths=torch.tensor([1])), "values: dtype float"),
        (dict(keys=["a", "b"], values=torch.tensor([1]), lengths=torch.tensor([1, 0, 0])), "multiple"),
        (dict(keys=["a"], values=torch.tensor([1, 2]), lengths=torch.tensor([2]),
              weights=torch.tensor([1.0])), "1 weights for 2 values"),
        (dict(keys=["a"], values=torch.tensor([[1]]), lengths=torch.tensor([1])), "dimension"),
        (dict(keys=["a"], values=torch.tensor([1])), "lengths or offsets"),
        (dict(keys=["a"], values=[1, 2], lengths=torch.tensor([2])), "torch.Tensor"),
    ],
)
def test_bad_input_is_named(kwargs: dict, match: str) -> None:
    with pytest.raises(recgo.InvalidInputError, match=match):
        recgo.KeyedJaggedTensor(**kwargs)


def test_mismatched_batches_in_jagged_dict() -> None:
    with pytest.raises(recgo.InvalidInputError, match="batch sizes"):
        recgo.KeyedJaggedTensor.from_jagged_dict({
            "a": (torch.tensor([1]), torch.tensor([1])),
            "b": (torch.tensor([1]), torch.tensor([1, 0])),
        })


def test_torchrec_round_trip() -> None:
    torchrec = pytest.importorskip("torchrec")
    w = torch.rand(7)
    ours = recgo.KeyedJaggedTensor(["f0", "f1"], _kjt().values(), lengths=_kjt().lengths(), weights=w)
    theirs = ours.to_torchrec()
    assert isinstance(theirs, torchrec.KeyedJaggedTensor)
    back = as_kjt(theirs)
    assert back.keys() == ours.keys()
    assert torch.equal(back.values(), ours.values())
    assert torch.equal(back.lengths(), ours.lengths())
    assert torch.equal(back.weights(), w)


def test_keyed_tensor_views_and_torchrec() -> None:
    vals = torch.arange(12.0).view(2, 6)
    kt = recgo.KeyedTensor(["a", "b"], [2, 4], vals)
    assert kt.offset_per_key() == [0, 2, 6]
    assert torch.equal(kt["b"], vals[:, 2:])
    leaf = vals.clone().requires_grad_(True)
    moved = recgo.KeyedTensor(["a", "b"], [2, 4], leaf).to("cpu", non_blocking=True)  # as TorchRec's .to
    assert moved.keys() == ["a", "b"] and moved.length_per_key() == [2, 4]
    moved["b"].sum().backward()
    assert torch.equal(leaf.grad, torch.tensor([[0.0, 0, 1, 1, 1, 1]] * 2))
    pytest.importorskip("torchrec")
    tkt = kt.to_torchrec()
    assert torch.equal(tkt.to_dict()["a"], vals[:, :2])


def test_as_kjt_rejects_other_types() -> None:
    with pytest.raises(recgo.InvalidInputError, match="KeyedJaggedTensor"):
        as_kjt({"a": torch.tensor([1])})


# -- KeyedTensor: TorchRec's test_keyed_tensor.py regroup cases, on recgo's type ---------------------

def test_regroup_single_kt() -> None:
    tensors = [torch.randn(2, 3) for _ in range(5)]
    keys = [f"dense_{i}" for i in range(5)]
    kt = recgo.KeyedTensor.from_tensor_list(keys, tensors, 1)
    g = recgo.KeyedTensor.regroup([kt], [["dense_0", "dense_4"], ["dense_1", "dense_3"], ["dense_2"]])
    assert torch.equal(g[0], torch.cat([tensors[0], tensors[4]], 1))
    assert torch.equal(g[1], torch.cat([tensors[1], tensors[3]], 1))
    assert torch.equal(g[2], tensors[2])


def test_regroup_multiple_kt_with_duplicates_and_torchrec_inputs() -> None:
    t1 = [torch.randn(2, 4), torch.randn(2, 8), torch.randn(2, 2)]
    t2 = [torch.randn(2, 3), torch.randn(2, 10)]
    kt1 = recgo.KeyedTensor.from_tensor_list(["dense_0", "dense_1", "dense_2"], t1)
    kt2 = recgo.KeyedTensor.from_tensor_list(["sparse_0", "sparse_1"], t2)
    groups = [["dense_0", "sparse_1", "dense_2"], ["dense_1", "sparse_0", "dense_0"]]
    g = recgo.KeyedTensor.regroup([kt1, kt2], groups)
    assert torch.equal(g[0], torch.cat([t1[0], t2[1], t1[2]], 1))
    assert torch.equal(g[1], torch.cat([t1[1], t2[0], t1[0]], 1))
    d = recgo.KeyedTensor.regroup_as_dict([kt1, kt2], groups, ["x", "y"])
    assert list(d) == ["x", "y"] and torch.equal(d["y"], g[1])
    torchrec = pytest.importorskip("torchrec")
    theirs = torchrec.KeyedTensor.regroup([kt1.to_torchrec(), kt2.to_torchrec()], groups)
    for a, b in zip(g, theirs):
        assert torch.equal(a, b)
    mixed = recgo.KeyedTensor.regroup([kt1.to_torchrec(), kt2], groups)  # TorchRec's KT as input too
    assert torch.equal(mixed[1], g[1])
    # TorchRec's own regroup of recgo's KTs: a repeated key takes its fallback, which reads _key_indices
    for a, b in zip(g, torchrec.KeyedTensor.regroup([kt1, kt2], groups)):
        assert torch.equal(a, b)
    # an empty group is a [B, 0] tensor, as TorchRec's
    empty, whole = recgo.KeyedTensor.regroup([kt1], [[], ["dense_1"]])
    assert empty.shape == (2, 0) and torch.equal(whole, t1[1])
    with pytest.raises(recgo.NotFoundError, match=r"\['nope'\]"):
        recgo.KeyedTensor.regroup([kt1], [["nope"]])


def test_regroup_backward_matches_slicing() -> None:
    values = torch.randn(3, 7, requires_grad=True)
    kt = recgo.KeyedTensor(["a", "b"], [3, 4], values)
    a, b = recgo.KeyedTensor.regroup([kt], [["b", "a"], ["a"]])
    (a.square().sum() + 2 * b.sum()).backward()
    want = torch.cat([2 * values[:, :3] + 2, 2 * values[:, 3:]], 1).detach()
    torch.testing.assert_close(values.grad, want)


def test_keyed_tensor_checks_its_layout() -> None:
    with pytest.raises(recgo.InvalidInputError, match="do not hold the keys' 5 columns"):
        recgo.KeyedTensor(["a", "b"], [2, 3], torch.zeros(2, 4))
    with pytest.raises(recgo.InvalidInputError, match="2 keys but 1 lengths"):
        recgo.KeyedTensor(["a", "b"], [2], torch.zeros(2, 2))
    kt = recgo.KeyedTensor(["a"], [2], torch.zeros(2, 2))
    assert kt.key_dim() == 1
    with pytest.raises(recgo.NotFoundError, match="'z' is not in"):
        kt["z"]


def test_keyed_tensor_repeated_key_resolves_to_its_last_block_as_torchrec() -> None:
    import torchrec

    v = torch.arange(12.).reshape(3, 4)
    ours = recgo.KeyedTensor(["a", "b", "a"], [1, 1, 2], v)
    theirs = torchrec.KeyedTensor(keys=["a", "b", "a"], length_per_key=[1, 1, 2], values=v)
    assert ours._key_indices() == theirs._key_indices()
    for k in ("a", "b"):
        torch.testing.assert_close(ours[k], theirs[k])
        torch.testing.assert_close(ours.to_dict()[k], theirs.to_dict()[k])
    torch.testing.assert_close(ours["a"], ours.to_dict()["a"])
    torch.testing.assert_close(recgo.KeyedTensor.regroup([ours], [["a"]])[0], theirs["a"])


@pytest.mark.parametrize("key_dim", [0, 1])
def test_keyed_tensor_from_tensor_list_key_dim_as_torchrec(key_dim: int) -> None:
    import torchrec

    g = torch.Generator().manual_seed(0)
    shapes = [(1, 2), (3, 2)] if key_dim == 0 else [(2, 1), (2, 3)]
    tensors = [torch.randn(*s, generator=g) for s in shapes]
    ours = recgo.KeyedTensor.from_tensor_list(["x", "y"], tensors, key_dim=key_dim, cat_dim=key_dim)
    theirs = torchrec.KeyedTensor.from_tensor_list(["x", "y"], tensors, key_dim=key_dim, cat_dim=key_dim)
    assert ours.key_dim() == theirs.key_dim() == key_dim
    assert ours.length_per_key() == theirs.length_per_key() and ours.offset_per_key() == theirs.offset_per_key()
    torch.testing.assert_close(ours.values(), theirs.values())
    for k in ("x", "y"):
        torch.testing.assert_close(ours[k], theirs[k])
        torch.testing.assert_close(ours.to_dict()[k], theirs.to_dict()[k])
    assert ours.to_torchrec().key_dim() == key_dim
    torch.testing.assert_close(recgo.KeyedTensor.regroup([ours], [["y", "x"]])[0],
                               torch.cat([tensors[1], tensors[0]], key_dim))
    from torch.utils import _pytree as pytree

    leaves, spec = pytree.tree_flatten(ours)  # (torch.export and compile carry outputs through pytree)
    for back in (pytree.tree_unflatten(leaves, spec),
                 pytree.tree_unflatten(leaves, pytree.treespec_loads(pytree.treespec_dumps(spec)))):
        assert back.key_dim() == key_dim and torch.equal(back["y"], ours["y"])
    with pytest.raises(recgo.InvalidInputError, match="key_dim=1, cat_dim=0"):
        recgo.KeyedTensor.from_tensor_list(["x", "y"], tensors, key_dim=1, cat_dim=0)


@pytest.mark.parametrize("shape", [(), (2,), (2, 2)])
def test_keyed_tensor_key_dim_0_blocks_of_any_trailing_shape_as_torchrec(shape: tuple[int, ...]) -> None:
    """key_dim=0 blocks of 1-D and 3-D tensors, as TorchRec takes them (recgo refused all but 2-D)."""
    import torchrec

    ts = [torch.arange(2 * max(1, int(torch.tensor(shape).prod())), dtype=torch.float32).reshape(2, *shape),
          torch.zeros(3, *shape)]
    ours = recgo.KeyedTensor.from_tensor_list(["x", "y"], ts, key_dim=0, cat_dim=0)
    theirs = torchrec.KeyedTensor.from_tensor_list(["x", "y"], ts, key_dim=0, cat_dim=0)
    for k in ("x", "y"):
        assert torch.equal(ours[k], theirs[k]) and torch.equal(ours.to_dict()[k], theirs.to_dict()[k])
    assert torch.equal(recgo.KeyedTensor.regroup([ours], [["y", "x"]])[0], torch.cat([ts[1], ts[0]]))
    assert recgo.KeyedTensor.regroup([ours], [[]])[0].shape == (0, *shape)


def test_keyed_tensor_key_dim_0_exports_with_a_dynamic_dim() -> None:
    """A key_dim=0 KeyedTensor built of tensors whose dim 0 is dynamic exports (its widths stay
    symbolic; int() fixed them to the example's and export refused the dynamic dim)."""
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return recgo.KeyedTensor.from_tensor_list(["x", "y"], [x * 2, y + 1], key_dim=0, cat_dim=0)["y"] * 1

    dyn = {0: torch.export.Dim.DYNAMIC}
    ep = torch.export.export(M(), (torch.randn(2, 3), torch.randn(4, 3)), dynamic_shapes=(dyn, dyn), strict=False)
    a, b = torch.randn(5, 3), torch.randn(1, 3)
    assert torch.equal(ep.module()(a, b), M()(a, b))
