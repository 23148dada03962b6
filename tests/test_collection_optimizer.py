"""recgo.modules.optim.CollectionOptimizer, the torch.optim face of a model's fused optimizers: torch's
learning-rate schedulers drive it, it sits in TorchRec's CombinedOptimizer and WarmupOptimizer as DMP's
fused_optimizer does, and its state dict and copies carry the hyper-parameters of every collection."""

from __future__ import annotations

import copy
import io
from typing import Any

import pytest
import torch
from torch import nn

from recgo import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
from recgo.errors import InvalidInputError
from recgo.modules import optim


def _sched_batches(n: int) -> list[KeyedJaggedTensor]:
    g = torch.Generator().manual_seed(9)
    out = []
    for _ in range(n):
        lengths = torch.randint(0, 4, (6,), generator=g)
        out.append(KeyedJaggedTensor(["a"], torch.randint(0, 20, (int(lengths.sum()),), generator=g), lengths=lengths))
    return out


def test_collection_optimizer_lets_a_torch_scheduler_drive_the_fused_rate() -> None:
    """StepLR over CollectionOptimizer, in the usual loop (zero_grad, backward, step, scheduler.step),
    gives the weights that setting each step's rate by hand gives; state_dict round-trips it."""
    cfg = [EmbeddingBagConfig(20, 4, "t", ["a"])]
    auto = EmbeddingBagCollection(cfg, optimizer=optim.Adagrad(lr=0.4), seed=2)
    hand = EmbeddingBagCollection(cfg, optimizer=optim.Adagrad(lr=0.4), seed=2)
    model = nn.ModuleDict({"ebc": auto, "head": nn.Linear(4, 1)})
    opt = optim.CollectionOptimizer(model)
    assert [g["name"] for g in opt.param_groups] == ["ebc"] and opt.param_groups[0]["lr"] == 0.4
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for i, kjt in enumerate(_sched_batches(4)):
        opt.zero_grad()
        auto(kjt).values().sum().backward()
        opt.step()
        sched.step()
        hand.set_fused_optimizer(optim.Adagrad(lr=0.4 * 0.5 ** i))
        hand(kjt).values().sum().backward()
    assert torch.equal(auto.embedding_bags["t"].weight.detach(), hand.embedding_bags["t"].weight.detach())
    assert auto.fused_optimizer.lr == 0.4 * 0.5 ** 3  # the rate of the last backward; the scheduler's next is 0.025
    opt.param_groups[0]["eps"] = 1e-4
    opt.step()
    assert auto.fused_optimizer == optim.Adagrad(lr=0.025, eps=1e-4)
    saved = opt.state_dict()
    again = optim.CollectionOptimizer(nn.ModuleDict({"ebc": hand}))
    again.load_state_dict(saved)
    assert hand.fused_optimizer == optim.Adagrad(lr=0.025, eps=1e-4)


def test_one_cycle_lr_cycles_adams_beta1_as_for_torch_adam() -> None:
    """OneCycleLR with its default cycle_momentum=True drives a fused Adam's lr and beta1 through the
    betas pair, step for step as it drives torch.optim.Adam's; with Adagrad it raises, as for torch's."""
    cfg = [EmbeddingBagConfig(20, 4, "t", ["a"])]
    ebc = EmbeddingBagCollection(cfg, optimizer=optim.Adam(lr=0.01, beta1=0.9, beta2=0.99), seed=2)
    opt = optim.CollectionOptimizer(ebc)
    ref = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=0.01, betas=(0.9, 0.99))
    kw = {"max_lr": 0.05, "total_steps": 6}
    sched, ref_sched = (torch.optim.lr_scheduler.OneCycleLR(o, **kw) for o in (opt, ref))
    for kjt in _sched_batches(5):
        opt.zero_grad()
        ebc(kjt).values().sum().backward()
        opt.step()
        ref.step()
        sched.step()
        ref_sched.step()
        opt.zero_grad()  # hands the scheduler's new values over
        want = ref.param_groups[0]
        assert ebc.fused_optimizer.lr == pytest.approx(want["lr"])
        assert (ebc.fused_optimizer.beta1, ebc.fused_optimizer.beta2) == pytest.approx(want["betas"])
    opt.param_groups[0]["beta2"] = 0.95  # a change by the recgo name shows in betas too
    opt.step()
    assert ebc.fused_optimizer.beta2 == 0.95 and opt.param_groups[0]["betas"][1] == 0.95
    ada = optim.CollectionOptimizer(EmbeddingBagCollection(cfg, optimizer=optim.Adagrad(lr=0.1)))
    for o in (ada, torch.optim.Adagrad([nn.Parameter(torch.zeros(1))], lr=0.1)):
        with pytest.raises(ValueError, match="momentum"):
            torch.optim.lr_scheduler.OneCycleLR(o, **kw)


