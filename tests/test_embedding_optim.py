"""Fused optimizers (issue 4): parity with float64 PyTorch references over several duplicate-heavy
steps and with TorchRec's FusedEmbeddingBagCollection; checkpoints; bad hyper-parameters."""

from __future__ import annotations

from typing import Any

import math
import os

import pytest
from hypothesis import given, settings, strategies as st
import torch
from torch import nn

from recgo import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
from recgo.errors import InvalidInputError
from recgo.modules import optim

CFGS = [EmbeddingBagConfig(40, 16, "t0", ["a", "b"]), EmbeddingBagConfig(25, 8, "t1", ["c"], pooling="mean")]


def batches(n: int, seed: int, weighted: bool = False) -> list[KeyedJaggedTensor]:
    """Duplicate-heavy batches (IDs from a small range) over features a, b, c with batch 6."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lengths = torch.randint(0, 6, (18,), generator=gen)
        values = torch.randint(0, 6, (int(lengths.sum()),), generator=gen)
        weights = torch.rand(values.numel(), generator=gen) + 0.5 if weighted else None
        out.append(KeyedJaggedTensor(["a", "b", "c"], values, lengths=lengths, weights=weights))
    return out


def pooled64(leaves: dict[str, torch.Tensor], kjt: KeyedJaggedTensor, cfgs: list[EmbeddingBagConfig]) -> torch.Tensor:
    feats = kjt.to_dict()
    cols = []
    for cfg in cfgs:
        for f in cfg.feature_names:
            v, ln = feats[f].values(), feats[f].lengths()
            offs = torch.cat([torch.zeros(1, dtype=torch.int64), ln.cumsum(0)[:-1]])
            cols.append(nn.functional.embedding_bag(v, leaves[cfg.name], offs, mode="sum" if cfg.pooling == "sum" else "mean"))
    return torch.cat(cols, 1)


def touched(kjt: KeyedJaggedTensor, cfg: EmbeddingBagConfig) -> torch.Tensor:
    feats = kjt.to_dict()
    return torch.unique(torch.cat([feats[f].values() for f in cfg.feature_names]))


class Reference:
    """Float64 lazy (touched-rows-only) optimizers with torch.optim's formulas."""

    def __init__(self, opt: optim.FusedOptimizer, weights: dict[str, torch.Tensor]) -> None:
        self.opt, self.step = opt, 0
        self.w = {k: v.clone() for k, v in weights.items()}
        self.s1 = {k: torch.zeros_like(v) for k, v in weights.items()}
        self.s2 = {k: torch.zeros_like(v) for k, v in weights.items()}
        self.rs = {k: torch.zeros(v.shape[0], dtype=torch.float64) for k, v in weights.items()}

    def update(self, name: str, rows: torch.Tensor, g: torch.Tensor) -> None:
        o, w = self.opt, self.w[name]
        if isinstance(o, optim.RowWiseAdagrad):
            self.rs[name][rows] += (g * g).mean(1)
            w[rows] -= o.lr * g / (self.rs[name][rows].sqrt() + o.eps).unsqueeze(1)
        elif isinstance(o, optim.Adagrad):
            self.s1[name][rows] += g * g
            w[rows] -= o.lr * g / (self.s1[name][rows].sqrt() + o.eps)
        elif isinstance(o, optim.Adam):
            wr = w[rows]
            if isinstance(o, optim.AdamW):
                wr = wr * (1 - o.lr * o.weight_decay)
            else:
                g = g + o.weight_decay * wr
            m = self.s1[name][rows] = o.beta1 * self.s1[name][rows] + (1 - o.beta1) * g
            v = self.s2[name][rows] = o.beta2 * self.s2[name][rows] + (1 - o.beta2) * g * g
            bc1, bc2 = 1 - o.beta1 ** self.step, 1 - o.beta2 ** self.step
            w[rows] = wr - o.lr / bc1 * m / (v.sqrt() / math.sqrt(bc2) + o.eps)
        else:
            w[rows] -= o.lr * g

    def train_step(self, kjt: KeyedJaggedTensor, grad_out: torch.Tensor) -> None:
        self.step += 1
        leaves = {k: v.clone().requires_grad_(True) for k, v in self.w.items()}
        (pooled64(leaves, kjt, CFGS) * grad_out.double()).sum().backward()
        for cfg in CFGS:
            rows = touched(kjt, cfg)
            self.update(cfg.name, rows, leaves[cfg.name].grad[rows])


