"""A Ctrl-C at any Python call of an engine operation leaves no engine handle behind, and the
collection usable: each operation runs once per Python function call it makes, the k-th run raising
KeyboardInterrupt at its k-th call (the leak checks and small objects are ``leak_checks``'s)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

import recgo
from recgo import planner as P
from recgo.data import SyntheticField, SyntheticSource
from recgo.feature import Feature
from recgo.modules import optim

from leak_checks import FEATURES, SOURCE, Counts, small_ebc, small_ids, small_kjt
from spawned import one_rank


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
    ebc, kjt = small_ebc(True), small_kjt(small_ids(True))
    ec = recgo.EmbeddingCollection([recgo.EmbeddingConfig(30, 4, "s", ["a"])], optimizer=optim.SGD(lr=0.1), seed=0)
    seq = small_kjt({"a": 30})
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
        self.ebc = small_ebc(True)
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
        return (ShardedEmbeddingBagCollection.from_ebc(small_ebc("dynamic" in case), owner_pooling=pooling),
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

    with one_rank(tmp_path):
        m, flat = _sharded_step_case(case)
        b0, b1 = (small_kjt(small_ids("dynamic" in case or case == "shard_model"), seed=s) for s in (0, 1))
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