def test_collection_optimizer_counts_shared_tables_once_and_needs_one() -> None:
    from recgo import EmbeddingCollection, EmbeddingConfig

    ebc = EmbeddingBagCollection([EmbeddingBagConfig(20, 4, "t", ["a"])], optimizer=optim.SGD(lr=0.1), seed=0)
    seq = EmbeddingCollection([EmbeddingConfig(20, 4, "t", ["h"])], share=ebc)
    own = EmbeddingCollection([EmbeddingConfig(20, 4, "s", ["g"])], optimizer=optim.SGD(lr=0.2))
    opt = optim.CollectionOptimizer(nn.ModuleDict({"ebc": ebc, "seq": seq, "own": own}))
    assert [(g["name"], g["lr"]) for g in opt.param_groups] == [("ebc", 0.1), ("own", 0.2)]
    opt.param_groups[1]["lr"] = 0.05
    opt.zero_grad()
    assert own.fused_optimizer == optim.SGD(lr=0.05) and ebc.fused_optimizer == optim.SGD(lr=0.1)
    with pytest.raises(InvalidInputError, match="no recgo collection with a fused optimizer"):
        optim.CollectionOptimizer(nn.ModuleDict({"dense": EmbeddingBagCollection([EmbeddingBagConfig(5, 2, "d", ["d"])])}))
    # a TorchRec fused optimizer's state dict (per-row state, no param_groups) is refused by name,
    # before anything changed (torch's own load raised a bare KeyError('param_groups'))
    torchrec_style = {"state": {"t.weight": {"t.weight.momentum_1": torch.zeros(20)}}}
    with pytest.raises(InvalidInputError, match="from_torchrec"):
        opt.load_state_dict(torchrec_style)
    assert own.fused_optimizer == optim.SGD(lr=0.05)
    opt.load_state_dict({**opt.state_dict(), "param_groups": [dict(g, lr=0.5) for g in opt.state_dict()["param_groups"]]})
    assert own.fused_optimizer == optim.SGD(lr=0.5) and ebc.fused_optimizer == optim.SGD(lr=0.5)


@pytest.mark.parametrize("named", [False, True])
def test_collection_optimizer_inside_torchrec_combined_optimizer(named: bool) -> None:
    """As in TorchRec's DLRM example: CombinedOptimizer([fused, dense]) (the fused entry named or
    not, as DMP's fused_optimizer may be) under one scheduler drives both rates, and its state_dict
    round trip hands the rate back to the tables."""
    keyed = pytest.importorskip("torchrec.optim.keyed")
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(20, 4, "t", ["a"])], optimizer=optim.SGD(lr=0.1), seed=0)
    model = nn.ModuleDict({"ebc": ebc, "lin": nn.Linear(4, 1)})
    dense = keyed.KeyedOptimizerWrapper(dict(model["lin"].named_parameters()), lambda ps: torch.optim.SGD(ps, lr=0.2))
    fused = optim.CollectionOptimizer(model)
    assert isinstance(fused, keyed.KeyedOptimizer) and fused.state_dict()["param_groups"][0]["lr"] == 0.1
    comb = keyed.CombinedOptimizer([("fused", fused) if named else fused, dense])
    sched = torch.optim.lr_scheduler.StepLR(comb, step_size=1, gamma=0.5)
    for _ in range(2):
        comb.zero_grad()
        comb.step()
        sched.step()
    comb.zero_grad()
    assert ebc.fused_optimizer == optim.SGD(lr=0.025) and [g["lr"] for g in comb.param_groups] == [0.025, 0.05]
    saved = comb.state_dict()
    ebc.set_fused_optimizer(optim.SGD(lr=1.0))
    comb.load_state_dict(saved)
    assert ebc.fused_optimizer == optim.SGD(lr=0.025)


