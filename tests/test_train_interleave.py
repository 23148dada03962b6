"""``recgo train``'s interleaved schedule: the backends' models built together and trained in turns of
``TURN_STEPS`` steps (so that their throughputs come from the same stretch of time) give each backend
the very losses and evaluations it gives trained alone, resumed or not; a failure closes every trainer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from recgo.train import run as run_mod
from recgo.train.data import SyntheticCriteo
from recgo.train.loop import TrainConfig, Trainer

BACKENDS = ["recgo", "torch"]


def _cfg(**kw: Any) -> TrainConfig:
    # 45 steps: turns of 20, 20 and 5; evaluations every 10 fall inside turns and at their ends
    base = dict(model="dlrm", steps=45, batch_size=128, dim=8, max_rows=2000, eval_every=10, seed=3)
    base.update(kw)
    return TrainConfig(**base)


def _source(cfg: TrainConfig) -> SyntheticCriteo:
    return SyntheticCriteo(batch_size=cfg.batch_size, max_rows=cfg.max_rows, seed=cfg.seed, validation_samples=512)


def _per_backend(report: dict[str, Any]) -> dict[str, tuple[list[float], list[dict[str, float]]]]:
    return {b: (p["train_loss"], p["evals"]) for b, p in report["backends"].items()}


def test_interleaved_turns_give_each_backend_its_sequential_run(tmp_path: Path) -> None:
    cfg = _cfg()
    inter = run_mod.train(cfg, BACKENDS, out=tmp_path / "i", progress=False, source=_source(cfg))
    seq = run_mod.train(cfg, BACKENDS, out=tmp_path / "s", progress=False, source=_source(cfg), interleave=False)
    assert list(inter["backends"]) == BACKENDS  # the rows in the order asked for
    assert _per_backend(inter) == _per_backend(seq)
    losses, evals = _per_backend(inter)["recgo"]
    assert len(losses) == 45 and [e["step"] for e in evals] == [10, 20, 30, 40, 45]
    assert (inter["turn_steps"], seq["turn_steps"]) == (run_mod.TURN_STEPS, None)
    assert json.loads((tmp_path / "i" / "report.json").read_text())["turn_steps"] == run_mod.TURN_STEPS
    assert f"turns of {run_mod.TURN_STEPS} steps" in (tmp_path / "i" / "report.md").read_text()
    assert "turns of" not in (tmp_path / "s" / "report.md").read_text()


def test_the_turns_time_each_backend_over_the_same_stretch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The schedule itself: each backend's steps come in turns of TURN_STEPS, one backend after the
    other, not one backend's whole run after the other's."""
    order: list[str] = []
    step = Trainer.train_step

    def logged(self: Trainer, batch: Any, timed: bool = True) -> float:
        order.append(self.backend)
        return step(self, batch, timed)

    monkeypatch.setattr(Trainer, "train_step", logged)
    cfg = _cfg(eval_every=45)
    run_mod.train(cfg, BACKENDS, progress=False, source=_source(cfg))
    turns = [(order[0], 1)]
    for b in order[1:]:
        turns[-1:] = [(b, turns[-1][1] + 1)] if b == turns[-1][0] else [turns[-1], (b, 1)]
    assert turns == [("recgo", 20), ("torch", 20), ("recgo", 20), ("torch", 20), ("recgo", 5), ("torch", 5)]


def test_resumed_backends_at_other_steps_finish_as_alone(tmp_path: Path) -> None:
    """One backend resumes at step 30 while the other starts over: both end at 45 with what a
    sequential resume gives."""
    first = _cfg(steps=30, checkpoint=str(tmp_path / "a" / "ck"))
    run_mod.train(first, ["torch"], progress=False, source=_source(first))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "ck.torch").write_bytes((tmp_path / "a" / "ck.torch").read_bytes())
    reports = []
    for folder, interleave in (("a", True), ("b", False)):
        cfg = _cfg(checkpoint=str(tmp_path / folder / "ck"))
        with pytest.warns(UserWarning, match="recgo has no checkpoint"):
            reports.append(run_mod.train(cfg, BACKENDS, resume=True, progress=False, source=_source(cfg),
                                         interleave=interleave))
    assert _per_backend(reports[0]) == _per_backend(reports[1])
    assert [len(reports[0]["backends"][b]["train_loss"]) for b in BACKENDS] == [45, 45]


def test_a_failing_backend_closes_every_trainer(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[str] = []
    close, step = Trainer.close, Trainer.train_step

    def recording_close(self: Trainer) -> None:
        closed.append(self.backend)
        close(self)

    def failing(self: Trainer, batch: Any, timed: bool = True) -> float:
        if self.backend == "torch" and self.step == 25:
            raise RuntimeError("injected failure")
        return step(self, batch, timed)

    monkeypatch.setattr(Trainer, "close", recording_close)
    monkeypatch.setattr(Trainer, "train_step", failing)
    cfg = _cfg(eval_every=45)
    with pytest.raises(RuntimeError, match="injected failure"):
        run_mod.train(cfg, BACKENDS, progress=False, source=_source(cfg))
    assert sorted(closed) == BACKENDS
