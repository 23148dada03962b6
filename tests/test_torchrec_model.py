"""TorchRec model code running with recgo's EmbeddingBagCollection swapped in (issue 10).

``torchrec.models.dlrm.DLRM`` is built on the meta device around a recgo collection, materialised with
``to_empty`` + ``reset_parameters`` as TorchRec models are, and trained side by side with the same
model around TorchRec's own collection (loaded with the same weights): predictions and every weight
agree step after step. A second model regroups two collections' outputs with TorchRec's
``KeyedTensor.regroup``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import recgo

tr = pytest.importorskip("torchrec")
from torchrec.models.dlrm import DLRM  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TKJT, KeyedTensor as TKT  # noqa: E402

TABLES = [
    tr.EmbeddingBagConfig(name="t_user", embedding_dim=8, num_embeddings=40, feature_names=["user"]),
    tr.EmbeddingBagConfig(name="t_item", embedding_dim=8, num_embeddings=60, feature_names=["item", "hist"],
                          pooling=tr.PoolingType.MEAN),
    tr.EmbeddingBagConfig(name="t_cat", embedding_dim=8, num_embeddings=10, feature_names=[]),  # feature "t_cat"
]


def _batch(gen: torch.Generator, b: int = 16) -> tuple[torch.Tensor, TKJT, torch.Tensor]:
    keys, rows = ["hist", "user", "t_cat", "item", "unused"], [60, 40, 10, 60, 1000]
    lengths = torch.randint(0, 4, (len(keys) * b,), generator=gen)
    vals = []
    for i, n in enumerate(rows):
        vals.append(torch.randint(0, n, (int(lengths[i * b:(i + 1) * b].sum()),), generator=gen))
    kjt = TKJT.from_lengths_sync(keys=keys, values=torch.cat(vals), lengths=lengths)
    return torch.randn(b, 5, generator=gen), kjt, torch.randint(0, 2, (b,), generator=gen).float()


def _reset(model: nn.Module) -> None:
    for m in model.modules():
        if hasattr(m, "reset_parameters") and m is not model:
            m.reset_parameters()


def _meta_dlrm(ebc: nn.Module, check: bool = False) -> DLRM:
    """A DLRM around ``ebc`` built on the meta device, materialised and initialised from seed 0, as
    TorchRec models are (``check``: the collection stays on meta until then)."""
    with torch.device("meta"):
        model = DLRM(embedding_bag_collection=ebc, dense_in_features=5, dense_arch_layer_sizes=[16, 8],
                     over_arch_layer_sizes=[16, 1])
    if check:
        assert model.sparse_arch.embedding_bag_collection.device == torch.device("meta")
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    _reset(model)
    # DLRM's non-persistent index buffer is data, not a parameter: to_empty leaves it uninitialised
    # (TorchRec's own meta flow recomputes it too).
    f = model.inter_arch.F
    model.inter_arch.triu_indices = torch.triu_indices(f + 1, f + 1, offset=1)
    return model


def test_dlrm_meta_construction_and_training_match_torchrec() -> None:
    with torch.device("meta"):
        ebc = recgo.EmbeddingBagCollection(TABLES, seed=0)
    ours = _meta_dlrm(ebc, check=True)
    ref = DLRM(embedding_bag_collection=tr.EmbeddingBagCollection(tables=TABLES), dense_in_features=5,
               dense_arch_layer_sizes=[16, 8], over_arch_layer_sizes=[16, 1])
    assert set(ours.state_dict()) == set(ref.state_dict())
    ref.load_state_dict(ours.state_dict())
    w0 = ours.sparse_arch.embedding_bag_collection.embedding_bags["t_item"].weight.detach().clone()
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ours, ref)]
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        dense, kjt, label = _batch(gen)
        losses = []
        for model, opt in zip((ours, ref), opts):
            opt.zero_grad()
            logits = model(dense, kjt).squeeze(1)
            loss = nn.functional.binary_cross_entropy_with_logits(logits, label)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    theirs = ref.state_dict()
    for k, v in ours.state_dict().items():
        torch.testing.assert_close(v, theirs[k], rtol=1e-4, atol=1e-6, msg=k)
    assert not torch.equal(ours.sparse_arch.embedding_bag_collection.embedding_bags["t_item"].weight, w0)


class _Regrouped(nn.Module):
    """A model that pools two collections and regroups their outputs with TorchRec's KeyedTensor.regroup."""

    def __init__(self, user: nn.Module, item: nn.Module) -> None:
        super().__init__()
        self.user, self.item = user, item
        self.proj = nn.Linear(12, 8)

    def forward(self, kjt: TKJT) -> torch.Tensor:
        kts = [self.user(kjt), self.item(kjt)]
        assert all(isinstance(kt, TKT) for kt in kts)
        query, cand = TKT.regroup(kts, [["user", "hist"], ["item"]])
        return (self.proj(query) * cand).sum(1)