def test_collection_optimizer_copies_drive_the_copied_collections() -> None:
    """deepcopy and torch.save/load of a model with its CollectionOptimizer: the copy's optimizer
    sets the copy's rates and leaves the original's alone (torch's Optimizer pickling kept only
    defaults, state and param_groups, so a copy lost its collections)."""
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(20, 4, "t", ["a"])], optimizer=optim.SGD(lr=0.1), seed=0)
    model = nn.ModuleDict({"ebc": ebc, "lin": nn.Linear(4, 1)})
    bundle = {"model": model, "opt": optim.CollectionOptimizer(model)}
    buf = io.BytesIO()
    torch.save(bundle, buf)
    buf.seek(0)
    for copied, lr in ((copy.deepcopy(bundle), 0.5), (torch.load(buf, weights_only=False), 0.7)):
        copied["opt"].param_groups[0]["lr"] = lr
        copied["opt"].step()
        assert copied["model"]["ebc"].fused_optimizer.lr == lr
    assert ebc.fused_optimizer.lr == 0.1


def test_collection_optimizer_state_dict_round_trip_with_torchrec_imported() -> None:
    """Built while torchrec is imported (a KeyedOptimizer), its own state_dict/load_state_dict are
    torch's: the hyper-parameters go back to the collections (KeyedOptimizer's load matched them by
    parameter keys, of which it has none, and loaded nothing)."""
    keyed = pytest.importorskip("torchrec.optim.keyed")
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(20, 4, "t", ["a"])], optimizer=optim.Adagrad(lr=0.4), seed=2)
    opt = optim.CollectionOptimizer(nn.ModuleDict({"ebc": ebc}))
    assert isinstance(opt, keyed.KeyedOptimizer)
    opt.param_groups[0]["lr"], opt.param_groups[0]["eps"] = 0.025, 1e-4
    saved = opt.state_dict()
    other = EmbeddingBagCollection([EmbeddingBagConfig(20, 4, "t", ["a"])], optimizer=optim.Adagrad(lr=0.4), seed=2)
    optim.CollectionOptimizer(nn.ModuleDict({"ebc": other})).load_state_dict(saved)
    assert other.fused_optimizer == optim.Adagrad(lr=0.025, eps=1e-4)


def test_torchrec_warmup_optimizer_saves_and_restores_its_progress() -> None:
    """TorchRec's WarmupOptimizer straight around the fused optimizer (as around DMP's) keeps its
    progress in the wrapped optimizer's state under a parameter of its own: state_dict raised a bare
    KeyError, and the progress must come back on load."""
    warmup = pytest.importorskip("torchrec.optim.warmup")

    def build() -> tuple[Any, EmbeddingBagCollection]:
        ebc = EmbeddingBagCollection([EmbeddingBagConfig(20, 4, "t", ["a"])], optimizer=optim.SGD(lr=0.1), seed=0)
        stage = warmup.WarmupStage(policy=warmup.WarmupPolicy.LINEAR, max_iters=10, value=0.1)
        return warmup.WarmupOptimizer(optim.CollectionOptimizer(nn.ModuleDict({"ebc": ebc})), [stage], lr=1.0), ebc

    opt, ebc = build()
    for _ in range(3):
        opt.zero_grad()
        ebc(KeyedJaggedTensor(["a"], torch.tensor([1]), lengths=torch.tensor([1]))).values().sum().backward()
        opt.step()
    saved = opt.state_dict()
    again, other = build()
    again.load_state_dict(saved)
    again.zero_grad()
    assert again._get_warmup_state() == (3, 0)
    assert other.fused_optimizer.lr == pytest.approx(0.1 + 0.9 * 3 / 10)  # the linear warmup's 4th rate


