"""FeatureEngine's raw-input keyword says what it carries: ``inputs=`` (dense, jagged and byte-string
inputs by name); the former ``dense=`` still works with a DeprecationWarning."""

from __future__ import annotations

import pytest
import torch

from recgo import InvalidInputError
from recgo.feature import Feature, FeatureEngine, encode_strings


def test_inputs_keyword_and_deprecated_dense() -> None:
    eng = FeatureEngine([Feature("site", dtype="bytes").hash().mod(1000), Feature("d", dtype="float").bucketize([0])])
    raw = {"site": encode_strings(["a.com", "b.org", "a.com"]), "d": torch.tensor([-1.0, 0.5, 2.0])}
    want = eng(raw)
    got = eng(inputs=raw)
    assert torch.equal(got.values(), want.values()) and torch.equal(got.lengths(), want.lengths())
    assert got.values()[0] == got.values()[2] and got.values()[0] != got.values()[1]  # same string, same ID
    with pytest.warns(DeprecationWarning, match="inputs="):
        old = eng(dense=raw)
    assert torch.equal(old.values(), want.values())
    with pytest.raises(InvalidInputError, match="once"), pytest.warns(DeprecationWarning):
        eng(inputs=raw, dense=raw)
