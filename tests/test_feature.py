"""FeatureEngine: transforms, specs, fusion plan and errors, checked against the torch reference."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import recgo
from recgo.feature import Feature, FeatureEngine, encode_strings, load_features
from recgo.feature.reference import reference, xxh64_bytes, xxh64_int, xxh64_pair

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from feature_synthetic import synthetic_batch, synthetic_features  # noqa: E402


def assert_same(out: recgo.KeyedJaggedTensor, ref: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Engine output equals the per-field reference, value for value, in key order."""
    assert out.keys() == list(ref)
    got = out.to_dict()
    for k, (v, l) in ref.items():
        assert torch.equal(got[k].lengths(), l.to(torch.int64)), f"{k}: lengths differ"
        assert torch.equal(got[k].values(), v.to(torch.int64)), f"{k}: values differ"


# --- the hash ---------------------------------------------------------------------------------

# Published XXH64 vectors (xxHash reference, as quoted by Boost.Hash2 and ClickHouse tests).
VECTORS = [
    (b"", 0, 0xEF46DB3751D8E999),
    (b"The quick brown fox jumps over the lazy dog", 43, 0x9A11F5E9468D7425),
    (b"test", 123, 3134990500624303823),
    (b"ABC", 0, 0xE66AE7354FCFEE98),
    (b"xxhash", 0, 0x32DD38952C4BC720),
]


@pytest.mark.parametrize("data,seed,want", VECTORS)
def test_xxh64_vectors_reference_and_engine(data: bytes, seed: int, want: int) -> None:
    assert xxh64_bytes(data, seed) == want
    eng = FeatureEngine([Feature("s", dtype="bytes").hash(seed=seed)])
    out = eng({"s": [data]})
    assert out.values().tolist() == [want - (1 << 64) if want >= 1 << 63 else want]


def test_int_hash_is_xxh64_of_little_endian_bytes() -> None:
    ids = torch.tensor([0, 1, -1, 2**40 + 3, -(2**63), 2**63 - 1])
    for seed in (0, 5, 2**64 - 1):
        want = [xxh64_bytes((v % 2**64).to_bytes(8, "little"), seed) for v in ids.tolist()]
        assert [v % 2**64 for v in xxh64_int(ids, seed).tolist()] == want
        out = FeatureEngine([Feature("i").hash(seed=seed)])({"i": ids})
        assert [v % 2**64 for v in out.values().tolist()] == want
        pair = xxh64_pair(ids, ids.flip(0), seed).tolist()
        assert [v % 2**64 for v in pair] == [
            xxh64_bytes((a % 2**64).to_bytes(8, "little") + (b % 2**64).to_bytes(8, "little"), seed)
            for a, b in zip(ids.tolist(), ids.flip(0).tolist())
        ]


# --- each transform, by hand ---------------------------------------------------------------------

def test_transforms_by_hand() -> None:
    feats = [
        Feature("hist").truncate(2, keep="last"),
        Feature("first", input="hist").truncate(2),
        Feature("m").mod(5),
        Feature("f", dtype="float").bucketize([0.0, 1.5, 10.0]),
        Feature("keep", input="hist").filter(range=(2, 4), mode="keep"),
        Feature("drop", input="hist").mask([1, 3]).fill_missing(-7),
        Feature("x").cross("first", "m", seed=9),
    ]
    eng = FeatureEngine(feats)
    batch = {
        "hist": (torch.tensor([1, 2, 3, 4, 3]), torch.tensor([4, 0, 1])),
        "m": torch.tensor([-7, 12, 5]),
        "f": torch.tensor([-1.0, 1.5, 99.0], dtype=torch.float64),
    }
    d = eng(batch).to_dict()
    assert d["hist"].values().tolist() == [3, 4, 3] and d["hist"].lengths().tolist() == [2, 0, 1]
    assert d["first"].values().tolist() == [1, 2, 3] and d["first"].lengths().tolist() == [2, 0, 1]
    assert d["m"].values().tolist() == [3, 2, 0]
    assert d["f"].values().tolist() == [0, 2, 3]
    assert d["keep"].values().tolist() == [2, 3, 3] and d["keep"].lengths().tolist() == [2, 0, 1]
    assert d["drop"].values().tolist() == [2, 4, -7, -7] and d["drop"].lengths().tolist() == [2, 1, 1]
    # cross: sample 0 = [1, 2] x [3] -> two pairs; sample 1 empty; sample 2 = [3] x [0].
    assert d["x"].lengths().tolist() == [2, 0, 1]
    want = [xxh64_bytes(a.to_bytes(8, "little") + b.to_bytes(8, "little"), 9) for a, b in [(1, 3), (2, 3), (3, 0)]]
    assert [v % 2**64 for v in d["x"].values().tolist()] == want
    assert_same(eng(batch), reference(feats, batch, 3))


