"""The collections' eager path (``recgo.modules._eager``) against their custom ops: the same outputs,
gradients and fused updates; taken only when nothing traces or intercepts the call; outputs that may
be modified in place, as the ops' outputs may."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import recgo
from recgo import modules
from recgo.modules import _eager, _ops, _sequence_ops


class _PassThrough(TorchDispatchMode):
    """A dispatch mode that changes nothing: with it active the collections must take their ops."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


def _batch(seed: int) -> recgo.KeyedJaggedTensor:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 5, (2 * 6,), generator=gen)
    values = torch.randint(0, 40, (int(lengths.sum()),), generator=gen)
    return recgo.KeyedJaggedTensor(["a", "b"], values, lengths=lengths)


def _pooled(optimizer: modules.FusedOptimizer | None) -> recgo.EmbeddingBagCollection:
    cfg = [recgo.EmbeddingBagConfig(name="t0", embedding_dim=8, num_embeddings=40, feature_names=["a"]),
           recgo.EmbeddingBagConfig(name="t1", embedding_dim=16, num_embeddings=40, feature_names=["b"],
                                    pooling="mean")]
    return recgo.EmbeddingBagCollection(tables=cfg, optimizer=optimizer, seed=3)


def _sequence(optimizer: modules.FusedOptimizer | None) -> recgo.EmbeddingCollection:
    cfg = [recgo.EmbeddingConfig(name="t0", embedding_dim=16, num_embeddings=40, feature_names=["a", "b"])]
    return recgo.EmbeddingCollection(cfg, optimizer=optimizer, seed=3)


def _outputs(m: torch.nn.Module, kjt: recgo.KeyedJaggedTensor) -> list[torch.Tensor]:
    res = m(kjt)
    if isinstance(res, dict):
        return [res[k].values() for k in ("a", "b")]
    return [res.values()]


def _train(m: torch.nn.Module, intercept: bool, steps: int = 3) -> tuple[list[torch.Tensor], dict]:
    """Forward + backward (+ the fused update) for a few batches; with ``intercept`` under a dispatch
    mode (the ops' path). Returns the last step's outputs and the state_dict after the steps."""
    outs: list[torch.Tensor] = []
    for s in range(steps):
        if intercept:
            with _PassThrough():
                outs = _outputs(m, _batch(s))
        else:
            outs = _outputs(m, _batch(s))
        grads = [torch.linspace(-1, 1, o.numel()).view_as(o) for o in outs]
        torch.autograd.backward(outs, grads)
        if any(p.grad is not None for p in m.parameters()):
            with torch.no_grad():  # a plain SGD step for the torch-optimizer case
                for p in m.parameters():
                    if p.grad is not None:
                        p -= 0.1 * p.grad.to_dense()
                        p.grad = None
    return [o.detach().clone() for o in outs], {k: v.clone() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("make", [_pooled, _sequence], ids=["pooled", "sequence"])
@pytest.mark.parametrize("optimizer", [None, modules.SGD(lr=0.1), modules.Adagrad(lr=0.1)], ids=["torch", "sgd", "adagrad"])
def test_eager_path_equals_the_custom_ops(make, optimizer) -> None:  # type: ignore[no-untyped-def]
    a = make(copy.deepcopy(optimizer))
    b = make(copy.deepcopy(optimizer))
    b.load_state_dict(a.state_dict())
    out_a, state_a = _train(a, intercept=False)
    out_b, state_b = _train(b, intercept=True)
    for x, y in zip(out_a, out_b):
        assert torch.equal(x, y)
    assert state_a.keys() == state_b.keys()
    for k in state_a:
        assert torch.equal(state_a[k], state_b[k]), k


@pytest.mark.parametrize("make", [_pooled, _sequence], ids=["pooled", "sequence"])
def test_eager_path_skips_the_ops_and_the_ops_serve_dispatch_modes(make, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    m = make(modules.SGD(lr=0.1))
    calls: list[str] = []
    for mod, name in ((_ops, "ebc_forward"), (_sequence_ops, "ec_forward")):
        real = getattr(mod, name)

        def spy(*args, _real=real, _name=name, **kwargs):  # type: ignore[no-untyped-def]
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(mod, name, spy)
    outs = _outputs(m, _batch(0))
    torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    with torch.no_grad():
        _outputs(m, _batch(1))
    assert calls == []
    with _PassThrough():
        _outputs(m, _batch(2))
    assert calls, "a dispatch mode must see the custom op"


@pytest.mark.parametrize("make", [_pooled, _sequence], ids=["pooled", "sequence"])
def test_a_frozen_fused_collection_backs_a_dense_loss_through_the_ops(make) -> None:  # type: ignore[no-untyped-def]
    """requires_grad_(False) on a fused collection: the dense part behind it trains, the tables stay,
    on the ops' path too (compile, dispatch modes). The op's output used to require grad through the
    anchor, and backward raised 'no saved forward'."""
    m = make(modules.SGD(lr=0.1))
    m.requires_grad_(False)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    dense = torch.nn.Linear(16, 1)
    with _PassThrough():
        outs = _outputs(m, _batch(0))
    assert not any(o.requires_grad for o in outs)
    sum(dense(o.view(-1, 16)).sum() for o in outs).backward()
    assert dense.weight.grad is not None and dense.weight.grad.abs().sum() > 0
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k]), k


