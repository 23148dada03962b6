"""Gradients with respect to per-ID weights (``recgo.modules._weight_grads``): TorchRec's position-weighted
features (``PositionWeightedModule``, ``PositionWeightedModuleCollection``, ``PositionWeightedProcessor``)
train their weights through the pooled collection. Before session 35 recgo's collection refused weights
that require grad, and ``from_torchrec`` refused a ``FeatureProcessedEmbeddingBagCollection`` whose
position weights train."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import recgo
from recgo import DynamicConfig, EmbeddingBagCollection, EmbeddingBagConfig, InvalidInputError, KeyedJaggedTensor
from recgo.modules import optim

KEYS = ["a", "b"]


def _batch(gen: torch.Generator, b: int = 6) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    lengths = torch.randint(0, 4, (len(KEYS) * b,), generator=gen)
    return KEYS, torch.randint(0, 20, (int(lengths.sum()),), generator=gen), lengths


def _reference(tables: list[tuple[torch.Tensor, list[str], bool]], keys: list[str], values: torch.Tensor,
               lengths: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Pooled output in plain torch ops (per table: its weights, features and MEAN flag), so autograd gives
    the weights' gradient to compare with."""
    b = lengths.numel() // len(keys)
    offs = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    cols = []
    for weight, features, mean in tables:
        for f in features:
            i = keys.index(f)
            bags = []
            for s in range(b):
                lo, hi = int(offs[i * b + s]), int(offs[i * b + s + 1])
                pooled = (weights[lo:hi, None] * weight[values[lo:hi]]).sum(0)
                bags.append(pooled / max(1, hi - lo) if mean else pooled)
            cols.append(torch.stack(bags))
    return torch.cat(cols, 1)


@pytest.mark.parametrize("fused", [False, True])
def test_weights_get_their_gradient_for_sum_mean_and_a_feature_two_tables_read(fused: bool) -> None:
    cfgs = [EmbeddingBagConfig(20, 4, "t_sum", ["a", "b"]), EmbeddingBagConfig(20, 3, "t_mean", ["a"], pooling="mean")]
    kw = {"optimizer": optim.SGD(lr=0.5)} if fused else {}
    ebc = EmbeddingBagCollection(cfgs, is_weighted=True, seed=1, **kw)
    gen = torch.Generator().manual_seed(2)
    for _ in range(3):  # the fused update changes the rows between steps: each step's gradient uses its own
        keys, values, lengths = _batch(gen)
        weights = torch.rand(values.numel(), generator=gen, dtype=torch.float64).requires_grad_()
        tables = [(ebc.embedding_bags[c.name].weight.detach().clone(), c.feature_names, c.pooling == "mean")
                  for c in cfgs]
        out = ebc(KeyedJaggedTensor(keys, values, weights, lengths=lengths)).values()
        g = torch.randn(out.shape, generator=gen)
        (out * g).sum().backward()
        want_w = weights.detach().float().requires_grad_()
        want = _reference(tables, keys, values, lengths, want_w)
        torch.testing.assert_close(out.detach(), want.detach(), rtol=1e-5, atol=1e-6)
        (want * g).sum().backward()
        assert weights.grad.dtype == torch.float64
        torch.testing.assert_close(weights.grad.float(), want_w.grad, rtol=1e-5, atol=1e-6)
    # without grad, or with detached weights, nothing changes
    with torch.no_grad():
        assert not ebc(KeyedJaggedTensor(keys, values, weights, lengths=lengths)).values().requires_grad


def test_dynamic_tables_still_refuse_weights_that_require_grad() -> None:
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(20, 4, "t", ["a"], dynamic=DynamicConfig(seed=1))],
                                 is_weighted=True)
    kjt = KeyedJaggedTensor(["a"], torch.tensor([5]), torch.ones(1, requires_grad=True), lengths=torch.tensor([1]))
    with pytest.raises(InvalidInputError, match="per-ID weights are not supported"):
        ebc(kjt)


