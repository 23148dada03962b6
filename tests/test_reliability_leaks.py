"""Nothing leaks: creating, using and dropping each public object N times leaves the engine as it was.

Every Go object Python holds is a handle (``recgo._debug.live_handles`` counts the live ones), every
running pipeline has goroutines (``recgo.pipeline.goroutines``) and tables, optimizer state and batch
buffers are mapped outside the Go heap (``recgo._debug.memory_in_use``). Each test runs its body once
to warm up (pools fill, lazily built state appears), takes the counts, runs the body N more times,
drops everything and waits (polling, with a timeout) for goroutines that are told to stop to exit:
the handle count must be back to its value exactly, the goroutine counts and the mapped bytes at or
below theirs. The N runs happen with Python's cyclic garbage collector off, so an object that only a
collection would free (held by a reference cycle) fails too: the collector runs on counts of Python
objects, blind to the megabytes of engine memory such an object may hold, so that memory stayed
taken for as long as the next full collection took to come.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import torch

import recgo
from recgo import _debug, planner as P
from recgo.data import CriteoSource, SyntheticField, SyntheticSource
from recgo.feature import Feature
from recgo.modules import optim

N = 20
SOURCE = SyntheticSource(600, [SyntheticField("u", 300, 1.1), SyntheticField("h", 800, 0.9, 0.8, 4.0)], dense=2)
FEATURES = [Feature("u").hash().mod(200), Feature("h").mod(400)]


@dataclass(frozen=True)
class Counts:
    """What the engine holds: live handles, process and pipeline goroutines, off-heap bytes mapped."""

    handles: int
    goroutines: int
    pipeline_goroutines: int
    mapped: int

    @staticmethod
    def now(collect: bool = True) -> Counts:
        if collect:
            gc.collect()
        total, running = recgo.pipeline.goroutines()
        return Counts(_debug.live_handles(), total, running, _debug.memory_in_use()[1])

    def within(self, base: Counts) -> bool:
        return (self.handles == base.handles and self.goroutines <= base.goroutines
                and self.pipeline_goroutines <= base.pipeline_goroutines and self.mapped <= base.mapped)


def settled(base: Counts, collect: bool = True, timeout: float = 10.0) -> Counts:
    """The counts once they are back within ``base``, or as they stand at the timeout: goroutines told
    to stop (a freed pipeline's, a cancelled plan job's) exit asynchronously. ``collect``: run Python's
    cyclic garbage collector before each reading."""
    deadline = time.monotonic() + timeout
    while True:
        now = Counts.now(collect)
        if now.within(base) or time.monotonic() > deadline:
            return now
        time.sleep(0.01)


def check_no_leak(body: Callable[[], object], n: int = N, timeout: float = 10.0) -> None:
    """Run ``body`` once to warm up, then ``n`` times, and assert nothing it made is left, also before
    Python's cyclic garbage collector ran."""
    body()
    base = settled(Counts.now())
    gc.disable()
    try:
        for _ in range(n):
            body()
        held = settled(base, collect=False, timeout=timeout)
    finally:
        gc.enable()
    after = settled(base, timeout=timeout)
    assert after.within(base), f"leaked: before {base}, after {n} runs {after}"
    assert held.within(base), f"held by a reference cycle: before {base}, after {n} runs {held} until gc.collect()"


def _kjt(rows: dict[str, int], batch: int = 16, seed: int = 0) -> recgo.KeyedJaggedTensor:
    """A batch of 0–3 IDs per bag, key ``k``'s in ``[0, rows[k])``."""
    g = torch.Generator().manual_seed(seed)
    lengths = [torch.randint(0, 4, (batch,), generator=g) for _ in rows]
    values = [torch.randint(0, n, (int(ln.sum()),), generator=g) for n, ln in zip(rows.values(), lengths)]
    return recgo.KeyedJaggedTensor(list(rows), torch.cat(values), lengths=torch.cat(lengths))


def _ids(dynamic: bool) -> dict[str, int]:
    return {"a": 1000 if dynamic else 64, "b": 32}


