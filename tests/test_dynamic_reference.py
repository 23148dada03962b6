"""Dynamic-ID tables against an independent Python model of the policy docs/dynamic.md and
engine/dynamic/doc.go state: an ID gets a row at its ``min_count``-th sighting without one (sightings
stay counted after an eviction, as the admission sketch keeps them); rows come from the free list
(ascending) before the high water mark; when full, one pass frees ceil(evict_fraction · bound) rows
not seen in the current step, first by the policy's key (LRU: last step seen; LFU: count, then last
step), ties by row; ``max_age`` frees rows unseen for more than ``max_age`` steps (a sweep every
``max_age // 4`` steps, and a lookup of such a row's ID, which then comes back as a new ID); a
``manual_step`` clock moves only with ``advance``; a new row starts from the ID's seeded initial
vector and zero optimizer state. The model trains its rows with the float64 lazy optimizer of
``test_optim_reference``; every step compares the outputs (pooled SUM or MEAN, with per-ID weights,
or sequence; IDs without a row as zero rows), the ID → row map, every weight and state row, and the
step counter. Eval forwards read the rows (IDs without one, or past ``max_age``, as zeros or the
``default`` vector) and change nothing; a checkpoint reload mid-run goes on as the uninterrupted
run. IDs include int64's extremes; batches may fill the table exactly or overflow it
(``CapacityError``, nothing changed)."""

from __future__ import annotations

import math

from hypothesis import example, given, settings, strategies as st, HealthCheck
import pytest
import torch

from recgo import (EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig,
                   KeyedJaggedTensor, dynamic)
from recgo.dynamic import DynamicConfig
from recgo.errors import CapacityError
from recgo.modules import optim
from test_dynamic import init_vector
from test_optim_reference import LazyReference

I64 = (-(2**63), -(2**63) + 1, -1, 0, 1, 2**63 - 2, 2**63 - 1)
LO, HI, SEED = -0.5, 0.5, 7


class TableModel:
    """A dict-based dynamic table: id → row, per-row last step and count, the sightings of IDs
    without a row (the admission sketch's exact counterpart: an evicted ID's sightings stay), trained by
    a float64 lazy optimizer over ``bound`` rows."""

    def __init__(self, bound: int, dim: int, policy: str, max_age: int, frac: float, min_count: int,
                 manual: bool, opt: optim.FusedOptimizer) -> None:
        self.bound, self.dim, self.policy, self.max_age, self.min_count = bound, dim, policy, max_age, min_count
        self.manual = manual  # the clock moves only with advance(), not with each forward
        self.pending: dict[int, int] = {}  # id → batches seen without a row
        self.k = max(1, math.ceil(frac * bound))
        self.rows: dict[int, int] = {}
        self.last: dict[int, int] = {}   # row → step
        self.count: dict[int, int] = {}  # row → sightings
        self.free: list[int] = []        # popped from the end: ascending
        self.high = 0
        self.step = 0
        self.ref = LazyReference(opt, torch.zeros(bound, dim))

    def stale(self, r: int, step: int | None = None) -> bool:
        return self.max_age > 0 and (self.step if step is None else step) - self.last[r] > self.max_age

    def advance(self) -> None:
        """One step of the clock, with the max_age sweep when it is due."""
        self.step += 1
        if self.max_age and self.step % max(1, self.max_age // 4) == 0:
            self.release([r for r in self.last if self.stale(r)])

    def release(self, victims: list[int]) -> None:
        for r in victims:
            del self.rows[next(i for i, x in self.rows.items() if x == r)]
            del self.last[r], self.count[r]
            self.ref.w[r] = 0
            self.ref.state[r] = 0
        self.free.extend(sorted(victims, reverse=True))

    def take(self) -> int | None:
        if self.free:
            return self.free.pop()
        if self.high < self.bound:
            self.high += 1
            return self.high - 1
        return None

    def fits(self, ids: list[int]) -> bool:
        """Whether a training forward of the distinct ``ids`` needs no more rows than the bound: the
        rows this step's earlier forwards hold (manual clock), then the IDs that hold or reach a row."""
        nxt = self.step if self.manual else self.step + 1
        need = sum(1 for r in self.last if self.last[r] == nxt)
        for i in ids:
            r = self.rows.get(i)
            if r is not None and not self.stale(r, nxt):
                need += self.last[r] != nxt
            else:
                need += self.pending.get(i, 0) + 1 >= self.min_count
        return need <= self.bound

    def resolve(self, ids: list[int]) -> list[int]:
        """One training forward's distinct ``ids`` (first-appearance order, and :meth:`fits`) → rows
        (-1: not admitted yet)."""
        if not self.manual:
            self.advance()
        stale, admit = [], []
        for i in ids:
            r = self.rows.get(i)
            if r is not None and self.stale(r):
                del self.rows[i], self.last[r], self.count[r]
                self.ref.w[r] = 0
                self.ref.state[r] = 0
                stale.append(r)
                r = None
            if r is None:
                self.pending[i] = self.pending.get(i, 0) + 1
                if self.pending[i] >= self.min_count:
                    admit.append(i)
            else:
                self.last[r] = self.step
                self.count[r] += 1
        self.free.extend(sorted(stale, reverse=True))
        for i in admit:
            r = self.take()
            while r is None:
                cands = [r for r in self.last if self.last[r] != self.step]
                key = (lambda r: (self.last[r], r)) if self.policy == "lru" else (
                    lambda r: (self.count[r], self.last[r], r))
                self.release(sorted(cands, key=key)[:self.k])
                r = self.take()
            # the count carries the sightings before admission (the sketch keeps none at min_count 1)
            self.rows[i], self.last[r], self.count[r] = r, self.step, self.pending[i] if self.min_count > 1 else 1
            self.ref.w[r] = init_vector(i, SEED, LO, HI, self.dim).double()
            self.ref.state[r] = 0
        return [self.rows.get(i, -1) for i in ids]


def pool(w: torch.Tensor, rows: torch.Tensor, lengths: list[int], sc: dict, weights: torch.Tensor,
         missing: torch.Tensor | None = None) -> torch.Tensor:
    """The rows (zeros, or ``missing``, for -1) per lookup (sequence), or per bag Σ weight·row, over the bag's length
    for MEAN (an ID without a row counts in it, as a zero row)."""
    missing = torch.zeros(()).double() if missing is None else missing.double()  # the eval default, if any
    per = torch.where((rows >= 0).unsqueeze(1), w[rows.clamp(min=0)], missing)
    if sc["sequence"]:
        return per
    out = torch.zeros(len(lengths), w.shape[1], dtype=torch.float64)
    return out.index_add_(0, bags(lengths), per * lookup_scale(lengths, sc, weights))


def bags(lengths: list[int]) -> torch.Tensor:
    return torch.arange(len(lengths)).repeat_interleave(torch.tensor(lengths))


def lookup_scale(lengths: list[int], sc: dict, weights: torch.Tensor) -> torch.Tensor:
    """Each lookup's factor in its bag's pooled vector: its weight, over the bag's length for MEAN."""
    scale = weights.double() if sc["weighted"] else torch.ones(sum(lengths), dtype=torch.float64)
    if sc["mode"] == "mean":
        scale = scale / torch.tensor(lengths, dtype=torch.float64)[bags(lengths)]
    return scale.unsqueeze(1)


def assert_unchanged(m: torch.nn.Module, before: dict[str, torch.Tensor], what: str) -> None:
    after = m.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before), f"{what} changed the table"


