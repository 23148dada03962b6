"""Dynamic-ID tables (issue 4, RecIS HashTable): admission, eval lookups, eviction, parity of training
with a float64 torch reference under the ID→row mapping, bit-exact checkpoints that resume
identically, bounded memory, and named errors for bad configs and checkpoints."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

import recgo
from recgo import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor, dynamic
from recgo.dynamic import DynamicConfig
from recgo.errors import InvalidInputError, NotFoundError
from recgo.modules import SGD, Adagrad, Adam, AdamW, RowWiseAdagrad
from threaded import run_threads

M64 = (1 << 64) - 1


def _mix(x: int) -> int:
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def init_vector(id_: int, seed: int, lo: float, hi: float, dim: int) -> torch.Tensor:
    """Python re-implementation of engine/dynamic.InitVector (splitmix64 stream keyed by seed and ID)."""
    x = _mix((id_ & M64) ^ _mix(seed)) | 1
    lo32, hi32 = torch.tensor(lo, dtype=torch.float32), torch.tensor(hi, dtype=torch.float32)
    span = hi32 - lo32
    out = torch.empty(dim, dtype=torch.float32)
    for j in range(dim):
        x = (x + 0x9E3779B97F4A7C15) & M64
        u = torch.tensor((_mix(x) >> 40) / float(1 << 24), dtype=torch.float32)
        out[j] = lo32 + span * u
    return out


def make(dim: int = 4, bound: int = 16, optimizer=SGD(lr=0.1), features=("f",), pooling: str = "sum",
         **dyn) -> EmbeddingBagCollection:
    cfg = EmbeddingBagConfig(name="t", embedding_dim=dim, num_embeddings=bound, feature_names=list(features),
                             pooling=pooling, dynamic=DynamicConfig(**dyn))
    return dynamic.attach(EmbeddingBagCollection([cfg], optimizer=optimizer))


def kjt(features: dict[str, list[list[int]]]) -> KeyedJaggedTensor:
    keys = list(features)
    values = [i for k in keys for bag in features[k] for i in bag]
    lengths = [len(bag) for k in keys for bag in features[k]]
    return KeyedJaggedTensor(keys, torch.tensor(values, dtype=torch.int64), lengths=torch.tensor(lengths, dtype=torch.int64))


@pytest.mark.parametrize("kwargs, match", [
    (dict(min_count=-1), "min_count"),
    (dict(min_count=300), "min_count"),
    (dict(eviction="fifo"), "eviction"),
    (dict(evict_fraction=-0.1), "evict_fraction"),
    (dict(evict_fraction=1.5), "evict_fraction"),
    (dict(evict_fraction="half"), "evict_fraction must be a number"),
    (dict(max_age=-3), "max_age"),
    (dict(num_embeddings=0), "num_embeddings"),
    (dict(num_embeddings=-4), "num_embeddings"),
    (dict(num_embeddings=2**31), r"num_embeddings 2147483648 out of range \(at most 2147483647\)"),
    (dict(max_age=2**40), r"max_age 1099511627776 out of range \(at most 2147483647\)"),
    (dict(memory_bytes=-1), "memory_bytes"),
    (dict(num_embeddings=None, memory_bytes=100), "holds no row"),
    (dict(init_min=0.1), "both init_min and init_max"),
    (dict(default=[1.0, 2.0]), "default vector has 2 values"),
    (dict(init_min=1.0, init_max=-1.0), "init range"),
    (dict(default=[0.0, float("nan"), 0.0, 0.0]), "default vector value 1"),
    (dict(seed=2**64), "seed must be below 2\\*\\*64"),  # was seed 0 in silence (ctypes' uint64)
])
def test_bad_config_raises_named_error(kwargs, match) -> None:
    cfg = EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=8, feature_names=["f"],
                             dynamic=DynamicConfig(**kwargs))
    with pytest.raises(InvalidInputError, match=match):
        EmbeddingBagCollection([cfg])


def test_bound_and_init_range_come_from_the_table_config_unless_overridden() -> None:
    def build(**dyn) -> EmbeddingBagCollection:
        cfg = EmbeddingBagConfig(name="t", embedding_dim=3, num_embeddings=100, feature_names=["f"],
                                 weight_init_min=-0.25, weight_init_max=0.75, dynamic=DynamicConfig(seed=4, **dyn))
        return dynamic.attach(EmbeddingBagCollection([cfg], optimizer=SGD(lr=0.1)))

    ebc = build()
    out = ebc(kjt({"f": [[42]]})).values()
    assert dynamic.stats(ebc, "t").num_embeddings == 100
    torch.testing.assert_close(out[0], init_vector(42, 4, -0.25, 0.75, 3), rtol=0, atol=0)
    ebc = build(num_embeddings=7, init_min=0.0, init_max=0.0)
    out = ebc(kjt({"f": [[42]]})).values()
    assert dynamic.stats(ebc, "t").num_embeddings == 7
    assert torch.count_nonzero(out) == 0
    assert ebc.embedding_bags["t"].weight.shape == (7, 3), "the parameter spans the bound"


def test_one_config_may_serve_several_tables_each_with_its_own_rows() -> None:
    """A DynamicConfig reused for two tables builds two independent tables (each takes its bound from its
    own table config); it used to free the first table's builder when the second was made."""
    dyn = DynamicConfig(min_count=1, seed=4)
    cfgs = [EmbeddingBagConfig(100, 4, "t0", ["a"], dynamic=dyn), EmbeddingBagConfig(50, 4, "t1", ["b"], dynamic=dyn)]
    ebc = EmbeddingBagCollection(cfgs, optimizer=SGD(lr=0.1))
    ebc(kjt({"a": [[1, 2]], "b": [[3]]})).values().sum().backward()
    assert (dynamic.stats(ebc, "t0").rows, dynamic.stats(ebc, "t1").rows) == (2, 1)
    assert (dynamic.stats(ebc, "t0").num_embeddings, dynamic.stats(ebc, "t1").num_embeddings) == (100, 50)
    again = EmbeddingBagCollection(cfgs, optimizer=SGD(lr=0.1))  # and again for another collection
    assert dynamic.stats(again, "t0").rows == 0