tr = pytest.importorskip("torchrec")
from torch.distributed.optim import _apply_optimizer_in_backward as apply_optimizer_in_backward  # noqa: E402
from torchrec.modules.feature_processor import PositionWeightedProcessor  # noqa: E402
from torchrec.modules.feature_processor_ import PositionWeightedModule, PositionWeightedModuleCollection  # noqa: E402
from torchrec.modules.fp_embedding_modules import FeatureProcessedEmbeddingBagCollection  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TKJT  # noqa: E402

TABLES = [tr.EmbeddingBagConfig(name="t1", embedding_dim=8, num_embeddings=30, feature_names=["f1"]),
          tr.EmbeddingBagConfig(name="t2", embedding_dim=4, num_embeddings=30, feature_names=["f2", "f3"])]
FEATURES = ["f1", "f2", "f3"]


class _PositionWeighted(nn.Module):
    def __init__(self, collection: bool) -> None:
        super().__init__()
        ebc = tr.EmbeddingBagCollection(tables=TABLES, is_weighted=True)
        fps = (PositionWeightedModuleCollection({k: 6 for k in FEATURES}) if collection
               else {k: PositionWeightedModule(max_feature_length=6) for k in FEATURES})
        self.fp = FeatureProcessedEmbeddingBagCollection(ebc, fps)
        self.lin = nn.Linear(16, 1)

    def forward(self, kjt: TKJT) -> torch.Tensor:
        return self.lin(self.fp(kjt).values()).squeeze(1)


def _tkjts(n: int) -> list[tuple[TKJT, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        lengths = torch.randint(0, 5, (len(FEATURES) * 8,), generator=gen)
        kjt = TKJT.from_lengths_sync(FEATURES, torch.randint(0, 30, (int(lengths.sum()),), generator=gen), lengths)
        out.append((kjt, torch.randint(0, 2, (8,), generator=gen).float()))
    return out


@pytest.mark.parametrize("collection", [False, True])
@pytest.mark.parametrize("fused", [False, True])
def test_trained_position_weights_convert_and_train_as_torchrecs(collection: bool, fused: bool) -> None:
    torch.manual_seed(0)
    ref = _PositionWeighted(collection)
    with torch.no_grad():
        for n, p in ref.named_parameters():
            if "position" in n:
                p.uniform_(0.5, 1.5)
    ours = copy.deepcopy(ref)
    before = {k: v.clone() for k, v in ref.state_dict().items() if "position" in k}
    if fused:
        for m in (ref, ours):
            apply_optimizer_in_backward(torch.optim.Adagrad, m.fp._embedding_bag_collection.parameters(), {"lr": 0.1})
    recgo.from_torchrec(ours)
    assert isinstance(ours.fp._embedding_bag_collection, recgo.EmbeddingBagCollection)
    results = []
    for m in (ref, ours):
        opt = torch.optim.SGD([p for n, p in m.named_parameters() if not (fused and "embedding_bag" in n)], lr=0.5)
        losses = []
        for kjt, label in _tkjts(4):
            opt.zero_grad()
            loss = nn.functional.binary_cross_entropy_with_logits(m(kjt), label)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        results.append((torch.stack(losses), m.state_dict()))
    (want, theirs), (got, mine) = results
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert all(not torch.equal(mine[k], v) for k, v in before.items())  # the position weights trained
    for k, v in theirs.items():
        torch.testing.assert_close(mine[k], v, rtol=1e-5, atol=1e-6, msg=k)


def test_position_weighted_processor_gets_torchrecs_gradients() -> None:
    torch.manual_seed(0)
    pwp = PositionWeightedProcessor(max_feature_lengths={k: 6 for k in FEATURES})
    with torch.no_grad():
        for p in pwp.parameters():
            p.uniform_(0.5, 1.5)
    ours = EmbeddingBagCollection(TABLES, is_weighted=True, seed=0)
    ref = tr.EmbeddingBagCollection(tables=TABLES, is_weighted=True)
    ref.load_state_dict(ours.state_dict())
    kjt = _tkjts(1)[0][0]
    grads = []
    for ebc in (ref, ours):
        pwp.zero_grad()
        ebc(pwp(kjt)).values().pow(2).sum().backward()
        grads.append([p.grad.clone() for p in pwp.parameters()])
    for g, w in zip(grads[1], grads[0]):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
