"""The idioms of a PyTorch training script applied to recgo's collections with fused optimizers (which
update rows inside the backward), each against float64 torch (``nn.functional.embedding_bag`` on a
copy of the weights, stepped by ``torch.optim``): loss scaling by ``torch.amp.GradScaler``, learning-rate
schedulers in any loop order, gradient accumulation, gradient clipping."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import recgo
from recgo.errors import InvalidInputError
from recgo.modules import optim

ROWS, DIM, TABLES = 20, 4, ("t0", "t1")
F64 = torch.float64


def _configs() -> list[recgo.EmbeddingBagConfig]:
    return [recgo.EmbeddingBagConfig(ROWS, DIM, name, [f"f{i}"]) for i, name in enumerate(TABLES)]


def _batch(seed: int, batch: int = 3) -> recgo.KeyedJaggedTensor:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 4, (len(TABLES) * batch,), generator=gen)
    values = torch.randint(0, ROWS, (int(lengths.sum()),), generator=gen)
    return recgo.KeyedJaggedTensor([f"f{i}" for i in range(len(TABLES))], values, lengths=lengths)


def _weights(ebc: Any) -> list[torch.Tensor]:
    return [ebc.embedding_bags[t].weight.detach().double() for t in TABLES]


def _leaves(ebc: Any) -> list[torch.Tensor]:
    """The reference's float64 tables, a copy of ``ebc``'s."""
    return [w.clone().requires_grad_(True) for w in _weights(ebc)]


def _pooled64(tables: list[torch.Tensor], kjt: recgo.KeyedJaggedTensor, sparse: bool = False) -> torch.Tensor:
    """float64 ``embedding_bag`` (sum) of each feature in its table: the collection's output."""
    offsets, batch, out = kjt.offset_per_key(), kjt.stride(), []
    for i, w in enumerate(tables):
        lengths = kjt.lengths()[i * batch:(i + 1) * batch]
        starts = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]])
        out.append(F.embedding_bag(kjt.values()[offsets[i]:offsets[i + 1]], w, starts, mode="sum", sparse=sparse))
    return torch.cat(out, 1)


def _loss(pooled: torch.Tensor, head: nn.Module) -> torch.Tensor:
    return (head(pooled) ** 2).sum()


def _model(opt: optim.FusedOptimizer | None, **kw: Any) -> tuple[nn.Module, Any, nn.Linear, nn.Linear]:
    """A collection and a dense head (float32), and the head's float64 copy."""
    ebc = recgo.EmbeddingBagCollection(_configs(), optimizer=opt, seed=0, **kw)
    head = nn.Linear(len(TABLES) * DIM, 1)
    head64 = nn.Linear(len(TABLES) * DIM, 1).double()
    head64.load_state_dict(head.state_dict())
    return nn.ModuleDict({"ebc": ebc, "head": head}), ebc, head, head64


def _assert_tables(ebc: Any, ref: list[torch.Tensor], atol: float = 1e-5) -> None:
    for got, want in zip(_weights(ebc), ref):
        torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=atol)


# -- torch.amp.GradScaler -------------------------------------------------------------------------------


@pytest.mark.parametrize("opt, ref_opt", [(optim.SGD(lr=0.1), torch.optim.SGD),
                                          (optim.Adagrad(lr=0.1, eps=1e-10), torch.optim.Adagrad)],
                         ids=["SGD", "Adagrad"])
def test_grad_scaler_the_fused_update_steps_on_the_unscaled_gradient(opt: optim.FusedOptimizer,
                                                                     ref_opt: Callable[..., Any]) -> None:
    """AMP's loop (float16 autocast, ``scaler.scale(loss).backward()``, ``scaler.step`` of the dense
    optimizer and of the fused one, ``scaler.update()``) with ``set_grad_scaler``: the tables follow
    float64 torch without scaling. Before, the fused update took the scaled gradient (1024 times the
    SGD step here) and ``scaler.step(CollectionOptimizer)`` raised "No inf checks were recorded"."""
    model, ebc, head, head64 = _model(opt)
    tables = _leaves(ebc)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    optim.set_grad_scaler(model, scaler)
    dense, fused = torch.optim.SGD(head.parameters(), lr=0.1), optim.CollectionOptimizer(model)
    ref = [torch.optim.SGD(head64.parameters(), lr=0.1), ref_opt(tables, lr=0.1)]
    for step in range(3):
        kjt = _batch(step)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = _loss(ebc(kjt).values(), head)
        scaler.scale(loss).backward()
        scaler.step(dense)
        scaler.step(fused)
        scaler.update()
        dense.zero_grad()
        _loss(_pooled64(tables, kjt), head64).backward()
        for o in ref:
            o.step()
            o.zero_grad()
    assert scaler.get_scale() == 1024.0  # no overflow, no growth yet
    _assert_tables(ebc, tables, atol=2e-3)  # float16 autocast's rounding of the head's backward