OPTIMIZERS = [
    optim.SGD(lr=0.3),
    optim.Adagrad(lr=0.2, eps=1e-8),
    optim.RowWiseAdagrad(lr=0.2, eps=1e-8),
    optim.Adam(lr=0.05),
    optim.Adam(lr=0.05, weight_decay=0.1),
    optim.AdamW(lr=0.05, weight_decay=0.1),
]


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=lambda o: f"{type(o).__name__}-wd{o.weight_decay}")
def test_fused_matches_float64_reference(opt: optim.FusedOptimizer) -> None:
    ebc = EmbeddingBagCollection(CFGS, optimizer=opt, seed=1)
    ref = Reference(opt, {c.name: ebc.embedding_bags[c.name].weight.detach().double() for c in CFGS})
    gen = torch.Generator().manual_seed(2)
    for kjt in batches(4, seed=3):
        out = ebc(kjt).values()
        g = torch.randn(out.shape, generator=gen)
        torch.testing.assert_close(out.double(), pooled64(ref.w, kjt, CFGS), rtol=1e-5, atol=1e-6)
        (out * g).sum().backward()
        ref.train_step(kjt, g)
    for c in CFGS:
        torch.testing.assert_close(ebc.embedding_bags[c.name].weight.detach().double(), ref.w[c.name], rtol=1e-5, atol=1e-5)
        assert int(ebc.embedding_bags[c.name].optimizer_step) == 4
        width = opt.state_width(c.embedding_dim)
        state = getattr(ebc.embedding_bags[c.name], "optimizer_state", torch.empty(c.num_embeddings, 0))
        assert tuple(state.shape) == (c.num_embeddings, width)
    if isinstance(opt, optim.Adam):
        state = ebc.embedding_bags["t0"].optimizer_state.double()
        torch.testing.assert_close(state[:, :16], ref.s1["t0"], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(state[:, 16:], ref.s2["t0"], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("opt,torch_opt", [
    (optim.SGD(lr=0.3), lambda p: torch.optim.SGD(p, lr=0.3)),
    (optim.Adagrad(lr=0.2, eps=1e-10), lambda p: torch.optim.Adagrad(p, lr=0.2, eps=1e-10)),
    (optim.Adam(lr=0.05), lambda p: torch.optim.SparseAdam(p, lr=0.05)),
], ids=["SGD", "Adagrad", "SparseAdam"])
def test_fused_matches_torch_optimizers(opt, torch_opt) -> None:
    """The same fused steps against torch.optim on float64 sparse gradients."""
    ebc = EmbeddingBagCollection(CFGS, optimizer=opt, seed=5)
    leaves = {c.name: nn.Parameter(ebc.embedding_bags[c.name].weight.detach().double().clone()) for c in CFGS}
    topt = torch_opt(list(leaves.values()))
    gen = torch.Generator().manual_seed(6)
    for kjt in batches(4, seed=7):
        out = ebc(kjt).values()
        g = torch.randn(out.shape, generator=gen)
        (out * g).sum().backward()
        topt.zero_grad()
        feats, cols = kjt.to_dict(), []
        for cfg in CFGS:
            for f in cfg.feature_names:
                v, ln = feats[f].values(), feats[f].lengths()
                offs = torch.cat([torch.zeros(1, dtype=torch.int64), ln.cumsum(0)[:-1]])
                cols.append(nn.functional.embedding_bag(v, leaves[cfg.name], offs, sparse=True,
                                                        mode="sum" if cfg.pooling == "sum" else "mean"))
        (torch.cat(cols, 1) * g.double()).sum().backward()
        topt.step()
    for c in CFGS:
        torch.testing.assert_close(ebc.embedding_bags[c.name].weight.detach().double(), leaves[c.name].detach(),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["SGD", "Adagrad", "RowWiseAdagrad"])
def test_fused_matches_torchrec_fused_ebc(name: str) -> None:
    torchrec = pytest.importorskip("torchrec")
    from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection
    import torchrec.optim as trec_optim

    torch_type = {"SGD": torch.optim.SGD, "Adagrad": torch.optim.Adagrad, "RowWiseAdagrad": trec_optim.RowWiseAdagrad}[name]
    kwargs = {"lr": 0.2} if name == "SGD" else {"lr": 0.2, "eps": 1e-8}
    tcfgs = [torchrec.EmbeddingBagConfig(num_embeddings=40, embedding_dim=16, name="t0", feature_names=["a", "b"]),
             torchrec.EmbeddingBagConfig(num_embeddings=25, embedding_dim=8, name="t1", feature_names=["c"])]
    ref = FusedEmbeddingBagCollection(tables=tcfgs, optimizer_type=torch_type, optimizer_kwargs=kwargs,
                                      device=torch.device("cpu"))
    ebc = EmbeddingBagCollection(tcfgs, optimizer=getattr(optim, name)(**kwargs), seed=8)
    ref.load_state_dict({k: v for k, v in ebc.state_dict().items() if k.endswith(".weight")})
    gen = torch.Generator().manual_seed(9)
    for kjt in batches(4, seed=10):
        want, got = ref(kjt.to_torchrec()).values(), ebc(kjt).values()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        g = torch.randn(got.shape, generator=gen)
        (want * g).sum().backward()
        (got * g).sum().backward()
    sd = ref.state_dict()
    for t in ("t0", "t1"):
        torch.testing.assert_close(ebc.embedding_bags[t].weight.detach(), sd[f"embedding_bags.{t}.weight"],
                                   rtol=1e-5, atol=1e-6)
    if name != "SGD":
        assert len(ref._emb_modules) == 1  # one FBGEMM module holds both tables (same pooling)
        states = ref._emb_modules[0]._emb_module.split_optimizer_states()
        for i, t in enumerate(("t0", "t1")):
            mine = ebc.embedding_bags[t].optimizer_state
            torch.testing.assert_close(mine.reshape(states[i][0].shape), states[i][0], rtol=1e-5, atol=1e-7)


# -- checkpoints ------------------------------------------------------------------------------------

def train(ebc: EmbeddingBagCollection, kjts: list[KeyedJaggedTensor], seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for kjt in kjts:
        out = ebc(kjt).values()
        (out * torch.randn(out.shape, generator=gen)).sum().backward()


def test_checkpoint_round_trip_is_bit_exact_and_resumes(tmp_path) -> None:
    opt = optim.Adam(lr=0.05, weight_decay=0.01)
    first = EmbeddingBagCollection(CFGS, optimizer=opt, seed=11)
    train(first, batches(2, seed=12), seed=13)
    path = tmp_path / "ebc.pt"
    first.save(path)
    saved = {k: v.clone() for k, v in first.state_dict().items()}
    assert {"embedding_bags.t0.optimizer_state", "embedding_bags.t0.optimizer_step"} <= set(saved)
    second = EmbeddingBagCollection(CFGS, optimizer=opt, seed=99)
    second.load(path)
    for k, v in second.state_dict().items():
        assert torch.equal(v, saved[k]), k
    more = batches(3, seed=14)
    train(first, more, seed=15)
    train(second, more, seed=15)
    for (k, a), b in zip(first.state_dict().items(), second.state_dict().values()):
        assert torch.equal(a, b), f"{k} diverged after resuming"
    # plain torch.save of the state_dict works too
    torch.save(first.state_dict(), tmp_path / "plain.pt")
    loaded = torch.load(tmp_path / "plain.pt", weights_only=True)
    assert torch.equal(loaded["embedding_bags.t1.optimizer_state"], first.embedding_bags.t1.optimizer_state)


def test_save_is_atomic(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    ebc = EmbeddingBagCollection(CFGS, optimizer=optim.SGD(lr=0.1), seed=0)
    path = tmp_path / "ckpt.pt"
    path.write_bytes(b"previous checkpoint")
    real_save = torch.save

    def failing_save(obj, f, *a, **kw):
        f.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        ebc.save(path)
    monkeypatch.setattr(torch, "save", real_save)
    assert path.read_bytes() == b"previous checkpoint"
    assert os.listdir(tmp_path) == ["ckpt.pt"], "no temporary file is left behind"


def test_load_checkpoint_of_another_shape(tmp_path) -> None:
    ebc = EmbeddingBagCollection(CFGS, optimizer=optim.Adagrad(lr=0.1), seed=0)
    other = EmbeddingBagCollection([EmbeddingBagConfig(41, 16, "t0", ["a", "b"]), CFGS[1]],
                                   optimizer=optim.Adagrad(lr=0.1), seed=0)
    other.save(tmp_path / "other.pt")
    with pytest.raises(InvalidInputError, match=r"'embedding_bags.t0.weight' has shape \(41, 16\)"):
        ebc.load(tmp_path / "other.pt")
    rowwise = EmbeddingBagCollection(CFGS, optimizer=optim.RowWiseAdagrad(lr=0.1), seed=0)
    with pytest.raises(InvalidInputError, match="optimizer_state"):
        rowwise.load_state_dict(ebc.state_dict())


# -- bad hyper-parameters and misuse ----------------------------------------------------------------

@pytest.mark.parametrize("make,msg", [
    (lambda: optim.SGD(lr=-0.1), "learning rate -0.1"),
    (lambda: optim.SGD(lr=float("nan")), "learning rate NaN"),
    (lambda: optim.Adagrad(lr=0.1, eps=0.0), "eps 0 must be"),
    (lambda: optim.RowWiseAdagrad(lr=0.1, eps=-1.0), "eps -1 must be"),
    (lambda: optim.Adam(beta1=1.0), "beta1 1 must be in"),
    (lambda: optim.Adam(beta2=-0.5), "beta2 -0.5 must be in"),
    (lambda: optim.AdamW(weight_decay=-1.0), "weight decay -1"),
])
def test_bad_hyper_parameters(make: Any, msg: str) -> None:
    """Refused where the optimizer is made (since session 40; the collection refused it), with the
    engine's message."""
    with pytest.raises(InvalidInputError, match=msg):
        make()


def test_set_fused_optimizer_and_misuse() -> None:
    ebc = EmbeddingBagCollection(CFGS, optimizer=optim.SGD(lr=0.1), seed=0)
    w0 = ebc.embedding_bags.t0.weight.detach().clone()
    ebc.set_fused_optimizer(optim.SGD(lr=0.0))
    train(ebc, batches(1, seed=1), seed=2)
    assert torch.equal(ebc.embedding_bags.t0.weight.detach(), w0), "lr 0 leaves weights alone"
    with pytest.raises(InvalidInputError, match="kind cannot change"):
        ebc.set_fused_optimizer(optim.Adagrad(lr=0.1))
    with pytest.raises(InvalidInputError, match="learning rate -1"):
        ebc.set_fused_optimizer(optim.SGD(lr=-1.0))
    with pytest.raises(InvalidInputError, match="fused optimizer"):
        EmbeddingBagCollection(CFGS, optimizer=torch.optim.SGD)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="fused optimizer"):
        EmbeddingBagCollection(CFGS, optimizer=optim.FusedOptimizer(lr=0.1))


def test_lookup_stats_count_duplicates() -> None:
    ebc = EmbeddingBagCollection(CFGS, seed=0)
    kjt = KeyedJaggedTensor(["a", "b", "c"], torch.tensor([1, 1, 2, 1, 3, 3]), lengths=torch.tensor([2, 1, 1, 0, 2, 0]))
    assert ebc.lookup_stats(kjt) == {"t0": (2, 4), "t1": (1, 2)}


# -- weight decay and parameters an optimizer does not take (issue 9) --------------------------------

def covering_batches(n: int, seed: int) -> list[KeyedJaggedTensor]:
    """Batches in which every row of every table is looked up (so a lazy optimizer, which updates the
    touched rows, and torch.optim on dense gradients, which updates all, must agree)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        feats = {"a": [torch.randperm(40, generator=gen)], "b": [], "c": [torch.randperm(25, generator=gen)]}
        for f, rows in (("a", 40), ("b", 40), ("c", 25)):
            feats[f] += [torch.randint(0, rows, (int(torch.randint(0, 4, (1,), generator=gen)),), generator=gen)
                         for _ in range(6 - len(feats[f]))]
        lengths = torch.tensor([len(v) for f in "abc" for v in feats[f]])
        values = torch.cat([v for f in "abc" for v in feats[f]])
        out.append(KeyedJaggedTensor(["a", "b", "c"], values, lengths=lengths))
    return out


def rowwise_adagrad64(params: list[torch.Tensor], lr: float, eps: float, wd: float) -> "torch.optim.Optimizer":
    """Row-wise Adagrad (FBGEMM EXACT_ROWWISE_ADAGRAD) with torch's L2 weight decay, in float64."""

    class RowWise(torch.optim.Optimizer):
        def step(self) -> None:  # type: ignore[override]
            for p in self.param_groups[0]["params"]:
                g = p.grad + wd * p.detach()
                s = self.state[p].setdefault("sum", torch.zeros(p.shape[0], dtype=p.dtype))
                s += (g * g).mean(1)
                with torch.no_grad():
                    p -= lr * g / (s.sqrt() + eps).unsqueeze(1)

    return RowWise(params, {})


@pytest.mark.parametrize("opt,torch_opt", [
    (optim.SGD(lr=0.3, weight_decay=0.2), lambda p: torch.optim.SGD(p, lr=0.3, weight_decay=0.2)),
    (optim.Adagrad(lr=0.2, eps=1e-10, weight_decay=0.3),
     lambda p: torch.optim.Adagrad(p, lr=0.2, eps=1e-10, weight_decay=0.3)),
    (optim.RowWiseAdagrad(lr=0.2, eps=1e-8, weight_decay=0.3), lambda p: rowwise_adagrad64(p, 0.2, 1e-8, 0.3)),
    (optim.Adam(lr=0.05, weight_decay=0.1), lambda p: torch.optim.Adam(p, lr=0.05, weight_decay=0.1)),
], ids=["SGD", "Adagrad", "RowWiseAdagrad", "Adam"])
def test_weight_decay_matches_torch_optimizers(opt, torch_opt) -> None:
    """weight_decay is torch's L2 term (g + wd·w) on every fused optimizer, over several steps."""
    ebc = EmbeddingBagCollection(CFGS, optimizer=opt, seed=21)
    leaves = {c.name: nn.Parameter(ebc.embedding_bags[c.name].weight.detach().double().clone()) for c in CFGS}
    topt = torch_opt(list(leaves.values()))
    no_decay = EmbeddingBagCollection(CFGS, optimizer=type(opt)(lr=opt.lr), seed=21)
    gen = torch.Generator().manual_seed(22)
    for kjt in covering_batches(5, seed=23):
        g = torch.randn(kjt.lengths().numel() // 3, 40, generator=gen)
        for m in (ebc, no_decay):
            (m(kjt).values() * g).sum().backward()
        topt.zero_grad()
        (pooled64(leaves, kjt, CFGS) * g.double()).sum().backward()
        topt.step()
    for c in CFGS:
        torch.testing.assert_close(ebc.embedding_bags[c.name].weight.detach().double(), leaves[c.name].detach(),
                                   rtol=1e-5, atol=1e-5)
    assert not torch.allclose(ebc.embedding_bags.t0.weight, no_decay.embedding_bags.t0.weight, atol=1e-4), \
        "weight decay changed nothing"


@pytest.mark.parametrize("kind,kw,msg", [
    (optim.SGD, dict(eps=1e-8), "eps=1e-08 has no meaning for sgd"),
    (optim.SGD, dict(beta1=0.9), "beta1=0.9 has no meaning for sgd"),
    (optim.Adagrad, dict(beta2=0.99), "beta2=0.99 has no meaning for adagrad"),
    (optim.RowWiseAdagrad, dict(beta1=0.5), "beta1=0.5 has no meaning for rowwise_adagrad"),
    (optim.SGD, dict(weight_decay=-0.1), "weight decay -0.1"),
    (optim.Adagrad, dict(weight_decay=float("inf")), "weight decay"),
])
def test_parameters_an_optimizer_does_not_take_are_refused(kind: Any, kw: dict[str, float], msg: str) -> None:
    """Refused where the optimizer is made, and where a collection's optimizer is changed through
    ``dataclasses.replace`` (what a ``CollectionOptimizer`` does)."""
    import dataclasses

    with pytest.raises(InvalidInputError, match=msg):
        kind(lr=0.1, **kw)
    ebc = EmbeddingBagCollection(CFGS, optimizer=kind(lr=0.1), seed=0)
    with pytest.raises(InvalidInputError, match=msg):
        ebc.set_fused_optimizer(dataclasses.replace(ebc.fused_optimizer, **kw))
    assert ebc.fused_optimizer == kind(lr=0.1)


@pytest.mark.parametrize("step", [-1, -(2**62), 2**53, 2**63 - 1])
def test_absurd_optimizer_step_is_refused_on_load(tmp_path, step: int) -> None:
    ebc = EmbeddingBagCollection(CFGS, optimizer=optim.Adam(lr=0.05), seed=0)
    train(ebc, batches(1, seed=1), seed=2)
    sd = {k: v.clone() for k, v in ebc.state_dict().items()}
    sd["embedding_bags.t0.optimizer_step"] = torch.tensor([step])
    other = EmbeddingBagCollection(CFGS, optimizer=optim.Adam(lr=0.05), seed=0)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(InvalidInputError, match="optimizer_step"):
        other.load_state_dict(sd)
    from recgo.modules import save_checkpoint
    save_checkpoint(sd, tmp_path / "bad.pt")
    with pytest.raises(InvalidInputError, match="optimizer_step"):
        other.load(tmp_path / "bad.pt")
    for k, v in other.state_dict().items():
        assert torch.equal(v, before[k]), k
    # A counter written past the check (in place) is refused by the engine at the next step, not NaN.
    with torch.no_grad():
        other.embedding_bags.t0.optimizer_step.fill_(step)
    with pytest.raises(InvalidInputError, match="optimizer step"):
        train(other, batches(1, seed=3), seed=4)
    assert torch.isfinite(other.embedding_bags.t0.weight).all()


@pytest.mark.parametrize(("cls", "kwargs", "want"), [
    (torch.optim.SGD, {"lr": 0.1}, optim.SGD(lr=0.1)),
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.0, "weight_decay": 1e-4}, optim.SGD(lr=0.1, weight_decay=1e-4)),
    (torch.optim.Adagrad, {"lr": 0.1}, optim.Adagrad(lr=0.1, eps=1e-8)),  # FBGEMM's eps, as under DMP
    (torch.optim.Adagrad, {"learning_rate": 0.2, "eps": 1e-10}, optim.Adagrad(lr=0.2, eps=1e-10)),
    ("torchrec.optim.RowWiseAdagrad", {"lr": 0.05}, optim.RowWiseAdagrad(lr=0.05, eps=1e-8)),
    (torch.optim.Adam, {"lr": 1e-3, "betas": (0.8, 0.99)}, optim.Adam(lr=1e-3, beta1=0.8, beta2=0.99, eps=1e-8)),
    (torch.optim.AdamW, {"lr": 1e-3}, optim.AdamW(lr=1e-3, eps=1e-8, beta1=0.9, beta2=0.999, weight_decay=1e-2)),
    (torch.optim.SGD, {}, optim.SGD(lr=0.01)),  # FBGEMM's default rate
    (torch.optim.Adam, {"lr": 0.1, "foreach": False, "fused": None, "maximize": False, "amsgrad": False},
     optim.Adam(lr=0.1, eps=1e-8)),
    # torch's Adam(decoupled_weight_decay=True) is AdamW; False is plain Adam (it was refused as unknown)
    (torch.optim.Adam, {"lr": 0.1, "decoupled_weight_decay": False}, optim.Adam(lr=0.1, eps=1e-8)),
    (torch.optim.Adam, {"lr": 0.1, "weight_decay": 0.1, "decoupled_weight_decay": True},
     optim.AdamW(lr=0.1, eps=1e-8, weight_decay=0.1)),
])
def test_from_torch_maps_the_in_backward_optimizers(cls: type | str, kwargs: dict, want: optim.FusedOptimizer) -> None:
    if isinstance(cls, str):
        cls = pytest.importorskip("torchrec").optim.RowWiseAdagrad
    assert optim.from_torch(cls, kwargs) == want


@pytest.mark.parametrize(("cls", "kwargs", "match"), [
    (torch.optim.RMSprop, {"lr": 0.1}, "RMSprop has no fused counterpart"),
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, "momentum=0.9 is not supported"),
    (torch.optim.Adam, {"lr": 0.1, "amsgrad": True}, "amsgrad=True is not supported"),
    (torch.optim.Adagrad, {"lr": 0.1, "lr_decay": 0.5}, "lr_decay=0.5 is not supported"),
    (torch.optim.SGD, {"lr": 0.1, "eps": 1e-8}, r"options \['eps'\] are not taken"),
    (torch.optim.Adagrad, {"lr": 0.1, "betas": (0.9, 0.9)}, r"options \['beta1', 'beta2'\] are not taken"),
    (torch.optim.Adam, {"lr": 0.1, "betas": 0.9}, "betas must be a pair"),
    (torch.optim.Adam, {"lr": "fast"}, "must be numbers"),
    (torch.optim.AdamW, {"lr": 0.1, "decoupled_weight_decay": False}, "is Adam: use Adam"),
    (torch.optim.SGD, {"lr": 0.1, "decoupled_weight_decay": False}, r"options \['decoupled_weight_decay'\] are not"),
])
def test_from_torch_refuses_what_it_cannot_compute(cls: type, kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        optim.from_torch(cls, kwargs)


@pytest.mark.parametrize("make", [
    lambda: optim.SGD(lr=True),
    lambda: optim.Adam(lr=True),
    lambda: optim.Adagrad(lr=0.1, eps=False),
    lambda: optim.AdamW(beta1=True),
    lambda: optim.RowWiseAdagrad(lr=0.1, weight_decay="0"),
    lambda: optim.SGD(lr=torch.tensor(0.1)),
    lambda: optim.from_torch(torch.optim.SGD, {"lr": True}),
    lambda: optim.from_torch(torch.optim.SGD, {"lr": torch.tensor(True)}),
    lambda: optim.from_torch(torch.optim.Adam, {"lr": 0.1, "betas": (True, 0.9)}),
])
def test_bool_and_non_number_hyper_parameters_are_refused_by_name(make) -> None:
    """SGD(lr=True) was accepted and trained at lr 1.0 (from_torch already refused a bool)."""
    with pytest.raises(InvalidInputError, match=r"hyper-parameters must be numbers, got \{'(lr|eps|beta1|weight_decay)'"):
        make()


def test_int_hyper_parameters_and_a_tensor_lr_are_taken() -> None:
    """torch.optim takes a 0-d tensor lr; from_torch refused it ("hyper-parameters must be numbers")."""
    assert optim.SGD(lr=1).params() == (optim.SGD.kind, 1.0, 0.0, 0.0, 0.0, 0.0)
    assert optim.Adam(lr=1, weight_decay=0) == optim.Adam(lr=1.0, weight_decay=0.0)
    lr = torch.tensor(0.25)
    got = optim.from_torch(torch.optim.SGD, {"lr": lr})
    assert got == optim.SGD(lr=0.25) and type(got.lr) is float
    assert optim.from_torch(torch.optim.Adam, {"lr": lr, "betas": (torch.tensor(0.5), 0.75)}) == \
        optim.Adam(lr=0.25, beta1=0.5, beta2=0.75)


def test_in_backward_needs_one_optimizer_per_collection() -> None:
    torchrec = pytest.importorskip("torchrec")
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    tables = [torchrec.EmbeddingBagConfig(num_embeddings=10, embedding_dim=4, name=n, feature_names=[n]) for n in "ab"]
    ebc = torchrec.EmbeddingBagCollection(tables=tables)
    assert optim.in_backward(ebc) is None
    apply_optimizer_in_backward(torch.optim.SGD, [ebc.embedding_bags["a"].weight], {"lr": 0.1})
    with pytest.raises(InvalidInputError, match="different in-backward optimizers"):
        optim.in_backward(ebc)
    apply_optimizer_in_backward(torch.optim.SGD, [ebc.embedding_bags["b"].weight], {"lr": 0.1})
    assert optim.in_backward(ebc) == optim.SGD(lr=0.1)


_KWARG_VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.integers(-3, 3), st.booleans(),
                          st.none(), st.text(max_size=3), st.tuples(st.floats(0, 1), st.floats(0, 1)))


@settings(max_examples=300, deadline=None)
@given(cls=st.sampled_from([torch.optim.SGD, torch.optim.Adagrad, torch.optim.Adam, torch.optim.AdamW,
                            torch.optim.RMSprop]),
       kwargs=st.dictionaries(st.sampled_from(["lr", "learning_rate", "eps", "weight_decay", "betas", "beta1",
                                               "momentum", "amsgrad", "maximize", "foreach", "lr_decay", "nesterov",
                                               "dampening", "centered", "alpha"]), _KWARG_VALUES, max_size=5))
def test_from_torch_gives_the_values_or_a_named_error(cls: type, kwargs: dict) -> None:
    """Whatever kwargs apply_optimizer_in_backward carries, from_torch returns a fused optimizer with
    those values (FBGEMM's defaults for the rest) or raises InvalidInputError, never anything else."""
    try:
        got = optim.from_torch(cls, kwargs)
    except InvalidInputError:
        return
    assert not ("lr" in kwargs and "learning_rate" in kwargs)
    lr = kwargs.get("learning_rate", kwargs.get("lr", 0.01))
    assert got.lr == float(lr) or (got.lr != got.lr and lr != lr)  # NaN stays NaN: the engine refuses it
    assert all(not isinstance(v, (bool, str)) for k, v in kwargs.items() if k in ("lr", "learning_rate", "eps"))
    if "weight_decay" in kwargs:
        wd = float(kwargs["weight_decay"])
        assert got.weight_decay == wd or (wd != wd and got.weight_decay != got.weight_decay)
    if "betas" in kwargs:
        assert (got.beta1, got.beta2) == tuple(float(b) for b in kwargs["betas"])
