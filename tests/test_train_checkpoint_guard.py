"""``recgo train --checkpoint``: a run without --resume refuses to overwrite a checkpoint already there
(a quick rerun replaced a long run's checkpoint in silence), and --resume checks every backend's
checkpoint before any backend trains (with ``--backend torch,recgo`` and a damaged ck.recgo, torch
trained on and overwrote ck.torch before recgo's load failed)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from recgo.errors import InvalidInputError, RecgoIOError
from recgo.modules import load_state, save_state
from recgo.train import TrainConfig, Trainer
from recgo.train.run import train


def _small(**kw: object) -> TrainConfig:
    # batch_size: every evaluation scores the whole held-out split in batches of it
    base: dict[str, object] = dict(steps=4, batch_size=512, dim=8, max_rows=200, eval_every=4, seed=1)
    base.update(kw)
    return TrainConfig(**base)  # type: ignore[arg-type]


def _no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*a: object, **kw: object) -> None:
        raise AssertionError("a backend trained although the run was to be refused")

    monkeypatch.setattr(Trainer, "__init__", refuse)


def test_a_run_without_resume_refuses_to_overwrite_a_checkpoint(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ck, out = tmp_path / "ck", tmp_path / "out"
    train(_small(checkpoint=str(ck)), ["recgo"], out=out, progress=False)
    assert load_state(f"{ck}.recgo")["step"] == 4
    before = (out / "report.json").read_bytes()
    _no_training(monkeypatch)
    msg = (rf"--checkpoint {ck}: {ck}\.recgo already holds a checkpoint \(step 4\): add --resume to continue it, "
           r"or remove it / give another --checkpoint")
    with pytest.raises(InvalidInputError, match=msg):
        train(_small(steps=2, eval_every=2, checkpoint=str(ck)), ["recgo"], out=out, progress=False)
    monkeypatch.undo()
    assert load_state(f"{ck}.recgo")["step"] == 4  # the checkpoint is kept ...
    assert (out / "report.json").read_bytes() == before  # ... and so is the last report
    # an unreadable file is refused too (without its step), and a fresh --checkpoint still trains
    (tmp_path / "bad.torch").write_bytes(b"not a checkpoint")
    with pytest.raises(InvalidInputError, match=r"bad\.torch already holds a checkpoint: add --resume"):
        train(_small(checkpoint=str(tmp_path / "bad")), ["recgo", "torch"], progress=False)
    assert not (tmp_path / "bad.recgo").exists()  # refused before recgo, listed first, trained
    train(_small(steps=2, eval_every=2, checkpoint=str(tmp_path / "new")), ["recgo"], progress=False)
    assert load_state(tmp_path / "new.recgo")["step"] == 2


def test_resume_checks_every_backend_before_any_trains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck = tmp_path / "ck"
    train(_small(steps=2, eval_every=2, checkpoint=str(ck)), ["torch", "recgo"], progress=False)
    torch_ck = Path(f"{ck}.torch")
    saved = torch_ck.read_bytes()
    good_recgo = Path(f"{ck}.recgo").read_bytes()

    Path(f"{ck}.recgo").write_bytes(good_recgo[: len(good_recgo) // 2])  # damaged
    _no_training(monkeypatch)
    with pytest.raises(RecgoIOError, match=r"ck\.recgo: cannot read the checkpoint"):
        train(_small(checkpoint=str(ck)), ["torch", "recgo"], resume=True, progress=False)
    assert torch_ck.read_bytes() == saved  # torch did not train on and overwrite its checkpoint

    # a checkpoint of other settings, a shorter run and another backend's file: refused up front alike
    Path(f"{ck}.recgo").write_bytes(good_recgo)
    other = r"ck\.recgo: the checkpoint was trained with other settings: \['dim'\]"
    with pytest.raises(InvalidInputError, match=other):
        train(_small(dim=4, checkpoint=str(ck)), ["recgo", "torch"], resume=True, progress=False)
    past = r"ck\.torch: the checkpoint is at step 2, past steps 1: resume with steps ≥ 2"
    with pytest.raises(InvalidInputError, match=past):
        train(_small(steps=1, eval_every=1, checkpoint=str(ck)), ["torch", "recgo"], resume=True, progress=False)
    Path(f"{ck}.recgo").write_bytes(saved)
    with pytest.raises(InvalidInputError, match=r"ck\.recgo: a checkpoint of backend 'torch', not 'recgo'"):
        train(_small(checkpoint=str(ck)), ["torch", "recgo"], resume=True, progress=False)
    assert torch_ck.read_bytes() == saved
    monkeypatch.undo()

    # checkpoints that pass resume as before: both continue from step 2 to 4
    Path(f"{ck}.recgo").write_bytes(good_recgo)
    report = train(_small(checkpoint=str(ck)), ["torch", "recgo"], resume=True, progress=False)
    assert load_state(torch_ck)["step"] == 4 and load_state(f"{ck}.recgo")["step"] == 4
    assert set(report["backends"]) == {"torch", "recgo"}


def _nproc_folder(root: Path, step: int) -> None:
    root.mkdir()
    (root / f"step-{step:08d}").mkdir()
    (root / "latest").write_text(f"step-{step:08d}")


def test_nproc_checkpoint_folders_are_guarded_before_the_ranks_start(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import recgo.train.distributed as distributed

    def no_launch(*a: object, **kw: object) -> None:
        raise AssertionError("the ranks started although the run was to be refused")

    monkeypatch.setattr(distributed, "launch", no_launch)
    ck = tmp_path / "ck"
    _nproc_folder(Path(f"{ck}.torch"), 12)
    with pytest.raises(InvalidInputError, match=rf"--checkpoint {ck}: {ck}\.torch already holds a checkpoint "
                                                 r"\(step 12\): add --resume"):
        train(_small(nproc=2, checkpoint=str(ck)), ["recgo", "torch"], progress=False)
    # --resume: every rank's file of every backend is read first (here rank 0's is missing)
    with pytest.raises(RecgoIOError, match=r"step-00000012: no rank-0-of-2\.pt"):
        train(_small(nproc=2, checkpoint=str(ck)), ["recgo", "torch"], resume=True, progress=False)
    # a folder without a complete step holds no checkpoint: neither refused nor read
    (Path(f"{ck}.torch") / "latest").unlink()
    seen: list[object] = []
    monkeypatch.setattr(distributed, "launch", lambda *a, **kw: seen.append(kw) or {"ok": True})
    assert train(_small(nproc=2, checkpoint=str(ck)), ["recgo", "torch"], progress=False) == {"ok": True}
    assert seen and seen[0]["resume"] is False  # type: ignore[index]


def test_under_torchrun_every_rank_checks_every_rank_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A torchrun rank used to check only its own file: the rank whose file was bad stopped while the
    others went on into the process group and waited for it until ``dist_timeout``. Every rank now
    reads every rank's file, so all refuse alike (here rank 0, whose own file is good)."""
    import recgo.train.distributed as distributed

    monkeypatch.setattr(distributed, "launch", lambda *a, **kw: pytest.fail("the rank went on to train"))
    for k, v in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(k, v)
    ck = tmp_path / "ck"
    cfg = _small(nproc=2, checkpoint=str(ck))
    _nproc_folder(Path(f"{ck}.torch"), 2)
    good = {"backend": "torch", "config": asdict(cfg), "step": 2, "dense": {}, "dense_optimizer": {},
            "sparse_optimizer": {}, "history": {"backend": "torch"}}  # a rank file's entries (their values aside)
    save_state(good, Path(f"{ck}.torch") / "step-00000002" / "rank-0-of-2.pt")
    with pytest.raises(RecgoIOError, match=r"step-00000002: no rank-1-of-2\.pt"):
        train(cfg, ["torch"], resume=True, progress=False)


