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


def test_train_torchrec_backend_without_torchrec_fails_before_training(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from recgo.__main__ import main

    _hide(monkeypatch, "torchrec")
    assert main(["train", "--backend", "recgo,torchrec", "--steps", "2", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("error: MissingExtraError: the torchrec backend needs torchrec, which is not installed: "
                           "pip install 'recgo[compare]'")
    assert not (tmp_path / "r").exists()


def _small_run(tmp_path: Path) -> list[str]:
    """``recgo train`` flags for a short run on small tables: the default tables take seconds to
    allocate and each evaluation scores the whole held-out split in batches of --batch-size."""
    conf = tmp_path / "small.yaml"
    conf.write_text("max_rows: 200\ndim: 4\n")
    return ["--config", str(conf), "--steps", "2", "--batch-size", "512", "--no-progress"]


def test_train_all_without_torchrec_runs_the_other_backends(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from recgo.__main__ import main

    _hide(monkeypatch, "torchrec")
    out = tmp_path / "r"
    assert main(["train", "--backend", "all", *_small_run(tmp_path), "--out", str(out)]) == 0
    assert "torchrec is not installed, so --backend all runs recgo and torch" in capsys.readouterr().err
    report = json.loads((out / "report.json").read_text())
    assert sorted(report["backends"]) == ["recgo", "torch"]
    assert all(b["samples_per_second"] > 0 for b in report["backends"].values())  # the last step is timed
    # and the report says so (the note went to stderr only)
    assert report["notes"] == ["torchrec is not installed, so --backend all ran recgo and torch"]
    assert "Note: torchrec is not installed, so --backend all ran recgo and torch." in (out / "report.md").read_text()


def _broken(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, top: str) -> None:
    """Make ``import top`` raise OSError as torchrec does over an fbgemm-gpu built for another torch."""
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        monkeypatch.delitem(sys.modules, name)
    (tmp_path / top).mkdir(parents=True)
    (tmp_path / top / "__init__.py").write_text(
        "raise OSError('Could not load this library: fbgemm_gpu_py.so')\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_train_all_with_unimportable_torchrec_runs_the_other_backends(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from recgo.__main__ import main

    _broken(monkeypatch, tmp_path / "pkgs", "torchrec")
    out = tmp_path / "r"
    assert main(["train", "--backend", "all", *_small_run(tmp_path), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "torchrec does not import on torch" in err and "OSError: Could not load this library" in err
    report = json.loads((out / "report.json").read_text())
    assert sorted(report["backends"]) == ["recgo", "torch"]
    assert report["notes"][0].startswith("torchrec does not import on torch")


def test_train_torchrec_backend_with_unimportable_torchrec_fails_before_training(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from recgo.__main__ import main

    _broken(monkeypatch, tmp_path / "pkgs", "torchrec")
    assert main(["train", "--backend", "recgo,torchrec", "--steps", "2", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: MissingExtraError: the torchrec backend needs torchrec, which is installed but "
                          "does not import on torch") and "\n" not in err
    assert not (tmp_path / "r").exists()
    with pytest.raises(MissingExtraError, match=r"torchrec_constraints needs torchrec, which is installed but"):
        recgo.planner.torchrec_constraints(None)  # type: ignore[arg-type]
