"""Concurrency promises that had no test of their own (docs/threads.md, the README's table and the
docstrings): each runs the work from several threads and compares with the same work run alone."""

from __future__ import annotations

import contextlib
import copy
import math
import pickle
import random
import threading
import time
from typing import Any, Callable

import pytest
import torch

import recgo
from recgo.data import SyntheticField, SyntheticSource, _prepared
from recgo.feature import Feature
from threaded import run_threads


class _Owner:
    """Stands in for a batch's owner handle."""

    def __init__(self, h: int) -> None:
        self._h = h

    @property
    def value(self) -> int:
        return self._h


class _SlowRef:
    """A live weak reference whose dereference lets other threads run (as a switch of the GIL
    between two steps of the registry's sweep does, only every time)."""

    def __init__(self, owner: _Owner) -> None:
        self.owner = owner

    def __call__(self) -> _Owner:
        time.sleep(0)
        return self.owner


def test_prepared_batch_registry_takes_registrations_from_several_threads(monkeypatch) -> None:
    """Pipelines in two threads register their batches at once while the registry is past its cap,
    so every registration sweeps it: the sweep iterated the dict while the other thread inserted and
    raised "dictionary changed size during iteration" from that pipeline's next()."""
    monkeypatch.setattr(_prepared, "_BATCHES", {})
    held = [_Owner(i + 1) for i in range(_prepared._MAX + 8)]
    for i, o in enumerate(held):
        _prepared._BATCHES[1 << 40 | i] = (_SlowRef(o), 1, 0, o.value)
    mine: list[list[_Owner]] = [[], []]

    def body(t: int) -> None:
        for s in range(12):
            o = _Owner(1000 * (t + 1) + s)
            mine[t].append(o)
            _prepared.register((t + 1) << 32 | s * 64, 4, 8, o)

    run_threads(2, body)
    for t, owners in enumerate(mine):
        for s, o in enumerate(owners):
            ref, numel, lengths_ptr, h = _prepared._BATCHES[(t + 1) << 32 | s * 64]
            assert (ref(), numel, lengths_ptr, h) == (o, 4, 8, o.value)


def _kjt(keys: list[str], seed: int, lo: int = 0, span: int = 200, n: int = 16) -> recgo.KeyedJaggedTensor:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 5, (len(keys) * n,), generator=g)
    return recgo.KeyedJaggedTensor(keys, lo + torch.randint(0, span, (int(lengths.sum()),), generator=g),
                                   lengths=lengths)


def test_concurrent_sequence_forwards_are_exact() -> None:
    """EmbeddingCollection forwards from several threads (grad and no_grad mixed) each give what they
    give alone."""
    ec = recgo.EmbeddingCollection([recgo.EmbeddingConfig(300, 8, "t", ["a", "b"])], seed=1)
    batches = [_kjt(["a", "b"], s, span=300) for s in range(6)]
    with torch.no_grad():
        want = [[jt.values().clone() for jt in ec(b).values()] for b in batches]
    wrong: list[tuple[int, int]] = []

    def body(i: int) -> None:
        with torch.set_grad_enabled(i % 2 == 0):
            for s in range(60):
                k = (i + s) % len(batches)
                got = [jt.values().detach() for jt in ec(batches[k]).values()]
                if not all(torch.equal(g, w) for g, w in zip(got, want[k])):
                    wrong.append((i, s))

    run_threads(4, body)
    assert wrong == []


def _shared_pair(opt: recgo.modules.optim.FusedOptimizer) -> tuple[recgo.EmbeddingBagCollection, recgo.EmbeddingCollection]:
    ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(400, 8, "t", ["p"])], seed=3, optimizer=opt)
    return ebc, recgo.EmbeddingCollection([recgo.EmbeddingConfig(400, 8, "t", ["q"])], share=ebc)


