"""Integer parameters of the Feature transforms.

``Feature.hash``'s argument is a 64-bit *seed*, not a bucket count (``mod`` takes that): ``hash(-1)``
is the seed whose bits are 2^64 - 1, documented and hashed identically by the engine and the torch
reference, so it stays accepted. A config's ``{hash: -1}`` was refused ("want a non-negative
integer") where the builder took it: both now read seeds the same way. ``mod`` and ``truncate``
refused a count below 1 without naming the value given; bools are refused everywhere.
"""

from __future__ import annotations

import pytest
import torch

import recgo
from recgo.feature import Feature, FeatureEngine, reference


def test_hash_minus_one_is_a_seed_the_engine_and_the_reference_agree_on() -> None:
    ids = torch.tensor([0, 1, -5, 2**62])
    eng = FeatureEngine([Feature("a").hash(-1), Feature("b", input="a").hash(2**64 - 1)])
    out = eng({"a": ids}).to_dict()
    assert torch.equal(out["a"].values(), reference.xxh64_int(ids, -1))
    assert torch.equal(out["a"].values(), out["b"].values())  # the same seed bits
    assert not torch.equal(out["a"].values(), FeatureEngine([Feature("a").hash(0)])({"a": ids}).values())


@pytest.mark.parametrize("op", ["hash", "cross"])
def test_a_configs_negative_seed_reads_as_the_builders(op: str) -> None:
    """``{hash: -1}`` in a config raised where ``Feature.hash(-1)`` was accepted."""
    if op == "hash":
        cfg, built = [{"name": "a", "ops": [{"hash": -1}]}], [Feature("a").hash(-1)]
    else:
        cfg = [{"name": "a"}, {"name": "x", "ops": [{"op": "cross", "fields": ["a", "a"], "seed": -2**63}]}]
        built = [Feature("a"), Feature("x").cross("a", "a", seed=-2**63)]
    eng = FeatureEngine(cfg)
    assert [f.to_dict() for f in eng.features] == [f.to_dict() for f in built]
    batch = {"a": (torch.arange(6), torch.tensor([2, 4]))}
    assert torch.equal(eng(batch).values(), FeatureEngine(built)(batch).values())
    for bad, words in [(2**64, "JSON number 18446744073709551616"), (-2**63 - 1, "JSON number -9223372036854775809"),
                       (True, "JSON bool")]:
        with pytest.raises(recgo.InvalidInputError, match=rf'field "seed": want a non-negative integer, got a {words}'):
            FeatureEngine([{"name": "a", "ops": [{"op": "hash", "seed": bad}]}])


@pytest.mark.parametrize("make, words", [
    (lambda: Feature("a").mod(-1), r"mod needs a bucket count n > 0, got -1"),
    (lambda: Feature("a").mod(0), r"mod needs a bucket count n > 0, got 0"),
    (lambda: Feature("a").truncate(0), r"truncate needs a length n >= 1, got 0"),
    (lambda: Feature("a").truncate(-2**63), r"truncate needs a length n >= 1, got -9223372036854775808"),
    (lambda: Feature.from_dict({"name": "a", "ops": [{"mod": -7}]}), r"mod needs a bucket count n > 0, got -7"),
    (lambda: Feature.from_dict({"name": "a", "ops": [{"truncate": {"n": -1, "keep": "last"}}]}),
     r"truncate needs a length n >= 1, got -1"),
], ids=["mod -1", "mod 0", "truncate 0", "truncate min", "config mod", "config truncate"])
def test_a_count_below_one_is_refused_naming_it(make, words: str) -> None:
    with pytest.raises(recgo.InvalidInputError, match=rf'feature "a" op 0 \((mod|truncate)\): {words}$'):
        FeatureEngine([make()])


@pytest.mark.parametrize("make", [
    lambda: Feature("a").hash(True), lambda: Feature("a").mod(True), lambda: Feature("a").truncate(False),
    lambda: Feature("a").fill_missing(True), lambda: Feature("x").cross("a", "b", seed=True),
    lambda: Feature("x").cross("a", "b", "c", True),
], ids=["hash", "mod", "truncate", "fill_missing", "cross seed", "cross positional seed"])
def test_bools_are_not_integers(make) -> None:
    with pytest.raises(recgo.InvalidInputError, match=r"must be an integer, got (True|False) \(bool\)"):
        make()