# --- specs and configs ----------------------------------------------------------------------------

def test_config_forms_agree(tmp_path) -> None:
    built = [
        Feature("hist").truncate(50, keep="last").hash().mod(10**6),
        Feature("price", dtype="float").bucketize([1, 10, 100]),
        Feature("hx").cross("hist", "price").mod(1000),
    ]
    yaml_text = """
features:
  - name: hist
    ops: [{truncate: {n: 50, keep: last}}, hash, {mod: 1000000}]
  - name: price
    dtype: float
    ops: [{bucketize: [1, 10, 100]}]
  - name: hx
    ops: [{cross: [hist, price]}, {mod: 1000}]
"""
    (tmp_path / "f.yaml").write_text(yaml_text)
    (tmp_path / "f.json").write_text(json.dumps({"features": [f.to_dict() for f in built]}))
    from_yaml = load_features(tmp_path / "f.yaml")
    assert [(f.name, [o["op"] for o in f.ops]) for f in from_yaml] == [(f.name, [o["op"] for o in f.ops]) for f in built]
    batch = {"hist": (torch.arange(10), torch.tensor([3, 0, 7])), "price": torch.tensor([0.5, 10.0, 1e6])}
    outs = [FeatureEngine(src)(batch) for src in (built, tmp_path / "f.yaml", tmp_path / "f.json")]
    for o in outs[1:]:
        assert torch.equal(o.values(), outs[0].values()) and torch.equal(o.lengths(), outs[0].lengths())
    assert_same(outs[0], reference(built, batch, 3))


def test_kjt_inputs_equal_dict_inputs() -> None:
    pytest.importorskip("torchrec")
    feats = [Feature("a").hash().mod(100), Feature("b").truncate(1, keep="last"), Feature("d", dtype="float").bucketize([0])]
    a, b = (torch.tensor([5, 6, 7]), torch.tensor([1, 1, 1])), (torch.tensor([1, 2, 3]), torch.tensor([2, 0, 1]))
    dense = {"d": torch.tensor([-1.0, 0.0, 2.0])}
    eng = FeatureEngine(feats)
    want = eng({"a": a, "b": b, **dense})
    kjt = recgo.KeyedJaggedTensor.from_jagged_dict({"b": b, "unused": b, "a": a})
    for batch in (kjt, kjt.to_torchrec()):
        got = eng(batch, dense=dense)
        assert torch.equal(got.values(), want.values()) and torch.equal(got.lengths(), want.lengths())


def test_outputs_own_their_memory() -> None:
    """Outputs wrap engine memory zero-copy; they stay valid after later batches and engine deletion."""
    import gc

    eng = FeatureEngine([Feature("a").hash().mod(1000), Feature("b").truncate(2)])
    b1 = {"a": torch.arange(5000), "b": (torch.arange(8999), torch.full((5000,), 1).index_fill_(0, torch.tensor([0]), 4000))}
    out1 = eng(b1)
    saved = (out1.values().clone(), out1.lengths().clone())
    for i in range(5):  # later batches recycle freed buffers, never live ones
        eng({"a": torch.arange(5000) + i, "b": (torch.arange(5000), torch.ones(5000, dtype=torch.int64))})
        gc.collect()
    del eng
    gc.collect()
    assert torch.equal(out1.values(), saved[0]) and torch.equal(out1.lengths(), saved[1])
    out1.values()[0] = -1  # writable like any tensor
    assert int(out1.values()[0]) == -1


# --- random specs and inputs vs the reference ------------------------------------------------------