def _ebc(dynamic: bool) -> recgo.EmbeddingBagCollection:
    dyn = recgo.DynamicConfig(min_count=1) if dynamic else None
    cfg = [recgo.EmbeddingBagConfig(num_embeddings=64, embedding_dim=8, name="t0", feature_names=["a"], dynamic=dyn),
           recgo.EmbeddingBagConfig(num_embeddings=32, embedding_dim=4, name="t1", feature_names=["b"])]
    return recgo.EmbeddingBagCollection(cfg, optimizer=optim.Adam(lr=0.01), seed=0)


def test_the_check_sees_a_leak_and_a_cycle() -> None:
    """The check itself: a collection kept, and one dropped inside a reference cycle, both fail it."""
    kept: list[recgo.EmbeddingBagCollection] = []
    with pytest.raises(AssertionError, match="leaked"):
        check_no_leak(lambda: kept.append(_ebc(False)), n=2, timeout=0.2)

    def cycle() -> None:
        box: dict[str, object] = {"ebc": _ebc(False)}
        box["self"] = box
    with pytest.raises(AssertionError, match="reference cycle"):
        check_no_leak(cycle, n=2, timeout=0.2)


@pytest.mark.parametrize("dynamic", [False, True])
def test_pooled_training_steps_leak_nothing(dynamic: bool) -> None:
    """A collection with a fused optimizer trained a few steps, then dropped, frees its tables, its
    optimizer state and every forward's context."""
    def body() -> None:
        ebc = _ebc(dynamic)
        for step in range(3):
            ebc(_kjt(_ids(dynamic), seed=step)).values().sum().backward()
    check_no_leak(body)


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_forward_whose_backward_never_runs_leaks_nothing(dynamic: bool) -> None:
    """A training forward's context (the batch's rows, for the backward) goes with its output's graph
    when no backward ever runs: on a live collection, and with the collection dropped first."""
    ebc = _ebc(dynamic)
    kjt = _kjt(_ids(dynamic))

    def kept() -> None:
        out = ebc(kjt).values()
        assert out.requires_grad
    check_no_leak(kept)

    def both() -> None:
        e = _ebc(dynamic)
        out = e(kjt).values()
        del e
        assert out.requires_grad
    check_no_leak(both)


@pytest.mark.parametrize("dynamic", [False, True])
def test_eval_and_no_grad_forwards_leak_nothing(dynamic: bool) -> None:
    ebc = _ebc(dynamic)
    kjt = _kjt(_ids(dynamic))

    def body() -> None:
        with torch.no_grad():
            assert not ebc(kjt).values().requires_grad
        ebc.eval()
        ebc(kjt).values()
        ebc.train()
    check_no_leak(body)


@pytest.mark.parametrize("dynamic", [False, True])
def test_sequence_collections_leak_nothing(dynamic: bool) -> None:
    """EmbeddingCollection, standalone and sharing a pooled collection's tables: trained steps, a
    forward without backward, a no_grad forward, a state_dict round trip."""
    kjt = _kjt({"a": 1000 if dynamic else 30})
    dyn = recgo.DynamicConfig() if dynamic else None

    def body() -> None:
        ec = recgo.EmbeddingCollection([recgo.EmbeddingConfig(64, 4, "s", ["a"], dynamic=dyn)],
                                       optimizer=optim.SGD(lr=0.1), seed=0)
        ec(kjt)["a"].values().sum().backward()
        ec(kjt)
        with torch.no_grad():
            ec(kjt)
        ec.load_state_dict(ec.state_dict())
        ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(64, 4, "t", ["a"], dynamic=dyn)],
                                           optimizer=optim.SGD(lr=0.1), seed=0)
        shared = recgo.EmbeddingCollection([recgo.EmbeddingConfig(64, 4, "t", ["a"], dynamic=dyn)], share=ebc)
        shared(kjt)["a"].values().sum().backward()
        shared(kjt)
    check_no_leak(body)