def test_keyed_tensor_regroup_model_matches_torchrec() -> None:
    user_t = [tr.EmbeddingBagConfig(name="u", embedding_dim=4, num_embeddings=40, feature_names=["user"])]
    item_t = [tr.EmbeddingBagConfig(name="i", embedding_dim=8, num_embeddings=60, feature_names=["hist", "item"])]
    with torch.device("meta"):
        ours = _Regrouped(recgo.EmbeddingBagCollection(user_t, seed=3), recgo.EmbeddingBagCollection(item_t, seed=4))
    ours.to_empty(device="cpu")
    torch.manual_seed(2)
    _reset(ours)
    ref = _Regrouped(tr.EmbeddingBagCollection(tables=user_t), tr.EmbeddingBagCollection(tables=item_t))
    ref.load_state_dict(ours.state_dict())
    gen = torch.Generator().manual_seed(5)
    _, kjt, _ = _batch(gen)
    a, b = ours(kjt), ref(kjt)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    a.square().sum().backward()
    b.square().sum().backward()
    for (name, p), (_, q) in zip(ours.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)


class _Sequence(nn.Module):
    """Sums a sequence collection's per-ID embeddings into one score per ID."""

    def __init__(self, ec: nn.Module) -> None:
        super().__init__()
        self.ec = ec
        self.proj = nn.Linear(8, 1)

    def forward(self, kjt: TKJT) -> torch.Tensor:
        out = self.ec(kjt)  # iterated, as model code does: traced, it is a dict of the leaf's entries
        return sum(self.proj(jt.values()).sum() for jt in out.values()) + self.proj(out["hist"].values()).mean()


def _traced_models() -> list[tuple[str, nn.Module, bool]]:
    """(name, model, takes dense input) for each recgo module kind a traced model may hold."""
    with torch.device("meta"):
        ebc = tr.EmbeddingBagCollection(tables=TABLES)
    dlrm = _meta_dlrm(ebc)
    ec = tr.EmbeddingCollection(tables=[tr.EmbeddingConfig(name="t", embedding_dim=8, num_embeddings=60,
                                                           feature_names=["hist", "item"])])
    return [("dlrm", recgo.from_torchrec(dlrm), True), ("sequence", recgo.from_torchrec(_Sequence(ec)), False)]


@pytest.mark.parametrize("trace", ["torch.fx", "torchrec.fx"])
def test_models_with_recgo_collections_trace_with_fx(trace: str) -> None:
    """``symbolic_trace`` used to fail inside the collection ("expected a KeyedJaggedTensor, got Proxy").
    Each recgo collection is now one ``call_module`` leaf of the graph, and the traced model predicts and
    trains as the model itself does."""
    import copy

    import torchrec.fx

    tracer = torch.fx.symbolic_trace if trace == "torch.fx" else torchrec.fx.symbolic_trace
    for name, model, dense_in in _traced_models():
        twin = copy.deepcopy(model)
        graph = tracer(twin)
        leaves = {n.target for n in graph.graph.nodes if n.op == "call_module"}
        recgo_paths = {p for p, m in twin.named_modules() if type(m).__module__.startswith("recgo.")}
        recgo_paths = {p for p in recgo_paths if not any(p.startswith(q + ".") for q in recgo_paths)}  # outermost
        assert recgo_paths and recgo_paths <= leaves, (name, leaves)
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, graph)]
        gen = torch.Generator().manual_seed(2)
        for _ in range(3):
            dense, kjt, _ = _batch(gen)
            outs = []
            for m, opt in zip((model, graph), opts):
                opt.zero_grad()
                out = m(dense, kjt) if dense_in else m(kjt)
                out.sum().backward()
                opt.step()
                outs.append(out.detach())
            torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=0, msg=name)
        for (k, v), w in zip(model.state_dict().items(), twin.state_dict().values()):
            torch.testing.assert_close(w, v, rtol=0, atol=0, msg=f"{name}: {k}")
    # a collection as the root of the trace: a named error (it was "has no attribute ''")
    ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 4, "t", ["f"])], seed=1)
    with pytest.raises(recgo.InvalidInputError, match="cannot be the root of a trace"):
        tracer(ebc)