def test_grad_scaler_an_overflow_skips_the_fused_update_and_lowers_the_scale() -> None:
    """A scaled gradient that overflows: the fused tables skip the update (rows, Adam's state and step
    unchanged), as ``scaler.step`` skips a torch optimizer, and ``scaler.update()`` backs the scale off,
    also with fused tables alone (it raised "No inf checks were recorded prior to update"). The next,
    finite step trains as float64 torch's Adam (lazy: ``SparseAdam``)."""
    ebc = recgo.EmbeddingBagCollection(_configs(), optimizer=optim.Adam(lr=0.05, eps=1e-12), seed=0)
    before = {k: v.clone() for k, v in ebc.state_dict().items()}
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 120)
    optim.set_grad_scaler(ebc, scaler)
    scaler.scale(ebc(_batch(0)).values().pow(2).sum() * 1e10).backward()  # 2^120·1e10: inf in float32
    scaler.update()
    assert scaler.get_scale() == 2.0 ** 119
    for k, v in ebc.state_dict().items():
        assert torch.equal(v, before[k]), k
    tables = _leaves(ebc)
    kjt = _batch(1)
    scaler.scale(ebc(kjt).values().pow(2).sum()).backward()
    scaler.update()
    _pooled64(tables, kjt).pow(2).sum().backward()
    for t in tables:
        t.grad = t.grad.to_sparse()
    torch.optim.SparseAdam(tables, lr=0.05, eps=1e-12).step()  # eps as in test_gradient_accumulation
    _assert_tables(ebc, tables)
    assert [int(ebc.embedding_bags[t].optimizer_step) for t in TABLES] == [1, 1]


def test_grad_scaler_sequence_collection_unscales_too() -> None:
    """An ``EmbeddingCollection`` with a fused SGD under a scaled loss steps as float64 torch's
    ``embedding`` with the unscaled gradient (the sequence collection has its own backward)."""
    ec = recgo.EmbeddingCollection([recgo.EmbeddingConfig(ROWS, DIM, "t0", ["f0"])], optimizer=optim.SGD(lr=0.1),
                                   seed=0)
    table = ec.embeddings["t0"].weight.detach().double().clone().requires_grad_(True)
    scaler = torch.amp.GradScaler("cpu", init_scale=512.0)
    optim.set_grad_scaler(ec, scaler)
    kjt = recgo.KeyedJaggedTensor(["f0"], torch.tensor([3, 5, 3, 7]), lengths=torch.tensor([3, 1]))
    scaler.scale(ec(kjt)["f0"].values().pow(2).sum()).backward()
    F.embedding(kjt.values(), table).pow(2).sum().backward()
    torch.testing.assert_close(ec.embeddings["t0"].weight.detach().double(), (table - 0.1 * table.grad).detach())


