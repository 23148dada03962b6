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


def test_meta_device_is_rejected_with_advice() -> None:
    with pytest.raises(recgo.InvalidInputError, match=r"\.cpu\(\)"):
        recgo.KeyedJaggedTensor(["a"], torch.tensor([1], device="meta"), lengths=torch.tensor([1]))


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
    pytest.importorskip("torchrec")
    tkt = kt.to_torchrec()
    assert torch.equal(tkt.to_dict()["a"], vals[:, :2])


def test_as_kjt_rejects_other_types() -> None:
    with pytest.raises(recgo.InvalidInputError, match="KeyedJaggedTensor"):
        as_kjt({"a": torch.tensor([1])})