def make_opt(kind: str) -> optim.FusedOptimizer:
    return {"SGD": optim.SGD(lr=0.5), "Adagrad": optim.Adagrad(lr=0.3, eps=1e-8),
            "RowWiseAdagrad": optim.RowWiseAdagrad(lr=0.3, eps=1e-8), "Adam": optim.Adam(lr=0.1),
            "AdamW": optim.AdamW(lr=0.1, weight_decay=0.5)}[kind]


@st.composite
def scenario(draw: st.DrawFn) -> dict:
    bound = draw(st.integers(1, 6))
    pool = draw(st.lists(st.sampled_from(I64) | st.integers(-(2**63), 2**63 - 1) | st.integers(0, 12),
                         min_size=1, max_size=2 * bound + 3, unique=True))
    batches = []
    # max_age 8 sweeps every other step: a row can be past its age and not yet freed (after step 10)
    max_age = draw(st.sampled_from([0, 0, 1, 2, 5, 8]))
    for _ in range(draw(st.integers(1, 12 if max_age == 8 else 8))):
        n = draw(st.integers(1, 2 * bound + 1))
        ids = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
        cuts = sorted(draw(st.lists(st.integers(0, n), max_size=3)))  # bags, empty ones included
        lengths = [b - a for a, b in zip([0, *cuts], [*cuts, n])]
        # (…, an eval forward first, a manual clock's advance first)
        batches.append((ids, lengths, draw(st.booleans()) and draw(st.booleans()), draw(st.booleans())))
    return {"bound": bound, "batches": batches, "dim": draw(st.sampled_from([1, 3, 8])),
            "policy": draw(st.sampled_from(["lru", "lfu"])), "max_age": max_age,
            "frac": draw(st.sampled_from([1 / 32, 0.3, 0.5, 1.0])),
            "kind": draw(st.sampled_from(["SGD", "Adagrad", "RowWiseAdagrad", "Adam", "AdamW"])),
            "seed": draw(st.integers(0, 1000)), "min_count": draw(st.sampled_from([1, 1, 2, 3])),
            "reload_at": draw(st.integers(0, 12)), "sequence": draw(st.booleans()),
            "manual": draw(st.booleans()) and draw(st.booleans()),
            "mode": draw(st.sampled_from(["sum", "mean"])), "weighted": draw(st.booleans()),
            "default": draw(st.none() | st.just(-3.0))}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
# a row past max_age between sweeps (last seen at step 2, evaluated at step 11): eval misses it
@example({"bound": 4, "batches": [([6], [1], False, False), ([5], [1], False, False)]
          + [([6], [1], False, False)] * 9 + [([5], [1], True, False)],
          "dim": 3, "policy": "lru", "max_age": 8, "frac": 0.3, "kind": "Adam", "seed": 1, "min_count": 1,
          "reload_at": 12, "sequence": False, "manual": False, "mode": "sum", "weighted": False, "default": -3.0})