def _train(module: torch.nn.Module, key: str, lo: int, span: int, steps: int) -> None:
    for s in range(steps):
        out = module(_kjt([key], 100 * lo + s, lo, span))
        values = out.values() if key == "p" else out[key].values()
        # a loss linear in the outputs: SGD's updates then commute, so every serial order is one result
        (values * torch.randn(values.shape, generator=torch.Generator().manual_seed(s))).sum().backward()


@pytest.mark.parametrize("disjoint", [True, False], ids=["disjoint", "overlapping"])
def test_a_collection_and_its_shared_sequence_collection_train_from_two_threads(disjoint: bool) -> None:
    """The README's contract holds for a pooled collection and the sequence collection built with
    share= it together: fused steps from two threads, one per collection, equal a serial run (bit-equal
    on disjoint rows with Adagrad; with SGD on shared rows, up to the order of the additions), and the
    shared step counter counts every step."""
    opt = recgo.modules.optim.Adagrad(lr=0.1) if disjoint else recgo.modules.optim.SGD(lr=0.01)
    lo_q, span = (200, 200) if disjoint else (0, 400)
    jobs = [lambda m: _train(m[0], "p", 0, span, 25), lambda m: _train(m[1], "q", lo_q, span, 25)]
    serial = _shared_pair(opt)
    for job in jobs:
        job(serial)
    both = _shared_pair(opt)
    run_threads(2, lambda i: jobs[i](both))
    got, want = both[0].embedding_bags.t, serial[0].embedding_bags.t
    if disjoint:
        assert torch.equal(got.weight, want.weight)
        assert torch.equal(got.optimizer_state, want.optimizer_state)
    else:
        torch.testing.assert_close(got.weight, want.weight, rtol=1e-5, atol=1e-6)
    assert int(got.optimizer_step) == int(want.optimizer_step) == 50


def _trains_as_alone_while(flip: Callable[[int], None], rows: int, dim: int, seed: int,
                           batches: list[recgo.KeyedJaggedTensor], in_thread: bool = False) -> None:
    """Train one collection on ``batches`` while another thread calls ``flip(n)`` for n = 0, 1, … and
    assert it ends as the same collection trained alone (up to the summation order of other worker
    counts); ``in_thread``: the training runs on a thread of its own (Go's threads) instead of here."""
    def make() -> recgo.EmbeddingBagCollection:
        return recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(rows, dim, "t", ["a"])], seed=seed,
                                            optimizer=recgo.modules.optim.Adagrad(lr=0.1))

    ref, m = make(), make()
    for b in batches:
        ref(b).values().square().sum().backward()
    stop = threading.Event()

    def flipping() -> None:
        n = 0
        while not stop.is_set():
            flip(n)
            n += 1

    def train(_: int = 0) -> None:
        for b in batches:
            m(b).values().square().sum().backward()

    flipper = threading.Thread(target=flipping)
    flipper.start()
    try:
        run_threads(1, train) if in_thread else train()
    finally:
        stop.set()
        flipper.join()
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(m.state_dict()[k], v, rtol=1e-5, atol=1e-6)


def test_set_num_threads_from_another_thread_while_one_trains() -> None:
    """recgo.set_num_threads may be called at any time from any thread (docs/threads.md): training
    meanwhile ends as a serial run does, up to the summation order of other worker counts."""
    g = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(20):
        lengths = torch.randint(0, 30, (256,), generator=g)
        batches.append(recgo.KeyedJaggedTensor(["a"], torch.randint(0, 2000, (int(lengths.sum()),), generator=g),
                                               lengths=lengths))
    before = recgo.num_threads()
    try:
        _trains_as_alone_while(lambda n: recgo.set_num_threads(1 + n % 3), 2000, 16, 1, batches, in_thread=True)
    finally:
        recgo.set_num_threads(before)


_SOURCE = SyntheticSource(6000, [SyntheticField("u", 300, 1.1), SyntheticField("i", 500, 1.0, 0.9)], dense=2, seed=5)
_FEATURES = [Feature("u").mod(200), Feature("i").mod(300)]


