"""Fused optimizers against a float64 PyTorch reference on hypothesis-chosen shapes and batches:
repeated IDs, rows absent from a step, empty bags, batches of one, per-ID weights under SUM and MEAN
pooling, zero gradients, tiny and huge learning rates, and hyper-parameters changed between steps
through ``CollectionOptimizer`` (as a scheduler does).

The reference is the lazy update of FBGEMM's / torch's sparse optimizers written out in float64 torch
ops: only the rows a batch looks up move (weights and state), duplicates are merged into one gradient
per row first, row-wise Adagrad accumulates the mean of the squared gradient, Adam's bias correction
uses the table's step counter, which counts every backward pass (FBGEMM's ``iter``; SparseAdam's
``step`` of a parameter that got a gradient), and ``weight_decay`` is torch's L2 term (AdamW: decoupled).
"""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings, strategies as st, HealthCheck
import pytest
import torch
from torch import nn

from recgo import EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig, KeyedJaggedTensor
from recgo.errors import InvalidInputError
from recgo.modules import optim


class LazyReference:
    """Float64 lazy optimizer over one table: ``step(rows, g)`` updates the distinct ``rows`` with
    their merged gradients ``g`` (one row each)."""

    def __init__(self, opt: optim.FusedOptimizer, weight: torch.Tensor) -> None:
        self.opt, self.t = opt, 0
        self.w = weight.detach().double().clone()
        width = opt.state_width(self.w.shape[1])
        self.state = torch.zeros(self.w.shape[0], width, dtype=torch.float64)

    def step(self, rows: torch.Tensor, g: torch.Tensor) -> None:
        self.t += 1
        o, w, s, d = self.opt, self.w, self.state, self.w.shape[1]
        wr = w[rows]
        if isinstance(o, optim.AdamW):
            wr = wr * (1 - o.lr * o.weight_decay)
        else:
            g = g + o.weight_decay * wr
        if isinstance(o, optim.RowWiseAdagrad):
            s[rows, 0] += (g * g).mean(1)
            w[rows] = wr - o.lr * g / (s[rows, 0].sqrt() + o.eps).unsqueeze(1)
        elif isinstance(o, optim.Adagrad):
            s[rows] += g * g
            w[rows] = wr - o.lr * g / (s[rows].sqrt() + o.eps)
        elif isinstance(o, optim.Adam):
            m = s[rows, :d] = o.beta1 * s[rows, :d] + (1 - o.beta1) * g
            v = s[rows, d:] = o.beta2 * s[rows, d:] + (1 - o.beta2) * g * g
            bc1, bc2 = 1 - o.beta1 ** self.t, 1 - o.beta2 ** self.t
            w[rows] = wr - o.lr / bc1 * m / (v.sqrt() / math.sqrt(bc2) + o.eps)
        else:
            w[rows] = wr - o.lr * g


def pooled64(w: torch.Tensor, ids: torch.Tensor, lengths: torch.Tensor, mode: str,
             weights: torch.Tensor | None) -> torch.Tensor:
    """FBGEMM's pooling in float64: Σ wᵢ·eᵢ, divided by the bag's length for MEAN (not by Σ wᵢ)."""
    offs = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]])
    out = nn.functional.embedding_bag(ids, w, offs, mode="sum", per_sample_weights=weights,
                                      include_last_offset=False)
    if mode == "mean":
        out = out / lengths.clamp(min=1).unsqueeze(1).double()
    return out


def make_opt(kind: str, lr: float, eps: float, betas: tuple[float, float], wd: float) -> optim.FusedOptimizer:
    if kind == "SGD":
        return optim.SGD(lr=lr, weight_decay=wd)
    if kind in ("Adagrad", "RowWiseAdagrad"):
        return getattr(optim, kind)(lr=lr, eps=eps, weight_decay=wd)
    return getattr(optim, kind)(lr=lr, eps=eps, beta1=betas[0], beta2=betas[1], weight_decay=wd)


