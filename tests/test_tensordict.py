"""TensorDict batches (one nested jagged tensor of IDs per feature), which TorchRec's collections take
(``maybe_td_to_kjt``): recgo's pooled and sequence collections take them too, with the outputs a
KeyedJaggedTensor of the same bags gives (they raised "expected a KeyedJaggedTensor")."""

from __future__ import annotations

import pytest
import torch

import recgo
from recgo import EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig
from recgo import InvalidInputError, KeyedJaggedTensor
from recgo.modules import optim

tensordict = pytest.importorskip("tensordict")

BAGS = {"b": [[4], [], [5, 6, 9]], "a": [[1, 2], [], [3]]}  # keys not in the tables' order


def njt(bags: list[list[int]]) -> torch.Tensor:
    return torch.nested.nested_tensor([torch.tensor(b, dtype=torch.int64) for b in bags], layout=torch.jagged)


def td(bags: dict[str, list[list[int]]] = BAGS) -> object:
    return tensordict.TensorDict({k: njt(v) for k, v in bags.items()}, batch_size=[3])


def kjt(bags: dict[str, list[list[int]]] = BAGS) -> KeyedJaggedTensor:
    return KeyedJaggedTensor.from_jagged_dict({k: (torch.tensor(sum(v, []), dtype=torch.int64),
                                                   torch.tensor([len(b) for b in v])) for k, v in bags.items()})


def test_as_kjt_converts_a_tensordict_as_torchrec_does() -> None:
    got = recgo.sparse.as_kjt(td())
    assert got.keys() == ["b", "a"] and got.stride() == 3
    assert got.values().tolist() == [4, 5, 6, 9, 1, 2, 3] and got.lengths().tolist() == [1, 0, 3, 2, 0, 1]
    torchrec = pytest.importorskip("torchrec")
    from torchrec.sparse.tensor_dict import maybe_td_to_kjt

    want = maybe_td_to_kjt(td())
    assert got.keys() == want.keys() and torch.equal(got.values(), want.values())
    assert torch.equal(got.lengths(), want.lengths())
    assert torchrec is not None


def test_a_narrowed_nested_tensor_gives_its_bags_only() -> None:
    """A nested tensor with holes between its bags (offsets and lengths) gives the bags, not the holes."""
    values, offsets = torch.arange(10, 20), torch.tensor([0, 4, 6, 9])
    holed = torch.nested.nested_tensor_from_jagged(values, offsets=offsets, lengths=torch.tensor([2, 1, 0]))
    got = recgo.sparse.as_kjt(tensordict.TensorDict({"a": holed}, batch_size=[3]))
    assert got.values().tolist() == [10, 11, 14] and got.lengths().tolist() == [2, 1, 0]


@pytest.mark.parametrize("optimizer", [None, optim.Adagrad(lr=0.1)])
def test_collections_answer_a_tensordict_as_its_kjt(optimizer: object) -> None:
    """Pooled and sequence outputs, and a fused training step, as for the same bags in a KJT."""
    cfgs = [EmbeddingBagConfig(10, 4, "ta", ["a"]), EmbeddingBagConfig(12, 8, "tb", ["b"], pooling="mean")]
    ebcs = [EmbeddingBagCollection(cfgs, seed=1, optimizer=optimizer) for _ in range(2)]
    for _ in range(2):
        got, want = ebcs[0](td()), ebcs[1](kjt())
        assert got.keys() == want.keys() == ["a", "b"]
        torch.testing.assert_close(got.values(), want.values(), rtol=0, atol=0)
        got.values().square().sum().backward()
        want.values().square().sum().backward()
    if optimizer is not None:
        for t in ("ta", "tb"):
            assert torch.equal(ebcs[0].embedding_bags[t].weight, ebcs[1].embedding_bags[t].weight)
    ec = EmbeddingCollection([EmbeddingConfig(10, 4, "ta", ["a"]), EmbeddingConfig(12, 4, "tb", ["b"])], seed=2)
    got, want = ec(td()), ec(kjt())
    assert type(got["a"]) is type(want["a"]) is recgo.JaggedTensor
    for k in ("a", "b"):
        torch.testing.assert_close(got[k].values(), want[k].values(), rtol=0, atol=0)
        assert torch.equal(got[k].lengths(), want[k].lengths())


def test_torchrec_collection_and_the_converted_one_agree_on_a_tensordict() -> None:
    torchrec = pytest.importorskip("torchrec")
    tables = [torchrec.EmbeddingBagConfig(num_embeddings=10, embedding_dim=4, name="ta", feature_names=["a"]),
              torchrec.EmbeddingBagConfig(num_embeddings=12, embedding_dim=4, name="tb", feature_names=["b"])]
    ref = torchrec.EmbeddingBagCollection(tables=tables)
    mine = recgo.from_torchrec(ref)
    with torch.no_grad():
        want, got = ref(td()), mine(td())
    assert got.keys() == want.keys()
    torch.testing.assert_close(got.values(), want.values())


@pytest.mark.parametrize("value, message", [
    (torch.tensor([[1, 2], [3, 4], [5, 6]]), "key 'a' holds a torch.strided tensor of 2 dimensions"),
    (torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(1, 3), torch.zeros(0, 3)], layout=torch.jagged),
     "key 'a' holds a torch.jagged tensor of 3 dimensions"),
])
def test_other_contents_are_refused_by_name(value: torch.Tensor, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        recgo.sparse.as_kjt(tensordict.TensorDict({"a": value}, batch_size=[3]))


def test_keys_of_other_batch_sizes_are_refused() -> None:
    bad = tensordict.TensorDict({"a": njt([[1], [2]]), "b": njt([[1], [2], [3]])}, batch_size=[])
    with pytest.raises(InvalidInputError, match=r"different batch sizes \[2, 3\]"):
        recgo.sparse.as_kjt(bad)