@pytest.mark.parametrize("kind", ["ebc", "ec"])
def test_lookup_stats_only_looks(kind: str) -> None:
    """lookup_stats (monitoring) admits no ID to a dynamic table and leaves its clock, also in training mode."""
    if kind == "ebc":
        m = EmbeddingBagCollection([EmbeddingBagConfig(100, 4, "t", ["a"], dynamic=DynamicConfig(min_count=1))],
                                   optimizer=SGD(lr=0.1))
    else:
        m = recgo.EmbeddingCollection([recgo.EmbeddingConfig(100, 4, "t", ["a"], dynamic=DynamicConfig(min_count=1))],
                                      optimizer=SGD(lr=0.1))
    batch = kjt({"a": [[11, 12, 11]]})
    assert m.training
    assert m.lookup_stats(batch) == m.lookup_stats(batch) == {"t": (2, 3)}
    s = dynamic.stats(m, "t")
    assert (s.rows, s.step, s.admitted) == (0, 0, 0)
    assert dynamic.lookup(m, "t", torch.tensor([11, 12])).tolist() == [-1, -1]


def test_a_memory_bound_too_small_for_one_row_names_the_table_and_its_dim() -> None:
    with pytest.raises(InvalidInputError, match=r'dynamic table "small": memory bound of 100 bytes holds no row: '
                                                r"the smallest table of dim 3 .* takes \d+ bytes"):
        EmbeddingBagCollection([EmbeddingBagConfig(10, 3, "small", ["a"], dynamic=DynamicConfig(memory_bytes=100))],
                               optimizer=Adagrad(lr=0.1))


def test_memory_bound_sets_the_row_bound_and_default_init() -> None:
    cfg = EmbeddingBagConfig(name="t", embedding_dim=16, num_embeddings=0, feature_names=["f"],
                             dynamic=DynamicConfig(memory_bytes=1 << 20, seed=3))
    ebc = dynamic.attach(EmbeddingBagCollection([cfg], optimizer=Adam(lr=0.01)))
    s = dynamic.stats(ebc, "t")
    assert s.reserved_bytes <= 1 << 20
    per_row = (16 + 32) * 4 + 20 + 16  # weights, Adam state, metadata, eviction scratch; + the ID map's slots
    assert (1 << 20) // (per_row + 128) < s.num_embeddings < (1 << 20) // per_row
    assert ebc.embedding_bags["t"].weight.shape == (s.num_embeddings, 16)
    out = ebc(kjt({"f": [[5]]})).values()
    scale = math.sqrt(1.0 / s.num_embeddings)
    torch.testing.assert_close(out[0], init_vector(5, 3, -scale, scale, 16), rtol=0, atol=0)


