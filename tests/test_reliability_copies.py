"""Copies of collections (issue 9): deepcopy, AveragedModel, pickle and torch.save(module) give
independent collections with their own engine storage, in this process and in a new one."""

from __future__ import annotations

import copy
import gc
import io
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import recgo
from recgo import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
from recgo.modules import optim

ROOT = Path(__file__).resolve().parents[1]


def kjt(seed: int, n: int = 8) -> KeyedJaggedTensor:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (3 * n,), generator=gen)
    values = torch.randint(0, 12, (int(lengths.sum()),), generator=gen)
    return KeyedJaggedTensor(["a", "b", "c"], values, lengths=lengths)


def make(kind: str, opt: optim.FusedOptimizer | None = optim.Adam(lr=0.05)) -> EmbeddingBagCollection:
    if kind == "fixed":
        tables = [EmbeddingBagConfig(20, 4, "t0", ["a", "b"]), EmbeddingBagConfig(12, 8, "t1", ["c"], pooling="mean")]
    else:
        tables = [EmbeddingBagConfig(20, 4, "t0", ["a", "b"],
                                     dynamic=recgo.DynamicConfig(min_count=2, default=[0.5] * 4)),
                  EmbeddingBagConfig(12, 8, "t1", ["c"], pooling="mean")]
    return EmbeddingBagCollection(tables, optimizer=opt, seed=3)


def train(ebc: EmbeddingBagCollection, seeds: range) -> None:
    for s in seeds:
        out = ebc(kjt(s)).values()
        (out * torch.randn(out.shape, generator=torch.Generator().manual_seed(s))).sum().backward()


def same_state(a: EmbeddingBagCollection, b: EmbeddingBagCollection) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


KINDS = ["fixed", "dynamic"]


@pytest.mark.parametrize("kind", KINDS)
def test_deepcopy_is_independent_and_survives_the_original(kind: str) -> None:
    a = make(kind)
    train(a, range(3))
    b = copy.deepcopy(a)
    assert b._handle.value != a._handle.value
    assert same_state(a, b), "the copy starts from the original's weights, optimizer state, step and ID map"
    w = a.embedding_bags.t1.weight
    assert b.embedding_bags.t1.weight.data_ptr() != w.data_ptr(), "own engine storage"
    before = {k: v.clone() for k, v in a.state_dict().items()}
    train(b, range(3, 6))
    for k, v in a.state_dict().items():
        assert torch.equal(v, before[k]), f"training the copy moved the original's {k}"
    # The copy trains exactly as the original would have.
    train(a, range(3, 6))
    assert same_state(a, b)
    del a, w
    gc.collect()
    out = b(kjt(9)).values()  # the original's memory is gone; the copy's is its own
    assert torch.isfinite(out).all()


