"""``recgo train``'s errors and notes: a user's mistake under ``--nproc`` is the one-line error of one
process, a YAML typo fails before anything starts, an interrupted run hints --resume whatever set the
checkpoint, a resumed run's report equals the uninterrupted one's, a diverged run warns, and a damaged
checkpoint says so in one line."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import pytest

from recgo.__main__ import _interrupted, main
from recgo.errors import InvalidInputError, RecgoIOError
from recgo.train import TrainConfig, Trainer, make_source
from recgo.train.distributed import TrainingProcessError, launch


# Tests that evaluate: every evaluation scores the whole held-out split in batches of batch_size, so
# large batches keep the many evaluations of these runs cheap.
EVAL_BATCH = 256


def _cfg(**kw) -> TrainConfig:
    base = dict(model="dlrm", steps=4, batch_size=32, dim=4, max_rows=200, eval_every=2, seed=1)
    base.update(kw)
    return TrainConfig(**base)


def test_a_sparse_optimizer_typo_fails_validation() -> None:
    with pytest.raises(InvalidInputError, match=r"^sparse_optimizer 'adamw': choose one of \('sgd', 'adagrad'\)$"):
        _cfg(sparse_optimizer="adamw").validate()


def test_a_user_error_in_a_rank_is_the_same_one_line_error() -> None:
    """The rank's InvalidInputError reaches the caller as InvalidInputError naming the rank, without
    a traceback (an unexpected exception still gives TrainingProcessError with it: test_train_nproc)."""
    with pytest.raises(InvalidInputError) as got:
        launch(_cfg(nproc=2, steps=2, sparse_optimizer="adamw", dist_timeout=30.0), ["recgo"], 2, progress=False,
               threads=1)
    assert not isinstance(got.value, TrainingProcessError)
    assert got.value.__cause__ is None and got.value.__suppress_context__
    msg = str(got.value)
    assert msg.startswith("--nproc 2, backend recgo, rank ")
    assert msg.endswith(": sparse_optimizer 'adamw': choose one of ('sgd', 'adagrad')")
    assert "Traceback" not in msg and "\n" not in msg


def test_the_resume_hint_uses_the_effective_config(capsys) -> None:
    args = argparse.Namespace(command="train", out="o", checkpoint=None, checkpoint_every=None,
                              effective_config=_cfg(checkpoint="ck/run", checkpoint_every=3))
    assert _interrupted(args) == 130
    err = capsys.readouterr().err
    assert "--resume continues from the last checkpoint (ck/run, every 3 steps)" in err


def test_an_interrupted_train_hints_resume_for_a_yaml_checkpoint(tmp_path: Path, monkeypatch, capsys) -> None:
    """checkpoint and checkpoint_every from the YAML only: Ctrl-C still says how to resume."""
    import recgo.train.run as run

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "train", interrupted)
    yaml = tmp_path / "c.yaml"
    yaml.write_text(f"max_rows: 200\ncheckpoint: {tmp_path}/ck\ncheckpoint_every: 2\n")
    rc = main(["train", "--no-progress", "--config", str(yaml), "--steps", "4", "--out", str(tmp_path / "o")])
    assert rc == 130
    err = capsys.readouterr().err
    assert f"--resume continues from the last checkpoint ({tmp_path}/ck, every 2 steps)" in err


def _eval_steps(t: Trainer) -> list[int]:
    return [int(e["step"]) for e in t.history.evals]


def test_a_resumed_run_reports_the_evaluations_of_the_uninterrupted_one(tmp_path: Path) -> None:
    cfg = _cfg(steps=12, eval_every=5, batch_size=EVAL_BATCH)
    whole = Trainer(cfg, make_source(cfg), "recgo")
    whole.run()
    assert _eval_steps(whole) == [5, 10, 12]  # the end of the run is evaluated off the grid
    first = Trainer(cfg, make_source(cfg), "recgo")
    first.run(7)
    assert _eval_steps(first) == [5, 7]
    first.save(tmp_path / "ck")
    first.close()
    resumed = Trainer(cfg, make_source(cfg), "recgo")
    resumed.load(tmp_path / "ck")
    assert _eval_steps(resumed) == [5]
    resumed.run()
    assert _eval_steps(resumed) == [5, 10, 12]
    assert resumed.history.evals == whole.history.evals
    whole.close()
    resumed.close()
    again = Trainer(cfg, make_source(cfg), "recgo")  # resumed at the step it stopped: its final evaluation
    again.load(tmp_path / "ck")
    again.run(7)
    assert again.history.evals == first.history.evals
    again.close()


def test_a_diverged_run_warns_once(tmp_path: Path) -> None:
    cfg = _cfg(steps=6, sparse_lr=1e30, dense_lr=1e30, batch_size=EVAL_BATCH)
    t = Trainer(cfg, make_source(cfg), "recgo")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t.run()
    t.close()
    bad = [i + 1 for i, v in enumerate(t.history.train_loss) if v != v or abs(v) == float("inf")]
    assert bad, "the run did not diverge"
    got = [str(w.message) for w in caught if "diverged" in str(w.message)]
    assert len(got) == 1
    assert got[0].startswith(f"backend recgo: the training loss is nan at step {bad[0]}: training diverged") or \
        got[0].startswith(f"backend recgo: the training loss is inf at step {bad[0]}: training diverged")


def test_a_garbage_checkpoint_is_not_a_readable_recgo_checkpoint(tmp_path: Path) -> None:
    from recgo.modules import load_state

    path = tmp_path / "ck.recgo"
    path.write_text("garbage\n")
    with pytest.raises(RecgoIOError) as got:
        load_state(path)
    msg = str(got.value)
    assert msg.startswith(f"{path}: cannot read the checkpoint: not a readable recgo checkpoint (the file is "
                          "truncated, corrupted or in another format): UnpicklingError: ")
    assert "weights_only" not in msg and "\n" not in msg


def test_the_cli_prints_recgo_warnings_as_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``recgo train``'s warnings came out in Python's format (file, line, ``UserWarning`` and the
    ``warnings.warn(...)`` source under it); the CLI prints recgo's as one ``warning:`` line, as its
    errors, and leaves other packages' warnings in Python's format."""
    yaml = pytest.importorskip("yaml")
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump({"dim": 8, "max_rows": 1000, "eval_every": 2}))
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        code = main(["train", "--config", str(conf), "--steps", "2", "--batch-size", "64", "--sharding", "hash",
                     "--no-progress", "--out", str(tmp_path / "r")])
        assert code == 0
        err = capsys.readouterr().err
        assert ("warning: sharding applies with --nproc > 1; one process holds every table whole and exchanges "
                "nothing\n") in err
        assert "UserWarning" not in err and "warnings.warn" not in err
        import recgo._cli_warnings as shown

        passed_on: list[str] = []
        warnings.showwarning = lambda message, category, filename, lineno, *a: passed_on.append(filename)
        with shown.one_line_warnings():  # a warning from outside recgo goes to the format in place
            warnings.warn_explicit("from elsewhere", UserWarning, "/elsewhere/mod.py", 7)
            warnings.warn_explicit("from recgo", UserWarning, shown.__file__, 7)
        assert passed_on == ["/elsewhere/mod.py"]
        assert capsys.readouterr().err == "warning: from recgo\n"