@contextlib.contextmanager
def _one_rank_world(tmp_path: Path) -> Iterator[None]:
    """This pytest process as a one-rank gloo world (a FileStore under ``tmp_path``): the sharded
    collections' all-to-alls still run through torch.distributed, so their Python paths do."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("dynamic", [False, True])
def test_sharded_collections_leak_nothing(tmp_path: Path, dynamic: bool) -> None:
    """A ShardedEmbeddingBagCollection on one rank: steps (its exchange steps are handles too), a
    forward without backward, a state_dict round trip, and a pipeline that partitions for it."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    source = SyntheticSource(200, [SyntheticField("a", 50, 1.0), SyntheticField("b", 30, 1.0)])
    features = [Feature("a").mod(64), Feature("b").mod(32)]

    def body() -> None:
        sh = ShardedEmbeddingBagCollection.from_ebc(_ebc(dynamic))
        sh(_kjt(_ids(dynamic))).values().sum().backward()
        sh(_kjt(_ids(dynamic)))
        sh.load_state_dict(sh.state_dict())
        with recgo.DataPipeline(source, features, 32, depth=2, shard=sh) as pipe:
            for b in pipe:
                sh(b.sparse).values().sum().backward()
    with _one_rank_world(tmp_path):
        check_no_leak(body, n=5)


def test_a_dynamic_tables_module_alone_names_its_missing_collection() -> None:
    """The dynamic table's state_dict hooks hold their collection weakly (else a cycle kept every
    dropped collection until a full collection): used on the table's module after the collection is
    gone they raise a named error instead of saving a weight without its ID map."""
    ebc = _ebc(True)
    table = ebc.embedding_bags["t0"]
    del ebc
    assert torch.isfinite(table.weight.detach()).all()  # its weight keeps the engine memory alive
    with pytest.raises(recgo.InvalidInputError, match=r"dynamic table 't0': state_dict\(\) of the table's module alone"):
        table.state_dict()


def test_feature_transforms_and_kjt_helpers_leak_nothing() -> None:
    """A feature engine and its outputs (off-heap KJTs), also through the KJT helpers that view or
    copy them (permute, split, to_dict, concat), and a transform that raises."""
    raw = recgo.KeyedJaggedTensor(["u", "h"], torch.arange(64), lengths=torch.full((16,), 4))

    def body() -> None:
        engine = recgo.FeatureEngine(FEATURES)
        out = engine(raw)
        a, b = out.split([1, 1])
        merged = recgo.KeyedJaggedTensor.concat([b, a])
        assert merged.permute([1, 0]).keys() == ["u", "h"]
        assert {k: v.values().numel() for k, v in out.to_dict().items()} == {"u": 32, "h": 32}
        with pytest.raises(recgo.InvalidInputError):
            engine(recgo.KeyedJaggedTensor(["x"], torch.arange(3), lengths=torch.tensor([3])))
    check_no_leak(body)


def _epoch(depth: int) -> int:
    with recgo.DataPipeline(SOURCE, FEATURES, 64, depth=depth) as pipe:
        return sum(b.labels.numel() for b in pipe)


@pytest.mark.parametrize("depth", [0, 2])
def test_pipelines_leak_nothing(depth: int) -> None:
    """Full epochs, a loop left mid-epoch and restarted from its position (load_state_dict replaces
    the running engine pipeline), then dropped without close(), and batches kept after their
    pipeline is gone."""
    def body() -> None:
        assert _epoch(depth) == 600
        pipe = recgo.DataPipeline(SOURCE, FEATURES, 64, depth=depth)
        kept = []
        for i, b in enumerate(pipe):
            kept.append(b)
            if i == 2:
                break
        pipe.load_state_dict(pipe.state_dict())
        next(pipe)
        del pipe
        assert sum(b.labels.numel() for b in kept) == 192
    check_no_leak(body, n=10)


@pytest.mark.parametrize("depth", [0, 2])
def test_a_pipeline_whose_source_raises_leaks_nothing(tmp_path: Path, depth: int) -> None:
    """A read error mid-epoch, caught and dropped: the pipeline, its goroutines and batches go."""
    good = "1" + "\t3" * 13 + "\tab" * 26 + "\n"
    path = tmp_path / "short.txt"
    path.write_text(good * 40 + "1\t2\n" + good)

    def body() -> None:
        pipe = recgo.DataPipeline(CriteoSource(path), [Feature("C1").mod(10)], 16, depth=depth)
        got = 0
        try:
            for b in pipe:
                got += b.labels.numel()
        except recgo.InvalidInputError as exc:
            assert "short line" in str(exc)
        assert got == 32
    check_no_leak(body, n=10)