def test_keyed_tensor_regroup_takes_a_repeated_key_from_the_last_input_as_torchrec() -> None:
    """recgo's regroup took a key present in several inputs from the first; TorchRec's from the last."""
    def kts(cls: type) -> list:
        return [cls(keys=["a", "b"], length_per_key=[2, 4], values=torch.arange(12.0).view(2, 6)),
                cls(keys=["a"], length_per_key=[1], values=torch.ones(2, 1))]

    want = TKT.regroup(kts(TKT), [["a", "b"]])[0]
    assert torch.equal(recgo.KeyedTensor.regroup(kts(recgo.KeyedTensor), [["a", "b"]])[0], want)
    assert torch.equal(recgo.KeyedTensor.regroup(kts(TKT), [["a", "b"]])[0], want)


class _TorchrecRegroup(nn.Module):
    """A TorchRec-style model whose forward takes a ``Batch`` (as TrainPipelineSparseDist feeds it) and
    regroups two collections' outputs with TorchRec's ``KeyedTensor.regroup`` / ``regroup_as_dict``."""

    def __init__(self, user: nn.Module, item: nn.Module) -> None:
        super().__init__()
        self.user, self.item = user, item
        self.proj = nn.Linear(12, 8)

    def forward(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        kts = [self.user(batch.sparse_features), self.item(batch.sparse_features)]
        self.seen = [kt for kt in kts]
        query, _ = TKT.regroup(kts, [["user", "hist"], ["item"]])
        cand = TKT.regroup_as_dict(kts, [["item"]], ["cand"])["cand"]
        logits = (self.proj(query) * cand).sum(1)
        return nn.functional.binary_cross_entropy_with_logits(logits, batch.labels), logits.detach()


def test_torchrecs_regroup_traces_and_pipelines_with_recgo_collections() -> None:
    """TorchRec's ``KeyedTensor.regroup`` is made of ``torch.fx.wrap``-ed helpers that become graph leaves
    only when a Proxy is among their arguments; given recgo's traced output they ran on the traced values
    and failed ("symbolically traced variables cannot be used as inputs to control flow"), so
    ``symbolic_trace`` of such a model, and TorchRec's ``TrainPipelineSparseDist``, which traces every
    model it drives, failed. Both now give TorchRec's results."""
    import copy

    import torchrec.fx
    from torchrec.datasets.utils import Batch
    from torchrec.distributed.train_pipeline import TrainPipelineSparseDist

    user_t = [tr.EmbeddingBagConfig(name="u", embedding_dim=4, num_embeddings=40, feature_names=["user"])]
    item_t = [tr.EmbeddingBagConfig(name="i", embedding_dim=8, num_embeddings=60, feature_names=["hist", "item"])]
    torch.manual_seed(0)
    ref = _TorchrecRegroup(tr.EmbeddingBagCollection(tables=user_t), tr.EmbeddingBagCollection(tables=item_t))
    ours = recgo.from_torchrec(copy.deepcopy(ref))
    gen = torch.Generator().manual_seed(5)
    batches = []
    for _ in range(4):
        dense, kjt, label = _batch(gen)
        batches.append(Batch(dense_features=dense, sparse_features=kjt, labels=label))
    for tracer in (torch.fx.symbolic_trace, torchrec.fx.symbolic_trace):
        twin = copy.deepcopy(ours)
        graph = tracer(twin)
        assert all(isinstance(kt, recgo.KeyedTensor) for kt in twin.seen)  # traced, as before: recgo's type
        torch.testing.assert_close(graph(batches[0])[1], ref(batches[0])[1], rtol=1e-5, atol=1e-6)
    losses = []
    for model in (ours, ref):
        pipe = TrainPipelineSparseDist(model, torch.optim.SGD(model.parameters(), lr=0.1), torch.device("cpu"))
        it, got = iter(batches), []
        for _ in batches:
            got.append(pipe.progress(it)[0].detach())
        losses.append(torch.stack(got))
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    theirs = ref.state_dict()
    for k, v in ours.state_dict().items():
        torch.testing.assert_close(v, theirs[k], rtol=1e-5, atol=1e-6, msg=k)
