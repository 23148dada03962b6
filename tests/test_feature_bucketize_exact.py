"""bucketize on int64 IDs compares exactly in int64: boundaries above 2^53 and near the int64 limits
keep every bit from Feature.bucketize through the JSON spec to the Go engine, and the torch reference
is exact too. Both are checked against a pure-Python bisect over Python ints."""

from __future__ import annotations

import bisect
import json
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import recgo
from recgo.feature import Feature, FeatureEngine, example_config, load_features
from recgo.feature.reference import bucketize as reference_bucketize
from recgo.feature.reference import reference

TS = 1_700_000_000_000_000_001  # a nanosecond timestamp, far above 2^53
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def exact_buckets(values: list[int], boundaries: list[int]) -> list[int]:
    """The definition, in Python ints: the number of boundaries ``<= x``."""
    return [bisect.bisect_right(boundaries, v) for v in values]


def engine_buckets(values: list[int], boundaries: list[int | float]) -> list[int]:
    """The Go engine's buckets for one dense int64 field."""
    out = FeatureEngine([Feature("a").bucketize(boundaries)])({"a": torch.tensor(values, dtype=torch.int64)})
    return out.values().tolist()


def test_boundary_above_2_53_is_exact() -> None:
    """The report's repro: boundary 2^53+1 splits 2^53 from 2^53+1 (float64 cannot)."""
    vals, bounds = [2**53, 2**53 + 1, 2**53 + 2], [2**53 + 1]
    assert engine_buckets(vals, bounds) == exact_buckets(vals, bounds) == [0, 1, 1]
    assert reference_bucketize(torch.tensor(vals), bounds).tolist() == [0, 1, 1]


def test_adjacent_timestamp_boundaries_are_strictly_increasing() -> None:
    """[ts, ts+1] for nanosecond timestamps is accepted on an int64 field and splits exactly."""
    vals, bounds = [TS - 1, TS, TS + 1, TS + 2], [TS, TS + 1]
    assert engine_buckets(vals, bounds) == [0, 1, 2, 2]
    # On a float field the two are one float64, so they are refused, saying why.
    with pytest.raises(recgo.InvalidInputError, match=r"strictly increasing: boundary 1 \(1700000000000000002\) "
                                                      r"follows 1700000000000000001 \(both are 1\.7e\+18"):
        FeatureEngine([Feature("t", dtype="float").bucketize(bounds)])


def test_integer_boundaries_stay_python_ints_in_the_spec() -> None:
    f = Feature("a").bucketize([2**53 + 1, TS, I64_MAX])
    (op,) = f.to_dict()["ops"]
    assert op["boundaries"] == [2**53 + 1, TS, I64_MAX]
    assert all(type(b) is int for b in op["boundaries"])
    assert Feature("p", dtype="float").bucketize([0.5, 1]).to_dict()["ops"][0]["boundaries"] == [0.5, 1]


near = st.one_of(
    st.integers(2**53 - 40, 2**53 + 40),
    st.integers(-(2**53) - 40, -(2**53) + 40),
    st.integers(I64_MIN, I64_MIN + 40),
    st.integers(I64_MAX - 40, I64_MAX),
    st.integers(TS - 40, TS + 40),
    st.integers(I64_MIN, I64_MAX),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(near, max_size=30), boundaries=st.lists(near, min_size=1, max_size=8, unique=True))
def test_int64_bucketize_matches_exact_bisect(values: list[int], boundaries: list[int]) -> None:
    """Engine and torch reference both equal a Python-int bisect near 2^53, near the int64 limits
    and near nanosecond timestamps, where neighbouring integers share one float64."""
    bounds = sorted(boundaries)
    want = exact_buckets(values, bounds)
    assert engine_buckets(values, bounds) == want
    assert reference_bucketize(torch.tensor(values, dtype=torch.int64), bounds).tolist() == want
    feats = [Feature("a").bucketize(bounds)]
    ref = reference(feats, {"a": torch.tensor(values, dtype=torch.int64)}, len(values))
    assert ref["a"][0].tolist() == want


@pytest.mark.parametrize("bounds,msg", [
    ([0, 0.5], r"boundary 1: 0\.5 is not an int64"),
    ([2**63], r"9223372036854775808 is not an int64"),
    ([I64_MIN - 1], r"-9223372036854775809 is not an int64"),
    ([5, 5.0], r"boundary 1 \(5\.0\) follows 5 \(both are 5"),
    ([TS + 1, TS], "strictly increasing"),
])
def test_bad_int64_boundaries_raise(bounds: list[int | float], msg: str) -> None:
    with pytest.raises(recgo.InvalidInputError, match=msg):
        FeatureEngine([Feature("a").bucketize(bounds)])


@pytest.mark.parametrize("bounds", [[0.5], [2**63]])
def test_reference_refuses_what_the_engine_refuses(bounds: list[int | float]) -> None:
    with pytest.raises(recgo.InvalidInputError, match="not an int64"):
        reference_bucketize(torch.tensor([1]), bounds)


def test_older_float_and_int_boundaries_still_load(tmp_path) -> None:
    """Configs written before: integral floats on int64 fields, ints and floats on float fields, in
    compact and canonical op form, from JSON and from a mapping; the shipped Criteo config builds."""
    doc = {"features": [
        {"name": "a", "ops": [{"bucketize": [1.0, 10.0, 1e3]}]},
        {"name": "b", "input": "a", "ops": [{"op": "bucketize", "boundaries": [-1, 0, 2**53 + 1]}]},
        {"name": "p", "dtype": "float", "ops": [{"bucketize": [1, 2.5, 10]}]},
    ]}
    path = tmp_path / "features.json"
    path.write_text(json.dumps(doc))
    ids = torch.tensor([0, 1, 999, 1000, 2**53 + 1])
    p = torch.tensor([0.5, 1.0, 2.5, 9.9, 10.0], dtype=torch.float64)
    for source in (doc, path):
        out = FeatureEngine(load_features(source))({"a": ids, "p": p}).to_dict()
        assert out["a"].values().tolist() == [0, 1, 2, 3, 3]
        assert out["b"].values().tolist() == [2, 2, 2, 2, 3]
        assert out["p"].values().tolist() == [0, 1, 2, 2, 3]
    pytest.importorskip("yaml")
    assert {f"I{i}" for i in range(1, 14)} <= set(FeatureEngine(example_config("criteo")).keys)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_a_non_finite_boundary_names_the_feature_and_place(bad: float) -> None:
    with pytest.raises(recgo.InvalidInputError, match=rf"feature spec: features\['x'\]\.ops\[0\]\.boundaries\[1\] is {bad}"):
        FeatureEngine([Feature("x", dtype="float").bucketize([0, bad])])