def test_dynamic_table_matches_a_dict_model(sc: dict) -> None:
    """Pooled (SUM, several bags) and sequence collections; some batches also go through an eval
    forward first, which must read the model's rows (zeros for IDs without one) and change nothing."""
    opt = make_opt(sc["kind"])
    dyn = DynamicConfig(eviction=sc["policy"], max_age=sc["max_age"], evict_fraction=sc["frac"], init_min=LO,
                        init_max=HI, seed=SEED, min_count=sc["min_count"], manual_step=sc["manual"],
                        default=None if sc["default"] is None else [sc["default"]] * sc["dim"])
    if sc["sequence"]:
        def build() -> EmbeddingCollection:
            table = EmbeddingConfig(sc["bound"], sc["dim"], "t", ["f"], dynamic=dyn)
            return EmbeddingCollection([table], optimizer=opt)

        def run(m: EmbeddingCollection, kjt: KeyedJaggedTensor) -> torch.Tensor:
            return m(kjt)["f"].values()
    else:
        def build() -> EmbeddingBagCollection:
            return EmbeddingBagCollection([EmbeddingBagConfig(sc["bound"], sc["dim"], "t", ["f"], dynamic=dyn,
                                                              pooling=sc["mode"])],
                                          is_weighted=sc["weighted"], optimizer=opt)

        def run(m: EmbeddingBagCollection, kjt: KeyedJaggedTensor) -> torch.Tensor:
            return m(kjt).values()
    ebc = build()
    model = TableModel(sc["bound"], sc["dim"], sc["policy"], sc["max_age"], sc["frac"], sc["min_count"],
                       sc["manual"], opt)
    gen = torch.Generator().manual_seed(sc["seed"])
    default = None if sc["default"] is None else torch.tensor(sc["default"])
    for i, (ids, lengths, eval_first, tick) in enumerate(sc["batches"]):
        if i == sc["reload_at"]:  # resume from a checkpoint: the rest must equal the uninterrupted run
            sd = {k: v.clone() for k, v in ebc.state_dict().items()}
            ebc = build()
            ebc.load_state_dict(sd)
        if sc["manual"] and tick:
            dynamic.advance(ebc, "t")
            model.advance()
        table = (ebc.embeddings if sc["sequence"] else ebc.embedding_bags)["t"]
        distinct = list(dict.fromkeys(ids))
        weights = torch.rand(len(ids), generator=gen) * 2 - 0.5
        kjt = KeyedJaggedTensor(["f"], torch.tensor(ids, dtype=torch.int64), lengths=torch.tensor(lengths),
                                weights=weights)
        fits = model.fits(distinct)
        if eval_first or not fits:
            before = {k: v.clone() for k, v in ebc.state_dict().items()}
        if eval_first:
            ebc.eval()
            with torch.no_grad():
                # a row past max_age that no sweep freed yet is missed too
                held = torch.tensor([r if r >= 0 and not model.stale(r) else -1
                                     for r in (model.rows.get(x, -1) for x in ids)])
                want = pool(model.ref.w, held, lengths, sc, weights, default)
                torch.testing.assert_close(run(ebc, kjt).double(), want, rtol=1e-5, atol=1e-5)
            ebc.train()
            assert_unchanged(ebc, before, "an eval forward")
        if not fits:
            with pytest.raises(CapacityError):
                run(ebc, kjt)
            assert_unchanged(ebc, before, "a refused batch")
            continue
        rows = model.resolve(distinct)
        out = run(ebc, kjt)
        got_rows = dynamic.lookup(ebc, "t", torch.tensor(distinct, dtype=torch.int64)).tolist()
        assert got_rows == rows, f"step {i}: rows of {distinct}"
        live = torch.tensor([rows[distinct.index(x)] for x in ids])
        torch.testing.assert_close(out.detach().double(), pool(model.ref.w, live, lengths, sc, weights),
                                   rtol=1e-5, atol=1e-5)
        g = torch.randn(out.shape, generator=gen)
        (out * g).sum().backward()
        # each lookup's gradient: its bag's (pooled) or its own (sequence), merged per row
        per_lookup = g.double() if sc["sequence"] else g.double()[bags(lengths)] * lookup_scale(lengths, sc, weights)
        merged = torch.zeros_like(model.ref.w)
        merged.index_add_(0, live[live >= 0], per_lookup[live >= 0])
        touched = torch.tensor(sorted(set(rows) - {-1}), dtype=torch.int64)
        model.ref.step(touched, merged[touched])
        torch.testing.assert_close(table.weight.detach().double(), model.ref.w, rtol=1e-5, atol=1e-5,
                                   msg=f"step {i}: weights")
        if model.ref.state.shape[1]:
            torch.testing.assert_close(table.optimizer_state.detach().double(), model.ref.state, rtol=1e-5,
                                       atol=1e-6, msg=f"step {i}: optimizer state")
        s = dynamic.stats(ebc, "t")
        assert (s.rows, s.step) == (len(model.rows), model.step)
