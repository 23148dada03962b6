"""PlannedEmbeddingBagCollection with a feature several tables read, some of them planned: each table
sees the feature's IDs renumbered by its own remap (unplanned ones unchanged), so outputs, names,
gradients and fused updates equal the plain EmbeddingBagCollection's (it refused such collections:
one batch key carried one set of IDs); Remap.apply_kjt says by name why it cannot do the same."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from recgo import EmbeddingBagCollection, EmbeddingBagConfig, InvalidInputError, KeyedJaggedTensor
from recgo import planner as P
from recgo.modules import optim

from test_embedding import reference

# "s" is read by ta, tb (mean) and tc; ta and tc also read a feature of their own, td none shared
CFGS = [EmbeddingBagConfig(60, 4, "ta", ["s", "u"]), EmbeddingBagConfig(80, 8, "tb", ["s"], pooling="mean"),
        EmbeddingBagConfig(70, 4, "tc", ["v", "s"]), EmbeddingBagConfig(30, 4, "td", ["w"])]
ROWS = {"s": 60, "u": 60, "v": 70, "w": 30}  # a shared feature's IDs fit its smallest table
NAMES = ["s@ta", "u", "s@tb", "v", "s@tc", "w"]  # the plain collection's output keys
PLANS = [("ta", "tb", "tc"), ("ta", "tb"), ("ta",)]  # all readers of "s" planned; one not; one planned


def batch(seed: int, weighted: bool = False, size: int = 24) -> KeyedJaggedTensor:
    """Keys in another order than the tables', 0–3 IDs per bag over each key's whole range, and a key
    no table reads."""
    g = torch.Generator().manual_seed(seed)
    keys = ["w", "s", "extra", "v", "u"]
    lengths = torch.randint(0, 4, (len(keys) * size,), generator=g)
    per_key = lengths.view(len(keys), size).sum(1).tolist()
    values = torch.cat([torch.randint(0, ROWS.get(k, 5), (n,), generator=g) for k, n in zip(keys, per_key)])
    weights = torch.rand(values.numel(), generator=g) + 0.5 if weighted else None
    return KeyedJaggedTensor(keys, values, weights=weights, lengths=lengths)


@pytest.fixture(scope="module")
def prof() -> P.Profile:
    """Each table hot at other rows (low, high, odd-spread), so the remaps differ."""
    g = torch.Generator().manual_seed(0)
    u = torch.rand(400, generator=g) ** 4
    ids = {"ta": (u * 60).long(), "tb": 79 - (u * 80).long(), "tc": (u * 70).long() * 37 % 70, "td": (u * 30).long()}
    specs = [P.TableSpec(c.name, c.num_embeddings, c.embedding_dim) for c in CFGS]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", P.ThinProfileWarning)
        return P.profile([ids], specs, sample_rate=1.0, min_lookups=0)


def planned_pair(prof: P.Profile, tables: tuple[str, ...], **kw) -> tuple[EmbeddingBagCollection,
                                                                              P.PlannedEmbeddingBagCollection]:
    """A plain collection and the planned one made from it (from_ebc), the plan covering ``tables``."""
    plan = P.plan(prof, P.Topology(nodes=1, gpus_per_node=2, hbm_bytes=300, host_bytes=10**6), tables=list(tables))
    plain = EmbeddingBagCollection(CFGS, seed=3, **kw)
    planned = P.PlannedEmbeddingBagCollection.from_ebc(plain, plan)
    old = torch.arange(60)
    renumbered = {t: planned.remap.apply(t, old) for t in tables}
    assert all(not torch.equal(r, old) for r in renumbered.values())  # every planned table moves rows
    assert len({tuple(r.tolist()) for r in renumbered.values()}) == len(tables)  # each its own way
    return plain, planned


def original_order(planned: P.PlannedEmbeddingBagCollection, table: str, t: torch.Tensor) -> torch.Tensor:
    """``t`` (per storage row) in the original row order."""
    ids = torch.arange(t.shape[0])
    return t[planned.remap.apply(table, ids)] if table in planned.remap._index else t


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("tables", PLANS)
def test_outputs_and_gradients_equal_the_plain_collection(prof: P.Profile, tables: tuple[str, ...],
                                                          weighted: bool) -> None:
    """Against the plain collection and nn.EmbeddingBag in float64: the pooled values per output key,
    and each table's weight gradient (mapped back to the original rows)."""
    plain, planned = planned_pair(prof, tables, is_weighted=weighted)
    assert planned.feature_names() == plain.feature_names() == NAMES
    kjt = batch(1, weighted)
    grad_out = torch.randn(kjt.stride(), 28, generator=torch.Generator().manual_seed(2))
    want64, grads64 = reference(plain, kjt, weighted, grad_out)
    got, want = planned(kjt), plain(kjt)
    assert got.keys() == want.keys() == NAMES and got.length_per_key() == want.length_per_key()
    torch.testing.assert_close(got.values(), want.values(), rtol=0, atol=0)
    torch.testing.assert_close(got.values().double(), want64, rtol=1e-5, atol=1e-6)
    (got.values() * grad_out).sum().backward()
    (want.values() * grad_out).sum().backward()
    for c in CFGS:
        g = original_order(planned, c.name, planned.ebc.embedding_bags[c.name].weight.grad)
        torch.testing.assert_close(g, plain.embedding_bags[c.name].weight.grad, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(g.double(), grads64[c.name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tables", PLANS)
def test_fused_training_steps_update_as_the_plain_collection(prof: P.Profile, tables: tuple[str, ...]) -> None:
    """Adagrad inside backward over several weighted steps: outputs, original_weight and the per-row
    optimizer state stay the plain collection's; state_dict keys are the plain ones under ``ebc.``,
    after the digest of the remap the rows are ordered by."""
    plain, planned = planned_pair(prof, tables, is_weighted=True, optimizer=optim.Adagrad(lr=0.2))
    assert list(planned.state_dict()) == ["_extra_state"] + ["ebc." + k for k in plain.state_dict()]
    for step in range(4):
        kjt = batch(10 + step, weighted=True)
        got, want = planned(kjt), plain(kjt)
        torch.testing.assert_close(got.values(), want.values(), rtol=1e-6, atol=1e-6)
        for out in (got, want):
            (out.values() ** 2).sum().backward()
    for c in CFGS:
        ref = plain.embedding_bags[c.name]
        torch.testing.assert_close(planned.original_weight(c.name), ref.weight.detach(), rtol=1e-6, atol=1e-6)
        state = original_order(planned, c.name, planned.ebc.embedding_bags[c.name].optimizer_state)
        torch.testing.assert_close(state, ref.optimizer_state, rtol=1e-6, atol=1e-6)
        assert int(planned.ebc.embedding_bags[c.name].optimizer_step) == int(ref.optimizer_step) == 4


def test_torchrec_input_and_collection(prof: P.Profile) -> None:
    """A TorchRec KJT gives a torchrec.KeyedTensor keyed as TorchRec's own collection keys a shared
    feature (feature@table), with its values; from_ebc takes TorchRec's collection."""
    torchrec = pytest.importorskip("torchrec")
    tr_cfgs = [torchrec.EmbeddingBagConfig(num_embeddings=c.num_embeddings, embedding_dim=c.embedding_dim,
                                           name=c.name, feature_names=list(c.feature_names),
                                           pooling=torchrec.PoolingType.MEAN if c.pooling == "mean"
                                           else torchrec.PoolingType.SUM) for c in CFGS]
    ref = torchrec.EmbeddingBagCollection(tables=tr_cfgs)
    plan = P.plan(prof, P.Topology(nodes=1, gpus_per_node=2, hbm_bytes=300, host_bytes=10**6), tables=["ta", "tb"])
    planned = P.PlannedEmbeddingBagCollection.from_ebc(ref, plan)
    kjt = batch(4).to_torchrec()
    with torch.no_grad():
        want, got = ref(kjt), planned(kjt)
    assert type(got) is type(want)
    assert got.keys() == want.keys() == NAMES and got.length_per_key() == want.length_per_key()
    torch.testing.assert_close(got.values(), want.values())
    for k in NAMES:
        torch.testing.assert_close(got[k], want[k])


def test_a_missing_shared_key_and_tracing(prof: P.Profile) -> None:
    """A batch without the shared key raises as the plain collection does; torch.fx traces the planned
    collection as a leaf whose output is indexed by the plain names."""
    plain, planned = planned_pair(prof, ("ta", "tb"))
    no_s = KeyedJaggedTensor(["u", "v", "w"], torch.tensor([1, 2, 3]), lengths=torch.ones(3, dtype=torch.int64))
    for m in (plain, planned):
        with pytest.raises(InvalidInputError, match=r"the batch lacks features \['s'\]"):
            m(no_s)

    class Model(nn.Module):
        def __init__(self, ebc: nn.Module) -> None:
            super().__init__()
            self.ebc = ebc

        def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
            out = self.ebc(kjt)
            return out["s@tb"] * 2 + out["s@tc"].sum(1, keepdim=True)

    kjt = batch(6)
    with torch.no_grad():
        torch.testing.assert_close(torch.fx.symbolic_trace(Model(planned))(kjt), Model(plain)(kjt))


def test_apply_kjt_refuses_a_key_planned_tables_share_by_name(prof: P.Profile) -> None:
    """apply_kjt takes a key's list of tables: several with a planned one raise naming the key and the
    planned tables (a {key: table} dict could only name one, and the others got its renumbering);
    one table, or unplanned tables only, renumber as before."""
    _, planned = planned_pair(prof, ("ta", "tb"))
    rm, kjt = planned.remap, batch(7)
    with pytest.raises(InvalidInputError, match=r"key 's' is read by tables \['ta', 'tb', 'tc'\], of which "
                                                r"\['ta', 'tb'\] the plan renumbers"):
        rm.apply_kjt(kjt, {"s": ["ta", "tb", "tc"], "u": "ta"})
    got = rm.apply_kjt(kjt, {"s": ["ta"], "u": "ta", "v": ("tc", "td")})
    s, u = kjt["s"].values(), kjt["u"].values()
    assert torch.equal(got["s"].values(), rm.apply("ta", s)) and not torch.equal(got["s"].values(), s)
    assert torch.equal(got["u"].values(), rm.apply("ta", u))
    assert torch.equal(got["v"].values(), kjt["v"].values()) and torch.equal(got["w"].values(), kjt["w"].values())


def test_a_deduplicating_pipeline_feeds_the_planned_collection(prof: P.Profile) -> None:
    """tables_of(planned) gives the tables as given, over the batch's keys (it gave the wrapped .ebc's
    feature#table keys, which no batch has, and the pipeline refused them); its deduplicated batches
    give the plain collection's outputs on the raw ones."""
    from recgo import DataPipeline
    from recgo.data import SyntheticField, SyntheticSource
    from recgo.feature import Feature
    from recgo.pipeline import tables_of

    plain, planned = planned_pair(prof, ("ta", "tb"))
    assert [c.feature_names for c in planned.embedding_bag_configs()] == [c.feature_names for c in CFGS]
    assert tables_of(planned) == [{"name": "ta", "keys": ["s", "u"]}, {"name": "tc", "keys": ["v"]},
                                  {"name": "td", "keys": ["w"]}]

    def pipe(**kw: object) -> DataPipeline:
        fields = [SyntheticField(k, n, 1.2) for k, n in ROWS.items()]
        return DataPipeline(SyntheticSource(60, fields, seed=5), [Feature(k) for k in ROWS], 20, **kw)

    n = 0
    with torch.no_grad():
        for raw, ded in zip(pipe(), pipe(tables=tables_of(planned))):
            torch.testing.assert_close(planned(ded.sparse_features).values(), plain(raw.sparse_features).values(),
                                       rtol=0, atol=0)
            n += 1
    assert n == 3


def test_from_ebc_keeps_sparse_gradients_and_dedup(prof: P.Profile) -> None:
    """A recgo source's sparse_grad and dedup carry over unless given (both were dropped: SparseAdam
    then refused the planned collection's dense gradients)."""
    plan = P.plan(prof, P.Topology(nodes=1, gpus_per_node=2, hbm_bytes=300, host_bytes=10**6), tables=["ta"])
    src = EmbeddingBagCollection(CFGS, seed=3, sparse_grad=True, dedup=False)
    planned = P.PlannedEmbeddingBagCollection.from_ebc(src, plan)
    assert planned.ebc._sparse_grad and not planned.ebc._dedup
    planned(batch(2)).values().sum().backward()
    assert planned.ebc.embedding_bags["ta"].weight.grad.is_sparse
    assert P.PlannedEmbeddingBagCollection.from_ebc(src, plan, dedup=True).ebc._dedup