class _Model(torch.nn.Module):
    """Pooled embeddings of both features and the dense inputs into one logit."""

    def __init__(self, dynamic: bool) -> None:
        super().__init__()
        dyn = recgo.DynamicConfig() if dynamic else None
        self.ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(200, 4, "u", ["u"], dynamic=dyn),
                                                 recgo.EmbeddingBagConfig(400, 4, "h", ["h"])],
                                                optimizer=optim.SGD(lr=0.1), seed=0)
        self.top = torch.nn.Linear(10, 1)

    def forward(self, sparse: recgo.KeyedJaggedTensor, dense: torch.Tensor) -> torch.Tensor:
        return self.top(torch.cat([self.ebc(sparse).values(), dense], 1))


@pytest.mark.parametrize("dynamic", [False, True])
def test_train_pipelines_leak_nothing(dynamic: bool) -> None:
    """A TrainPipeline run to the end of its data, and one dropped after two steps without close(),
    the second raising in its loss (its batch is kept for the next step)."""
    def failing(out: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        raise ValueError("loss")

    def body() -> None:
        model = _Model(dynamic)
        tp = recgo.TrainPipeline(model, torch.optim.SGD(model.top.parameters(), lr=0.1), SOURCE, FEATURES, 64)
        assert len(tp.run(progress=False)) == 10
        tp.close()
        tp = recgo.TrainPipeline(model, None, SOURCE, FEATURES, 64)
        tp.progress()
        tp.loss_fn = failing
        with pytest.raises(ValueError, match="loss"):
            tp.progress()
    check_no_leak(body, n=5)


def test_training_from_several_threads_leaks_nothing() -> None:
    """Four threads training one dynamic collection, each also running forwards it never backs."""
    def body() -> None:
        ebc = _ebc(True)

        def work(seed: int) -> None:
            for i in range(5):
                ebc(_kjt(_ids(True), seed=10 * seed + i)).values().sum().backward()
                ebc(_kjt(_ids(True), seed=seed))
        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    check_no_leak(body, n=5)


def test_planner_jobs_leak_nothing() -> None:
    """Profile, plan (a heuristic and a short MILP), remap a KJT, and a plan that cannot place."""
    from planner_data import TABLES, batches

    data = batches(0, 2, 32)
    topo = P.Topology(nodes=1, gpus_per_node=2, hbm_bytes=30_000, host_bytes=1 << 20, batch_size=512)

    def body() -> None:
        prof = P.profile(data, TABLES, sample_rate=1.0, steps=2)
        for strategy in ("row_greedy", "milp"):
            plan = P.plan(prof, topo, strategy, time_limit=5)
            assert len(plan.tables) == 3
        remapped = plan.remap().apply_kjt(data[0])
        assert remapped.values().numel() == data[0].values().numel()
        with pytest.raises(recgo.CapacityError):
            P.plan(prof, P.Topology(nodes=1, gpus_per_node=1, hbm_bytes=10, host_bytes=10, batch_size=8),
                   "row_greedy")
    check_no_leak(body, n=5)


@pytest.mark.parametrize("dynamic", [False, True])
def test_state_dict_round_trips_leak_nothing(tmp_path: Path, dynamic: bool) -> None:
    """state_dict()/load_state_dict(), save()/load() files, and a load refused for a wrong shape."""
    src = _ebc(dynamic)
    src(_kjt(_ids(dynamic))).values().sum().backward()

    def body() -> None:
        dst = _ebc(dynamic)
        dst.load_state_dict(src.state_dict())
        src.save(tmp_path / "ebc")
        dst.load(tmp_path / "ebc")
        bad = {k: (v[:1] if k.endswith("t1.weight") else v) for k, v in src.state_dict().items()}
        with pytest.raises((recgo.RecgoError, RuntimeError)):
            dst.load_state_dict(bad)
    check_no_leak(body)


def test_dynamic_export_and_import_leak_nothing(tmp_path: Path) -> None:
    src = _ebc(True)
    src(_kjt(_ids(True))).values().sum().backward()

    def body() -> None:
        dst = _ebc(True)
        state = recgo.dynamic.export_state(src, "t0")
        weight = src.embedding_bags["t0"].weight.detach()
        recgo.dynamic.import_state(dst, "t0", state, weight, src.embedding_bags["t0"].optimizer_state)
        assert recgo.dynamic.stats(dst, "t0") == recgo.dynamic.stats(src, "t0")
        recgo.dynamic.lookup(dst, "t0", torch.arange(10))
        recgo.dynamic.save(src, "t0", tmp_path / "t0.bin")
        recgo.dynamic.load(dst, "t0", tmp_path / "t0.bin")
    check_no_leak(body)


def test_long_lived_objects_do_not_grow_the_go_heap() -> None:
    """Go state that grows per call (a map or list in a live collection, engine or pool) leaks without
    leaving a handle behind: the live Go heap after a full collection stays flat over hundreds of steps
    of long-lived collections (dynamic, fixed, sequence) and a feature engine, after a warm-up. The
    heap measured so moves by some 25 KB between readings (pools, runtime buffers) even on a loaded
    machine; the bound allows ten times that, which a leak of a kilobyte per engine call goes past."""
    ebcs = {d: _ebc(d) for d in (True, False)}
    ec = recgo.EmbeddingCollection([recgo.EmbeddingConfig(30, 4, "s", ["a"])], optimizer=optim.SGD(lr=0.1), seed=0)
    engine = recgo.FeatureEngine(FEATURES)
    raw = recgo.KeyedJaggedTensor(["u", "h"], torch.arange(64), lengths=torch.full((16,), 4))
    batches = {d: [_kjt(_ids(d), seed=s) for s in range(4)] for d in (True, False)}
    sequences = [_kjt({"a": 30}, seed=s) for s in range(4)]

    def steps(n: int) -> int:
        for i in range(n):
            for d, ebc in ebcs.items():
                ebc(batches[d][i % 4]).values().sum().backward()
                with torch.no_grad():
                    ebc(batches[d][i % 4])
            ec(sequences[i % 4])["a"].values().sum().backward()
            engine(raw)
            if i % 20 == 0:
                ebcs[True].state_dict()
        gc.collect()
        return _debug.memory_in_use()[0]

    base = steps(50)
    grown = steps(250) - base
    assert grown < 256 << 10, f"the Go heap grew by {grown} bytes over 250 steps"


def _interrupted_at_every_call(op: Callable[[], object], after: Callable[[str], object] | None = None,
                               hit: set[str] | None = None) -> int:
    """Run ``op`` once per Python function call it makes, run k raising KeyboardInterrupt at the first
    instruction of its k-th call (where a Ctrl-C pending at that point is raised), and assert after
    each run that every engine handle it made is freed (at the latest when collected). Returns the
    number of calls swept. A finalizer it interrupts reports to ``sys.unraisablehook``, which is set to
    drop the report: pytest's keeps it, and with it the object being finalized. ``after(where)`` runs
    after each run (the first, uninterrupted one too), before the handle count: it checks that what
    was interrupted still works; ``hit`` collects the names of the functions interrupted."""
    op()
    if after is not None:
        after("no call (the uninterrupted run)")
    base = Counts.now().handles
    k = 0
    while True:
        seen, where, name = [0], [""], [""]

        def interrupt(frame: Any, event: str, arg: object) -> None:
            if event == "call":
                seen[0] += 1
                if seen[0] > k:
                    sys.settrace(None)
                    name[0] = frame.f_code.co_name
                    where[0] = f"{frame.f_code.co_filename}:{name[0]}, called from line {frame.f_back.f_lineno}"
                    raise KeyboardInterrupt

        hook, sys.unraisablehook = sys.unraisablehook, lambda unraisable: None
        sys.settrace(interrupt)
        try:
            op()
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
            sys.unraisablehook = hook
        if seen[0] > k:
            if hit is not None:
                hit.add(name[0])
            if after is not None:
                after(where[0])
        if Counts.now(collect=False).handles != base:  # (collecting only then: a collection takes long)
            assert Counts.now().handles == base, f"a Ctrl-C at {where[0]} left an engine handle behind"
        if seen[0] <= k:
            return k
        k += 1


def _interruptible_ops() -> dict[str, Callable[[], object]]:
    ebc, kjt = _ebc(True), _kjt(_ids(True))
    ec = recgo.EmbeddingCollection([recgo.EmbeddingConfig(30, 4, "s", ["a"])], optimizer=optim.SGD(lr=0.1), seed=0)
    seq = _kjt({"a": 30})
    engine = recgo.FeatureEngine(FEATURES)
    raw = recgo.KeyedJaggedTensor(["u", "h"], torch.arange(64), lengths=torch.full((16,), 4))
    from planner_data import TABLES, batches

    prof = P.profile(batches(0, 2, 32), TABLES, sample_rate=1.0, steps=2)
    topo = P.Topology(nodes=1, gpus_per_node=2, hbm_bytes=30_000, host_bytes=1 << 20, batch_size=512)

    def pipeline() -> None:
        pipe = recgo.DataPipeline(SOURCE, FEATURES, 300, depth=0)
        next(pipe)
        pipe.close()
    return {
        "pooled training step": lambda: ebc(kjt).values().sum().backward(),
        "pooled lookup_stats": lambda: ebc.lookup_stats(kjt),
        "sequence training forward": lambda: ec(seq),
        "sequence lookup_stats": lambda: ec.lookup_stats(seq),
        "feature transform": lambda: engine(raw),
        "plan": lambda: P.plan(prof, topo, "row_greedy"),
        "pipeline next and close": pipeline,
    }


@pytest.mark.parametrize("op", ["pooled training step", "pooled lookup_stats", "sequence training forward",
                                "sequence lookup_stats", "feature transform", "plan", "pipeline next and close"])
def test_a_ctrl_c_at_any_python_call_leaves_no_handle(op: str) -> None:
    """A Ctrl-C is raised at the next Python call after it arrives, anywhere. Handles made by a call
    and carried out of its protected block as raw numbers, to be wrapped by a caller (a forward's
    context, lookup_stats's, a feature output's buffer, a plan), were lost when it landed in between;
    and Handle.free, which disarmed its capsule in a ``finally``, lost the handle when it landed
    before the free itself ran (lookup_stats frees its context so)."""
    run = _interruptible_ops()[op]
    assert _interrupted_at_every_call(run) > 10


class _ShardedTop(torch.nn.Module):
    """A dynamic-ID pooled collection under a linear layer: what ``shard_model`` wraps in DDP."""

    def __init__(self) -> None:
        super().__init__()
        self.ebc = _ebc(True)
        self.top = torch.nn.Linear(12, 1)

    def forward(self, kjt: recgo.KeyedJaggedTensor) -> torch.Tensor:
        return self.top(self.ebc(kjt).values())


SHARDED_STEPS = ["pooled", "pooled, owner pooling", "pooled dynamic", "pooled dynamic, owner pooling",
                 "pooled dynamic, pipeline batches", "sequence", "sequence dynamic", "shard_model"]


def _sharded_step_case(case: str) -> tuple[torch.nn.Module, Callable[[Any], torch.Tensor]]:
    """The sharded module a step of ``case`` trains (fused Adam) and its output as one flat tensor."""
    from recgo.distributed import ShardedEmbeddingBagCollection, ShardedEmbeddingCollection, shard_model

    if case.startswith("pooled"):
        pooling = "pooled" if "owner pooling" in case else "rows"
        return (ShardedEmbeddingBagCollection.from_ebc(_ebc("dynamic" in case), owner_pooling=pooling),
                lambda out: out.values())
    if case.startswith("sequence"):
        dyn = recgo.DynamicConfig(min_count=1) if "dynamic" in case else None
        ec = ShardedEmbeddingCollection([recgo.EmbeddingConfig(64, 8, "t0", ["a"], dynamic=dyn),
                                         recgo.EmbeddingConfig(32, 4, "t1", ["b"])],
                                        optimizer=optim.Adam(lr=0.01), seed=0)
        return ec, lambda out: torch.cat([out[k].values().reshape(-1) for k in ("a", "b")])
    torch.manual_seed(0)
    return shard_model(_ShardedTop()), lambda out: out


def _same_state(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    if a is None or b is None or a.keys() != b.keys():
        return False
    return all(torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)


@pytest.mark.parametrize("case", SHARDED_STEPS)
def test_a_ctrl_c_at_any_python_call_of_a_sharded_step(tmp_path: Path, case: str) -> None:
    """A sharded training step (forward, backward, fused update) on a one-rank world, interrupted at
    each of its Python calls in turn (every one: a step makes some 160-260, and the whole sweep of a
    case takes a few seconds): no engine handle is left behind, and the collection trains on. The
    tables are as before the step, as its forward left them (a dynamic table admits the batch's IDs
    in the forward), or as after the whole step, and the next step gives what it gives from that
    state uninterrupted; or, when the interrupt landed in the backward exchange, the collection is
    marked and refuses the next step with PartialStepError until a load restores it
    (docs/sharding.md, "A backward that fails part-way"), after which the step gives what it gives
    uninterrupted. ``shard_model``'s DDP wrapper: a backward interrupted in recgo's autograd node or
    its comm hook left DDP's Reducer mid-iteration, and every later forward raised (a
    PeerFailureError over DDP's internal assert) before session 46; its forward now resets the
    Reducer. There the handle count is taken after the next step: torch's autograd engine keeps the
    nodes a failed backward had queued (the collection's step among them) until the thread's next
    backward."""
    from recgo.distributed import PartialStepError

    with _one_rank_world(tmp_path):
        m, flat = _sharded_step_case(case)
        b0, b1 = (_kjt(_ids("dynamic" in case or case == "shard_model"), seed=s) for s in (0, 1))
        if "pipeline" in case:  # batches the pipeline partitioned for the collection (recgo_shard_begin_prepared)
            source = SyntheticSource(64, [SyntheticField("a", 1000, 1.0), SyntheticField("b", 32, 1.0)])
            with recgo.DataPipeline(source, [Feature("a"), Feature("b").mod(32)], 32, depth=0, shard=m) as pipe:
                b0, b1 = (b.sparse for b in pipe)
            from recgo.data import _prepared
            assert all(_prepared.prepared_handle(b.values(), b.lengths()) for b in (b0, b1))

        def step(b: recgo.KeyedJaggedTensor) -> torch.Tensor:
            out = flat(m(b))
            out.sum().backward()
            return out.detach()

        def state() -> dict[str, Any] | None:
            try:
                return {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in m.state_dict().items()}
            except PartialStepError:
                return None

        step(b0)
        step(b1)  # warm-up: the dynamic tables hold both batches' IDs, DDP has built its buckets
        before = state()
        ends: dict[str, tuple[dict[str, Any] | None, torch.Tensor]] = {}  # what step(b0) may leave, and step(b1) then
        for name, run in (("before", lambda: None), ("forward", lambda: flat(m(b0))), ("step", lambda: step(b0))):
            run()
            ends[name] = (state(), step(b1))
            m.load_state_dict(before)
        outcomes: dict[str, int] = {}

        def next_step_works(where: str) -> None:
            now = state()
            if now is None:
                with pytest.raises(PartialStepError, match="KeyboardInterrupt"):
                    step(b1)
                m.load_state_dict(before)
                name, expected = "marked", ends["before"][1]
            else:
                name = next((n for n, (s, _) in ends.items() if _same_state(s, now)), "")
                assert name, f"a Ctrl-C at {where} left the tables in a state no step leaves"
                expected = ends[name][1]
            assert torch.equal(step(b1), expected), \
                f"after a Ctrl-C at {where} the next step differs from an uninterrupted one"
            outcomes[name] = outcomes.get(name, 0) + 1
            m.load_state_dict(before)

        hit: set[str] = set()
        _interrupted_at_every_call(lambda: step(b0), after=next_step_works, hit=hit)
    # the sweep interrupted the step before its engine calls, in its exchanges, and after its update
    assert {"before", "step", "marked"} | ({"forward"} if "dynamic" in case else set()) <= outcomes.keys(), outcomes
    assert {"call_making", "_drive", "drive_backward", "begin_backward", "_record"} <= hit
    if "pipeline" in case:
        assert "prepared_handle" in hit
    if case == "shard_model":
        assert {"reduce", "_wait"} <= hit
