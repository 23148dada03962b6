"""``recgo.to_torchrec``: the way back from ``from_torchrec``, for what only TorchRec's modules feed (its
inference stack: ``quantize_dynamic`` to ``QuantEmbeddingBagCollection``, ``torch.jit.script``). Before
session 35 a recgo-trained model had to be rebuilt around TorchRec's modules by hand."""

from __future__ import annotations


import pytest
import torch
from torch import nn

import recgo
from recgo.modules import optim

tr = pytest.importorskip("torchrec")
from torchrec.models.dlrm import DLRM  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TKJT  # noqa: E402

TABLES = [tr.EmbeddingBagConfig(name=f"t{i}", embedding_dim=8, num_embeddings=50, feature_names=[f"f{i}"])
          for i in range(3)]
KEYS = [f"f{i}" for i in range(3)]


def _batch(seed: int) -> tuple[torch.Tensor, TKJT]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 3, (len(KEYS) * 4,), generator=gen)
    kjt = TKJT.from_lengths_sync(KEYS, torch.randint(0, 50, (int(lengths.sum()),), generator=gen), lengths)
    return torch.randn(4, 4, generator=gen), kjt


def test_a_trained_model_goes_back_to_torchrecs_modules_and_quantizes() -> None:
    from torch import quantization as quant
    from torchrec.modules.embedding_configs import QuantConfig
    from torchrec.quant.embedding_modules import EmbeddingBagCollection as QuantEBC

    torch.manual_seed(0)
    model = DLRM(embedding_bag_collection=recgo.EmbeddingBagCollection(TABLES, optimizer=optim.Adagrad(lr=0.1)),
                 dense_in_features=4, dense_arch_layer_sizes=[16, 8], over_arch_layer_sizes=[16, 1])
    dense, kjt = _batch(1)
    model(dense, kjt).sum().backward()  # a fused step: the weights to carry are the trained ones
    model.eval()
    want = model(dense, kjt)
    state = torch.get_rng_state()
    back = recgo.to_torchrec(model)
    assert torch.equal(torch.get_rng_state(), state)  # TorchRec's constructor drew from a forked generator
    ebc = back.sparse_arch.embedding_bag_collection
    assert type(ebc) is tr.EmbeddingBagCollection and not ebc.training
    torch.testing.assert_close(back(dense, kjt), want, rtol=0, atol=0)
    qconfig = QuantConfig(activation=quant.PlaceholderObserver.with_args(dtype=torch.float),
                          weight=quant.PlaceholderObserver.with_args(dtype=torch.qint8))
    with pytest.warns(DeprecationWarning):
        quantized = quant.quantize_dynamic(back, qconfig_spec={tr.EmbeddingBagCollection: qconfig},
                                           mapping={tr.EmbeddingBagCollection: QuantEBC}, inplace=False)
    assert type(quantized.sparse_arch.embedding_bag_collection) is QuantEBC
    torch.testing.assert_close(quantized(dense, kjt), want, rtol=0, atol=1e-3)


def test_sequence_collections_keep_need_indices_frozen_tables_and_hooks() -> None:
    seqs = [recgo.EmbeddingConfig(10, 4, "a", ["fa"]), recgo.EmbeddingConfig(7, 4, "b", ["fb"])]
    ec = recgo.EmbeddingCollection(seqs, need_indices=True, seed=2)
    ec.embeddings["b"].weight.requires_grad_(False)
    calls = []
    handle = ec.register_forward_hook(lambda m, args, out: calls.append(type(m).__module__))
    model = nn.ModuleDict({"ec": ec})
    back = recgo.to_torchrec(model)["ec"]
    assert type(back) is tr.EmbeddingCollection and back.need_indices()
    assert back.embeddings["a"].weight.requires_grad and not back.embeddings["b"].weight.requires_grad
    kjt = TKJT.from_lengths_sync(["fa", "fb"], torch.tensor([1, 2, 3, 4]), torch.tensor([2, 0, 1, 1]))
    got, want = back(kjt), recgo.EmbeddingCollection(seqs, need_indices=True, seed=2)(kjt)
    for k in ("fa", "fb"):
        torch.testing.assert_close(got[k].values(), want[k].values(), rtol=0, atol=0)
        assert torch.equal(got[k].weights(), want[k].weights().to(got[k].weights().dtype))
    assert calls == ["torchrec.modules.embedding_modules"]
    handle.remove()
    back(kjt)
    assert len(calls) == 1
    # and forth again: the same outputs
    again = recgo.from_torchrec(back)
    torch.testing.assert_close(again(kjt)["fa"].values(), want["fa"].values(), rtol=0, atol=0)