def test_admission_eval_and_initial_vectors() -> None:
    ebc = make(dim=3, bound=8, min_count=2, seed=11, init_min=-0.5, init_max=0.5)
    batch = kjt({"f": [[10, 20], [30]]})
    assert torch.count_nonzero(ebc(batch).values()) == 0, "first sighting: not admitted, pools zeros"
    ebc.eval()
    assert torch.count_nonzero(ebc(batch).values()) == 0
    assert dynamic.stats(ebc, "t").rows == 0, "eval lookups insert nothing"
    assert dynamic.lookup(ebc, "t", torch.tensor([10, 30])).tolist() == [-1, -1]
    ebc.train()
    out = ebc(kjt({"f": [[10], [99]]})).values()
    rows = dynamic.lookup(ebc, "t", torch.tensor([10, 20, 30, 99])).tolist()
    assert rows[0] >= 0 and rows[1:] == [-1, -1, -1], "10 seen in two batches, the others once"
    torch.testing.assert_close(out[0], init_vector(10, 11, -0.5, 0.5, 3), rtol=0, atol=0)
    assert torch.count_nonzero(out[1]) == 0
    weight = ebc.embedding_bags["t"].weight
    torch.testing.assert_close(weight[rows[0]].detach(), init_vector(10, 11, -0.5, 0.5, 3), rtol=0, atol=0)
    s = dynamic.stats(ebc, "t")
    assert (s.rows, s.high_water, s.num_embeddings, s.step, s.admitted, s.evicted) == (1, 1, 8, 2, 1, 0)


def test_eval_default_vector() -> None:
    ebc = make(dim=2, bound=4, default=[0.5, -2.0])
    ebc(kjt({"f": [[1]]}))  # admits 1
    ebc.eval()
    out = ebc(kjt({"f": [[7], [7, 8], [1]]})).values()
    torch.testing.assert_close(out[0], torch.tensor([0.5, -2.0]))
    torch.testing.assert_close(out[1], torch.tensor([1.0, -4.0]), msg="two unseen IDs: default twice")
    assert torch.equal(out[2], ebc.embedding_bags["t"].weight[0].detach())
    assert dynamic.stats(ebc, "t").rows == 1


@pytest.mark.filterwarnings("ignore:dynamic-ID tables trained by a torch optimizer")
@pytest.mark.parametrize("optimizer", [SGD(lr=0.5), Adam(lr=0.1), None], ids=["SGD", "Adam", "torch"])
def test_default_row_is_never_trained_and_not_a_parameter_row(optimizer) -> None:
    """Eval mode with grad enabled: unseen IDs pool the default vector, and backward leaves it alone."""
    ebc = make(dim=2, bound=4, default=[0.5, -2.0], optimizer=optimizer)
    assert ebc.embedding_bags["t"].weight.shape == (4, 2), "the weight has num_embeddings rows, default apart"
    if isinstance(optimizer, Adam):
        assert ebc.embedding_bags["t"].optimizer_state.shape == (4, 4)
    ebc(kjt({"f": [[1]]}))  # admits 1
    ebc.eval()
    assert dynamic.lookup(ebc, "t", torch.tensor([1, 7])).tolist() == [0, -1], "unseen IDs read -1"
    for _ in range(3):
        out = ebc(kjt({"f": [[7], [7, 8], [1]]})).values()
        torch.testing.assert_close(out[0], torch.tensor([0.5, -2.0]), rtol=0, atol=0)
        if optimizer is None:
            grads = torch.autograd.grad(out.sum(), [ebc.embedding_bags["t"].weight])
            assert grads[0].shape == (4, 2) and torch.count_nonzero(grads[0][1:]) == 0
            assert torch.equal(grads[0][0], torch.ones(2)), "only the admitted row has a gradient"
        else:
            out.sum().backward()
    out = ebc(kjt({"f": [[9]]})).values()
    torch.testing.assert_close(out[0], torch.tensor([0.5, -2.0]), rtol=0, atol=0,
                               msg="the default vector drifted: backward trained it")
    assert dynamic.stats(ebc, "t").rows == 1