def _pipeline(**kw) -> recgo.DataPipeline:
    return recgo.DataPipeline(_SOURCE, _FEATURES, 64, depth=3, threads=2, **kw)


def test_pipelines_in_several_threads_read_what_each_reads_alone() -> None:
    """Pipelines over one source, each iterated by its own thread (with tables, so every batch is
    registered as prepared), deliver exactly the batches a pipeline delivers alone."""
    tables = [{"name": "t", "keys": ["u", "i"]}]
    want = [(b.sparse.values().clone(), b.dense.clone()) for b in _pipeline(tables=tables)]
    got: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(3)]
    run_threads(3, lambda i: got[i].extend((b.sparse.values(), b.dense) for b in _pipeline(tables=tables)))
    for mine in got:
        assert len(mine) == len(want)
        assert all(torch.equal(v, wv) and torch.equal(d, wd) for (v, d), (wv, wd) in zip(mine, want))


def test_closing_a_pipeline_while_another_thread_reads_it() -> None:
    """DataPipeline's contract: one thread may close the pipeline while another is in next(): that
    call finishes, later ones raise InvalidInputError, and the batches handed out stay valid."""
    want = [b.dense.clone() for b in _pipeline()]
    for delay in (0.0, 0.002, 0.01):
        pipe, got, ended = _pipeline(), [], []

        def read() -> None:
            try:
                while True:
                    got.append(next(pipe))
            except BaseException as exc:  # noqa: BLE001 - inspected below
                ended.append(exc)

        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(delay)
        pipe.close()
        reader.join()
        assert len(ended) == 1
        closed = isinstance(ended[0], recgo.errors.InvalidInputError) and "closed" in str(ended[0])
        if len(got) < len(want):
            assert closed
        else:  # every batch read: the pass's end came first, or the close landed before the last next()
            assert closed or isinstance(ended[0], StopIteration)
        assert all(torch.equal(b.dense, w) for b, w in zip(got, want))


def test_save_while_the_shared_sequence_collection_trains(tmp_path) -> None:
    """save() of a collection copies its tables under the lock that the share= sequence collection's
    fused steps take too: a file saved while that collection trains in another thread holds one step
    of both tables (each step updates both) and loads."""
    def pair() -> tuple[recgo.EmbeddingBagCollection, recgo.EmbeddingCollection]:
        ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(4000, 32, "t0", ["p"]),
                                            recgo.EmbeddingBagConfig(300, 8, "t1", ["r"])], seed=1,
                                           optimizer=recgo.modules.optim.Adagrad(lr=0.01))
        return ebc, recgo.EmbeddingCollection([recgo.EmbeddingConfig(4000, 32, "t0", ["q"]),
                                               recgo.EmbeddingConfig(300, 8, "t1", ["s"])], share=ebc)

    ebc, ec = pair()
    batch = _kjt(["q", "s"], 0, span=300, n=512)
    stop = threading.Event()

    def train() -> None:
        while not stop.is_set():
            sum(jt.values().sum() for jt in ec(batch).values()).backward()

    worker = threading.Thread(target=train)
    worker.start()
    try:
        steps = []
        for i in range(4):
            ebc.save(tmp_path / f"c{i}.pt")
            fresh = pair()[0]
            fresh.load(tmp_path / f"c{i}.pt")
            s = fresh.state_dict()
            steps.append((int(s["embedding_bags.t0.optimizer_step"]), int(s["embedding_bags.t1.optimizer_step"])))
    finally:
        stop.set()
        worker.join()
    assert all(a == b for a, b in steps), steps
    assert steps[-1][0] > steps[0][0], steps


def _dynamic_pair(opt: recgo.modules.optim.FusedOptimizer, init: float = 0.1) -> recgo.EmbeddingBagCollection:
    def dyn() -> recgo.DynamicConfig:
        return recgo.DynamicConfig(seed=7, evict_fraction=0.25, init_min=-init, init_max=init)

    return recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(2000, 16, "t0", ["a"], dynamic=dyn()),
                                         recgo.EmbeddingBagConfig(2000, 16, "t1", ["b"], dynamic=dyn())],
                                        seed=1, optimizer=opt)