def test_what_has_no_torchrec_module_is_refused_by_name() -> None:
    with pytest.raises(recgo.InvalidInputError, match="holds no recgo"):
        recgo.to_torchrec(nn.Linear(2, 2))
    dyn = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 4, "d", ["fd"], dynamic=recgo.DynamicConfig())])
    with pytest.raises(recgo.InvalidInputError, match="dynamic-ID tables"):
        recgo.to_torchrec(nn.Sequential(dyn))
    with pytest.raises(recgo.InvalidInputError, match=r"recgo.to_torchrec\(model\) for TorchRec's own modules"):
        torch.jit.script(nn.Sequential(recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 4, "t", ["f"])])))


def test_a_table_shared_by_pooled_and_sequence_features_stays_one_table() -> None:
    """An ``EmbeddingCollection(share=ebc)`` looks up the pooled collection's rows: after conversion both
    TorchRec modules hold the one ``weight`` parameter, so a torch optimizer trains one table, as in recgo.
    They used to get two copies, which a TorchRec script going on from here trained apart."""
    ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 4, "t", ["p"]),
                                        recgo.EmbeddingBagConfig(6, 4, "u", ["q"])], seed=3)
    ec = recgo.EmbeddingCollection([recgo.EmbeddingConfig(10, 4, "t", ["s"])], share=ebc)
    back = recgo.to_torchrec(nn.ModuleDict({"ec": ec, "ebc": ebc}))  # the sequence collection first
    weight = back["ebc"].embedding_bags["t"].weight
    assert back["ec"].embeddings["t"].weight is weight
    assert len({id(p) for p in back.parameters()}) == 2  # tables t and u
    kjt = TKJT.from_lengths_sync(["p", "q", "s"], torch.tensor([1, 2, 1, 1]), torch.tensor([1, 1, 2]))
    opt = torch.optim.SGD(back.parameters(), lr=0.5)
    (back["ebc"](kjt).values().sum() + back["ec"](kjt)["s"].values().sum()).backward()
    opt.step()
    torch.testing.assert_close(back["ec"](kjt)["s"].values(), weight[[1, 1]].detach(), rtol=0, atol=0)


def test_from_torchrec_keeps_tied_tables_one_table() -> None:
    """TorchRec's sequence collection whose tables are a pooled collection's (the same ``weight``, as
    ``to_torchrec`` leaves a ``share=`` collection) becomes ``EmbeddingCollection(share=)`` over the
    converted pooled one: one set of rows, trained once. It used to get its own copy, trained apart."""
    ebc = tr.EmbeddingBagCollection(tables=[tr.EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=10,
                                                                  feature_names=["p"])])
    ec = tr.EmbeddingCollection(tables=[tr.EmbeddingConfig(name="t", embedding_dim=4, num_embeddings=10,
                                                           feature_names=["s"])], need_indices=True)
    ec.embeddings["t"].weight = ebc.embedding_bags["t"].weight
    want = ebc.embedding_bags["t"].weight.detach().clone()
    model = recgo.from_torchrec(nn.ModuleDict({"ec": ec, "ebc": ebc}), optimizer=optim.SGD(lr=0.5))
    assert model["ec"].ebc is model["ebc"] and model["ec"].need_indices()
    kjt = TKJT.from_lengths_sync(["p", "s"], torch.tensor([1, 1, 1]), torch.tensor([1, 2]))
    (model["ebc"](kjt).values().sum() + model["ec"](kjt)["s"].values().sum()).backward()
    want[1] -= 0.5 * 3  # both collections' lookups of row 1 update the one table (SGD: in either order)
    torch.testing.assert_close(model["ec"].embeddings["t"].weight.detach(), want, rtol=0, atol=1e-6)
    # only some of a sequence collection's tables tied: share= cannot say it, so it is refused by name
    ebc2 = tr.EmbeddingBagCollection(tables=[tr.EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=10,
                                                                   feature_names=["p"])])
    ec2 = tr.EmbeddingCollection(tables=[tr.EmbeddingConfig(name="t", embedding_dim=4, num_embeddings=10,
                                                            feature_names=["s"]),
                                         tr.EmbeddingConfig(name="u", embedding_dim=4, num_embeddings=5,
                                                            feature_names=["r"])])
    ec2.embeddings["t"].weight = ebc2.embedding_bags["t"].weight
    with pytest.raises(recgo.errors.InvalidInputError, match="tie all its tables to one EmbeddingBagCollection"):
        recgo.from_torchrec(nn.ModuleDict({"ebc": ebc2, "ec": ec2}))