@pytest.mark.parametrize("change, match", [
    ({"step": 2.7}, r"the checkpoint's step 2\.7 is not a non-negative integer"),
    ({"step": -1}, r"the checkpoint's step -1 is not a non-negative integer"),
    ({"step": "2"}, r"the checkpoint's step '2' is not a non-negative integer"),
    ({"config": [1]}, r"the checkpoint's config is a list, not a dict"),
    ({"history": {"backend": "recgo", "bogus": 1}}, r"the checkpoint's history is not a dict of"),
    ({"model": None}, r"the checkpoint lacks \['model'\]"),
])
def test_a_forged_train_checkpoint_is_refused_before_it_is_restored(tmp_path: Path, change: dict,
                                                                    match: str) -> None:
    """A resume read the step with int() (2.7 resumed at step 2, -1 was taken, "2" raised ValueError)
    and built the history after the weights were restored (unknown fields raised TypeError then); a
    missing entry or a config that is not a dict raised KeyError or TypeError."""
    from recgo.train.loop import read_checkpoint

    # the entries a resume reads, as Trainer.state() writes them (the tensors do not matter here)
    state = {"step": 2, "backend": "recgo", "config": asdict(_small()), "data": None, "data_file": None, "model": {},
             "dense_optimizer": {}, "sparse_optimizer": {}, "history": {"backend": "recgo", "train_loss": [0.7, 0.6]}}
    save_state(state, tmp_path / "ck")
    assert read_checkpoint(_small(), "recgo", None, tmp_path / "ck")["step"] == 2
    state.update(change)
    state = {k: v for k, v in state.items() if v is not None}
    save_state(state, tmp_path / "forged")
    with pytest.raises(RecgoIOError, match=match):
        read_checkpoint(_small(), "recgo", None, tmp_path / "forged")