def takes(opt: optim.FusedOptimizer) -> set[str]:
    """The hyper-parameters besides lr that ``opt`` takes (the others must stay 0)."""
    return {"weight_decay"} | ({"eps"} if not isinstance(opt, optim.SGD) else set()) | (
        {"beta1", "beta2"} if isinstance(opt, optim.Adam) else set())


KINDS = ["SGD", "Adagrad", "RowWiseAdagrad", "Adam", "AdamW"]
LRS = st.sampled_from([1e-6, 0.01, 0.3, 1.0, 50.0])


@st.composite
def scenario(draw: st.DrawFn) -> dict:
    rows, dim = draw(st.integers(1, 12)), draw(st.sampled_from([1, 3, 4, 8, 9, 17]))
    steps = draw(st.integers(1, 4))
    batches = []
    for _ in range(steps):
        b = draw(st.integers(1, 4))
        lengths = draw(st.lists(st.integers(0, 5), min_size=b, max_size=b))
        # IDs from a prefix of the table: repeats in a bag and across bags, the rows past it absent
        hi = draw(st.integers(0, rows - 1))
        ids = draw(st.lists(st.integers(0, hi), min_size=sum(lengths), max_size=sum(lengths)))
        per_id = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, -2.0, 3.25]), min_size=len(ids), max_size=len(ids)))
        zero_grad = draw(st.booleans()) and draw(st.booleans())
        # hyper-parameters handed over before this step (None: unchanged), as a scheduler would
        new = draw(st.none() | st.fixed_dictionaries({"lr": LRS}, optional={
            "weight_decay": st.sampled_from([0.0, 0.2]), "eps": st.sampled_from([1e-8, 0.1]),
            "beta1": st.sampled_from([0.0, 0.8]), "beta2": st.sampled_from([0.5, 0.99])}))
        batches.append((lengths, ids, per_id, zero_grad, new))
    return {
        "rows": rows, "dim": dim, "batches": batches,
        "kind": draw(st.sampled_from(KINDS)), "lr": draw(LRS),
        "eps": draw(st.sampled_from([1e-10, 1e-8, 1e-3, 0.5])),
        "betas": (draw(st.sampled_from([0.0, 0.5, 0.9])), draw(st.sampled_from([0.0, 0.9, 0.999]))),
        "wd": draw(st.sampled_from([0.0, 0.0, 0.05, 1.5])),
        "mode": draw(st.sampled_from(["sum", "mean"])), "weighted": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)), "dedup": draw(st.booleans()),
    }