def test_float16_autocast_without_a_grad_scaler_warns_once() -> None:
    """A fused training forward under float16 autocast warns once, naming set_grad_scaler, at the
    script's line; bfloat16 (no scaler needed), a collection with a scaler and evaluation do not."""
    ebc = recgo.EmbeddingBagCollection(_configs(), optimizer=optim.SGD(lr=0.1), seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ebc(_batch(0))
        with torch.autocast("cpu", dtype=torch.float16):
            with torch.no_grad():
                ebc(_batch(0))
            ebc(_batch(0))
            ebc(_batch(1))
        scaled = recgo.EmbeddingBagCollection(_configs(), optimizer=optim.SGD(lr=0.1), seed=0)
        optim.set_grad_scaler(scaled, torch.amp.GradScaler("cpu"))
        with torch.autocast("cpu", dtype=torch.float16):
            scaled(_batch(0))
    mine = [w for w in caught if "set_grad_scaler" in str(w.message)]
    assert len(mine) == 1 and mine[0].filename == __file__


def test_set_grad_scaler_refuses_what_it_cannot_serve() -> None:
    ebc = recgo.EmbeddingBagCollection(_configs(), optimizer=optim.SGD(lr=0.1), seed=0)
    with pytest.raises(InvalidInputError, match="GradScaler"):
        optim.set_grad_scaler(ebc, object())
    with pytest.raises(InvalidInputError, match="no recgo collection with a fused optimizer"):
        optim.set_grad_scaler(recgo.EmbeddingBagCollection(_configs(), seed=0), torch.amp.GradScaler("cpu"))
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    optim.set_grad_scaler(ebc, scaler)
    optim.set_grad_scaler(ebc, None)  # removed: the update takes the gradient as it comes
    tables = _leaves(ebc)
    kjt = _batch(0)
    ebc(kjt).values().sum().backward()
    _pooled64(tables, kjt).sum().backward()
    _assert_tables(ebc, [t - 0.1 * t.grad for t in tables])


# -- learning-rate schedulers ------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["step-zero_grad-sched", "no-zero_grad", "zero_grad-first"])
def test_a_schedulers_rate_reaches_the_next_backward_in_any_loop_order(order: str) -> None:
    """A warm-up (LambdaLR 1/3, 2/3, 1) over ``CollectionOptimizer``: each backward runs at the rate the
    group holds then, as ``torch.optim.SGD.step()`` reads it, whether the loop calls ``zero_grad()``
    before the backward, after ``step()`` (then ``scheduler.step()``), or never. Before, the rate was
    handed over only at ``zero_grad()``/``step()``: the other two loops ran one step late, the first
    backward at the full rate."""
    _, ebc, _, _ = _model(optim.SGD(lr=0.3))
    tables = _leaves(ebc)
    fused, ref = optim.CollectionOptimizer(ebc), torch.optim.SGD(tables, lr=0.3)
    warmup = lambda s: min(1.0, (s + 1) / 3)  # noqa: E731
    sched = torch.optim.lr_scheduler.LambdaLR(fused, warmup)
    ref_sched = torch.optim.lr_scheduler.LambdaLR(ref, warmup)
    for step in range(4):
        kjt = _batch(step)
        if order == "zero_grad-first":
            fused.zero_grad()
        ebc(kjt).values().pow(2).sum().backward()
        if order != "no-zero_grad":
            fused.step()
            fused.zero_grad()
        sched.step()
        _pooled64(tables, kjt).pow(2).sum().backward()
        ref.step()
        ref.zero_grad()
        ref_sched.step()
        _assert_tables(ebc, tables)


def test_a_param_group_edit_reaches_the_next_backward_and_state_dicts_round_trip() -> None:
    """``param_groups[0]["lr"] = ...`` between steps takes effect at the next backward; a scheduler's and
    the optimizer's state dicts, loaded into new ones mid-schedule, go on with the same rates."""
    _, ebc, _, _ = _model(optim.SGD(lr=1.0))
    fused = optim.CollectionOptimizer(ebc)
    fused.param_groups[0]["lr"] = 0.2
    tables = _leaves(ebc)
    ebc(_batch(0)).values().sum().backward()
    _pooled64(tables, _batch(0)).sum().backward()
    _assert_tables(ebc, [t - 0.2 * t.grad for t in tables])
    sched = torch.optim.lr_scheduler.StepLR(fused, step_size=1, gamma=0.5)
    sched.step()
    saved, saved_sched = fused.state_dict(), sched.state_dict()
    again = optim.CollectionOptimizer(ebc)
    again_sched = torch.optim.lr_scheduler.StepLR(again, step_size=1, gamma=0.5)
    again.load_state_dict(saved)
    again_sched.load_state_dict(saved_sched)
    again_sched.step()
    assert again.param_groups[0]["lr"] == pytest.approx(0.05)
    tables = _leaves(ebc)
    ebc(_batch(1)).values().sum().backward()
    _pooled64(tables, _batch(1)).sum().backward()
    _assert_tables(ebc, [t - 0.05 * t.grad for t in tables])


# -- gradient accumulation -------------------------------------------------------------------------------


@pytest.mark.parametrize("merged", [False, True], ids=["per-backward", "merged_update"])
@pytest.mark.parametrize("opt, ref_opt, sparse", [
    (optim.Adagrad(lr=0.1, eps=1e-10), lambda p: torch.optim.Adagrad(p, lr=0.1), False),
    # SparseAdam adds eps to √v before the bias correction, recgo as torch.optim.Adam after: eps → 0
    (optim.Adam(lr=0.05, eps=1e-12), lambda p: torch.optim.SparseAdam(p, lr=0.05, eps=1e-12), True),
], ids=["Adagrad", "Adam"])
def test_gradient_accumulation(merged: bool, opt: optim.FusedOptimizer, ref_opt: Callable[..., Any],
                               sparse: bool) -> None:
    """Two micro-batches per step, each loss divided by 2. A fused table steps in every backward (the
    reference steps after each micro-batch, the second forward seeing the first's update); inside
    ``with ebc.merged_update():`` around the micro-batches it takes one step on the accumulated
    gradient, as ``torch.optim`` after two backwards."""
    _, ebc, _, _ = _model(opt)
    tables = _leaves(ebc)
    ref = ref_opt(tables)
    for step in range(2):
        micro = [_batch(10 * step), _batch(10 * step + 1)]
        with ebc.merged_update() if merged else contextlib.nullcontext():
            for kjt in micro:
                (ebc(kjt).values().pow(2).sum() / 2).backward()
        for kjt in micro:
            (_pooled64(tables, kjt, sparse).pow(2).sum() / 2).backward()
            if not merged:
                ref.step()
                ref.zero_grad()
        if merged:
            ref.step()
            ref.zero_grad()
    _assert_tables(ebc, tables)


def test_gradient_accumulation_with_optimizer_none_is_torchs() -> None:
    """Without a fused optimizer the tables' gradients accumulate in ``.grad`` for a torch optimizer,
    as any parameter's (dense and sparse gradients)."""
    for sparse in (False, True):
        _, ebc, _, _ = _model(None, sparse_grad=sparse)
        tables = _leaves(ebc)
        mine, ref = torch.optim.Adagrad(ebc.parameters(), lr=0.1), torch.optim.Adagrad(tables, lr=0.1)
        for step in range(2):
            for kjt in (_batch(10 * step), _batch(10 * step + 1)):
                (ebc(kjt).values().pow(2).sum() / 2).backward()
                (_pooled64(tables, kjt).pow(2).sum() / 2).backward()
            for o in (mine, ref):
                o.step()
                o.zero_grad()
        _assert_tables(ebc, tables)


# -- gradient clipping -----------------------------------------------------------------------------------


def test_clip_grad_norm_sees_no_fused_table() -> None:
    """``clip_grad_norm_(model.parameters())``: a fused table has no ``.grad`` (its update ran in the
    backward, unclipped), so the norm and the clipping are the dense part's alone."""
    model, ebc, head, head64 = _model(optim.SGD(lr=0.1))
    tables = _leaves(ebc)
    kjt = _batch(0)
    _loss(ebc(kjt).values(), head).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
    _loss(_pooled64(tables, kjt), head64).backward()
    ref_norm = torch.nn.utils.clip_grad_norm_(head64.parameters(), 1e-3)
    assert norm.item() == pytest.approx(ref_norm.item(), rel=1e-5)
    _assert_tables(ebc, [t - 0.1 * t.grad for t in tables])  # the unclipped step


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_clip_grad_norm_with_optimizer_none_clips_the_tables(sparse: bool) -> None:
    """With ``optimizer=None`` the tables' gradients take part in the norm and are clipped, as float64
    torch's."""
    model, ebc, head, head64 = _model(None, sparse_grad=sparse)
    tables = _leaves(ebc)
    kjt = _batch(0)
    _loss(ebc(kjt).values(), head).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    _loss(_pooled64(tables, kjt), head64).backward()
    ref_norm = torch.nn.utils.clip_grad_norm_([*tables, *head64.parameters()], 1.0)
    assert norm.item() == pytest.approx(ref_norm.item(), rel=1e-5)
    for t, ref in zip(TABLES, tables):
        grad = ebc.embedding_bags[t].weight.grad
        torch.testing.assert_close((grad.to_dense() if sparse else grad).double(), ref.grad, rtol=1e-5, atol=1e-6)


# -- backwards that do not reach the collection ---------------------------------------------------------


def test_a_backward_to_dense_inputs_alone_runs_no_fused_update() -> None:
    """``loss.backward(inputs=dense)`` and ``torch.autograd.grad(loss, dense)`` do not run the
    collection's backward, so its tables stay as they were (a plain table would get no ``.grad``); the
    next full backward steps as float64 torch's."""
    model, ebc, head, head64 = _model(optim.SGD(lr=0.1))
    before = _weights(ebc)
    kjt = _batch(0)
    _loss(ebc(kjt).values(), head).backward(inputs=list(head.parameters()))
    torch.autograd.grad(_loss(ebc(kjt).values(), head), list(head.parameters()))
    _assert_tables(ebc, before, atol=0)
    assert head.weight.grad is not None
    tables = _leaves(ebc)
    _loss(ebc(kjt).values(), head).backward()
    _loss(_pooled64(tables, kjt), head64).backward()
    _assert_tables(ebc, [t - 0.1 * t.grad for t in tables])