def test_lookups_of_wrong_tables_raise() -> None:
    fixed = EmbeddingBagConfig(name="fixed", embedding_dim=2, num_embeddings=4, feature_names=["g"])
    dyn = EmbeddingBagConfig(name="d", embedding_dim=2, num_embeddings=4, feature_names=["f"],
                             dynamic=DynamicConfig())
    with pytest.warns(UserWarning, match="fused optimizer"):
        ebc = dynamic.attach(EmbeddingBagCollection([fixed, dyn]))
    with pytest.raises(InvalidInputError, match="not a dynamic-ID table"):
        dynamic.stats(ebc, "fixed")
    with pytest.raises(NotFoundError, match="nope"):
        dynamic.stats(ebc, "nope")
    with pytest.raises(InvalidInputError, match="ids"):
        dynamic.lookup(ebc, "d", torch.tensor([[1, 2]]))
    assert dynamic.stats(ebc, 1).num_embeddings == 4


def test_batch_with_more_ids_than_the_bound_is_a_capacity_error() -> None:
    ebc = make(dim=2, bound=3)
    with pytest.raises(recgo.CapacityError, match="raise the row bound"):
        ebc(kjt({"f": [[1, 2], [3, 4]]}))


class Float64Reference:
    """A dynamic table trained in float64 torch: a dict id → weights/state, following the engine's
    ID→row mapping (rows it gives, keeps or evicts) and A's documented fused optimizer formulas."""

    def __init__(self, ebc: EmbeddingBagCollection, opt, seed: int, lo: float, hi: float) -> None:
        self.ebc, self.opt, self.seed, self.lo, self.hi = ebc, opt, seed, lo, hi
        self.dim = ebc.embedding_bag_configs()[0].embedding_dim
        self.w: dict[int, torch.Tensor] = {}
        self.s: dict[int, torch.Tensor] = {}
        self.step = 0

    def sync(self) -> None:
        """Follow admissions and evictions the last engine forward made."""
        st_ = dynamic.export_state(self.ebc, "t")
        hw = int(st_["dynamic_meta"][7])
        live = {int(i) for i, c in zip(st_["dynamic_ids"][:hw].tolist(), st_["dynamic_counts"][:hw].tolist()) if c}
        for gone in set(self.w) - live:
            del self.w[gone], self.s[gone]
        width = self.opt.state_width(self.dim)
        for new in live - set(self.w):
            self.w[new] = init_vector(new, self.seed, self.lo, self.hi, self.dim).double()
            self.s[new] = torch.zeros(width, dtype=torch.float64)

    def forward(self, bags: dict[str, list[list[int]]], mean: bool) -> torch.Tensor:
        cols = []
        for f, fb in bags.items():
            out = torch.zeros(len(fb), self.dim, dtype=torch.float64)
            for b, bag in enumerate(fb):
                for i in bag:
                    if i in self.w:
                        out[b] += self.w[i]
                if mean and bag:
                    out[b] /= len(bag)
            cols.append(out)
        return torch.cat(cols, dim=1)

    def backward(self, bags: dict[str, list[list[int]]], mean: bool, grad: torch.Tensor) -> None:
        g: dict[int, torch.Tensor] = {}
        for fi, fb in enumerate(bags.values()):
            for b, bag in enumerate(fb):
                for i in bag:
                    if i in self.w:
                        scale = 1.0 / len(bag) if mean else 1.0
                        g[i] = g.get(i, 0) + grad[b, fi * self.dim:(fi + 1) * self.dim].double() * scale
        self.step += 1
        o = self.opt
        for i, gi in g.items():
            w, s = self.w[i], self.s[i]
            if isinstance(o, SGD):
                w -= o.lr * gi
            elif isinstance(o, RowWiseAdagrad):
                s += (gi * gi).mean()
                w -= o.lr * gi / (s.sqrt() + o.eps)
            elif isinstance(o, Adagrad):
                s += gi * gi
                w -= o.lr * gi / (s.sqrt() + o.eps)
            else:  # Adam, AdamW
                d = self.dim
                m, v = s[:d], s[d:]
                if o.weight_decay:
                    if isinstance(o, AdamW):
                        w *= 1 - o.lr * o.weight_decay
                    else:
                        gi = gi + o.weight_decay * w
                m.mul_(o.beta1).add_((1 - o.beta1) * gi)
                v.mul_(o.beta2).add_((1 - o.beta2) * gi * gi)
                bc1, bc2 = 1 - o.beta1 ** self.step, 1 - o.beta2 ** self.step
                w -= (o.lr / bc1) * m / (v.sqrt() / math.sqrt(bc2) + o.eps)