@st.composite
def cases(draw):
    size = draw(st.integers(0, 6))
    ids = st.integers(-(2**63), 2**63 - 1) | st.integers(-20, 20)
    int_ops = st.lists(st.one_of(
        st.builds(lambda s: ("hash", s), st.integers(0, 2**64 - 1)),
        st.builds(lambda n: ("mod", n), st.integers(1, 2**62)),
        st.builds(lambda b: ("bucketize", sorted(set(b))), st.lists(st.integers(-30, 30), min_size=1, max_size=5)),
        st.builds(lambda n, k: ("truncate", n, k), st.integers(1, 4), st.sampled_from(["first", "last"])),
        st.builds(lambda v, m: ("filter", v, m), st.lists(st.integers(-5, 5), max_size=4), st.sampled_from(["drop", "keep"])),
        st.builds(lambda lo, w, m: ("range", lo, lo + w, m), st.integers(-10, 10), st.integers(0, 10), st.sampled_from(["drop", "keep"])),
        st.builds(lambda d: ("fill", d), st.integers(-3, 3)),
    ), max_size=5)

    def chain(f: Feature, ops) -> Feature:
        for op in ops:
            if op[0] == "hash":
                f.hash(op[1])
            elif op[0] == "mod":
                f.mod(op[1])
            elif op[0] == "bucketize":
                f.bucketize(op[1])
            elif op[0] == "truncate":
                f.truncate(op[1], keep=op[2])
            elif op[0] == "filter":
                f.filter(op[1], mode=op[2])
            elif op[0] == "range":
                f.filter(range=(op[1], op[2]), mode=op[3])
            else:
                f.fill_missing(op[1])
        return f

    def lengths():
        return draw(st.lists(st.integers(0, 5), min_size=size, max_size=size))

    feats, batch, int_names = [], {}, []
    for i in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["int", "int", "dense", "float", "bytes", "cross"]))
        name = f"f{i}"
        if kind == "cross" and int_names:
            a, b = draw(st.sampled_from(int_names)), draw(st.sampled_from(int_names))
            f = chain(Feature(name, output=draw(st.booleans())).cross(a, b, seed=draw(st.integers(0, 2**64 - 1))), draw(int_ops))
        elif kind == "float":
            lens = lengths()
            vals = draw(st.lists(st.floats(-50, 50, width=32), min_size=sum(lens), max_size=sum(lens)))
            dt = draw(st.sampled_from([torch.float32, torch.float64]))
            batch[name] = (torch.tensor(vals, dtype=dt), torch.tensor(lens, dtype=torch.int64))
            bounds = sorted(set(draw(st.lists(st.floats(-60, 60, width=32), min_size=1, max_size=6))))
            f = chain(Feature(name, dtype="float").bucketize(bounds), draw(int_ops))
        elif kind == "bytes":
            lens = lengths()
            batch[name] = [[s.encode() for s in draw(st.lists(st.text(max_size=40), min_size=n, max_size=n))] for n in lens]
            f = chain(Feature(name, dtype="bytes").hash(draw(st.integers(0, 2**64 - 1))), draw(int_ops))
        else:
            dense = kind == "dense"
            lens = [1] * size if dense else lengths()
            vals = torch.tensor(draw(st.lists(ids, min_size=sum(lens), max_size=sum(lens))), dtype=torch.int64)
            batch[name] = vals if dense else (vals, torch.tensor(lens, dtype=torch.int64))
            f = chain(Feature(name), draw(int_ops))
        feats.append(f)
        int_names.append(name)
    if not any(f.output for f in feats):
        feats[0].output = True
    return feats, batch, size


def _engine_batch(batch):
    """Bytes inputs go to the engine packed (the reference reads the Python lists)."""
    return {k: encode_strings(v) if isinstance(v, list) else v for k, v in batch.items()}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_random_specs_match_reference(case) -> None:
    feats, batch, size = case
    eng = FeatureEngine(feats)
    assert_same(eng(_engine_batch(batch)), reference(feats, batch, size))
    p = eng.plan()
    assert p.calls_before == sum(len(f.ops) for f in feats)
    assert p.calls_after <= p.calls_before
    assert sorted(x for g in p.groups for x in g.features) == sorted(f.name for f in feats for _ in f.ops)
    unfused = FeatureEngine(feats, fuse=False)
    assert unfused.plan().calls_after == p.calls_before
    assert_same(unfused(_engine_batch(batch)), reference(feats, batch, size))


def test_long_tailed_batch_spans_tiles() -> None:
    """Many fields, one very long sequence: tiles cut across fields; results still exact."""
    feats = synthetic_features(40, seed=3)
    batch, _ = synthetic_batch(feats, 512, seed=4, mean_seq=30)
    assert_same(FeatureEngine(feats)(batch), reference(feats, batch, 512))


# --- the fusion report ------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [26, 400, 2000])
def test_table2_call_reduction(n: int) -> None:
    feats = synthetic_features(n)
    p = FeatureEngine(feats).plan()
    assert p.calls_before == sum(len(f.ops) for f in feats)
    assert sum(len(g.features) for g in p.groups) == p.calls_before
    assert p.calls_after <= 10  # five op kinds + a cross stage, regardless of the field count
    assert p.reduction >= 0.8
    assert "fused" in p.table()


