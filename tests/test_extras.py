"""A missing optional dependency gives one MissingExtraError naming the recgo[extra] to install."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import recgo
from recgo.errors import MissingExtraError, require_extra


def _hide(monkeypatch: pytest.MonkeyPatch, top: str) -> None:
    """Make ``import top`` (and its submodules) fail as if the package were not installed."""
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, top, None)


def test_require_extra_names_the_extra() -> None:
    assert require_extra("json", "plots", "testing") is sys.modules["json"]
    with pytest.raises(MissingExtraError) as exc:
        require_extra("recgo_no_such_module", "plots", "testing")
    msg = str(exc.value)
    assert msg == "testing needs recgo_no_such_module, which is not installed: pip install 'recgo[plots]'"
    assert "\n" not in msg and isinstance(exc.value, ImportError)


def test_yaml_feature_config_without_pyyaml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "f.yaml"
    cfg.write_text("features: []\n")
    _hide(monkeypatch, "yaml")
    with pytest.raises(MissingExtraError, match=r"recgo\[yaml\]"):
        recgo.load_features(cfg)


def test_plots_without_matplotlib(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _hide(monkeypatch, "matplotlib")
    with pytest.raises(MissingExtraError, match=r"needs matplotlib.*recgo\[plots\]"):
        recgo.planner.plot_gpu_costs({}, tmp_path / "x.png")


def test_torchrec_helpers_without_torchrec(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, "torchrec")
    with pytest.raises(MissingExtraError, match=r"torchrec_constraints needs torchrec.*recgo\[compare\]"):
        recgo.planner.torchrec_constraints(None)  # type: ignore[arg-type]
