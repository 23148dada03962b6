"""TorchRec's own modules around recgo's collections and batches (session 37, TorchRec's module tests
run with recgo's classes substituted): each case builds the same model twice, once on TorchRec's classes
and once with recgo's swapped in as docs/embedding.md says, and compares outputs, gradients and the
managed-collision remapping.

Before session 37 TorchRec's feature processors read private fields that recgo's ``KeyedJaggedTensor``
lacked (``_index_per_key``, ``_key_indices()``, ``_stride_per_key_per_rank``), and TorchRec's
managed-collision wrapper asked recgo's ``EmbeddingBagCollection`` for ``embedding_configs()``, which it
did not have: each failed with an ``AttributeError``.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import recgo
import recgo.distributed
from recgo import InvalidInputError, KeyedJaggedTensor

tr = pytest.importorskip("torchrec")
from torchrec.modules.feature_processor import PositionWeightedProcessor  # noqa: E402
from torchrec.modules.feature_processor_ import PositionWeightedModule  # noqa: E402
from torchrec.modules.fp_embedding_modules import FeatureProcessedEmbeddingBagCollection  # noqa: E402
from torchrec.modules.mc_embedding_modules import (  # noqa: E402
    ManagedCollisionEmbeddingBagCollection as TorchRecMCEBC,
    ManagedCollisionEmbeddingCollection as TorchRecMCEC,
)
from torchrec.modules.mc_modules import (  # noqa: E402
    LRU_EvictionPolicy,
    ManagedCollisionCollection,
    MCHManagedCollisionModule,
)
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TKJT  # noqa: E402

FEATURES = ["f1", "f2"]


def _batches(n: int, b: int = 4, high: int = 12, seed: int = 0) -> list[tuple[TKJT, KeyedJaggedTensor]]:
    """``n`` batches of ``FEATURES`` (IDs below ``high``), each as TorchRec's KJT and recgo's."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lengths = torch.randint(0, 4, (len(FEATURES) * b,), generator=gen)
        values = torch.randint(0, high, (int(lengths.sum()),), generator=gen)
        out.append((TKJT.from_lengths_sync(FEATURES, values, lengths),
                    KeyedJaggedTensor(FEATURES, values, lengths=lengths)))
    return out


def _tables() -> list:
    return [tr.EmbeddingBagConfig(name="t1", embedding_dim=4, num_embeddings=12, feature_names=["f1"]),
            tr.EmbeddingBagConfig(name="t2", embedding_dim=3, num_embeddings=12, feature_names=["f2"])]


class _ProcessorThenCollection(nn.Module):
    """TorchRec's older ``PositionWeightedProcessor`` in front of a weighted collection."""

    def __init__(self, ebc: nn.Module) -> None:
        super().__init__()
        self.pwp = PositionWeightedProcessor({f: 5 for f in FEATURES})
        self.ebc = ebc

    def forward(self, features):  # noqa: ANN001, ANN201
        return self.ebc(self.pwp(features))


class _SplitThenCollection(nn.Module):
    """A ``FeatureProcessedEmbeddingBagCollection`` of per-feature modules called in its two halves
    (``split()``: TorchRec's ``FeatureProcessorDictWrapper``, then the collection), as TorchRec's test does."""

    def __init__(self, ebc: nn.Module) -> None:
        super().__init__()
        self.fp_ebc = FeatureProcessedEmbeddingBagCollection(ebc, {f: PositionWeightedModule(5) for f in FEATURES})

    def forward(self, features):  # noqa: ANN001, ANN201
        fp, ebc = self.fp_ebc.split()
        return ebc(fp(features))


def _position_weighted(kind: str) -> nn.Module:
    torch.manual_seed(0)
    ebc = tr.EmbeddingBagCollection(tables=_tables(), is_weighted=True)
    model: nn.Module = _ProcessorThenCollection(ebc) if kind == "processor" else _SplitThenCollection(ebc)
    with torch.no_grad():  # position weights other than their initial ones, so a mix-up shows
        for name, p in model.named_parameters():
            if "position_weight" in name:
                p.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("kind", ["processor", "split"])
