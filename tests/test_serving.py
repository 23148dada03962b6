"""Serving a trained recgo model: eval forwards under ``torch.no_grad`` / ``torch.inference_mode``
checked against float64 torch on the state dict's weights, a serving thread beside a training one (the
concurrency contract), dynamic-ID tables in eval from several threads, a sharded model's checkpoint
loaded into a one-process model, and the routes that do not take a recgo collection (``torch.jit.trace``,
TorchRec's quantization) saying so or documented. ``test_serving_export.py`` has the exported and
compiled programs."""

from __future__ import annotations

import copy
import gc
import threading
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import recgo
from recgo import _debug
from recgo.errors import InvalidInputError
from recgo.modules import optim
from spawned import one_rank

C = recgo.EmbeddingBagConfig
L = torch.tensor


def _kjt(values: list[int], lengths: list[int], weights: list[float] | None = None,
         keys: tuple[str, ...] = ("f", "g")) -> recgo.KeyedJaggedTensor:
    return recgo.KeyedJaggedTensor(list(keys), L(values, dtype=torch.int64),
                                   None if weights is None else L(weights, dtype=torch.float32),
                                   lengths=L(lengths, dtype=torch.int64))


def _collection(weighted: bool = False, opt: optim.FusedOptimizer | None = None) -> recgo.EmbeddingBagCollection:
    return recgo.EmbeddingBagCollection([C(100, 8, "t", ["f"]), C(50, 4, "u", ["g"], pooling="mean")],
                                        is_weighted=weighted, optimizer=opt, seed=0)


def _reference(ebc: recgo.EmbeddingBagCollection, kjt: recgo.KeyedJaggedTensor) -> torch.Tensor:
    """The pooled output in float64 torch from the state dict's weights (per-ID weights scale each row;
    MEAN divides by the bag's length, as TorchRec's weighted MEAN does)."""
    sd = ebc.state_dict()
    parts = kjt.to_dict()
    out = []
    for key, table, mean in (("f", "t", False), ("g", "u", True)):
        jt = parts[key]
        w = sd[f"embedding_bags.{table}.weight"].double()
        lengths = jt.lengths()
        psw = jt.weights_or_none()
        pooled = F.embedding_bag(jt.values(), w, jt.offsets()[:-1], mode="sum",
                                 per_sample_weights=None if psw is None else psw.double())
        if mean:
            pooled = pooled / lengths.clamp(min=1).unsqueeze(1).double()
        out.append(pooled)
    return torch.cat(out, 1)


