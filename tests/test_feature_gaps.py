"""FeatureEngine additions (issues 9, 11, 14): capacity limits, strict configs, a near-linear planner,
per-ID weights, crosses of more than two fields, filters on float fields, position and recency
transforms — each checked against the torch reference (recgo.feature.reference)."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import recgo
from recgo.feature import Feature, FeatureEngine, load_features
from recgo.feature.reference import reference_weighted, xxh64_bytes, xxh64_lanes


def assert_same_weighted(out: recgo.KeyedJaggedTensor, ref: dict) -> None:
    """Engine output equals the weighted reference: values, lengths and (1 where unweighted) weights."""
    assert out.keys() == list(ref)
    weighted = any(w is not None for _, _, w in ref.values())
    assert (out.weights_or_none() is not None) == weighted
    got = out.to_dict()
    pos = 0
    for k, (v, l, w) in ref.items():
        assert torch.equal(got[k].lengths(), l.to(torch.int64)), f"{k}: lengths differ"
        assert torch.equal(got[k].values(), v.to(torch.int64)), f"{k}: values differ"
        if weighted:
            gw = out.weights()[pos:pos + v.numel()]
            want = w if w is not None else torch.ones(v.numel())
            assert torch.equal(gw, want.to(torch.float32)), f"{k}: weights differ"
        pos += v.numel()


# --- capacity (issue 9) ---------------------------------------------------------------------------

def test_huge_cross_is_a_capacity_error() -> None:
    """Two bags of 60,000 IDs would cross into 3.6e9 values: refused, naming feature and size."""
    eng = FeatureEngine([Feature("a", output=False), Feature("b", output=False), Feature("ab").cross("a", "b")])
    bag = (torch.arange(60000), torch.tensor([60000]))
    with pytest.raises(recgo.CapacityError, match=r'feature "ab": cross would produce more than 268435456 values.*max_values'):
        eng({"a": bag, "b": bag})
    assert eng.max_values == 2**28


def test_max_values_is_configurable(tmp_path) -> None:
    feats = [Feature("a", output=False), Feature("b", output=False), Feature("ab").cross("a", "b").mod(7)]
    batch = {"a": (torch.arange(20), torch.tensor([20])), "b": (torch.arange(30), torch.tensor([30]))}  # 600 values
    assert FeatureEngine(feats)(batch).values().numel() == 600
    with pytest.raises(recgo.CapacityError, match="more than 500 values"):
        FeatureEngine(feats, max_values=500)(batch)
    cfg = {"max_values": 500, "features": [f.to_dict() for f in feats]}
    (tmp_path / "f.json").write_text(json.dumps(cfg))
    eng = FeatureEngine(tmp_path / "f.json")
    assert eng.max_values == 500
    with pytest.raises(recgo.CapacityError):
        eng(batch)
    assert FeatureEngine(tmp_path / "f.json", max_values=10**6)(batch).values().numel() == 600  # the argument wins
    for bad in (0, -3, 2.5, True):
        with pytest.raises(recgo.InvalidInputError, match="max_values"):
            FeatureEngine(feats, max_values=bad)


def test_a_weighted_output_past_max_values_names_its_weights() -> None:
    """The limit counts the output buffer's 8-byte words (values, lengths, weights two to a word): 300
    weighted values past a limit of 400 were said to be "300 values and 1 lengths" past it."""
    eng = FeatureEngine([Feature("a")], max_values=400)
    assert eng({"a": (torch.arange(300), torch.tensor([300]))}).values().numel() == 300
    with pytest.raises(recgo.CapacityError, match=r"300 values, 1 lengths and 300 weights \(two to a word\) take 451 "
                                                  r"8-byte words, past the limit of 400 per buffer \(max_values\)"):
        eng({"a": (torch.arange(300), torch.tensor([300]), torch.ones(300))})


# --- config validation (issue 9) -------------------------------------------------------------------

@pytest.mark.parametrize("entry,msg", [
    ({"name": "a", "ops": {"hash": 7}}, r"feature 'a': field 'ops' must be a list of ops, got a dict.*ops: \[\{'hash': 7\}\]"),
    ({"name": "a", "ops": "hash"}, r"feature 'a': field 'ops' must be a list of ops, got a str.*ops: \[hash\]"),
    ({"name": "a", "output": "false", "ops": []}, r"feature 'a': output must be true or false, got str 'false'"),
    ({"name": "a", "dtype": "int32", "ops": []}, r"feature 'a': dtype must be one of"),
    ({"name": "a", "ops": [{"sqrt": 2}]}, r"feature 'a' op 0: unknown op 'sqrt'"),
    ({"name": "a", "ops": ["hash", 7]}, r"feature 'a' op 1: cannot read op 7"),
])
def test_malformed_configs_name_feature_and_field(entry, msg) -> None:
    with pytest.raises(recgo.InvalidInputError, match=msg):
        FeatureEngine({"features": [entry]})


def test_compact_op_keeps_its_parameter() -> None:
    """``[{hash: 7}]`` is the documented short form: the seed is 7, not dropped."""
    eng = FeatureEngine({"features": [{"name": "a", "ops": [{"hash": 7}]}]})
    assert eng.features[0].ops == [{"op": "hash", "seed": 7}]
    ids = torch.tensor([1, 2])
    assert torch.equal(eng({"a": ids}).values(), FeatureEngine([Feature("a").hash(7)])({"a": ids}).values())


def test_bad_names_and_values_are_caught_by_the_engine() -> None:
    with pytest.raises(recgo.InvalidInputError, match=r"feature 0: feature name \"a\\x00b\" contains the control character U\+0000"):
        FeatureEngine([Feature("a\x00b")])
    with pytest.raises(recgo.InvalidInputError, match=r'feature "a" op 0 \(filter\): 1.5 is not an int64'):
        FeatureEngine([Feature("a").filter([1.5])])
    with pytest.raises(recgo.InvalidInputError, match=r"features\['a'\]\.ops\[0\]\.boundaries\[0\] is nan"):
        FeatureEngine([Feature("a", dtype="float").bucketize([float("nan")])])
    with pytest.raises(recgo.InvalidInputError, match="not JSON-encodable"):
        FeatureEngine([Feature("a")._add("hash", seed=object())])
    with pytest.raises(recgo.InvalidInputError, match=r"feature spec: feature 0 \(\"a\"\) op 0: field \"seed\": want a non-negative integer, got a JSON string"):
        FeatureEngine([Feature("a")._add("hash", seed="7")])
    with pytest.raises(recgo.InvalidInputError, match="unknown top-level keys"):
        load_features({"features": [], "fuse": False})


# --- planner (issue 9) -----------------------------------------------------------------------------

def test_long_chain_builds() -> None:
    """A 10,000-op chain (construction used to grow cubically with chain length) plans one group
    per op; benchmarks/features.py reports the construction time."""
    f = Feature("a")
    for i in range(2500):
        f.hash(i).mod(1 << 40).truncate(3).fill_missing(0)
    p = FeatureEngine([f, Feature("b").hash()]).plan()
    assert p.calls_before == 10001 and p.calls_after == 10000


def test_copies_and_pickles_are_independent_engines() -> None:
    """Deep copies and pickles (issue 9: copying an engine handle is a use-after-free) rebuild the
    engine from its spec, with the same limit."""
    import copy
    import gc
    import pickle

    eng = FeatureEngine([Feature("a").hash(3).mod(100)], max_values=1000)
    ids = torch.arange(10)
    want = eng({"a": ids}).values()
    dup, unpickled = copy.deepcopy(eng), pickle.loads(pickle.dumps(eng))
    assert dup._h.value != eng._h.value
    eng.close()
    del eng
    gc.collect()
    for e in (dup, unpickled):
        assert torch.equal(e({"a": ids}).values(), want) and e.max_values == 1000


def test_concurrent_calls_equal_serial() -> None:
    """One engine called from several threads at once (the documented contract) gives each call
    the serial result."""
    from concurrent.futures import ThreadPoolExecutor

    feats = [Feature("h").filter([0]).truncate(5, keep="last").hash().mod(997), Feature("x").cross("h", "h").mod(50)]
    eng = FeatureEngine(feats)
    g = torch.Generator().manual_seed(0)
    batches = [{"h": (torch.randint(0, 30, (400,), generator=g), torch.full((100,), 4), torch.rand(400, generator=g))}
               for _ in range(8)]
    want = [eng(b) for b in batches]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: eng(batches[i % 8]), range(32)))
    for i, out in enumerate(got):
        w = want[i % 8]
        assert torch.equal(out.values(), w.values()) and torch.equal(out.weights(), w.weights())


# --- helpful errors (issue 14) ----------------------------------------------------------------------

def test_list_for_int_field_suggests_bytes() -> None:
    eng = FeatureEngine([Feature("a").hash()])
    with pytest.raises(recgo.InvalidInputError, match=r'list of strings for an int64 field; declare the feature with dtype="bytes"'):
        eng({"a": ["u1", "u2"]})
    with pytest.raises(recgo.InvalidInputError, match=r"Python list for an int64 field; pass a tensor"):
        eng({"a": [1, 2]})


# --- the issue-11 transforms, by hand and against the reference --------------------------------------

def test_weights_travel_through_truncate_and_filter() -> None:
    pytest.importorskip("torchrec")
    feats = [Feature("h").filter([3]).truncate(2, keep="last").fill_missing(-1), Feature("u")]
    kjt = recgo.KeyedJaggedTensor(["h", "u"], torch.tensor([1, 3, 2, 4, 3, 7, 8]), torch.tensor([4, 1, 1, 1]),
                                  torch.tensor([0.5, 9, 2, 4, 9, 1.5, 2.5]))
    eng = FeatureEngine(feats)
    out = eng(kjt)
    assert out.values().tolist() == [2, 4, -1, 7, 8]
    assert out.weights().tolist() == [2, 4, 1, 1.5, 2.5]
    assert out.weights().dtype == torch.float32
    batch = {"h": (torch.tensor([1, 3, 2, 4, 3]), torch.tensor([4, 1]), torch.tensor([0.5, 9, 2, 4, 9])),
             "u": (torch.tensor([7, 8]), torch.ones(2, dtype=torch.int64), torch.tensor([1.5, 2.5]))}
    assert_same_weighted(eng(batch), reference_weighted(feats, batch, 2))
    assert eng(kjt.to_torchrec()).weights().tolist() == [2, 4, 1, 1.5, 2.5]
    assert eng({"h": batch["h"][:2], "u": batch["u"][0]}).weights_or_none() is None


def test_cross_of_three_fields_by_hand() -> None:
    feats = [Feature("a"), Feature("b"), Feature("c"), Feature("abc").cross("a", "b", "c", seed=5)]
    batch = {"a": (torch.tensor([1, 2]), torch.tensor([2])), "b": torch.tensor([7]), "c": (torch.tensor([4, 5, 6]), torch.tensor([3]))}
    got = FeatureEngine(feats)(batch).to_dict()["abc"].values().tolist()
    le = lambda *xs: b"".join(x.to_bytes(8, "little", signed=True) for x in xs)  # noqa: E731
    want = [xxh64_bytes(le(x, 7, z), 5) for x in (1, 2) for z in (4, 5, 6)]
    assert [v % 2**64 for v in got] == want


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 8, 9])
def test_lane_hash_is_xxh64_of_the_bytes(k: int) -> None:
    g = torch.Generator().manual_seed(k)
    lanes = [torch.randint(-(2**63), 2**63 - 1, (6,), generator=g) for _ in range(k)]
    got = xxh64_lanes(lanes, 2**64 - 3).tolist()
    for i in range(6):
        data = b"".join(int(l[i]).to_bytes(8, "little", signed=True) for l in lanes)
        assert got[i] % 2**64 == xxh64_bytes(data, 2**64 - 3)


def test_filter_on_float_fields() -> None:
    feats = [Feature("p", dtype="float").filter(range=(0, 100.5), mode="keep").bucketize([1, 10, 100]),
             Feature("q", input="p", dtype="float").filter([0.5, 7]).truncate(1).bucketize([1])]
    for dt in (torch.float32, torch.float64):
        vals = torch.tensor([-1.0, 0.5, float("nan"), 100.5, 7.0, 3.25], dtype=dt)
        batch = {"p": (vals, torch.tensor([3, 3]), torch.arange(6, dtype=torch.float32))}
        out = FeatureEngine(feats)(batch)
        d = out.to_dict()
        assert d["p"].values().tolist() == [0, 1, 1] and d["p"].lengths().tolist() == [1, 2]  # NaN, -1 and 100.5 dropped
        assert d["q"].values().tolist() == [0, 1]  # bag 0: [-1, NaN] cut to [-1]; bag 1: [100.5, 3.25] cut to [100.5]
        assert_same_weighted(out, reference_weighted(feats, batch, 2))
    with pytest.raises(recgo.InvalidInputError, match="NaN"):  # a NaN that reaches bucketize is refused
        FeatureEngine([Feature("p", dtype="float").truncate(3).bucketize([0])])(batch)


def test_position_and_recency_for_sequences() -> None:
    """Side features of a behaviour sequence from the same engine: bucketized time since each event
    (given the request time per sample) and the position counted from the latest event."""
    feats = [
        Feature("hist", input="hist_item").truncate(3, keep="last").hash().mod(1000),
        Feature("hist_age", input="hist_ts").truncate(3, keep="last").recency("req_ts").bucketize([60, 3600, 86400]),
        Feature("hist_pos", input="hist_item").truncate(3, keep="last").position("last"),
    ]
    batch = {
        "hist_item": (torch.tensor([11, 12, 13, 14, 21]), torch.tensor([4, 0, 1])),
        "hist_ts": (torch.tensor([0, 5000, 99000, 99990, 10]), torch.tensor([4, 0, 1])),
        "req_ts": torch.tensor([100000, 7, 100]),
    }
    eng = FeatureEngine(feats)
    assert ("req_ts", "int64") in eng.inputs
    d = eng(batch).to_dict()
    assert d["hist_age"].values().tolist() == [3, 1, 0, 1]  # ages 95000, 1000, 10 and 90 seconds
    assert d["hist_pos"].values().tolist() == [2, 1, 0, 0]
    assert_same_weighted(eng(batch), reference_weighted(feats, batch, 3))
    with pytest.raises(recgo.InvalidInputError, match="one value per sample"):
        eng({**batch, "req_ts": (torch.tensor([1, 2, 3]), torch.tensor([2, 0, 1]))})


# --- random specs with every new op and weights, vs the reference -----------------------------------

@st.composite
def weighted_cases(draw):
    size = draw(st.integers(0, 5))
    ops = st.lists(st.sampled_from(["hash", "mod", "truncate", "filter", "fill", "position", "recency"]), max_size=4)

    def chain(f: Feature, kinds) -> Feature:
        for k in kinds:
            if k == "hash":
                f.hash(draw(st.integers(0, 2**64 - 1)))
            elif k == "mod":
                f.mod(draw(st.integers(1, 50)))
            elif k == "truncate":
                f.truncate(draw(st.integers(1, 3)), keep=draw(st.sampled_from(["first", "last"])))
            elif k == "filter":
                f.filter(range=(-3, draw(st.integers(-3, 20))), mode=draw(st.sampled_from(["drop", "keep"])))
            elif k == "fill":
                f.fill_missing(draw(st.integers(-3, 3)))
            elif k == "position":
                f.position(draw(st.sampled_from(["first", "last"])))
            else:
                f.recency("now")
        return f

    def lengths():
        return torch.tensor(draw(st.lists(st.integers(0, 4), min_size=size, max_size=size)), dtype=torch.int64)

    def weights(n):
        return torch.tensor(draw(st.lists(st.integers(0, 12), min_size=n, max_size=n)), dtype=torch.float32) / 4

    batch = {"now": torch.tensor(draw(st.lists(st.integers(-50, 50), min_size=size, max_size=size)), dtype=torch.int64)}
    feats, names = [], []
    for i in range(draw(st.integers(1, 5))):
        name = f"f{i}"
        kind = draw(st.sampled_from(["int", "int", "float", "cross"]))
        if kind == "cross" and names:
            fields = [draw(st.sampled_from(names)) for _ in range(draw(st.integers(2, 4)))]
            f = chain(Feature(name).cross(*fields, seed=draw(st.integers(0, 9))), draw(ops))
        elif kind == "float":
            lens = lengths()
            vals = torch.tensor(draw(st.lists(st.floats(-20, 20, width=32), min_size=int(lens.sum()), max_size=int(lens.sum()))))
            batch[name] = (vals, lens, weights(int(lens.sum()))) if draw(st.booleans()) else (vals, lens)
            f = Feature(name, dtype="float")
            if draw(st.booleans()):
                f.filter(range=(draw(st.floats(-20, 0)), draw(st.floats(0, 20))), mode=draw(st.sampled_from(["drop", "keep"])))
            if draw(st.booleans()):
                f.truncate(draw(st.integers(1, 3)), keep="last")
            f = chain(f.bucketize([-5.5, 0, 2.25]), draw(ops))
        else:
            lens = lengths()
            vals = torch.tensor(draw(st.lists(st.integers(-10, 20), min_size=int(lens.sum()), max_size=int(lens.sum()))), dtype=torch.int64)
            batch[name] = (vals, lens, weights(int(lens.sum()))) if draw(st.booleans()) else (vals, lens)
            f = chain(Feature(name), draw(ops))
        feats.append(f)
        names.append(name)
    return feats, batch, size


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(weighted_cases())
def test_random_weighted_specs_match_reference(case) -> None:
    feats, batch, size = case
    ref = reference_weighted(feats, batch, size)
    assert_same_weighted(FeatureEngine(feats)(batch), ref)
    assert_same_weighted(FeatureEngine(feats, fuse=False)(batch), ref)


# --- inputs an adversarial pass found unchecked (session 26) -----------------------------------------

def test_weights_must_have_one_entry_per_value() -> None:
    """A dict input's weights were passed by address only: too few read past their end (a segfault for
    large batches, garbage weights for small ones), too many were cut silently."""
    eng = FeatureEngine([Feature("a").hash(), Feature("s", dtype="bytes").hash()])
    data, slens = recgo.feature.encode_strings(["ab", "c"])
    good = {"s": (data, slens, torch.tensor([1, 1]), torch.tensor([2.0, 3.0]))}
    vals, lens = torch.zeros(1 << 20, dtype=torch.int64), torch.full((2,), 1 << 19)
    for w in (torch.ones(1), torch.empty(0), torch.ones((1 << 20) + 1)):
        with pytest.raises(recgo.InvalidInputError, match=rf"input 'a': {w.numel()} weights for 1048576 values"):
            eng({"a": (vals, lens, w), **good})
    with pytest.raises(recgo.InvalidInputError, match="input 's': 3 weights for 2 strings"):
        eng({"a": (vals, lens), "s": (data, slens, torch.tensor([1, 1]), torch.ones(3))})
    out = eng({"a": (torch.arange(4), torch.tensor([1, 3]), torch.tensor([1.0, 2, 3, 4])), **good})
    assert out.weights().tolist() == [1.0, 2.0, 3.0, 4.0, 2.0, 3.0]


@pytest.mark.parametrize("how", ["dict", "kjt", "bytes"])
def test_lengths_whose_sum_wraps_around_int64_are_refused(how: str) -> None:
    """[2^63-1, 2^63-1, 5] sums to 3 in int64: the batch passed as three values with two huge bags (or
    an internal error for ops that walk the bags)."""
    big = 2**63 - 1
    lens = torch.tensor([big, big, 5])
    if how == "bytes":
        eng = FeatureEngine([Feature("s", dtype="bytes").hash()])
        with pytest.raises(recgo.InvalidInputError, match="byte string lengths sum past the 3 bytes"):
            eng({"s": (torch.tensor([97, 98, 99], dtype=torch.uint8), lens)})
        return
    eng = FeatureEngine([Feature("a").truncate(2)])
    with pytest.raises(recgo.InvalidInputError, match="lengths sum past the 3 values"):
        if how == "dict":
            eng({"a": (torch.arange(3), lens)})
        else:  # the engine's own KJT path (recgo's KJT checks the sum in Python; bypass it as a buggy caller would)
            kjt = recgo.KeyedJaggedTensor(["a"], torch.arange(3), lengths=torch.tensor([1, 1, 1]))
            kjt._lengths = lens
            eng(kjt)


def test_builder_refuses_what_is_not_a_list_of_numbers() -> None:
    """Strings were split into characters or parsed as numbers, a three-number range was cut to two,
    and a lone number raised a raw TypeError."""
    cases = [(lambda: Feature("p", dtype="float").bucketize("123"), "boundaries must be a sequence of numbers, got str"),
             (lambda: Feature("a").filter(["7"]), "expected a number, got '7'"),
             (lambda: Feature("a").filter(range=(1, 2, 3)), r"range must be \(lo, hi\), got 3 numbers"),
             (lambda: Feature("a").bucketize(["abc"]), "expected a number, got 'abc'"),
             (lambda: Feature("a").bucketize(5), "boundaries must be a sequence of numbers, got int 5"),
             (lambda: Feature("a").filter(range=5), "range must be a sequence of numbers, got int 5")]
    for make, msg in cases:
        with pytest.raises(recgo.InvalidInputError, match=msg):
            make()
    assert Feature("a").bucketize(torch.tensor([1, 5])).ops[0]["boundaries"] == [1, 5]
    assert Feature("a").filter(range=(1, 2.5)).ops[0]["range"] == [1, 2.5]


def test_names_without_a_utf8_form_are_refused_when_the_engine_is_built() -> None:
    """A lone surrogate became U+FFFD in Go, so the feature could not be fed by its own name."""
    with pytest.raises(recgo.InvalidInputError, match="not valid Unicode text"):
        FeatureEngine([Feature("a\ud800").hash()])
    assert FeatureEngine([Feature("é").hash()])({"é": torch.tensor([1])}).keys() == ["é"]


def test_small_input_errors_name_the_problem() -> None:
    nan = FeatureEngine([Feature("p", dtype="float").bucketize([1.0])])
    with pytest.raises(recgo.InvalidInputError, match=r'feature "p": value 2 \(in sample 1\) is NaN'):
        nan({"p": (torch.tensor([1.0, 2, float("nan"), 1]), torch.tensor([2, 2]))})
    strings = FeatureEngine([Feature("s", dtype="bytes").hash()])
    assert strings({"s": []}).lengths().tolist() == []  # an empty batch of strings
    with pytest.raises(recgo.InvalidInputError, match="expected str or bytes, got NoneType"):
        strings({"s": ["a", None]})
    with pytest.raises(recgo.InvalidInputError, match=r"must be in \[1, \d+\] .*got 1180591620717411303424$"):
        recgo.set_num_threads(2**70)
