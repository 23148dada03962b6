"""Feature configs read strictly and alike from JSON and YAML: an integer-valued literal past 2^53 kept
its digits in JSON but was rounded to a float in YAML (the same config filtered another ID); a key
given twice in one mapping was silently overwritten by the last (also in ``recgo train --config``);
``max_values: 1e6`` in JSON was refused as ``Decimal('1E+6')`` while ``mod: 1e6`` was taken; and
``FeatureEngine`` of a generator raised "no features" (its check used the generator up)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import recgo
from recgo.feature import Feature, FeatureEngine


@pytest.mark.parametrize("name, text", [
    ("p.json", '{"features": [{"name": "a", "ops": [{"filter": [9007199254740993.0]}]}]}'),
    ("p.yaml", "features:\n  - {name: a, ops: [{filter: [9007199254740993.0]}]}\n"),
])
def test_a_literal_past_2_53_reads_exactly_from_json_and_yaml(tmp_path: Path, name: str, text: str) -> None:
    if name.endswith(".yaml"):
        pytest.importorskip("yaml")
    (tmp_path / name).write_text(text)
    engine = FeatureEngine(tmp_path / name)
    assert engine({"a": torch.tensor([2**53, 2**53 + 1])}).values().tolist() == [2**53]


@pytest.mark.parametrize("name, text, match", [
    ("d.json", '{"features": [{"name": "a", "ops": [{"mod": 7}], "ops": [{"mod": 1000}]}]}', "key 'ops' is given twice"),
    ("d.json", '{"features": [], "features": [{"name": "a"}]}', "key 'features' is given twice"),
    ("d.yaml", "features:\n  - name: a\n    ops: [{mod: 7}]\n    ops: [{mod: 1000}]\n", "key 'ops' is given twice"),
])
def test_a_key_given_twice_is_refused(tmp_path: Path, name: str, text: str, match: str) -> None:
    if name.endswith(".yaml"):
        pytest.importorskip("yaml")
    (tmp_path / name).write_text(text)
    with pytest.raises(recgo.InvalidInputError, match=f"{name}: .*{match}"):
        FeatureEngine(tmp_path / name)


def test_yaml_merge_keys_may_override_what_they_merge(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    text = "features:\n  - &b {name: a, input: a, ops: [{mod: 7}]}\n  - <<: *b\n    name: b\n    ops: [{mod: 5}]\n"
    (tmp_path / "m.yaml").write_text(text)
    out = FeatureEngine(tmp_path / "m.yaml")({"a": torch.tensor([12, 13])})
    assert out.keys() == ["a", "b"] and out.values().tolist() == [5, 6, 2, 3]


def test_max_values_in_exponent_form_is_an_integer(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text('{"features": [{"name": "a", "ops": [{"mod": 1e6}]}], "max_values": 1e6}')
    engine = FeatureEngine(tmp_path / "c.json")
    assert engine.max_values == 10**6
    assert engine({"a": torch.tensor([10**6 + 3])}).values().tolist() == [3]


def test_an_engine_of_a_generator_has_its_features() -> None:
    want = [Feature("a").mod(5), Feature("b").hash()]
    for source in ((f for f in want), iter(want), map(lambda f: f, want)):
        assert FeatureEngine(source).keys == ["a", "b"]


def test_a_train_config_with_a_key_given_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("yaml")
    from recgo.__main__ import main

    (tmp_path / "c.yaml").write_text("steps: 5\nsteps: 500\n")
    assert main(["train", "--config", str(tmp_path / "c.yaml"), "--no-progress", "--out", str(tmp_path / "r")]) == 2
    assert "key 'steps' is given twice in one mapping" in capsys.readouterr().err