def assert_close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    scale = want.abs().max().item() if want.numel() else 0.0
    torch.testing.assert_close(got.double(), want, rtol=2e-5, atol=2e-5 * max(1.0, scale), msg=what)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_pooled_fused_optimizer_matches_float64_reference(sc: dict) -> None:
    opt = make_opt(sc["kind"], sc["lr"], sc["eps"], sc["betas"], sc["wd"])
    cfg = EmbeddingBagConfig(sc["rows"], sc["dim"], "t", ["f"], pooling=sc["mode"])
    ebc = EmbeddingBagCollection([cfg], is_weighted=sc["weighted"], optimizer=opt, seed=sc["seed"],
                                 dedup=sc["dedup"])
    sched = optim.CollectionOptimizer(ebc)
    table = ebc.embedding_bags["t"]
    ref = LazyReference(opt, table.weight)
    gen = torch.Generator().manual_seed(sc["seed"])
    for i, (lengths, ids, per_id, zero_grad, new) in enumerate(sc["batches"]):
        if new is not None:
            new = {k: v for k, v in new.items() if k == "lr" or k in takes(opt)}
            sched.param_groups[0].update(new)
            if "betas" in sched.param_groups[0]:
                sched.param_groups[0]["betas"] = (ref.opt.beta1, ref.opt.beta2)  # unchanged: beta1/beta2 rule
            ref.opt = replace(ref.opt, **new)
        sched.zero_grad()
        v, ln = torch.tensor(ids, dtype=torch.int64), torch.tensor(lengths, dtype=torch.int64)
        wts = torch.tensor(per_id) if sc["weighted"] else None
        kjt = KeyedJaggedTensor(["f"], v, lengths=ln, weights=wts)
        out = ebc(kjt).values()
        leaf = ref.w.clone().requires_grad_(True)
        want = pooled64(leaf, v, ln, sc["mode"], None if wts is None else wts.double())
        assert_close(out.detach(), want.detach(), f"step {i}: pooled output")
        g = torch.zeros(out.shape) if zero_grad else torch.randn(out.shape, generator=gen)
        (out * g).sum().backward()
        sched.step()
        (want * g.double()).sum().backward()
        touched = torch.unique(v)
        ref.step(touched, leaf.grad[touched])
        assert_close(table.weight.detach(), ref.w, f"step {i}: weights")
        if ref.state.shape[1]:
            assert_close(table.optimizer_state.detach(), ref.state, f"step {i}: optimizer state")
    assert int(table.optimizer_step) == len(sc["batches"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_sequence_fused_optimizer_matches_float64_reference(sc: dict) -> None:
    """The sequence collection (one row per ID, no pooling) under the same optimizers."""
    opt = make_opt(sc["kind"], sc["lr"], sc["eps"], sc["betas"], sc["wd"])
    ec = EmbeddingCollection([EmbeddingConfig(sc["rows"], sc["dim"], "t", ["f"])], optimizer=opt, seed=sc["seed"],
                             dedup=sc["dedup"])
    table = ec.embeddings["t"]
    ref = LazyReference(opt, table.weight)
    gen = torch.Generator().manual_seed(sc["seed"])
    for i, (lengths, ids, _, zero_grad, _) in enumerate(sc["batches"]):
        v, ln = torch.tensor(ids, dtype=torch.int64), torch.tensor(lengths, dtype=torch.int64)
        out = ec(KeyedJaggedTensor(["f"], v, lengths=ln))["f"].values()
        assert_close(out.detach(), ref.w[v], f"step {i}: rows")
        g = torch.zeros(out.shape) if zero_grad else torch.randn(out.shape, generator=gen)
        (out * g).sum().backward()
        merged = torch.zeros_like(ref.w).index_add_(0, v, g.double())
        touched = torch.unique(v)
        ref.step(touched, merged[touched])
        assert_close(table.weight.detach(), ref.w, f"step {i}: weights")
        if ref.state.shape[1]:
            assert_close(table.optimizer_state.detach(), ref.state, f"step {i}: optimizer state")


@pytest.mark.parametrize("kind,kw,msg", [
    (optim.Adagrad, dict(lr=0.1, eps=1e-50), "eps 1e-50 must be finite and > 0 in float32"),
    (optim.RowWiseAdagrad, dict(lr=0.1, eps=1e-46), "eps 1e-46"),
    (optim.Adam, dict(lr=0.1, eps=1e-50), "eps 1e-50"),
    (optim.SGD, dict(lr=1e39), "learning rate 1e\\+39 must be finite in float32"),
    (optim.AdamW, dict(lr=0.1, weight_decay=1e39), "weight decay 1e\\+39"),
])
def test_hyper_parameters_float32_cannot_hold_are_refused(kind: type, kw: dict[str, float], msg: str) -> None:
    """The kernels run in float32: an eps that rounds to zero there made a touched row whose merged
    gradient is zero (per-ID weights of zero) 0/0 = NaN, and a learning rate past float32's range
    made it inf·0; both were taken as valid. They are refused where the optimizer is made (since
    session 40; the collection refused it) and when a collection's is changed to them."""
    cfg = [EmbeddingBagConfig(4, 2, "t", ["f"])]
    with pytest.raises(InvalidInputError, match=msg):
        kind(**kw)
    good = kind(lr=0.1)
    ebc = EmbeddingBagCollection(cfg, optimizer=good, seed=0)
    with pytest.raises(InvalidInputError, match=msg):
        ebc.set_fused_optimizer(replace(good, **kw))
    kjt = KeyedJaggedTensor(["f"], torch.tensor([1, 2]), lengths=torch.tensor([1, 1]))
    (ebc(kjt).values() * torch.tensor([[0.0, 0.0], [1.0, 1.0]])).sum().backward()
    assert torch.isfinite(ebc.embedding_bags["t"].weight).all()