@pytest.mark.parametrize("opt, pooling", [
    (SGD(lr=0.1), "sum"),
    (Adagrad(lr=0.1), "mean"),
    (RowWiseAdagrad(lr=0.1), "sum"),
    (Adam(lr=0.01, weight_decay=0.01), "sum"),
    (AdamW(lr=0.01), "mean"),
])
def test_training_matches_float64_reference(opt, pooling) -> None:
    """Admission (min_count 2), LRU eviction and the fused optimizers: the engine's outputs, weights and
    optimizer state track a float64 torch model that follows the engine's ID→row mapping."""
    dim, bound, seed = 4, 12, 5
    ebc = make(dim=dim, bound=bound, optimizer=opt, features=("a", "b"), pooling=pooling, min_count=2,
               evict_fraction=0.25, seed=seed, init_min=-0.2, init_max=0.2)
    ref = Float64Reference(ebc, opt, seed, -0.2, 0.2)
    gen = torch.Generator().manual_seed(3)
    mean = pooling == "mean"
    for step in range(40):
        bags = {f: [[int(x) * 7919 - 50 for x in torch.randint(0, 20, (int(n),), generator=gen)]
                    for n in torch.randint(0, 4, (3,), generator=gen)] for f in ("a", "b")}
        out = ebc(kjt(bags)).values()
        ref.sync()
        torch.testing.assert_close(out.double(), ref.forward(bags, mean), rtol=1e-5, atol=1e-6,
                                   msg=f"step {step}: pooled output")
        grad = torch.randn(out.shape, generator=gen)
        out.backward(grad)
        ref.backward(bags, mean, grad)
        if not ref.w:
            continue
        ids = torch.tensor(sorted(ref.w), dtype=torch.int64)
        rows = dynamic.lookup(ebc, "t", ids)
        assert bool((rows >= 0).all())
        holder = ebc.embedding_bags["t"]
        got_w = holder.weight.detach()[rows].double()
        torch.testing.assert_close(got_w, torch.stack([ref.w[i] for i in ids.tolist()]), rtol=1e-4, atol=1e-5,
                                   msg=f"step {step}: weights")
        if opt.state_width(dim):
            got_s = holder.optimizer_state.detach()[rows].double()
            torch.testing.assert_close(got_s, torch.stack([ref.s[i] for i in ids.tolist()]), rtol=1e-4,
                                       atol=1e-6, msg=f"step {step}: optimizer state")
    s = dynamic.stats(ebc, "t")
    assert s.evicted > 0 and s.rows == len(ref.w), "the run exercised eviction"


def train_batches(ebc: EmbeddingBagCollection, steps: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    outs = []
    for _ in range(steps):
        bags = {"f": [[int(x) for x in torch.randint(0, 40, (int(n),), generator=gen)]
                      for n in torch.randint(0, 5, (4,), generator=gen)]}
        out = ebc(kjt(bags)).values()
        out.backward(torch.randn(out.shape, generator=gen))
        outs.append(out.detach().clone())
    return outs


def assert_state_dicts_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_memory_stops_growing_once_the_bound_is_reached() -> None:
    """A stream of ever-new IDs through a small bound: committed storage plateaus at the bound."""
    dim, bound = 16, 2048
    ebc = make(dim=dim, bound=bound, optimizer=RowWiseAdagrad(lr=0.1), min_count=1, evict_fraction=0.05)
    gen = torch.Generator().manual_seed(0)
    resident, rss = [], []
    next_id = 1 << 40
    for step in range(300):
        hot = torch.randint(0, 1000, (64,), generator=gen)
        fresh = torch.arange(next_id, next_id + 64)
        next_id += 64
        batch = KeyedJaggedTensor(["f"], torch.cat([hot, fresh]), lengths=torch.full((32,), 4, dtype=torch.int64))
        out = ebc(batch).values()
        out.sum().backward()
        resident.append(dynamic.stats(ebc, "t").resident_bytes)
        rss.append(_rss_bytes())
    s = dynamic.stats(ebc, "t")
    assert s.high_water == bound and s.evicted > 0
    assert resident[-1] == resident[150], "no growth after the table filled (by step ~40)"
    per_row = (dim + 1 + 4) * 4  # weights, row-wise state, metadata
    assert resident[-1] <= bound * per_row + 8 * 4096
    # The whole process too: 150 more steps of constant eviction may not grow it measurably (a leak of
    # ~100 KB per step would show; the table itself is ~0.2 MB).
    assert rss[-1] - rss[150] < 16 << 20, f"process RSS grew {(rss[-1] - rss[150]) / 2**20:.1f} MiB"


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@settings(max_examples=25, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.lists(st.integers(-5, 30), min_size=1, max_size=6, unique=True)),
                    min_size=1, max_size=25),
       min_count=st.integers(1, 3), policy=st.sampled_from(["lru", "lfu"]))