@pytest.mark.parametrize("make", [_pooled, _sequence], ids=["pooled", "sequence"])
def test_outputs_may_be_modified_in_place(make) -> None:  # type: ignore[no-untyped-def]
    """``out.mul_(3)`` before backward (an autograd.Function's view outputs would refuse it): the
    weights' gradient equals an untouched output's with three times the upstream gradient."""
    m = make(None)
    kjt = _batch(4)
    outs = _outputs(m, kjt)
    for o in outs:
        o.mul_(3)
    torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    grads = {name: p.grad.to_dense() for name, p in m.named_parameters()}
    ref = make(None)
    ref.load_state_dict(m.state_dict())
    ref_outs = _outputs(ref, kjt)
    torch.autograd.backward(ref_outs, [3 * torch.ones_like(o) for o in ref_outs])
    for name, p in ref.named_parameters():
        torch.testing.assert_close(grads[name], p.grad.to_dense())
        assert grads[name].abs().sum() > 0, name


@pytest.mark.parametrize("fused", [False, True], ids=["torch", "sgd"])
def test_an_unused_output_gets_a_zero_gradient(fused: bool) -> None:
    """Only key "b"'s output feeds the loss: the backward fills "a"'s gradient with zeros (the eager
    path does not materialise it), so the table moves exactly as a float64 reference says."""
    lr = 0.1
    m = _sequence(modules.SGD(lr=lr) if fused else None)
    w0 = m.embeddings["t0"].weight.detach().double().clone()
    kjt = _batch(5)
    b = m(kjt)["b"].values()
    g = torch.linspace(-1, 1, b.numel()).view_as(b)
    b.backward(g)
    ids_b = kjt["b"].values()
    ref = torch.zeros_like(w0).index_add_(0, ids_b, g.double())
    if fused:
        torch.testing.assert_close(m.embeddings["t0"].weight.detach().double(), w0 - lr * ref, rtol=1e-6, atol=1e-6)
    else:
        torch.testing.assert_close(m.embeddings["t0"].weight.grad.to_dense().double(), ref, rtol=1e-6, atol=1e-6)


def test_backward_twice_and_a_dropped_graph() -> None:
    """The eager node owns the engine context: a second backward is a named error, and a graph
    dropped without backward frees its context."""
    m = _sequence(modules.SGD(lr=0.1))
    out = m(_batch(6))["a"].values()
    out.sum().backward(retain_graph=True)
    with pytest.raises(recgo.errors.InvalidInputError, match="no saved forward"):
        out.sum().backward()
    assert len(m._contexts) == 0
    pending = [m(_batch(s))["a"].values() for s in range(5)]
    assert len(m._contexts) == 5
    del pending
    assert len(m._contexts) == 0


@pytest.mark.parametrize("make", [_pooled, _sequence], ids=["pooled", "sequence"])
@pytest.mark.parametrize("path", ["eager", "ops"])
def test_create_graph_gradients_refuse_a_double_backward(make, path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A weight gradient taken with ``create_graph=True`` is the first-order gradient, and a gradient
    penalty built on it raises instead of back-propagating without its second-order term (it did,
    silently, before); a loss linear in the outputs has no such term and needs no refusal."""
    if path == "ops":
        monkeypatch.setattr(_eager, "allowed", lambda *tensors: False)
    m = make(None)
    weights = [p for p in m.parameters()]
    ref = make(None)
    ref.load_state_dict(m.state_dict())
    loss = sum((o ** 2).sum() for o in _outputs(m, _batch(0)))
    grads = torch.autograd.grad(loss, weights, create_graph=True)
    sum((o ** 2).sum() for o in _outputs(ref, _batch(0))).backward()
    for g, p in zip(grads, ref.parameters()):
        assert torch.allclose(g.to_dense(), p.grad.to_dense())
    with pytest.raises(recgo.InvalidInputError, match="no double backward"):
        sum((g.to_dense() ** 2).sum() for g in grads).backward()
    linear = sum(o.sum() for o in _outputs(m, _batch(1)))
    grads = torch.autograd.grad(linear, weights, create_graph=True)
    assert not any(g.requires_grad for g in grads)
