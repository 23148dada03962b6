"""max_values for element-wise groups, and printable feature names.

Two gaps between the engine and its documented contract. The values a fused element-wise group
(hash, mod, bucketize, position, recency) produces were never checked against ``max_values``: many
features hashing one input allocated the whole group's buffer, however far past the limit, and the
error came only from the assembled output. And feature and input names were refused only for
control characters, so a line separator, zero-width space, byte order mark or bidirectional
override passed although names must be printable (``str.isprintable``).
"""

from __future__ import annotations

import pytest
import torch

import recgo
from recgo.feature import Feature, FeatureEngine

K = 8  # features fanning out from one input


@pytest.mark.parametrize("op", [
    lambda f, i: f.hash(i),
    lambda f, i: f.mod(i + 2),
    lambda f, i: f.bucketize([i]),
    lambda f, i: f.position(),
], ids=["hash", "mod", "bucketize", "position"])
def test_a_fused_elementwise_group_past_max_values_is_refused(op) -> None:
    """Eight features over one 1,000-value input make a group of 8,000 values, past a limit of 4,000:
    refused naming the group and its size, before the output is reached; a smaller batch still runs."""
    eng = FeatureEngine([op(Feature(f"f{i}", input="a"), i) for i in range(K)], max_values=4000)
    name = eng.plan().groups[0].op
    with pytest.raises(recgo.CapacityError, match=rf'fused {name} group of {K} features: 8000 values in all by '
                                                  r'feature "f0" \(the largest, 1000 values\) would exceed the limit '
                                                  r"of 4000 values per buffer; raise max_values"):
        eng({"a": (torch.arange(1000), torch.tensor([600, 400]))})
    out = eng({"a": (torch.arange(200), torch.tensor([150, 50]))})  # 1,600 values and 16 lengths fit
    assert out.values().numel() == K * 200


def test_a_copied_input_past_max_values_is_refused() -> None:
    """A feature with no ops copies its input out of the batch: that copy is checked too."""
    with pytest.raises(recgo.CapacityError, match=r'feature "a": a copy of its 1500 values would exceed the limit '
                                                  r"of 1000 values per buffer"):
        FeatureEngine([Feature("a")], max_values=1000)({"a": (torch.arange(1500), torch.tensor([1500]))})


@pytest.mark.parametrize("bad", ["a\u2028b", "a\u200bb", "\ufeffa", "a\u202eb", "a\u00a0b"])
def test_names_must_be_printable(bad: str) -> None:
    assert not bad.isprintable()
    code = f"U\\+{ord([c for c in bad if not c.isprintable()][0]):04X}"
    with pytest.raises(recgo.InvalidInputError, match=rf"feature name .* contains the non-printable character {code}; "
                                                      r"names must be printable"):
        FeatureEngine([Feature(bad)])
    with pytest.raises(recgo.InvalidInputError, match=rf"input name .* contains the non-printable character {code}"):
        FeatureEngine([Feature("a", input=bad)])
    assert FeatureEngine([Feature("a b"), Feature("é名")]).keys == ["a b", "é名"]  # printable: space and letters