_BATCHES = [([1, 2, 3, 4, 5], [2, 1, 1, 1]),  # 2 samples
            ([7], [1, 0]),  # one sample, an empty bag
            ([], [0, 0]),  # one sample, no IDs
            ([], []),  # no sample
            ([i % 100 for i in range(30_000)], [3] * 5_000 + [3] * 5_000)]  # 5,000 samples (u: IDs < 50)


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
@pytest.mark.parametrize("weighted", [False, True])
def test_eval_forwards_equal_float64_torch_and_change_nothing(mode, weighted: bool) -> None:
    ebc = _collection(weighted, optim.Adagrad(lr=0.1))
    gen = torch.Generator().manual_seed(0)
    for v, lengths in _BATCHES[:2]:  # trained: the weights served are not the initial ones
        w = torch.rand(len(v), generator=gen).tolist() if weighted else None
        ebc(_kjt(v, lengths, w)).values().square().sum().backward()
    ebc.eval()
    before = {k: t.clone() for k, t in ebc.state_dict().items()}
    for v, lengths in _BATCHES:
        v = [x % 50 if i >= sum(lengths[: len(lengths) // 2]) else x for i, x in enumerate(v)]  # u has 50 rows
        w = torch.rand(len(v), generator=gen).tolist() if weighted else None
        kjt = _kjt(v, lengths, w)
        with mode():
            out = ebc(kjt).values()
        assert out.shape == (len(lengths) // 2, 12) and not out.requires_grad
        torch.testing.assert_close(out.double(), _reference(ebc, kjt), rtol=0, atol=1e-6)
    after = ebc.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # no step, no optimizer state moved


def test_many_eval_forwards_hold_no_engine_objects() -> None:
    ebc = _collection(opt=optim.Adagrad(lr=0.1)).eval()
    kjt = _kjt(*_BATCHES[0])
    with torch.inference_mode():
        ebc(kjt)
    gc.collect()
    handles = _debug.live_handles()
    with torch.inference_mode():
        for _ in range(2_000):
            ebc(kjt)
    gc.collect()
    assert _debug.live_handles() == handles


def test_eval_ids_out_of_range_raise_by_name() -> None:
    ebc = _collection().eval()
    for bad in (100, -1):
        with torch.no_grad(), pytest.raises(InvalidInputError, match=f'table "t": id {bad} out of range'):
            ebc(_kjt([bad, 1], [1, 0, 1, 0]))


def test_a_serving_thread_sees_whole_fused_steps_of_a_training_thread() -> None:
    """The contract: a fused step is atomic and no forward runs during one, so each output a serving
    thread computes while another thread trains equals the output after some number of steps."""
    ebc = recgo.EmbeddingBagCollection([C(400, 32, "t", ["f"]), C(300, 16, "u", ["g"])],
                                       optimizer=optim.Adam(lr=0.01), seed=0)
    gen = torch.Generator().manual_seed(1)
    train = _kjt(torch.randint(0, 300, (1024,), generator=gen).tolist(), [2] * 512)
    serve = _kjt(torch.randint(0, 300, (1024,), generator=gen).tolist(), [2] * 512)
    ref, steps = copy.deepcopy(ebc), 30
    states = []
    for k in range(steps + 1):
        with torch.no_grad():
            states.append(ref(serve).values().clone())
        if k < steps:
            ref(train).values().square().sum().backward()
    served: list[torch.Tensor] = []
    done = threading.Event()

    def serving() -> None:
        with torch.inference_mode():
            while not done.is_set() or not served:
                served.append(ebc(serve).values().clone())

    t = threading.Thread(target=serving)
    t.start()
    try:
        for _ in range(steps):
            ebc(train).values().square().sum().backward()
    finally:
        done.set()
        t.join()
    assert all(any(torch.equal(s, w) for w in states) for s in served)
    assert torch.equal(ebc.state_dict()["embedding_bags.t.weight"], ref.state_dict()["embedding_bags.t.weight"])


def test_dynamic_tables_in_eval_admit_nothing_from_several_threads() -> None:
    ebc = recgo.EmbeddingBagCollection(
        [C(16, 4, "t", ["f"], dynamic=recgo.DynamicConfig(eviction="lru", default=[0.5] * 4)), C(50, 4, "u", ["g"])],
        optimizer=optim.SGD(lr=0.1), seed=0)
    ebc(_kjt([1000, 2000, 1], [2, 1])).values().sum().backward()  # 1000 and 2000 get rows
    ebc.eval()
    before = {k: t.clone() for k, t in ebc.state_dict().items()}
    known = ebc.embedding_bags["t"].weight.detach()[recgo.dynamic.lookup(ebc, "t", L([1000]))[0]].clone()
    outs: list[torch.Tensor] = []

    def serving(first: int) -> None:
        with torch.inference_mode():
            for i in range(100):  # an unseen ID per call
                outs.append(ebc(_kjt([1000, first + i, 7, 1], [1, 1, 1, 1])).values().clone())

    threads = [threading.Thread(target=serving, args=(5_000 + 1_000 * n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for out in outs:
        assert torch.equal(out[0, :4], known) and torch.equal(out[1, :4], torch.full((4,), 0.5))
    assert torch.equal(recgo.dynamic.lookup(ebc, "t", L([1000, 2000, 5_000, 8_099])), L([0, 1, -1, -1]))
    after = ebc.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("sequence", [False, True])
def test_jit_trace_of_a_model_with_a_collection_raises_by_name(sequence: bool) -> None:
    """torch.jit.trace records torch ops; the lookup runs in Go, so the traced module made the pooled
    output from nothing: an empty tensor (with check_trace=False, an empty result for every batch)."""

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = (recgo.EmbeddingCollection([recgo.EmbeddingConfig(100, 4, "t", ["f"])], seed=0) if sequence
                        else recgo.EmbeddingBagCollection([C(100, 4, "t", ["f"])], seed=0))

        def forward(self, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            out = self.emb(recgo.KeyedJaggedTensor(["f"], values, lengths=lengths))
            return (out["f"].values() if sequence else out.values()) * 2.0

    model = Model().eval()
    with torch.no_grad(), warnings.catch_warnings(), \
            pytest.raises(InvalidInputError, match="torch.jit.trace.*to_torchrec"):
        warnings.simplefilter("ignore")  # torch's deprecation of jit.trace
        torch.jit.trace(model, (L([1, 2, 3]), L([2, 1])), check_trace=False)
    with torch.no_grad():  # the model itself still serves
        assert model(L([1, 2, 3]), L([2, 1])).shape == ((3, 4) if sequence else (2, 4))


@pytest.mark.parametrize("meta", [False, True])
def test_a_dynamic_tables_weights_load_into_a_serving_model_without_its_optimizer_state(meta: bool) -> None:
    """A dynamic-ID table trained with Adagrad: its state dict without the optimizer entries (TorchRec's
    kind, a checkpoint trimmed for serving), or the whole one into a model built without an optimizer,
    raised ("the checkpoint lacks optimizer_state"; "state_width=4 ... does not match the table's
    state_width=0"), where a fixed table loads both. Now the rows load, with a fresh optimizer's zeros
    where the table's optimizer keeps state."""
    def build(opt: optim.FusedOptimizer | None) -> recgo.EmbeddingBagCollection:
        return recgo.EmbeddingBagCollection(
            [C(20, 4, "t", ["f"], dynamic=recgo.DynamicConfig(eviction="lfu")), C(10, 4, "u", ["g"])],
            optimizer=opt, seed=3, device="meta" if meta else None)

    src = recgo.EmbeddingBagCollection(
        [C(20, 4, "t", ["f"], dynamic=recgo.DynamicConfig(eviction="lfu")), C(10, 4, "u", ["g"])],
        optimizer=optim.Adagrad(lr=0.1), seed=3)
    for i in range(5):
        src(_kjt([100 + i, 200, 300 * i, 1, 2], [2, 1, 1, 1])).values().square().sum().backward()
    src.eval()
    batch = _kjt([100, 200, 0, 104, 9, 3], [2, 2, 1, 1])
    with torch.no_grad():
        want = src(batch).values()
    state = src.state_dict()
    weights = {k: v for k, v in state.items() if "optimizer" not in k}
    for opt, given, strict in ((optim.Adagrad(lr=0.1), weights, True), (None, weights, True), (None, state, False)):
        dst = build(opt).eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (a dynamic table without a fused optimizer warns)
            res = dst.load_state_dict(given, strict=strict)
        assert not res.missing_keys
        with torch.no_grad():
            assert torch.equal(dst(batch).values(), want)
        assert torch.equal(recgo.dynamic.lookup(dst, "t", L([100, 200, 104, 7])),
                           recgo.dynamic.lookup(src, "t", L([100, 200, 104, 7])))
        if opt is not None:  # the imported rows' Adagrad sums start from zero
            assert not dst.embedding_bags["t"].optimizer_state.any()
    with pytest.raises(InvalidInputError):  # another optimizer's state still does not load
        build(optim.Adam(lr=0.1)).load_state_dict(state)


# -- a sharded model's checkpoint in one process ------------------------------------------------------

_TABLES = [C(30, 4, "h", ["fh"]), C(20, 8, "r", ["fr"], pooling="mean"), C(12, 4, "d", ["fd"]), C(9, 4, "w", ["fw"])]
_SHARDING = {"h": "hash", "r": "row_wise", "d": "data_parallel", "w": "table_wise"}
_KEYS = ["fh", "fr", "fd", "fw"]


def _sparse(seed: int) -> recgo.KeyedJaggedTensor:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 3, (4 * 4,), generator=gen)
    rows = [c.num_embeddings for c in _TABLES for _ in range(4)]
    ids = torch.cat([torch.randint(0, r, (int(n),), generator=gen) for r, n in zip(rows, lengths)])
    return recgo.KeyedJaggedTensor(_KEYS, ids, lengths=lengths)


class _Model(torch.nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        self.ebc = recgo.EmbeddingBagCollection(copy.deepcopy(_TABLES), optimizer=optim.Adagrad(lr=0.1), seed=seed)
        self.ec = recgo.EmbeddingCollection([recgo.EmbeddingConfig(30, 4, "s", ["fh"])], optimizer=optim.SGD(lr=0.1),
                                            seed=seed + 1)
        self.top = torch.nn.Linear(20, 1)

    def forward(self, kjt: recgo.KeyedJaggedTensor) -> torch.Tensor:
        seq = self.ec(kjt)["fh"]
        return self.top(self.ebc(kjt).values()).squeeze(1) + seq.values().sum() * 0.5


def test_a_sharded_models_state_dict_loads_into_a_one_process_model(tmp_path: Path) -> None:
    """shard_model's model saves each rank's entries under rank-tagged keys (``t.rank0_of_1.weight`` and
    the rows' ``shard_ids``). An unsharded model took them for unexpected keys: strict=True raised
    torch's missing/unexpected-keys error and strict=False loaded nothing, the tables left at their
    initial weights without a word. Now they load whole, as gather_state_dict's would."""
    torch.manual_seed(0)
    with one_rank(tmp_path):
        model = _Model(seed=1)
        sharded = recgo.distributed.shard_model(model, _SHARDING, timeout=30)
        for step in range(2):
            sharded(_sparse(step)).sum().backward()
        state = sharded.state_dict()
        gathered = recgo.distributed.gather_state_dict(sharded, optimizer_state=True)
        sharded.eval()
        with torch.no_grad():
            want = [sharded(_sparse(s)) for s in range(3, 6)]
    assert any(".rank0_of_1." in k for k in state)
    for strict in (True, False):
        serving = _Model(seed=7).eval()
        res = serving.load_state_dict(state, strict=strict)
        assert not res.missing_keys and not res.unexpected_keys
        with torch.no_grad():
            for s, w in zip(range(3, 6), want):
                torch.testing.assert_close(serving(_sparse(s)), w, rtol=0, atol=0)
        mine = serving.state_dict()
        for k, v in gathered.items():
            assert torch.equal(mine[k], v), k
    with torch.device("meta"):  # a serving model built on the meta device is materialised by the load
        meta = _Model(seed=7)
    meta.load_state_dict(state, assign=True)
    meta.eval()
    with torch.no_grad():
        torch.testing.assert_close(meta(_sparse(3)), want[0], rtol=0, atol=0)


def _split(ebc: recgo.EmbeddingBagCollection, table: str, steps: tuple[int, int] | None = None
           ) -> dict[str, torch.Tensor]:
    """Table ``table`` of ``ebc`` as two ranks' entries, each holding rows in a shuffled order."""
    sd = ebc.state_dict()
    rows = sd[f"embedding_bags.{table}.weight"].shape[0]
    perm = torch.randperm(rows, generator=torch.Generator().manual_seed(3))
    out = {}
    for r, ids in enumerate((perm[: rows // 3], perm[rows // 3:])):
        head = f"embedding_bags.{table}.rank{r}_of_2."
        out[head + "shard_ids"] = ids
        out[head + "weight"] = sd[f"embedding_bags.{table}.weight"][ids].clone()
        out[head + "optimizer_state"] = sd[f"embedding_bags.{table}.optimizer_state"][ids].clone()
        step = sd[f"embedding_bags.{table}.optimizer_step"].clone()
        out[head + "optimizer_step"] = step if steps is None else torch.full_like(step, steps[r])
    return out


def test_every_ranks_entries_merged_load_whole_and_incomplete_sets_are_refused() -> None:
    src = _collection(opt=optim.Adagrad(lr=0.1))
    for v, lengths in _BATCHES[:2]:
        src(_kjt(v, lengths)).values().square().sum().backward()
    merged = {**_split(src, "t"), **_split(src, "u")}
    want = src.state_dict()
    for strict in (True, False):
        dst = recgo.EmbeddingBagCollection([C(100, 8, "t", ["f"]), C(50, 4, "u", ["g"], pooling="mean")],
                                           optimizer=optim.Adagrad(lr=0.1), seed=5)
        dst.load_state_dict(merged, strict=strict)
        got = dst.state_dict()
        assert all(torch.equal(got[k], want[k]) for k in want)
    dst = _collection(opt=optim.Adagrad(lr=0.1))
    dst.embedding_bags["t"].weight.data.fill_(0.25)
    held = {k: t.clone() for k, t in dst.state_dict().items()}
    one_rank_only = {k: v for k, v in merged.items() if ".rank1_of_2." not in k}
    with pytest.raises(InvalidInputError, match="rank0_of_2, not every rank's of one world"):
        dst.load_state_dict(one_rank_only, strict=False)
    with pytest.raises(InvalidInputError, match="different optimizer steps"):
        dst.load_state_dict({**_split(src, "t", steps=(2, 3)), **_split(src, "u")})
    torn = dict(merged)
    torn["embedding_bags.t.rank1_of_2.shard_ids"] = torn["embedding_bags.t.rank1_of_2.shard_ids"][1:]
    with pytest.raises(InvalidInputError, match="it is no shard of this table"):
        dst.load_state_dict(torn)
    assert all(torch.equal(dst.state_dict()[k], v) for k, v in held.items())  # every refusal changed nothing
    dynamic = recgo.EmbeddingBagCollection([C(100, 8, "t", ["f"], dynamic=recgo.DynamicConfig())],
                                           optimizer=optim.Adagrad(lr=0.1), seed=0)
    with pytest.raises(InvalidInputError, match="dynamic-ID table's ID maps cannot be loaded into an unsharded"):
        dynamic.load_state_dict(_split(src, "t"), strict=False)


# -- TorchRec's quantization -------------------------------------------------------------------------

def test_torchrecs_quantization_leaves_recgo_collections_float_and_to_torchrec_quantizes() -> None:
    """As documented (docs/embedding.md, "Serving a trained model"): TorchRec's quantize_embeddings and
    quantize_inference_model swap modules by exact class, so a recgo collection stays as it is (float,
    recgo's); recgo.to_torchrec first gives TorchRec's collection, which they quantize."""
    pytest.importorskip("torchrec")
    from torchrec.inference.modules import quantize_embeddings
    from torchrec.quant.embedding_modules import EmbeddingBagCollection as QuantEBC

    model = torch.nn.ModuleDict({"ebc": _collection(opt=optim.Adagrad(lr=0.1))})
    kjt = _kjt(*_BATCHES[0])
    model["ebc"](kjt).values().square().sum().backward()
    model.eval()
    with torch.no_grad():
        want = model["ebc"](kjt).values()
    skipped = quantize_embeddings(model, dtype=torch.qint8, inplace=False)
    assert type(skipped["ebc"]) is recgo.EmbeddingBagCollection
    quantized = quantize_embeddings(recgo.to_torchrec(copy.deepcopy(model)), dtype=torch.qint8, inplace=False)
    assert type(quantized["ebc"]) is QuantEBC
    import torchrec

    tkjt = torchrec.KeyedJaggedTensor.from_lengths_sync(["f", "g"], kjt.values(), kjt.lengths())
    torch.testing.assert_close(quantized["ebc"](tkjt).values(), want, rtol=0, atol=2e-3)


def test_eval_outputs_do_not_depend_on_thread_counts() -> None:
    """Each bag is pooled by one writer in one order, so torch's and recgo's thread counts, and the
    thread a forward runs on, split the work without changing a bit of the output."""
    ebc = recgo.EmbeddingBagCollection([C(5_000, 64, "t", ["f"]), C(3_000, 24, "u", ["g"], pooling="mean")],
                                       seed=0).eval()
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(0, 30, (2 * 2_048,), generator=gen)
    kjt = recgo.KeyedJaggedTensor(["f", "g"], torch.randint(0, 3_000, (int(lengths.sum()),), generator=gen),
                                  lengths=lengths)
    torch_threads, recgo_threads = torch.get_num_threads(), recgo.num_threads()
    outs = []
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            recgo.set_num_threads(n)
            with torch.inference_mode():
                outs.append(ebc(kjt).values().clone())
            t = threading.Thread(target=lambda: outs.append(ebc(kjt).values().detach().clone()))
            t.start()
            t.join()
    finally:
        torch.set_num_threads(torch_threads)
        recgo.set_num_threads(recgo_threads)
    assert all(torch.equal(o, outs[0]) for o in outs)