# --- bad input ------------------------------------------------------------------------------------

@pytest.mark.parametrize("feats,msg", [
    ([Feature("a")._add("sqrt")], "unknown op"),
    ([Feature("a").cross("b", "c"), Feature("b").cross("a", "c"), Feature("c")], "cycle"),
    ([Feature("a").truncate(0)], "n >= 1"),
    ([Feature("a", dtype="float").bucketize([3, 1])], "strictly increasing"),
    ([Feature("a", dtype="float").mod(3)], "dtype mismatch"),
    ([Feature("a", dtype="bytes").truncate(3)], "dtype mismatch"),
    ([Feature("a").cross("a", "zz")], "not a feature"),
    ([Feature("a").truncate(2, keep="middle")], "first"),
])
def test_malformed_specs_raise(feats, msg) -> None:
    with pytest.raises(recgo.InvalidInputError, match=msg):
        FeatureEngine(feats)


def test_bad_batches_raise() -> None:
    eng = FeatureEngine([Feature("a").hash(), Feature("f", dtype="float").bucketize([0])])
    f = torch.tensor([0.5, 1.0])
    with pytest.raises(recgo.InvalidInputError, match="lengths sum to 2 but there are 3 values"):
        eng({"a": (torch.tensor([1, 2, 3]), torch.tensor([1, 1])), "f": f})
    with pytest.raises(recgo.InvalidInputError, match="negative"):
        eng({"a": (torch.tensor([1]), torch.tensor([2, -1])), "f": f})
    with pytest.raises(recgo.InvalidInputError, match="dtype mismatch"):
        eng({"a": torch.tensor([1.0, 2.0]), "f": f})
    with pytest.raises(recgo.InvalidInputError, match="dtype"):
        eng({"a": torch.tensor([1, 2]), "f": torch.tensor([1, 2])})
    with pytest.raises(recgo.InvalidInputError, match="NaN"):
        eng({"a": torch.tensor([1, 2]), "f": torch.tensor([0.0, float("nan")])})
    with pytest.raises(recgo.InvalidInputError, match="lacks input"):
        eng({"a": torch.tensor([1, 2])})
    with pytest.raises(recgo.InvalidInputError, match="batch size"):
        eng({"a": torch.tensor([1, 2, 3]), "f": f})
    with pytest.raises(recgo.InvalidInputError):
        load_features({"features": [{"name": "a", "ops": [{"mod": 3}], "colour": "red"}]})
    # A KeyedJaggedTensor whose lengths disagree with its values, or that carries a float field.
    bad = recgo.KeyedJaggedTensor(["a"], torch.tensor([1, 2, 3]), lengths=torch.tensor([1, 1]))
    with pytest.raises(recgo.InvalidInputError, match="lengths sum to 2 but there are 3 values"):
        eng(bad, dense={"f": f})
    with pytest.raises(recgo.InvalidInputError, match="negative"):
        eng(recgo.KeyedJaggedTensor(["a"], torch.tensor([1]), lengths=torch.tensor([2, -1])), dense={"f": f})
    with pytest.raises(recgo.InvalidInputError, match="dtype mismatch"):
        eng(recgo.KeyedJaggedTensor(["a", "f"], torch.tensor([1, 2, 3, 4]), lengths=torch.tensor([1, 1, 1, 1])))


@pytest.mark.parametrize("name, text, match", [
    ("f.yaml", "features: [\n", r"f\.yaml: not valid YAML: while parsing"),
    ("f.yaml", "features: [!!python/object/apply:os.system [echo]]\n", r"f\.yaml: not valid YAML: could not determine"),
    ("f.yaml", "features: " + "[" * 20000 + "\n", r"f\.yaml: not valid YAML: nested too deeply"),
    ("f.json", '{"features": ' + "[" * 100000, r"f\.json: invalid JSON: nested too deeply"),
])
def test_a_feature_config_file_that_does_not_parse_is_named(tmp_path, name: str, text: str, match: str) -> None:
    """A YAML syntax error or a tag safe_load refuses raised yaml's own exceptions, and nesting past the
    parser's stack a RecursionError (JSON and YAML): each is an InvalidInputError naming the file."""
    pytest.importorskip("yaml")
    (tmp_path / name).write_text(text)
    with pytest.raises(recgo.InvalidInputError, match=match):
        load_features(tmp_path / name)