def _dynamic_batch(s: int) -> recgo.KeyedJaggedTensor:
    ids = torch.randint(0, 5000, (512,), generator=torch.Generator().manual_seed(s))
    return recgo.KeyedJaggedTensor(["a", "b"], ids, lengths=torch.ones(512, dtype=torch.int64))


def _train_until(ebc: recgo.EmbeddingBagCollection, stop: threading.Event) -> None:
    s = 0
    while not stop.is_set():
        ebc(_dynamic_batch(s)).values().sum().backward()
        s += 1


def test_save_with_dynamic_tables_while_another_thread_trains(tmp_path) -> None:
    """save() read each dynamic table's snapshot on its own and copied the step counters after them,
    so a file saved while another thread trained held several steps: one table at clock 115, the
    other at 121, both step counters at 127. Now every table comes from one section: each batch
    feeds both tables, so their clocks, high-water marks and step counters agree in every file."""
    opt = recgo.modules.optim.Adagrad(lr=0.05)
    ebc, stop = _dynamic_pair(opt), threading.Event()
    worker = threading.Thread(target=_train_until, args=(ebc, stop))
    worker.start()
    seen = []
    try:
        for i in range(10):
            ebc.save(tmp_path / f"c{i}.pt")
            fresh = _dynamic_pair(opt)
            fresh.load(tmp_path / f"c{i}.pt")
            s = fresh.state_dict()
            t0, t1 = (s[f"embedding_bags.{t}.dynamic_meta"].tolist() for t in ("t0", "t1"))
            steps = [int(s[f"embedding_bags.{t}.optimizer_step"]) for t in ("t0", "t1")]
            seen.append((t0[4], t1[4], *steps))
    finally:
        stop.set()
        worker.join()
    # a training forward advances both clocks, its backward both step counters: a file taken
    # between them has clocks one past the steps
    assert all(c0 == c1 and s0 == s1 and c0 - s0 in (0, 1) for c0, c1, s0, s1 in seen), seen
    assert seen[-1][2] > seen[0][2], seen


def test_copies_while_another_thread_trains_hold_one_step() -> None:
    """copy.deepcopy and pickle (AveragedModel, an EMA, torch.save(module) in another thread) read the
    live tables one at a time: a copy held dynamic tables at clocks 2 and 13 with step counters 24
    and 37. They now take the state as save() does, one step of every table."""
    ebc, stop = _dynamic_pair(recgo.modules.optim.Adagrad(lr=0.05)), threading.Event()
    worker = threading.Thread(target=_train_until, args=(ebc, stop))
    worker.start()
    seen = []
    try:
        for i in range(10):
            c = copy.deepcopy(ebc) if i % 2 == 0 else pickle.loads(pickle.dumps(ebc))
            s = c.state_dict()
            clocks = [int(s[f"embedding_bags.{t}.dynamic_meta"][4]) for t in ("t0", "t1")]
            steps = [int(s[f"embedding_bags.{t}.optimizer_step"]) for t in ("t0", "t1")]
            seen.append((*clocks, *steps))
    finally:
        stop.set()
        worker.join()
    assert all(c0 == c1 and s0 == s1 and c0 - s0 in (0, 1) for c0, c1, s0, s1 in seen), seen