def test_id_map_invariants_and_export_import(ops, min_count, policy) -> None:
    ebc = make(dim=2, bound=6, min_count=min_count, eviction=policy, evict_fraction=0.5)
    for train, ids in ops:
        before = dynamic.stats(ebc, "t")
        rows = dynamic.lookup(ebc, "t", torch.tensor(ids), train=train).tolist()
        live = [r for r in rows if r >= 0]
        assert len(set(live)) == len(live), "distinct IDs get distinct rows"
        assert all(-1 <= r < 6 for r in rows)
        if not train:
            assert dynamic.stats(ebc, "t") == before, "eval lookups change nothing"
        else:
            assert rows == dynamic.lookup(ebc, "t", torch.tensor(ids)).tolist()
    other = make(dim=2, bound=6, min_count=min_count, eviction=policy, evict_fraction=0.5)
    other.load_state_dict(ebc.state_dict())
    assert_state_dicts_equal(ebc.state_dict(), other.state_dict())


def test_concurrent_lookups_from_threads() -> None:
    ebc = make(dim=2, bound=64, min_count=2, evict_fraction=0.1, manual_step=True)

    def worker(seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        for _ in range(100):
            ids = torch.unique(torch.randint(0, 500, (16,), generator=gen))
            rows = dynamic.lookup(ebc, "t", ids, train=True)
            assert bool(((rows >= -1) & (rows < 64)).all())
            dynamic.advance(ebc, "t")

    run_threads(4, worker, switch_interval=None)  # raises what a thread raised
    sd = ebc.state_dict()
    hw = int(sd["embedding_bags.t.dynamic_meta"][7])
    ids = sd["embedding_bags.t.dynamic_ids"][:hw]
    counts = sd["embedding_bags.t.dynamic_counts"][:hw]
    live = ids[counts > 0]
    rows = dynamic.lookup(ebc, "t", live)
    assert torch.equal(rows, torch.nonzero(counts > 0).flatten()), "ID map and row owners agree"


def test_attach_is_idempotent_and_callable_per_table() -> None:
    ebc = make(dim=2, bound=16)
    cfg = ebc.embedding_bag_configs()[0]
    cfg.dynamic.attach(ebc, 0)  # what the collection itself may call
    dynamic.attach(ebc)
    train_batches(ebc, 3, seed=5)
    sd = ebc.state_dict()
    assert sum(k.endswith("dynamic_meta") for k in sd) == 1
    other = make(dim=2, bound=16)
    other.load_state_dict(sd)
    assert_state_dicts_equal(sd, other.state_dict())


def test_collection_attaches_dynamic_tables_itself() -> None:
    """A plain EmbeddingBagCollection (no explicit dynamic.attach) checkpoints its ID maps."""
    cfg = EmbeddingBagConfig(name="t", embedding_dim=2, num_embeddings=16, feature_names=["f"],
                             dynamic=DynamicConfig())
    ebc = EmbeddingBagCollection([cfg], optimizer=SGD(lr=0.1))
    train_batches(ebc, 3, seed=7)
    sd = ebc.state_dict()
    assert "embedding_bags.t.dynamic_ids" in sd and "embedding_bags.t.dynamic_meta" in sd
    other = EmbeddingBagCollection([EmbeddingBagConfig(name="t", embedding_dim=2, num_embeddings=16,
                                                       feature_names=["f"], dynamic=DynamicConfig())],
                                   optimizer=SGD(lr=0.1))
    other.load_state_dict(sd)
    assert_state_dicts_equal(sd, other.state_dict())


@pytest.mark.parametrize("kind", ["pooled", "sequence", "sharded"])
def test_gradient_accumulation_across_a_readmission_leaves_the_new_incarnation_alone(tmp_path: Path, kind: str) -> None:
    """Three micro-batches' forwards before their backward: the second evicts the IDs the first looked up,
    the third re-admits them (re-initialised) into the same rows. The first's gradients belong to the
    evicted incarnation and are dropped: the rows move by the third's gradient only (float64 reference:
    the fresh rows minus lr × 1). The owner compared the rows' IDs only and applied the stale gradient."""
    dyn = DynamicConfig(evict_fraction=1.0, init_min=-0.5, init_max=0.5)
    if kind == "sharded":
        import torch.distributed as dist
        from recgo.distributed import ShardedEmbeddingBagCollection
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        if kind == "sequence":
            coll: torch.nn.Module = recgo.EmbeddingCollection([recgo.EmbeddingConfig(2, 2, "t", ["f"], dynamic=dyn)],
                                                              optimizer=SGD(lr=0.5))
        else:
            coll = EmbeddingBagCollection([EmbeddingBagConfig(2, 2, "t", ["f"], dynamic=dyn)], optimizer=SGD(lr=0.5))
            if kind == "sharded":
                coll = ShardedEmbeddingBagCollection.from_ebc(coll)

        def out(ids: list[int]) -> torch.Tensor:
            res = coll(KeyedJaggedTensor(["f"], torch.tensor(ids), lengths=torch.ones(len(ids), dtype=torch.int64)))
            return res["f"].values() if kind == "sequence" else res.values()

        first = out([1, 2])
        rows = dynamic.lookup(coll, "t", torch.tensor([1, 2]))
        second = out([3, 4])  # evicts 1 and 2
        third = out([1, 2])  # evicts 3 and 4; 1 and 2 come back, re-initialised, to their rows
        assert torch.equal(dynamic.lookup(coll, "t", torch.tensor([1, 2])), rows)
        weight = (coll.embeddings if kind == "sequence" else coll.embedding_bags)["t"].weight
        want = weight.detach()[rows].double() - 0.5  # SGD lr 0.5, gradient 1
        (10 * first.sum() + 10 * second.sum() + third.sum()).backward()
        torch.testing.assert_close(weight.detach()[rows].double(), want, rtol=0, atol=1e-6)
    finally:
        if kind == "sharded":
            dist.destroy_process_group()


@pytest.mark.parametrize("sequence", [False, True])
def test_gradient_accumulation_across_an_eviction_leaves_the_new_owner_alone(sequence: bool) -> None:
    """Two micro-batches' forwards, one loss, one backward: the second forward's admission evicts a
    row the first looked up; the first's gradient for the evicted ID is dropped, not written into the
    row's new owner (which moves by its own gradient only: SGD, lr 1, gradient 1)."""
    cfg = EmbeddingBagConfig(4, 2, "t", ["f"], dynamic=DynamicConfig(eviction="lfu", evict_fraction=0.25))
    if sequence:
        coll: torch.nn.Module = recgo.EmbeddingCollection([recgo.EmbeddingConfig(4, 2, "t", ["f"], dynamic=cfg.dynamic)],
                                                          optimizer=SGD(lr=1.0))
    else:
        coll = EmbeddingBagCollection([cfg], optimizer=SGD(lr=1.0))

    def out(ids: list[int]) -> torch.Tensor:
        kjt = KeyedJaggedTensor(["f"], torch.tensor(ids), lengths=torch.tensor([len(ids)]))
        res = coll(kjt)
        return res["f"].values() if sequence else res.values()

    first = out([11, 12, 13, 14])  # fills the table
    second = out([15])  # evicts one of 11..14 for 15
    assert dynamic.stats(coll, "t").evicted == 1
    row = int(dynamic.lookup(coll, "t", torch.tensor([15]))[0])
    weight = (coll.embeddings if sequence else coll.embedding_bags)["t"].weight
    before = weight.detach()[row].clone()
    (10 * first.sum() + second.sum()).backward()
    torch.testing.assert_close(weight.detach()[row], before - 1)

