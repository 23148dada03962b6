"""PlannedEmbeddingBagCollection on the paths the plain collection takes: TorchRec's variable-batch
KJTs (it refused them, saying recgo's collections take them), torch.compile over changing batch sizes
(from the second shape on, dynamo traced the Go remap with fake tensors' pointers and it raised
'remap: table index 94… of 1'), is_weighted(), from_ebc of a collection already planned (a bare
KeyError) or with a frozen table (it came back trainable), and a state dict in another remap's row order
(loaded silently, every row under another ID)."""

from __future__ import annotations

import warnings

import pytest
import torch

from recgo import EmbeddingBagCollection, InvalidInputError, KeyedJaggedTensor
from recgo import planner as P
from recgo.modules import optim

from test_planner_shared_keys import CFGS, batch, planned_pair, prof  # noqa: F401 (prof: the fixture)


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


def test_from_ebc_keeps_a_frozen_table_frozen(prof: P.Profile) -> None:
    """A pretrained table frozen in the source (``requires_grad_(False)``) stays frozen: it came back
    trainable and a fused step changed its rows."""
    plain = EmbeddingBagCollection(CFGS, seed=3, optimizer=optim.SGD(lr=1.0))
    plain.embedding_bags["ta"].weight.requires_grad_(False)
    plan = P.plan(prof, P.Topology(nodes=1, gpus_per_node=2, hbm_bytes=300, host_bytes=10**6), tables=["ta", "tb"])
    planned = P.PlannedEmbeddingBagCollection.from_ebc(plain, plan)
    assert [n for n, p in planned.named_parameters() if not p.requires_grad] == ["ebc.embedding_bags.ta.weight"]
    before = {c.name: planned.original_weight(c.name).clone() for c in CFGS}
    (planned(batch(1)).values() ** 2).sum().backward()
    assert torch.equal(planned.original_weight("ta"), before["ta"])
    assert not torch.equal(planned.original_weight("tb"), before["tb"])  # the others train


def test_a_state_dict_in_another_remaps_order_is_refused(prof: P.Profile) -> None:
    """Rows are stored in the remap's order: a state dict saved by a collection with another remap (here
    the plan of the same tables from another profile) loaded "with all keys matched" and put every row
    under another ID. Now refused before any row is copied; the same remap loads exactly."""
    _, planned = planned_pair(prof, ("ta", "tb"))
    g = torch.Generator().manual_seed(1)
    ids = {c.name: torch.randint(0, c.num_embeddings, (400,), generator=g) for c in CFGS}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", P.ThinProfileWarning)
        other_prof = P.profile([ids], [P.TableSpec(c.name, c.num_embeddings, c.embedding_dim) for c in CFGS],
                               sample_rate=1.0, min_lookups=0)
    topo = P.Topology(nodes=1, gpus_per_node=2, hbm_bytes=300, host_bytes=10**6)
    other = P.PlannedEmbeddingBagCollection(CFGS, P.plan(other_prof, topo, tables=["ta", "tb"]))
    kept = {k: v.clone() for k, v in other.state_dict().items() if k != "_extra_state"}
    with pytest.raises(InvalidInputError, match=r"another row order for tables \['ta', 'tb'\]"):
        other.load_state_dict(planned.state_dict())
    assert all(torch.equal(v, other.state_dict()[k]) for k, v in kept.items())  # nothing copied
    same = P.PlannedEmbeddingBagCollection(CFGS, planned.plan, remap=planned.remap)
    same.load_state_dict(planned.state_dict())
    for c in CFGS:
        assert torch.equal(same.original_weight(c.name), planned.original_weight(c.name))


def test_a_remap_of_another_plan_is_refused(prof: P.Profile) -> None:
    """A stale ``remap.bin`` beside a re-planned ``plan.json`` (here: the remap of a plan with more HBM)
    was taken as it was: the collection's hot region was not the one the plan placed."""
    topo = P.Topology(nodes=1, gpus_per_node=2, hbm_bytes=300, host_bytes=10**6)
    roomy = P.plan(prof, P.Topology(nodes=1, gpus_per_node=2, hbm_bytes=10**5, host_bytes=10**6), tables=["ta"])
    tight = P.plan(prof, topo, tables=["ta"])
    assert roomy.table("ta")["hot_rows"] != tight.table("ta")["hot_rows"]
    with pytest.raises(InvalidInputError, match=r"the remap was not made for this plan: tables 'ta' \(remap: 60 rows"):
        P.PlannedEmbeddingBagCollection(CFGS, tight, remap=roomy.remap(prof))
    with pytest.raises(InvalidInputError, match="'ta' .*plan: absent"):
        P.PlannedEmbeddingBagCollection(CFGS, P.plan(prof, topo, tables=["tb"]), remap=roomy.remap(prof))
    P.PlannedEmbeddingBagCollection(CFGS, tight, remap=tight.remap(prof))