@pytest.mark.parametrize("sharded", [False, True])
def test_dynamic_rows_read_while_another_thread_trains_are_whole_updates(sharded: bool, tmp_path) -> None:
    """A dynamic table's state_dict() entries come from a snapshot, which copied the rows under the
    table's own locks only, while a fused update (under the collection's lock) wrote them: a row
    could be half updated (2 to 20 such rows in 150 reads). The snapshot now holds the collection's
    lock shared; a sharded collection's (a world of one rank here) waits for the rank's exchange
    under way, inside which its owners update rows (before, it took no lock). With zero initial rows
    and a loss whose gradient is one per lookup, every element of a row moves by the same SGD steps,
    so a whole row is constant."""
    from spawned import one_rank

    dyn = recgo.DynamicConfig(seed=7, evict_fraction=0.25, init_min=0.0, init_max=0.0)
    cfgs = [recgo.EmbeddingBagConfig(508, 512, "t", ["a"], dynamic=dyn)]
    batches = [recgo.KeyedJaggedTensor(["a"], torch.randint(0, 500, (2048,), generator=torch.Generator().manual_seed(s)),
                                       lengths=torch.ones(2048, dtype=torch.int64)) for s in range(8)]
    with one_rank(tmp_path) if sharded else contextlib.nullcontext():
        if sharded:
            from recgo.distributed import ShardedEmbeddingBagCollection

            ebc = ShardedEmbeddingBagCollection(cfgs, "hash", optimizer=recgo.modules.optim.SGD(lr=1.0), seed=1, timeout=30)
        else:
            ebc = recgo.EmbeddingBagCollection(cfgs, seed=1, optimizer=recgo.modules.optim.SGD(lr=1.0))
        stop = threading.Event()
        steps = [0]

        def train() -> None:
            while not stop.is_set():
                ebc(batches[steps[0] % len(batches)]).values().sum().backward()
                steps[0] += 1

        worker = threading.Thread(target=train)
        worker.start()
        torn = 0
        try:
            for _ in range(300):
                sd = ebc.state_dict()
                (key,) = [k for k in sd if k.endswith(".weight")]
                w = sd[key]
                torn += int((w != w[:, :1]).any(dim=1).sum())
        finally:
            stop.set()
            worker.join()
        assert steps[0] > 10 and torn == 0


def _multi_knapsack(seed: int, threads: int) -> Any:
    from recgo.planner import solve_mip

    rng = random.Random(seed)
    n = 30
    cost = [float(rng.randint(10, 99)) for _ in range(n)]
    rows = []
    for _ in range(4):
        coef = [float(rng.randint(5, 64)) for _ in range(n)]
        rows.append((-math.inf, math.floor(sum(coef) / 2), list(range(n)), coef))
    return solve_mip(cost, [0] * n, [1] * n, [True] * n, rows, maximize=True, mip_rel_gap=0.0, threads=threads)


def test_mip_solves_from_several_threads_equal_solves_made_alone() -> None:
    """HiGHS solves from several threads at once (each its own instance; HiGHS thread counts that
    differ between the threads, over HiGHS's one process-wide scheduler) prove the optima found alone."""
    want = [_multi_knapsack(seed, 1).objective for seed in range(4)]
    got: list[tuple[int, Any]] = []
    run_threads(3, lambda i: got.extend((seed, _multi_knapsack(seed, 1 + i % 2)) for seed in range(4)),
                switch_interval=None)
    assert len(got) == 12
    assert all(r.status == "optimal" and r.objective == pytest.approx(want[seed], abs=1e-9) for seed, r in got)


def test_switching_the_team_while_the_main_thread_trains() -> None:
    """recgo._threads.use_openmp from another thread while the main thread's loops run (on torch's
    OpenMP team or Go's threads, switched between its loops) trains as a run on either alone."""
    from recgo import _threads

    torch.ones(1 << 16).add_(1)  # torch's OpenMP runtime loaded
    if _threads.openmp_runtime() is None:
        pytest.skip("no OpenMP runtime in this process")

    batches = [_kjt(["a"], s, span=3000, n=512) for s in range(12)]
    try:
        _trains_as_alone_while(lambda n: _threads.use_openmp(n % 2 == 0), 3000, 32, 4, batches)
    finally:
        _threads.configure_default()  # the process's setting back (RECGO_OPENMP)