def test_averaged_model_tracks_the_average() -> None:
    base = make("fixed", opt=None)
    swa = torch.optim.swa_utils.AveragedModel(base)
    topt = torch.optim.SGD(base.parameters(), lr=0.5)
    weights = [base.embedding_bags.t0.weight.detach().clone()]
    for s in range(3):
        topt.zero_grad()
        base(kjt(s)).values().sum().backward()
        topt.step()
        weights.append(base.embedding_bags.t0.weight.detach().clone())
        swa.update_parameters(base)
    avg = swa.module.embedding_bags.t0.weight.detach()
    # AveragedModel copies at construction (weights[0]), then averages the updates it is shown.
    torch.testing.assert_close(avg, torch.stack(weights[1:]).mean(0), rtol=1e-6, atol=1e-6)
    assert not torch.equal(avg, base.embedding_bags.t0.weight.detach())
    # The averaged copy pools its own (averaged) rows: check against torch's embedding_bag on them.
    batch = kjt(5)
    feats, cols = batch.to_dict(), []
    for name, feat, mode in (("t0", "a", "sum"), ("t0", "b", "sum"), ("t1", "c", "mean")):
        v, ln = feats[feat].values(), feats[feat].lengths()
        offs = torch.cat([torch.zeros(1, dtype=torch.int64), ln.cumsum(0)[:-1]])
        cols.append(torch.nn.functional.embedding_bag(v, swa.module.embedding_bags[name].weight.detach(), offs,
                                                      mode=mode))
    torch.testing.assert_close(swa(batch).values().detach(), torch.cat(cols, 1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(swa.module.embedding_bags.t0.weight.detach(), avg, rtol=0, atol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_pickle_round_trip_in_process(kind: str) -> None:
    a = make(kind)
    train(a, range(2))
    a.eval()
    a.note = "user attribute"
    b = pickle.loads(pickle.dumps(a))
    assert b._handle.value != a._handle.value and same_state(a, b)
    assert not b.training and b.note == "user attribute"
    torch.testing.assert_close(a(kjt(4)).values(), b(kjt(4)).values(), rtol=0, atol=0)


def test_engine_handles_refuse_copies() -> None:
    a = make("fixed")
    with pytest.raises(TypeError, match="cannot be copied"):
        copy.copy(a._handle)
    with pytest.raises(TypeError, match="cannot be copied"):
        pickle.dumps(a._handle)


def test_torch_save_module_loads_in_a_new_process(tmp_path: Path) -> None:
    for kind in KINDS:  # one child process checks both kinds (starting one costs seconds)
        a = make(kind)
        train(a, range(3))
        torch.save(a, tmp_path / f"{kind}.pt")
        state = {k: v.clone() for k, v in a.state_dict().items()}
        a.eval()  # an eval forward leaves the dynamic clock and ID map alone
        torch.save({"want": a(kjt(7)).values().detach(), "state": state}, tmp_path / f"{kind}-want.pt")
    # In a fresh process handle numbers start over: an unpickled handle would name another object.
    script = textwrap.dedent(f"""
        import torch, recgo
        from recgo import KeyedJaggedTensor
        decoy = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(5, 4, "x", ["a"])])
        for kind in {KINDS!r}:
            m = torch.load({str(tmp_path)!r} + f"/{{kind}}.pt", weights_only=False)
            ref = torch.load({str(tmp_path)!r} + f"/{{kind}}-want.pt")
            sd = m.state_dict()
            assert list(sd) == list(ref["state"]), (list(sd), list(ref["state"]))
            for k, v in ref["state"].items():
                assert torch.equal(sd[k], v), k
            gen = torch.Generator().manual_seed(7)
            lengths = torch.randint(0, 4, (24,), generator=gen)
            values = torch.randint(0, 12, (int(lengths.sum()),), generator=gen)
            batch = KeyedJaggedTensor(["a", "b", "c"], values, lengths)
            assert m.training
            m.eval()
            assert torch.equal(m(batch).values().detach(), ref["want"])
            m.train()
            m(batch).values().sum().backward()  # trains its own storage
            assert int(m.embedding_bags.t1.optimizer_step) == 4
        print("OK")
    """)
    env = {"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr[-3000:]


def test_deepcopy_in_a_parent_module_and_buffer_io() -> None:
    parent = torch.nn.ModuleDict({"emb": make("fixed")})
    train(parent["emb"], range(2))
    twin = copy.deepcopy(parent)
    assert twin["emb"]._handle.value != parent["emb"]._handle.value
    assert same_state(parent["emb"], twin["emb"])
    buf = io.BytesIO()
    torch.save(parent, buf)
    buf.seek(0)
    again = torch.load(buf, weights_only=False)
    assert same_state(parent["emb"], again["emb"])


def test_deepcopy_keeps_what_shares_the_collections_parameters_shared() -> None:
    """deepcopy((collection, optimizer)) gave an optimizer over orphan clones (the copy never trained),
    and a dense weight tied to a table came back untied; plain torch modules keep both."""
    ebc = make("fixed", None)
    opt = torch.optim.SGD(ebc.parameters(), lr=0.1)
    e2, o2 = copy.deepcopy((ebc, opt))
    assert [id(p) for g in o2.param_groups for p in g["params"]] == [id(p) for p in e2.parameters()]
    before = e2.embedding_bags["t0"].weight.detach().clone()
    train(e2, range(1))
    o2.step()
    assert not torch.equal(e2.embedding_bags["t0"].weight, before)
    assert torch.equal(ebc.embedding_bags["t0"].weight, before)  # the original is not touched

    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ebc = make("fixed", None)
            self.proj = torch.nn.Linear(4, 20, bias=False)
            self.proj.weight = self.ebc.embedding_bags["t0"].weight

    tied = copy.deepcopy(Tied())
    assert tied.proj.weight is tied.ebc.embedding_bags["t0"].weight
    assert len(list(tied.parameters())) == 2


def test_an_assigning_load_from_another_collection_leaves_that_one_alone() -> None:
    """b.load_state_dict(a.state_dict(keep_vars=True), assign=True) re-pointed a's own parameter and
    buffers at b's engine memory: training b changed a, and a's forward then raised."""
    a, b = make("fixed"), make("fixed")
    own = b.embedding_bags["t0"].weight
    want = {k: v.clone() for k, v in a.state_dict().items()}
    b.load_state_dict(a.state_dict(keep_vars=True), assign=True)
    assert b.embedding_bags["t0"].weight is own  # b keeps its objects (optimizers built on them work)
    assert same_state(a, b)
    train(b, range(3))
    assert all(torch.equal(v, want[k]) for k, v in a.state_dict().items())
    train(a, range(1))  # a still runs on its own memory
    assert not same_state(a, b)


def _add_version(module: torch.nn.Module, state: dict, prefix: str, local: object) -> None:
    state[prefix + "format_version"] = torch.tensor(2)


def _drop_version(module: torch.nn.Module, state: dict, prefix: str, *rest: object) -> None:
    state.pop(prefix + "format_version", None)


class _Calls:
    """Forward hooks that record their calls (picklable: a module-level class)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def pre(self, module: torch.nn.Module, args: tuple) -> None:
        self.seen.append("pre")

    def post(self, module: torch.nn.Module, args: tuple, out: object) -> None:
        self.seen.append("fwd")


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
@pytest.mark.parametrize("kind", KINDS)
def test_copies_carry_the_users_hooks_and_do_not_run_them(kind: str, how: str) -> None:
    """Hooks on the collection come along as they do for any nn.Module; a state-dict hook that adds an
    entry no longer breaks the copy (which loads strictly), and the copy's state is the original's."""
    a = make(kind)
    train(a, range(2))
    calls = _Calls()
    a.register_forward_pre_hook(calls.pre)
    a.register_forward_hook(calls.post)
    a.register_state_dict_post_hook(_add_version)
    a.register_load_state_dict_pre_hook(_drop_version)
    model = torch.nn.Sequential(a, torch.nn.Identity())
    b = copy.deepcopy(model)[0] if how == "deepcopy" else pickle.loads(pickle.dumps(model))[0]
    assert b._handle.value != a._handle.value
    assert b.state_dict()["format_version"].item() == 2  # the hook came along
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)
    b(kjt(5))
    copied = next(iter(b._forward_hooks.values())).__self__  # the recorder copied with the hook
    assert copied is not calls and copied.seen[-2:] == ["pre", "fwd"]
    b.load_state_dict(sa)  # the copied load hook drops the extra entry, as on the original


def _child_lookup(rank: int, model: torch.nn.Module, want: torch.Tensor) -> None:
    got = model[0](kjt(9)).values().detach()
    if not torch.equal(got, want):
        raise AssertionError(f"the child's lookup differs by {(got - want).abs().max()}")


def test_a_model_passed_to_spawned_processes_arrives_whole() -> None:
    """torch.multiprocessing.spawn(args=(model,)): the copies' temporary tensors travel as file
    descriptors the child opens at launch; they used to be closed by then ('bad value(s) in
    fds_to_keep' or 'unable to resize file')."""
    import torch.multiprocessing as mp

    a = make("fixed")
    train(a, range(2))
    a.eval()
    want = a(kjt(9)).values().detach()
    mp.spawn(_child_lookup, args=(torch.nn.Sequential(a), want), nprocs=1, join=True)


class _HookedEBC(EmbeddingBagCollection):
    def hook(self, module: torch.nn.Module, args: tuple, out: object) -> None:
        self.calls = getattr(self, "calls", 0) + 1


class _HookedEC(recgo.EmbeddingCollection):
    def hook(self, module: torch.nn.Module, args: tuple, out: object) -> None:
        self.calls = getattr(self, "calls", 0) + 1


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_hook_bound_to_the_collection_copies_onto_the_copy(how: str) -> None:
    """A hook that is the collection's own method refers back to it: the copy's hook must be the copy's
    (pickle recursed without end, the sequence collection's deepcopy too, or came back as a second copy
    or as the base class)."""
    copy_of = copy.deepcopy if how == "deepcopy" else (lambda o: pickle.loads(pickle.dumps(o)))
    ebc = _HookedEBC([EmbeddingBagConfig(20, 4, "t0", ["a"])], seed=0)
    ec = _HookedEC([recgo.EmbeddingConfig(20, 4, "s", ["a"])])
    for m, out in ((ebc, lambda c: c(kjt(1)).values()), (ec, lambda c: c(kjt(1))["a"].values())):
        m.register_forward_hook(m.hook)
        c = copy_of(m)
        assert type(c) is type(m) and next(iter(c._forward_hooks.values())).__self__ is c
        out(c)
        assert c.calls == 1 and not hasattr(m, "calls")
