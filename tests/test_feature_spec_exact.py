"""Feature specs reach the engine as the values the reference computes with, and the engine's inputs
are checked: big integer-valued float boundaries, exact JSON literals, an engine independent of the
caller's later edits to its Features, negative seeds, crosses given an input, and clear errors for
inputs that raised raw Python errors (a single Feature, 0-d tensors, lone surrogates, mixed string
bags)."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest
import torch

from recgo.errors import InvalidInputError
from recgo.feature import Feature, FeatureEngine, encode_strings
from recgo.feature.reference import reference


def _run(features: list[Feature], batch: dict) -> dict:
    out = FeatureEngine(features)(inputs=batch).to_dict()
    return {k: (v.values(), v.lengths()) for k, v in out.items()}


def _assert_matches_reference(features: list[Feature], batch: dict, size: int) -> None:
    got, want = _run(features, batch), reference(features, batch, size)
    assert list(got) == list(want)
    for k in want:
        assert torch.equal(got[k][0], want[k][0].to(torch.int64)), k
        assert torch.equal(got[k][1], want[k][1].to(torch.int64)), k


P60 = 2**60


@pytest.mark.parametrize("make", [
    lambda: Feature("i").bucketize([2.0**60]),
    lambda: Feature("i").filter([2.0**60], mode="keep"),
    lambda: Feature("i").filter(range=(2.0**60, 2.0**61), mode="keep"),
    lambda: Feature("i").bucketize([-(2.0**62), 2.0**53, 2.0**60]),
])
def test_big_float_parameters_on_int_ids_are_their_values(make) -> None:
    """2.0**60 went to the engine as its repr 1.152921504606847e+18, which the engine reads digit by
    digit as 1152921504606847000: ID 2^60 fell into another bucket than the reference's, and the filter
    kept another ID."""
    ids = torch.tensor([P60, P60 + 1000, 1152921504606847000, P60 - 1, 2**53, -(2**62)])
    _assert_matches_reference([make()], {"i": (ids, torch.tensor([3, 3]))}, 2)


@pytest.mark.parametrize("make", [
    lambda: Feature("i").bucketize([float(-(2**63)), 0]),
    lambda: Feature("i").filter(range=(float(-(2**63)), 0.0), mode="keep"),
    lambda: Feature("i").filter([float(-(2**63))], mode="drop"),
])
def test_float_int64_min_on_int_ids_is_int64_min(make) -> None:
    """float(-2**63) is exactly int64's minimum, but only 2^53 <= |v| < 2^63 became an int, so it
    went to the engine as -9.223372036854776e+18 and was refused as "not an int64"."""
    ids = torch.tensor([-(2**63), -5, 0, 7])
    _assert_matches_reference([make()], {"i": (ids, torch.tensor([4]))}, 1)


def test_float_two_to_the_63_is_still_refused_by_name(tmp_path: Path) -> None:
    for make in (lambda: Feature("i").bucketize([0, 2.0**63]),
                 lambda: Feature("i").filter(range=(0.0, 2.0**63), mode="keep")):
        with pytest.raises(InvalidInputError, match=r"9\.223372036854776e\+18 is not an int64"):
            FeatureEngine([make()])
    path = tmp_path / "f.json"  # the JSON literal (a Decimal) takes the same path
    path.write_text('{"features": [{"name": "i", "ops": [{"bucketize": [-9223372036854775808.0]}]}]}')
    assert FeatureEngine(path).features[0].ops[0]["boundaries"] == [-(2**63)]


def test_a_json_config_literal_is_read_exactly(tmp_path: Path) -> None:
    """9007199254740993.0 in a JSON config is 2^53 + 1 (json.loads made it the float 2^53)."""
    path = tmp_path / "f.json"
    path.write_text('{"features": [{"name": "i", "ops": [{"bucketize": [9007199254740993.0]}]}]}')
    eng = FeatureEngine(path)
    assert eng.features[0].ops[0]["boundaries"] == [2**53 + 1]
    got = eng(inputs={"i": torch.tensor([2**53, 2**53 + 1, 1])}).values().tolist()
    assert got == [0, 1, 0]
    upper = tmp_path / "g.YAML"  # the suffix in capitals is still YAML
    pytest.importorskip("yaml")
    upper.write_text("features:\n- name: i\n  ops: [{mod: 7}]\n")
    assert FeatureEngine(upper)(inputs={"i": torch.tensor([9])}).values().tolist() == [2]


def test_the_engine_keeps_its_own_features() -> None:
    """The engine kept the caller's Feature objects: a mod chained on later did not run in the engine
    but showed in its features and ran in its copies and pickles."""
    f = Feature("a").hash(1)
    eng = FeatureEngine([f])
    f.mod(10)
    ids = {"a": torch.tensor([5, 6, 7])}
    want = eng(inputs=ids).values()
    assert repr(eng.features) == "[Feature('a').hash(seed=1)]"
    for other in (copy.deepcopy(eng), pickle.loads(pickle.dumps(eng))):
        assert torch.equal(other(inputs=ids).values(), want)
    assert want.abs().max() > 10  # hashed, not reduced


def test_a_negative_seed_hashes_as_the_reference() -> None:
    """hash(seed=-1) passed the builder and the reference, then the engine refused it."""
    ids = torch.tensor([1, 2, 3, -4])
    _assert_matches_reference([Feature("a").hash(seed=-1)], {"a": ids}, 4)
    _assert_matches_reference([Feature("a", output=False), Feature("b", output=False),
                               Feature("ab").cross("a", "b", seed=-7)], {"a": ids, "b": ids + 1}, 4)


def test_a_cross_given_an_input_or_dtype_is_refused() -> None:
    """A cross reads the features it crosses; the input/dtype given to it were dropped in silence."""
    for f in (Feature("x", input="col").cross("a", "b"), Feature("x", dtype="float").cross("a", "b")):
        with pytest.raises(InvalidInputError, match="a cross feature reads the features it crosses"):
            FeatureEngine([Feature("a"), Feature("b"), f])
    with pytest.raises(InvalidInputError, match="a cross feature reads"):
        FeatureEngine({"features": [{"name": "a"}, {"name": "b"},
                                    {"name": "x", "input": "col", "ops": [{"cross": ["a", "b"]}]}]})


def test_bad_inputs_get_named_errors() -> None:
    with pytest.raises(InvalidInputError, match=r"got one: write \[Feature\('a'\)"):
        FeatureEngine(Feature("a"))  # type: ignore[arg-type]
    for build in (lambda: Feature("a").bucketize(torch.tensor(3)), lambda: Feature("a").filter(torch.tensor(3))):
        with pytest.raises(InvalidInputError, match="must be a sequence of numbers"):
            build()
    with pytest.raises(InvalidInputError, match="not valid UTF-8"):
        encode_strings(["ok", "\ud800"])
    with pytest.raises(InvalidInputError, match="sample 0 is a list"):
        encode_strings([[], "abc"])  # became three one-character strings
    with pytest.raises(InvalidInputError, match="gradients with respect to per-ID weights"):
        FeatureEngine([Feature("a")])(inputs={"a": (torch.tensor([1]), torch.tensor([1]),
                                                    torch.ones(1, requires_grad=True))})


def test_an_empty_input_name_is_refused() -> None:
    """input="" read the input of the feature's own name instead, in silence."""
    for build in (lambda: FeatureEngine([Feature("a", input="")]),
                  lambda: FeatureEngine({"features": [{"name": "a", "input": "", "ops": [{"mod": 3}]}]})):
        with pytest.raises(InvalidInputError, match="feature 'a': input must be a non-empty string"):
            build()


def test_strings_of_every_bytes_like_type_and_config_entry_lists() -> None:
    data, lens = encode_strings([bytearray(b"abc"), memoryview(b"de"), "f"])
    assert data.tolist() == list(b"abcdef") and lens.tolist() == [3, 2, 1]
    data, lens, bags = encode_strings([[bytearray(b"ab")], [], ("c", b"d")])
    assert data.tolist() == list(b"abcd") and lens.tolist() == [2, 1, 1] and bags.tolist() == [1, 0, 2]
    assert len(encode_strings([])) == 2  # an empty batch, as before
    eng = FeatureEngine([{"name": "a", "ops": [{"mod": 3}]}])  # a list of config entries
    assert eng(inputs={"a": torch.tensor([4, 5])}).values().tolist() == [1, 2]
