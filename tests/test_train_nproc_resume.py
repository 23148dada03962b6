"""``recgo train --nproc 2 --checkpoint ... --resume``: train n steps, stop, resume, finish equals the
uninterrupted run (final weights, losses and AUC) on every backend."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from recgo.errors import RecgoIOError
from recgo.train import TrainConfig, train
from recgo.train.distributed import World, launch
from recgo.train.nproc_checkpoint import load_rank_state

BACKENDS = ["recgo", "torchrec", "torch"]


def _cfg(**kw) -> TrainConfig:
    # batch_size: every evaluation scores the whole held-out split in batches of it, on every backend
    base = dict(model="dlrm", steps=4, batch_size=256, dim=4, max_rows=200, eval_every=2, seed=2, nproc=2,
                sparse_optimizer="adagrad")
    base.update(kw)
    return TrainConfig(**base)


def test_resume_on_two_ranks_equals_uninterrupted(tmp_path: Path) -> None:
    pytest.importorskip("torchrec")
    ck = str(tmp_path / "ck")
    opts = dict(progress=False, threads=1, one_world=True)
    whole = launch(_cfg(), BACKENDS, 2, weights_dir=str(tmp_path / "whole"), **opts)
    launch(_cfg(steps=2, checkpoint=ck), BACKENDS, 2, **opts)  # stop after 2 of the 4 steps
    for b in BACKENDS:
        step_dirs = sorted(p.name for p in Path(f"{ck}.{b}").glob("step-*"))
        assert step_dirs == ["step-00000002"] and (Path(f"{ck}.{b}") / "latest").read_text() == "step-00000002"
    assert sorted(p.name for p in Path(f"{ck}.recgo/step-00000002/recgo-shards").iterdir()) == [
        "shard-0-of-2.pt", "shard-1-of-2.pt"]
    # fail_at step 1: a run that started over instead of resuming at step 2 would raise there.
    resumed = launch(_cfg(checkpoint=ck), BACKENDS, 2, weights_dir=str(tmp_path / "resumed"), resume=True,
                     fail_at=(0, 1), **opts)
    for b in BACKENDS:
        a = torch.load(tmp_path / "whole" / f"{b}.pt", weights_only=False)
        r = torch.load(tmp_path / "resumed" / f"{b}.pt", weights_only=False)
        for n in a["tables"]:
            assert torch.equal(a["tables"][n], r["tables"][n]), (b, n)
        for k in a["dense"]:
            assert torch.equal(a["dense"][k], r["dense"][k]), (b, k)
        got, want = resumed["backends"][b], whole["backends"][b]
        assert got["train_loss"] == want["train_loss"], b
        assert got["evals"] == want["evals"] and got["final_auc"] == want["final_auc"], b
    # Another world size cannot take over the reader positions: a clear error naming the files.
    with pytest.raises(RecgoIOError, match="rank-2-of-3.pt.*resume with the --nproc it was written with"):
        load_rank_state(World(2, 3), f"{ck}.recgo")


def test_an_incomplete_checkpoint_folder_is_refused(tmp_path: Path) -> None:
    from recgo.train.nproc_checkpoint import _latest, exists

    (tmp_path / "ck.recgo" / "step-00000002").mkdir(parents=True)
    assert not exists(tmp_path / "ck.recgo")
    with pytest.raises(RecgoIOError, match="no complete --nproc checkpoint"):
        _latest(tmp_path / "ck.recgo")


def test_resume_without_a_checkpoint_path_is_refused() -> None:
    with pytest.raises(ValueError, match="resume needs a checkpoint"):
        train(_cfg(), ["recgo"], resume=True, progress=False)


def test_train_hands_resume_to_the_launcher(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``recgo train --nproc 2 --checkpoint ... --resume`` reaches the ranks (no longer refused)."""
    import recgo.train.distributed as D

    seen = {}

    def fake_launch(cfg, backends, nproc, **kw):
        seen.update(kw, nproc=nproc, checkpoint=cfg.checkpoint)
        return {"ok": True}

    monkeypatch.setattr(D, "launch", fake_launch)
    assert train(_cfg(checkpoint=str(tmp_path / "ck")), ["recgo"], resume=True, progress=False) == {"ok": True}
    assert seen["resume"] is True and seen["nproc"] == 2 and seen["checkpoint"] == str(tmp_path / "ck")
