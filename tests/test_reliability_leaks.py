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

import gc
import threading
from pathlib import Path

import pytest
import torch

import recgo
from recgo import _debug, planner as P
from recgo.data import CriteoSource, SyntheticField, SyntheticSource
from recgo.feature import Feature
from recgo.modules import optim

from leak_checks import FEATURES, SOURCE, check_no_leak, small_ebc, small_ids, small_kjt
from spawned import one_rank


def test_the_check_sees_a_leak_and_a_cycle() -> None:
    """The check itself: a collection kept, and one dropped inside a reference cycle, both fail it."""
    kept: list[recgo.EmbeddingBagCollection] = []
    with pytest.raises(AssertionError, match="leaked"):
        check_no_leak(lambda: kept.append(small_ebc(False)), n=2, timeout=0.2)

    def cycle() -> None:
        box: dict[str, object] = {"ebc": small_ebc(False)}
        box["self"] = box
    with pytest.raises(AssertionError, match="reference cycle"):
        check_no_leak(cycle, n=2, timeout=0.2)


@pytest.mark.parametrize("dynamic", [False, True])
def test_pooled_training_steps_leak_nothing(dynamic: bool) -> None:
    """A collection with a fused optimizer trained a few steps, then dropped, frees its tables, its
    optimizer state and every forward's context."""
    def body() -> None:
        ebc = small_ebc(dynamic)
        for step in range(3):
            ebc(small_kjt(small_ids(dynamic), seed=step)).values().sum().backward()
    check_no_leak(body)


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_forward_whose_backward_never_runs_leaks_nothing(dynamic: bool) -> None:
    """A training forward's context (the batch's rows, for the backward) goes with its output's graph
    when no backward ever runs: on a live collection, and with the collection dropped first."""
    ebc = small_ebc(dynamic)
    kjt = small_kjt(small_ids(dynamic))

    def kept() -> None:
        out = ebc(kjt).values()
        assert out.requires_grad
    check_no_leak(kept)

    def both() -> None:
        e = small_ebc(dynamic)
        out = e(kjt).values()
        del e
        assert out.requires_grad
    check_no_leak(both)


@pytest.mark.parametrize("dynamic", [False, True])
def test_eval_and_no_grad_forwards_leak_nothing(dynamic: bool) -> None:
    ebc = small_ebc(dynamic)
    kjt = small_kjt(small_ids(dynamic))

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
    kjt = small_kjt({"a": 1000 if dynamic else 30})
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


@pytest.mark.parametrize("dynamic", [False, True])
def test_sharded_collections_leak_nothing(tmp_path: Path, dynamic: bool) -> None:
    """A ShardedEmbeddingBagCollection on one rank: steps (its exchange steps are handles too), a
    forward without backward, a state_dict round trip, and a pipeline that partitions for it."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    source = SyntheticSource(200, [SyntheticField("a", 50, 1.0), SyntheticField("b", 30, 1.0)])
    features = [Feature("a").mod(64), Feature("b").mod(32)]

    def body() -> None:
        sh = ShardedEmbeddingBagCollection.from_ebc(small_ebc(dynamic))
        sh(small_kjt(small_ids(dynamic))).values().sum().backward()
        sh(small_kjt(small_ids(dynamic)))
        sh.load_state_dict(sh.state_dict())
        with recgo.DataPipeline(source, features, 32, depth=2, shard=sh) as pipe:
            for b in pipe:
                sh(b.sparse).values().sum().backward()
    with one_rank(tmp_path):
        check_no_leak(body, n=5)


def test_a_dynamic_tables_module_alone_names_its_missing_collection() -> None:
    """The dynamic table's state_dict hooks hold their collection weakly (else a cycle kept every
    dropped collection until a full collection): used on the table's module after the collection is
    gone they raise a named error instead of saving a weight without its ID map."""
    ebc = small_ebc(True)
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
        ebc = small_ebc(True)

        def work(seed: int) -> None:
            for i in range(5):
                ebc(small_kjt(small_ids(True), seed=10 * seed + i)).values().sum().backward()
                ebc(small_kjt(small_ids(True), seed=seed))
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
    src = small_ebc(dynamic)
    src(small_kjt(small_ids(dynamic))).values().sum().backward()

    def body() -> None:
        dst = small_ebc(dynamic)
        dst.load_state_dict(src.state_dict())
        src.save(tmp_path / "ebc")
        dst.load(tmp_path / "ebc")
        bad = {k: (v[:1] if k.endswith("t1.weight") else v) for k, v in src.state_dict().items()}
        with pytest.raises((recgo.RecgoError, RuntimeError)):
            dst.load_state_dict(bad)
    check_no_leak(body)


def test_dynamic_export_and_import_leak_nothing(tmp_path: Path) -> None:
    src = small_ebc(True)
    src(small_kjt(small_ids(True))).values().sum().backward()

    def body() -> None:
        dst = small_ebc(True)
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
    ebcs = {d: small_ebc(d) for d in (True, False)}
    ec = recgo.EmbeddingCollection([recgo.EmbeddingConfig(30, 4, "s", ["a"])], optimizer=optim.SGD(lr=0.1), seed=0)
    engine = recgo.FeatureEngine(FEATURES)
    raw = recgo.KeyedJaggedTensor(["u", "h"], torch.arange(64), lengths=torch.full((16,), 4))
    batches = {d: [small_kjt(small_ids(d), seed=s) for s in range(4)] for d in (True, False)}
    sequences = [small_kjt({"a": 30}, seed=s) for s in range(4)]

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
