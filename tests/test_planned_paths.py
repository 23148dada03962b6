"""PlannedEmbeddingBagCollection on the paths the plain collection takes: TorchRec's variable-batch
KJTs (it refused them, saying recgo's collections take them), torch.compile over changing batch sizes
(from the second shape on, dynamo traced the Go remap with fake tensors' pointers and it raised
'remap: table index 94… of 1'), is_weighted(), and from_ebc of a collection already planned (a bare
KeyError)."""

from __future__ import annotations

import pytest
import torch

from recgo import InvalidInputError, KeyedJaggedTensor
from recgo import planner as P

from test_planner_shared_keys import batch, planned_pair, prof  # noqa: F401 (prof: the fixture)


@pytest.mark.parametrize("tables", [("ta", "tb"), ("tc",)])
def test_a_variable_batch_pools_as_in_the_plain_collection(prof: P.Profile, tables: tuple[str, ...]) -> None:
    torchrec = pytest.importorskip("torchrec")
    plain, planned = planned_pair(prof, tables)
    keys, strides = ["s", "u", "v", "w"], [2, 3, 1, 3]
    lengths = torch.tensor([1, 2, 0, 1, 1, 3, 2, 0, 1])
    values = torch.tensor([5, 7, 59, 3, 0, 11, 12, 13, 29, 28, 1])
    inverse = torch.tensor([[0, 1, 1], [0, 1, 2], [0, 0, 0], [2, 1, 0]])
    kjt = torchrec.KeyedJaggedTensor(keys=keys, values=values, lengths=lengths,
                                     stride_per_key_per_rank=[[s] for s in strides], inverse_indices=(keys, inverse))
    got, want = planned(kjt), plain(kjt)
    assert type(got) is type(want) and got.keys() == want.keys()
    torch.testing.assert_close(got.values(), want.values(), rtol=0, atol=0)
    got.values().sum().backward()
    want.values().sum().backward()
    for t, table in plain.embedding_bags.items():
        new = planned.remap.apply(t, torch.arange(table.weight.shape[0])) if t in tables else slice(None)
        torch.testing.assert_close(planned.ebc.embedding_bags[t].weight.grad[new], table.weight.grad)


def test_compiled_over_changing_batch_sizes(prof: P.Profile) -> None:
    plain, planned = planned_pair(prof, ("ta", "tb"))
    compiled = torch.compile(planned, backend="eager")
    with torch.no_grad():
        for size in (4, 7, 12, 5):
            kjt = batch(size, size=size)
            torch.testing.assert_close(compiled(kjt).values(), plain(kjt).values(), rtol=0, atol=0)


def test_is_weighted_and_a_planned_source(prof: P.Profile) -> None:
    _, planned = planned_pair(prof, ("ta",), is_weighted=True)
    assert planned.is_weighted()
    with pytest.raises(InvalidInputError, match="from_ebc: the collection is already planned"):
        P.PlannedEmbeddingBagCollection.from_ebc(planned, planned.plan)
    assert isinstance(batch(0), KeyedJaggedTensor)