def test_combined_optimizer_param_groups_of_several_collections_are_refused_not_mixed() -> None:
    """TorchRec keys saved param groups by their parameters' names; a CollectionOptimizer's groups have
    none, so with save_param_groups(True) every collection's group loaded into the same one (all but
    the last kept their old rates). It raises instead; one collection still saves."""
    keyed = pytest.importorskip("torchrec.optim.keyed")
    a = EmbeddingBagCollection([EmbeddingBagConfig(20, 4, "t", ["a"])], optimizer=optim.SGD(lr=0.1), seed=0)
    b = EmbeddingBagCollection([EmbeddingBagConfig(20, 4, "u", ["b"])], optimizer=optim.SGD(lr=0.3), seed=0)
    comb = keyed.CombinedOptimizer([optim.CollectionOptimizer(nn.ModuleDict({"a": a, "b": b}))])
    with pytest.raises(InvalidInputError, match="has 2 groups"):
        comb.save_param_groups(True)
    one = keyed.CombinedOptimizer([optim.CollectionOptimizer(nn.ModuleDict({"a": a}))])
    one.save_param_groups(True)
    one.param_groups[0]["lr"] = 0.01
    saved = one.state_dict()
    one.param_groups[0]["lr"] = 0.5
    one.load_state_dict(saved)
    assert a.fused_optimizer.lr == 0.01


def test_calling_fused_optimizer_as_torchrecs_method_names_the_way() -> None:
    """TorchRec's FusedEmbeddingBagCollection.fused_optimizer() is a method; a converted script's call
    failed with "'SGD' object is not callable". It names CollectionOptimizer, which is the object."""
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(10, 4, "t", ["f"])], optimizer=optim.SGD(lr=0.1))
    with pytest.raises(InvalidInputError, match="CollectionOptimizer"):
        ebc.fused_optimizer()
    assert optim.CollectionOptimizer(ebc).param_groups[0]["lr"] == 0.1


def test_add_param_group_is_refused_not_ignored() -> None:
    """torch's add_param_group was inherited: the added parameters were never stepped (SGD) or the
    next step() raised a bare IndexError (Adam). TorchRec's KeyedOptimizer refuses it; so does this."""
    for opt in (optim.SGD(lr=0.1), optim.Adam(lr=0.1)):
        ebc = EmbeddingBagCollection([EmbeddingBagConfig(10, 4, "t", ["f"])], optimizer=opt)
        co = optim.CollectionOptimizer(ebc)
        with pytest.raises(InvalidInputError, match="add_param_group"):
            co.add_param_group({"params": [nn.Parameter(torch.ones(3))], "lr": 0.5})
        assert len(co.param_groups) == 1
        co.step()  # still works


def test_a_bool_hyper_parameter_in_a_param_group_is_refused() -> None:
    """A param group's lr set to True went through float() and trained at 1.0; a tensor is read as its value."""
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(20, 4, "t", ["a"])], optimizer=optim.SGD(lr=0.1), seed=0)
    opt = optim.CollectionOptimizer(ebc)
    opt.param_groups[0]["lr"] = torch.tensor(0.5)
    opt.step()
    assert ebc.fused_optimizer == optim.SGD(lr=0.5)
    opt.param_groups[0]["lr"] = True
    with pytest.raises(InvalidInputError, match=r"hyper-parameters must be numbers, got \{'lr': True\}"):
        opt.step()
    assert ebc.fused_optimizer == optim.SGD(lr=0.5)


@pytest.mark.parametrize("group, key, value, match", [
    (0, "lr", "abc", "hyper-parameters must be numbers"), (0, "lr", float("nan"), "learning rate NaN"),
    (1, "lr", -1.0, "learning rate -1"), (1, "lr", None, r"the saved group for 'g' lacks \['lr'\]"),
])
def test_a_refused_state_dict_leaves_the_groups_and_the_collections_as_they_were(group: int, key: str, value: Any,
                                                                                  match: str) -> None:
    """torch's load_state_dict put the groups in place before the collections refused a value: the refused
    value stayed in param_groups (every later step() raised on it), and with the second group refused the
    first collection had already taken its new rate. A missing hyper-parameter raised KeyError."""
    model = nn.ModuleDict({n: EmbeddingBagCollection([EmbeddingBagConfig(10, 4, "t", [n])], optimizer=optim.Adam(lr=0.1))
                           for n in ("e", "g")})
    opt = optim.CollectionOptimizer(model)
    state = copy.deepcopy(opt.state_dict())
    state["param_groups"][0]["lr"] = 0.5  # taken by collection e before g's value is refused
    if value is None:
        del state["param_groups"][group][key]
    else:
        state["param_groups"][group][key] = value
    with pytest.raises(InvalidInputError, match=match):
        opt.load_state_dict(state)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.1]
    assert [model[n].fused_optimizer.lr for n in ("e", "g")] == [0.1, 0.1]
    opt.step()  # the groups still push