def test_a_one_class_validation_split_reports_no_auc(tmp_path: Path) -> None:
    """A validation split of one class has no AUC: before, the report's table and summary showed ``nan``
    as if it were a result, with no word of why. Now the run warns, the table says n/a, the summary
    leaves it out and a note names the cause."""
    line = "0" + "\t1" * 13 + "\tab" * 26 + "\n"  # every click 0
    data = tmp_path / "zeros.txt"
    data.write_text(line * 200)
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="the validation split's 20 samples are all labelled 0"):
        assert main(["train", "--data", str(data), "--steps", "3", "--batch-size", "16", "--out", str(out),
                     "--no-progress"]) == 0
    md = (out / "report.md").read_text()
    assert "| n/a |" in md and "nan" not in md
    assert "Note: val AUC of recgo is n/a: the validation split's 20 samples are all labelled 0" in md
    import json

    report = json.loads((out / "report.json").read_text())
    assert report["backends"]["recgo"]["final_auc"] is None and "auc_recgo" not in md


def test_an_empty_validation_split_is_a_named_error_before_training(tmp_path: Path) -> None:
    """No validation samples: before, ``SyntheticCriteo(validation_samples=0)`` trained the whole run,
    then its first evaluation failed on ``torch.cat(): expected a non-empty list of Tensors``, and a
    ``CriteoFile`` fraction of NaN failed on ``int(nan)``. Now the sources refuse them, and a trainer
    given a source with no validation batches raises before its first step, naming the split."""
    from recgo.train.data import CriteoFile, SyntheticCriteo

    with pytest.raises(InvalidInputError, match="validation_samples must be a positive integer"):
        Trainer(_cfg(), SyntheticCriteo(batch_size=32, max_rows=200, samples=128, validation_samples=0), "recgo").run()
    data = tmp_path / "tiny.txt"
    data.write_text("1" + "\t1" * 13 + "\tab" * 26 + "\n" + "0" + "\t2" * 13 + "\tcd" * 26 + "\n")
    for bad in (float("nan"), 1.0, -0.1, "0.1"):
        with pytest.raises(InvalidInputError, match=r"validation_fraction must be a number in \[0, 1\)"):
            CriteoFile(data, batch_size=1, validation_fraction=bad)
    kept = CriteoFile(data, batch_size=1, validation_fraction=0.0)  # tiny data, no share: one line still held out
    assert [b.size for b in kept.validation()] == [1]

    class NoValidation(SyntheticCriteo):
        def validation(self) -> list:
            return []

    with pytest.raises(InvalidInputError, match="NoValidation: the validation split is empty"):
        Trainer(_cfg(), NoValidation(batch_size=32, max_rows=200, samples=128), "recgo")