def test_torchrecs_feature_processors_take_recgo_batches(kind: str) -> None:
    ref = _position_weighted(kind)
    ours = recgo.from_torchrec(copy.deepcopy(ref))
    tkjt, rkjt = _batches(1)[0]
    got, want = ours(rkjt), ref(tkjt)
    assert got.keys() == want.keys() == FEATURES
    torch.testing.assert_close(got.values(), want.values(), rtol=1e-6, atol=1e-6)
    g = torch.randn(want.values().shape, generator=torch.Generator().manual_seed(1))
    (got.values() * g).sum().backward()
    (want.values() * g).sum().backward()
    for (name, p), (_, q) in zip(ours.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_a_recgo_batch_answers_torchrecs_private_layout_fields() -> None:
    tkjt, rkjt = _batches(1)[0]
    assert rkjt._key_indices() == tkjt._key_indices() == {"f1": 0, "f2": 1}
    assert rkjt._index_per_key == tkjt._index_per_key
    assert rkjt._stride_per_key_per_rank is None and not rkjt.variable_stride_per_key()


def _managed(pooled: bool, collection: nn.Module, configs: list) -> nn.Module:
    mch = {"t1": MCHManagedCollisionModule(zch_size=6, device=torch.device("cpu"), eviction_interval=1,
                                           eviction_policy=LRU_EvictionPolicy())}
    mcc = ManagedCollisionCollection(mch, configs)
    return (TorchRecMCEBC if pooled else TorchRecMCEC)(collection, mcc, return_remapped_features=True)


@pytest.mark.parametrize("pooled", [True, False])
def test_torchrecs_managed_collision_wrapper_takes_recgo_collections(pooled: bool) -> None:
    # one table over both features; IDs far outside its 6 rows, so the MCH modules remap and evict
    if pooled:
        cfgs = [recgo.EmbeddingBagConfig(name="t1", embedding_dim=4, num_embeddings=6, feature_names=FEATURES)]
        ours_c: nn.Module = recgo.EmbeddingBagCollection(cfgs, seed=0)
        ref_c: nn.Module = tr.EmbeddingBagCollection(tables=[c.to_torchrec() for c in cfgs])
    else:
        cfgs = [recgo.EmbeddingConfig(name="t1", embedding_dim=4, num_embeddings=6, feature_names=FEATURES)]
        ours_c = recgo.EmbeddingCollection(cfgs, seed=0)
        ref_c = tr.EmbeddingCollection(tables=[c.to_torchrec() for c in cfgs])
    ref_c.load_state_dict(ours_c.state_dict())
    ours = _managed(pooled, ours_c, ours_c.embedding_bag_configs() if pooled else ours_c.embedding_configs())
    ref = _managed(pooled, ref_c, ref_c.embedding_bag_configs() if pooled else ref_c.embedding_configs())
    for i, (tkjt, rkjt) in enumerate(_batches(4, high=1000, seed=2)):
        got, got_ids = ours(rkjt if i % 2 else tkjt)  # recgo's batch and TorchRec's
        want, want_ids = ref(tkjt)
        torch.testing.assert_close(got_ids.values(), want_ids.values())
        if pooled:
            assert got.keys() == want.keys()
            torch.testing.assert_close(got.values(), want.values())
        else:
            for f in FEATURES:
                torch.testing.assert_close(got[f].values(), want[f].values())
    # from_torchrec leaves it as it is (its collection is recgo's); shard_model refuses it by name
    assert recgo.from_torchrec(nn.Sequential(ours))[0] is ours
    with pytest.raises(InvalidInputError, match="cannot be sharded"):
        recgo.distributed.shard_model(nn.Sequential(ours))


@pytest.mark.parametrize("pooled", [True, False])
def test_to_torchrec_of_a_meta_collection_is_torchrecs_on_meta(pooled: bool) -> None:
    # TorchRec's module tests build collections on meta; to_torchrec of one refused it before session 37
    cfgs = [c if pooled else recgo.EmbeddingConfig(c.num_embeddings, c.embedding_dim, c.name, c.feature_names)
            for c in (recgo.EmbeddingBagConfig(12, 4, "t1", ["f1"]), recgo.EmbeddingBagConfig(12, 4, "t2", ["f2"]))]
    make = (lambda **k: recgo.EmbeddingBagCollection(cfgs, is_weighted=False, **k)) if pooled else (
        lambda **k: recgo.EmbeddingCollection(cfgs, need_indices=True, **k))
    got = recgo.to_torchrec(make(device="meta"))
    tr_cfgs = [c.to_torchrec() for c in cfgs]
    want = (tr.EmbeddingBagCollection(tables=tr_cfgs, device=torch.device("meta")) if pooled
            else tr.EmbeddingCollection(tables=tr_cfgs, need_indices=True, device=torch.device("meta")))
    assert type(got) is type(want)
    assert {k: (v.shape, v.device) for k, v in got.state_dict().items()} == {
        k: (v.shape, v.device) for k, v in want.state_dict().items()}
    # materialised as TorchRec's are (weights loaded with assign=True), it gives recgo's outputs
    cpu = make(seed=3)
    got.load_state_dict(cpu.state_dict(), assign=True)
    tkjt, rkjt = _batches(1)[0]
    if pooled:
        torch.testing.assert_close(got(tkjt).values(), cpu(rkjt).values(), rtol=0, atol=0)
    else:
        out, ref = got(tkjt), cpu(rkjt)
        for f in FEATURES:
            torch.testing.assert_close(out[f].values(), ref[f].values(), rtol=0, atol=0)
            assert torch.equal(out[f].weights(), ref[f].weights())


def test_to_torchrec_of_a_sequence_collection_of_several_widths_is_refused_by_name() -> None:
    # recgo's EmbeddingCollection takes tables of several widths, TorchRec's one width: the conversion
    # used to fail inside TorchRec's constructor with its bare ValueError
    cfgs = [recgo.EmbeddingConfig(12, 4, "t1", ["f1"]), recgo.EmbeddingConfig(12, 3, "t2", ["f2"])]
    with pytest.raises(ValueError, match="same embedding dimension"):
        tr.EmbeddingCollection(tables=[c.to_torchrec() for c in cfgs])
    with pytest.raises(InvalidInputError, match=r"tables \[3, 4\] wide: TorchRec's EmbeddingCollection requires one"):
        recgo.to_torchrec(nn.Sequential(recgo.EmbeddingCollection(cfgs)))


@pytest.mark.parametrize("opt_class", [torch.optim.Adam, torch.optim.Adagrad])
def test_from_torchrec_warns_that_an_in_backward_adam_leaves_untouched_rows_alone(opt_class: type) -> None:
    # torch's Adam on TorchRec's dense gradients goes on stepping a row after the batches stop touching
    # it (its moments); recgo's fused Adam does not. The conversion used to say nothing about Adam.
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    def torchrecs() -> nn.Module:
        torch.manual_seed(0)
        m = tr.EmbeddingBagCollection(tables=_tables())
        apply_optimizer_in_backward(opt_class, m.parameters(), {"lr": 0.1})
        return m

    ref = torchrecs()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ours = recgo.from_torchrec(torchrecs())
    said = any("steps the rows a batch leaves out" in str(w.message) for w in record)
    assert said == (opt_class is torch.optim.Adam)
    for ids in ([1, 2], [3, 4]):  # row 1 in the first batch only
        batch = KeyedJaggedTensor(FEATURES, torch.tensor(ids), lengths=torch.tensor([1, 0, 1, 0]))
        ours(batch).values().sum().backward()
        ref(batch.to_torchrec()).values().sum().backward()
    w_ours, w_ref = ours.embedding_bags["t1"].weight.detach(), ref.embedding_bags["t1"].weight.detach()
    torch.testing.assert_close(w_ours[3], w_ref[3])  # in the last batch: the same update
    # row 1 was left out of the last: moved again by torch's Adam only, so the warning is true
    assert torch.equal(w_ours[1], w_ref[1]) == (opt_class is not torch.optim.Adam)