@pytest.mark.parametrize("call", ["step", "zero_grad"])
def test_a_refused_group_changes_no_collection(call: str) -> None:
    """Group 0 at lr 0.5 and group 1 at lr −1: the step raised after collection a had taken 0.5 (the
    ranges were the engine's, checked as each collection took its change)."""
    m = nn.ModuleDict({"a": EmbeddingBagCollection([EmbeddingBagConfig(4, 2, "t", ["f"])], optimizer=optim.SGD(lr=0.1)),
                       "b": EmbeddingBagCollection([EmbeddingBagConfig(4, 2, "u", ["g"])], optimizer=optim.SGD(lr=0.1))})
    co = optim.CollectionOptimizer(m)
    co.param_groups[0]["lr"], co.param_groups[1]["lr"] = 0.5, -1.0
    with pytest.raises(InvalidInputError, match="learning rate -1"):
        getattr(co, call)()
    assert m["a"].fused_optimizer.lr == 0.1 and m["b"].fused_optimizer.lr == 0.1
    co.param_groups[1]["lr"] = 0.25
    getattr(co, call)()
    assert m["a"].fused_optimizer.lr == 0.5 and m["b"].fused_optimizer.lr == 0.25


def test_a_state_dict_of_another_optimizer_kind_or_model_is_refused() -> None:
    """An Adagrad collection's saved groups loaded into an Adam one: it ran on with beta1 = beta2 = 0 (the
    Adagrad group's unused fields); a state dict of two collections into one raised torch's bare
    ValueError, a list of non-dicts a TypeError."""
    cfg = [EmbeddingBagConfig(10, 4, "t", ["f"])]
    adam = EmbeddingBagCollection(cfg, optimizer=optim.Adam(lr=0.1))
    co = optim.CollectionOptimizer(adam)
    adagrad = optim.CollectionOptimizer(EmbeddingBagCollection(cfg, optimizer=optim.Adagrad(lr=0.3)))
    with pytest.raises(InvalidInputError, match="is Adagrad's, the collection runs Adam"):
        co.load_state_dict(adagrad.state_dict())
    two = nn.ModuleDict({n: EmbeddingBagCollection(cfg, optimizer=optim.Adam(lr=0.2)) for n in ("x", "y")})
    with pytest.raises(InvalidInputError, match=r"has 2 group\(s\), one per collection, this optimizer 1"):
        co.load_state_dict(optim.CollectionOptimizer(two).state_dict())
    with pytest.raises(InvalidInputError, match="'param_groups' must be a list of dicts"):
        co.load_state_dict({"state": {}, "param_groups": [0.1]})
    assert adam.fused_optimizer == optim.Adam(lr=0.1)
    saved = optim.CollectionOptimizer(EmbeddingBagCollection(cfg, optimizer=optim.Adam(lr=0.4))).state_dict()
    del saved["param_groups"][0]["fused_optimizer"]  # saved before groups named their kind: loads
    co.load_state_dict(saved)
    assert adam.fused_optimizer == optim.Adam(lr=0.4)


def test_set_fused_optimizer_is_kept_by_the_collection_optimizer() -> None:
    """A rate set on the collection itself was put back to the group's stale one by the next
    zero_grad() (and saved stale): the collection's change is kept and shown in the group, and a change
    of the group later still reaches the collection."""
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(10, 4, "t", ["f"])], optimizer=optim.Adagrad(lr=0.1))
    co = optim.CollectionOptimizer(ebc)
    ebc.set_fused_optimizer(optim.Adagrad(lr=0.5, weight_decay=0.01))
    assert co.state_dict()["param_groups"][0]["lr"] == 0.5
    co.zero_grad()
    co.step()
    assert ebc.fused_optimizer == optim.Adagrad(lr=0.5, weight_decay=0.01)
    assert (co.param_groups[0]["lr"], co.param_groups[0]["weight_decay"]) == (0.5, 0.01)
    co.param_groups[0]["lr"] = 0.05
    co.step()
    assert ebc.fused_optimizer == optim.Adagrad(lr=0.05, weight_decay=0.01)
