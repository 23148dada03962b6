"""The training job: exact AUC, backend parity from the same weights, resume, the sequence model."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

from recgo.errors import InvalidInputError
from recgo.train import TrainConfig, Trainer, auc, log_loss, make_source
from recgo.train.data import SyntheticCriteo, TaobaoSequences
from train_resume import assert_resume_equals_whole

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TAOBAO = DATA / "taobao" / "taobao_UserBehavior_head.csv"
CRITEO = DATA / "criteo" / "criteo_dac_train_head10109.txt"


def _brute_auc(s: list[float], y: list[int]) -> float:
    pos = [a for a, l in zip(s, y) if l]
    neg = [a for a, l in zip(s, y) if not l]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 1)), min_size=2, max_size=40))
def test_auc_matches_pair_counting(pairs: list[tuple[int, int]]) -> None:
    s = [float(a) for a, _ in pairs]  # few distinct values: many ties
    y = [b for _, b in pairs]
    got = auc(torch.tensor(s), torch.tensor(y))
    if 0 < sum(y) < len(y):
        assert got == pytest.approx(_brute_auc(s, y), abs=1e-12)
    else:
        assert math.isnan(got)


def test_auc_and_log_loss_match_sklearn() -> None:
    sklearn = pytest.importorskip("sklearn.metrics")
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(5000, generator=g).round(decimals=1)
    labels = (torch.rand(5000, generator=g) < torch.sigmoid(logits)).float()
    assert auc(logits, labels) == pytest.approx(sklearn.roc_auc_score(labels.numpy(), logits.numpy()), abs=1e-12)
    p = torch.sigmoid(logits.double())
    assert log_loss(logits, labels) == pytest.approx(sklearn.log_loss(labels.numpy(), p.numpy()), rel=1e-9)


def test_metrics_of_a_diverged_model_and_bad_labels() -> None:
    """NaN scores (a diverged model) gave an AUC near 0.5 and ±inf logits a NaN log loss; labels
    other than 0/1 gave -0.0 or NaN."""
    y = torch.tensor([0.0, 0.0, 1.0, 1.0])
    assert math.isnan(auc(torch.tensor([0.1, math.nan, 0.3, 0.4]), y))
    assert auc(torch.tensor([0.1, -math.inf, 0.3, math.inf]), y) == 1.0
    assert log_loss(torch.tensor([math.inf, -math.inf]), torch.tensor([1.0, 0.0])) == 0.0
    assert log_loss(torch.tensor([math.inf]), torch.tensor([0.0])) == math.inf
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        auc(torch.tensor([0.1, 0.2]), torch.tensor([0.0, 2.0]))


def test_synthetic_validation_scores_every_held_out_sample() -> None:
    """The synthetic held-out set read with drop_last: a batch of 300 scored 256 of 400 samples, and
    a batch larger than the set none (evaluate then crashed on an empty list)."""
    for batch in (300, 1000):
        s = SyntheticCriteo(batch_size=batch, max_rows=1000, seed=5, samples=batch * 2, validation_samples=400)
        assert sum(b.size for b in s.validation()) == 400


def _small(model: str = "dlrm", **kw) -> TrainConfig:
    base = dict(model=model, steps=12, batch_size=256, dim=8, max_rows=2000, eval_every=6, seed=1)
    base.update(kw)
    return TrainConfig(**base)


def _short_validation(cfg: TrainConfig) -> SyntheticCriteo:
    """``make_source(cfg)`` of a synthetic ``cfg`` with a smaller held-out split, for tests that run
    several trainers: every evaluation scores the whole split, which costs more than their steps."""
    return SyntheticCriteo(batch_size=cfg.batch_size, max_rows=cfg.max_rows, seed=cfg.seed, validation_samples=1024)


def test_synthetic_stream_is_deterministic_resumable_and_held_out() -> None:
    s = SyntheticCriteo(batch_size=128, max_rows=1000, seed=5, samples=128 * 6, validation_samples=256)
    first = s.stream(depth=2)
    a = [next(first) for _ in range(4)]
    state = first.state_dict()
    rest = [next(first) for _ in range(4)]  # crosses the epoch end (6 batches) into the next epoch
    first.close()
    again = s.stream(depth=0)
    b = [next(again) for _ in range(8)]
    again.close()
    resumed = s.stream(state, depth=1)
    c = [next(resumed) for _ in range(4)]
    resumed.close()
    for x, y in zip(a + rest, b):
        assert torch.equal(x.sparse.values(), y.sparse.values()) and torch.equal(x.labels, y.labels)
    for x, y in zip(rest, c):
        assert torch.equal(x.sparse.values(), y.sparse.values()) and torch.equal(x.dense, y.dense)
    assert torch.equal(b[6].labels, b[0].labels)  # epoch 2 repeats epoch 1
    val = s.validation()
    assert sum(v.size for v in val) == 256
    train_vals = torch.cat([x.dense for x in b[:6]])
    assert not any(torch.equal(v.dense[0], row) for v in val for row in train_vals)  # held out


@pytest.mark.parametrize("sparse_optimizer", ["sgd", "adagrad"])
def test_backends_agree_from_the_same_weights(sparse_optimizer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torchrec")
    # Adagrad with its default eps (1e-8) moves an element by about lr·g/|g| on its first step, whatever
    # |g|: this model's gradients are 1e-9..1e-4, so an element whose gradient cancels to rounding noise
    # moves by ±lr on the sign of that noise, and the flip spreads to the rows sharing its samples. The
    # 12 steps then agreed to within 0.1% of the elements on one CPU and differed in 11% on another
    # (AVX-512: torch's nn.EmbeddingBag sums in another order than recgo's and FBGEMM's, which agreed).
    # An eps above the noise makes the update a smooth function of the gradient, so the three backends
    # can be held to the same weights; the weights still move (46% of elements by more than 1e-4).
    from recgo.train import backends, loop

    monkeypatch.setattr(loop, "SparseOptim", functools.partial(backends.SparseOptim, eps=1e-5))
    cfg = _small(sparse_optimizer=sparse_optimizer)
    source = _short_validation(cfg)
    results = {}
    for backend in ("recgo", "torch", "torchrec"):
        tr = Trainer(cfg, source, backend)
        tr.run()
        weight = tr.model.sparse.module.state_dict()
        key = "C3.weight" if backend == "torch" else "embedding_bags.C3.weight"
        results[backend] = (tr.history.evals[-1]["auc"], tr.history.train_loss, weight[key].clone())
    ref_auc, ref_loss, ref_w = results["torch"]
    for backend in ("recgo", "torchrec"):
        got_auc, got_loss, got_w = results[backend]
        assert got_auc == pytest.approx(ref_auc, abs=1e-3)
        assert got_loss == pytest.approx(ref_loss, rel=1e-4, abs=1e-5)
        assert float((got_w - ref_w).abs().max()) <= 1e-5, backend


@pytest.mark.parametrize("backend", ["recgo", "torch", "torchrec"])
def test_resume_equals_uninterrupted(tmp_path: Path, backend: str) -> None:
    """Every backend resumes with its optimizer state (TorchRec's FusedEmbeddingBagCollection's save
    raised before: its fused_optimizer is a method)."""
    if backend == "torchrec":
        pytest.importorskip("torchrec")
    cfg = _small(checkpoint=str(tmp_path / "ck"))
    source = _short_validation(cfg)
    assert_resume_equals_whole(lambda: Trainer(cfg, source, backend), 5, tmp_path / "ck")


def test_resume_refuses_other_settings(tmp_path: Path) -> None:
    cfg = _small()
    tr = Trainer(cfg, make_source(cfg), "torch")
    tr.run(steps=2)
    tr.save(tmp_path / "ck")
    other = _small(dim=4)
    with pytest.raises(ValueError, match="dim"):
        Trainer(other, make_source(other), "torch").load(tmp_path / "ck")


def _criteo_lines(path: Path, n: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        ints = torch.randint(0, 50, (13,), generator=g).tolist()
        cats = torch.randint(0, 1 << 20, (26,), generator=g).tolist()
        rows.append("\t".join([str(int(torch.rand(1, generator=g) < 0.3))] + [str(v) for v in ints]
                              + [f"{v:08x}" for v in cats]))
    path.write_text("\n".join(rows) + "\n")


def test_resume_refuses_a_changed_schedule_or_data_file_and_takes_the_same_file_by_another_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A linear decay over other steps switched schedules midway, a data file replaced at the same path
    resumed with its old reader position, and the same file by a relative path was refused."""
    cfg = _small(lr_decay="linear", steps=4)
    tr = Trainer(cfg, make_source(cfg), "torch")
    tr.run(steps=2)
    tr.save(tmp_path / "ck")
    longer = _small(lr_decay="linear", steps=8)
    with pytest.raises(InvalidInputError, match="decays the learning rate linearly over steps=4"):
        Trainer(longer, make_source(longer), "torch").load(tmp_path / "ck")
    data = tmp_path / "day.txt"
    _criteo_lines(data, 1200, 0)
    cfg = _small(data=str(data), batch_size=100, steps=4, eval_every=2)
    tr = Trainer(cfg, make_source(cfg), "torch")
    tr.run(steps=2)
    tr.save(tmp_path / "ck2")
    monkeypatch.chdir(tmp_path)
    same = _small(data="day.txt", batch_size=100, steps=4, eval_every=2)
    Trainer(same, make_source(same), "torch").load(tmp_path / "ck2")  # refused as other settings before
    _criteo_lines(data, 1200, 1)
    changed = _small(data=str(data), batch_size=100, steps=4, eval_every=2)
    with pytest.raises(InvalidInputError, match="is another file or changed since"):
        Trainer(changed, make_source(changed), "torch").load(tmp_path / "ck2")


@pytest.mark.skipif(not CRITEO.exists(), reason="Criteo sample not present")
def test_criteo_file_split_and_dcn() -> None:
    cfg = _small("dcnv2", data=str(CRITEO), batch_size=512, steps=4, eval_every=4)
    tr = Trainer(cfg, make_source(cfg), "recgo")
    h = tr.run()
    assert 0.4 < h.evals[-1]["auc"] < 1.0
    assert sum(b.size for b in tr.source.validation()) == 1010


@pytest.mark.skipif(not TAOBAO.exists(), reason="Taobao sample not present")
def test_taobao_sequences_hold_out_each_users_last_event() -> None:
    s = TaobaoSequences(TAOBAO, batch_size=64, max_len=5, seed=0)
    b = s.train_batch(0)
    lens = b.sparse.lengths().view(5, 64)
    assert torch.equal(lens[0], lens[1]) and int(lens[0].max()) <= 5 and bool((lens[2:] == 1).all())
    assert sum(v.size for v in s.validation()) == 2 * 815  # one positive and one negative per user


@pytest.mark.skipif(not TAOBAO.exists(), reason="Taobao sample not present")
@pytest.mark.parametrize("backend", ["torch", "torchrec", "recgo"])
def test_bst_trains_on_every_backend(backend: str) -> None:
    if backend == "torchrec":
        pytest.importorskip("torchrec")
    if backend == "recgo":
        import recgo

        if not hasattr(recgo, "EmbeddingCollection"):
            pytest.skip("recgo.EmbeddingCollection not available")
    cfg = _small("bst", data=str(TAOBAO), batch_size=64, max_len=10, steps=4, eval_every=4)
    h = Trainer(cfg, make_source(cfg), backend).run()
    assert all(math.isfinite(x) for x in h.train_loss) and 0.0 <= h.evals[-1]["auc"] <= 1.0


@pytest.mark.skipif(not TAOBAO.exists(), reason="Taobao sample not present")
def test_bst_backends_agree_from_the_same_weights() -> None:
    """The sequence model's shared item/category tables (history and target) train alike on every backend."""
    pytest.importorskip("torchrec")
    cfg = _small("bst", data=str(TAOBAO), batch_size=64, dim=8, max_len=10, steps=8, eval_every=8, sparse_optimizer="sgd")
    source = make_source(cfg)
    out = {}
    for backend in ("torch", "torchrec", "recgo"):
        tr = Trainer(cfg, source, backend)
        tr.run()
        sd = tr.model.sparse.module.state_dict()
        out[backend] = (next(v for k, v in sd.items() if k.endswith("item.weight")).clone(), tr.history.train_loss)
    for backend in ("torchrec", "recgo"):
        torch.testing.assert_close(out[backend][0], out["torch"][0], rtol=1e-5, atol=1e-7)
        assert out[backend][1] == pytest.approx(out["torch"][1], rel=1e-5)


@pytest.mark.skipif(not CRITEO.exists(), reason="Criteo sample not present")
def test_cli_epochs_counts_the_file_once_and_trains_that_many_steps(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from recgo.__main__ import main
    from recgo.train import loop

    built: list[object] = []
    real = loop.make_source

    def counting(cfg: TrainConfig, **kwargs: object) -> object:
        built.append(real(cfg, **kwargs))
        return built[-1]

    monkeypatch.setattr(loop, "make_source", counting)
    monkeypatch.setattr("recgo.train.run.make_source", counting)
    assert main(["train", "--model", "dlrm", "--data", str(CRITEO), "--epochs", "0.5", "--batch-size", "1024",
                 "--no-progress", "--out", str(tmp_path / "r")]) == 0
    assert len(built) == 1  # --epochs counted the batches on the source the run then trained on
    per_epoch = built[0].batches_per_epoch()  # type: ignore[attr-defined]
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["config"]["steps"] == max(1, int(0.5 * per_epoch)) and per_epoch == 9100 // 1024


@pytest.mark.parametrize("epochs, steps", [("0.29", 29), ("1.13", 113), ("2.01", 201), ("0.001", 1)])
def test_cli_epochs_count_steps_exactly(epochs: str, steps: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """--epochs × batches per epoch from the number as written: 0.29 × 100 was 28 steps (the float
    product 28.999999999999996 truncated)."""
    from recgo.__main__ import build_parser
    from recgo.train import cli

    class Hundred:
        def batches_per_epoch(self, nproc: int) -> int:
            return 100

    monkeypatch.setattr("recgo.train.loop.make_source", lambda cfg, **kw: Hundred())
    args = build_parser().parse_args(["train", "--epochs", epochs, "--no-progress"])
    cfg, _ = cli._config(args)
    assert cfg.steps == steps


def test_cli_refuses_epochs_past_the_step_counter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from recgo.__main__ import main

    assert main(["train", "--model", "dlrm", "--data", str(CRITEO), "--epochs", "1e308", "--no-progress",
                 "--out", str(tmp_path / "r")]) == 2
    assert "--epochs 1e+308 of 8 steps each is more than 2^63 - 1 steps" in capsys.readouterr().err


@pytest.mark.parametrize("epochs", ["0", "-1", "nan", "inf"])  # (inf: an OverflowError traceback before)
def test_cli_refuses_epochs_that_are_not_positive(epochs: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from recgo.__main__ import main

    assert main(["train", f"--epochs={epochs}", "--no-progress", "--out", str(tmp_path / "r")]) == 2
    assert "InvalidInputError: --epochs must be a positive number" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_cli_checks_the_report_folder_before_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from recgo.__main__ import main

    def no_training(cfg: TrainConfig) -> None:
        raise AssertionError("the run started although its report could not be written")

    monkeypatch.setattr("recgo.train.run.make_source", no_training)
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "report"  # below a regular file: no folder can be made there
    assert main(["train", "--steps", "3", "--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "RecgoIOError: report folder" in err and str(out) in err


@pytest.mark.parametrize("flags, hint", [([], "interrupted; no report was written to train-report\n"),
                                         (["--checkpoint", "ck", "--checkpoint-every", "5", "--out", "r"],
                                          "interrupted; no report was written to r; --resume continues from the last "
                                          "checkpoint (ck, every 5 steps)\n")])
def test_cli_ctrl_c_is_one_line_and_status_130(flags: list[str], hint: str, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from recgo.__main__ import main

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    def interrupted_save(args: object) -> int:  # torch's zip writer raising as a Ctrl-C unwinds a save
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos") from None

    for run in (interrupted, interrupted_save):
        monkeypatch.setattr("recgo.train.cli.run_cli", run)  # bound when main builds the parser
        assert main(["train", *flags]) == 130
        assert capsys.readouterr().err == hint


def test_checkpoint_paths_are_checked_before_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from recgo.errors import InvalidInputError, RecgoIOError
    from recgo.train import train

    def no_training(cfg: TrainConfig) -> None:
        raise AssertionError("the run started although its checkpoint path was wrong")

    monkeypatch.setattr("recgo.train.run.make_source", no_training)
    (tmp_path / "one.recgo").write_text("a single-process checkpoint")
    with pytest.raises(InvalidInputError, match=r"one\.recgo is a single-process checkpoint \(a file\); --nproc 2"):
        train(_small(nproc=2, checkpoint=str(tmp_path / "one")), ["recgo"])
    (tmp_path / "ranks.torch").mkdir()
    with pytest.raises(InvalidInputError, match=r"ranks\.torch is a folder \(an --nproc run's checkpoint\)"):
        train(_small(checkpoint=str(tmp_path / "ranks")), ["torch"])
    (tmp_path / "file").write_text("")
    with pytest.raises(RecgoIOError, match="--checkpoint folder"):
        train(_small(checkpoint=str(tmp_path / "file" / "sub" / "ck")), ["recgo"])


def test_checkpoint_in_a_new_folder_is_written(tmp_path: Path) -> None:
    from recgo.train import train

    ck = tmp_path / "new" / "deeper" / "run"
    train(_small(steps=2, eval_every=2, checkpoint=str(ck)), ["recgo"], progress=False)
    assert (tmp_path / "new" / "deeper" / "run.recgo").is_file()


@pytest.mark.parametrize("text, message", [("dist_timeout: abc\n", "dist_timeout must be positive, finite seconds, got 'abc'"),
                                           ("steps: '5'\n", "steps must be a positive integer, got '5'"),
                                           ("steps: [\n", "not valid YAML"),
                                           ("steps: " + "[" * 20000 + "\n", "not valid YAML: nested too deeply")])
def test_bad_yaml_values_are_one_line_errors(text: str, message: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("yaml")
    from recgo.__main__ import main

    (tmp_path / "c.yaml").write_text(text)
    assert main(["train", "--config", str(tmp_path / "c.yaml"), "--no-progress", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_missing_config_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("yaml")
    from recgo.__main__ import main

    missing = tmp_path / "nope.yaml"
    assert main(["train", "--config", str(missing), "--no-progress", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert f"config: cannot read {missing}: No such file or directory" in err and err.count("\n") == 1
    # a device is refused before it is read (/dev/zero was read until memory ran out)
    assert main(["train", "--config", "/dev/zero", "--no-progress", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "config: /dev/zero is not a regular file (a pipe, socket or device)" in err and err.count("\n") == 1


@pytest.mark.parametrize("lines", [0, 1])
def test_a_criteo_file_without_a_validation_line_is_named(lines: int, tmp_path: Path) -> None:
    from recgo.errors import InvalidInputError
    from recgo.train.data import CriteoFile

    f = tmp_path / "tiny.txt"
    f.write_text("\t".join(["1"] + ["0"] * 13 + ["68fd1e64"] * 26) + "\n" if lines else "")
    with pytest.raises(InvalidInputError, match=rf"tiny\.txt: {lines} lines; the run needs training lines"):
        CriteoFile(f, batch_size=1)


@pytest.mark.parametrize("bad", [3, 18])  # a training line, a validation line (the last 10 % of 20)
def test_a_bad_criteo_line_is_named_by_the_users_file_and_line(bad: int, tmp_path: Path) -> None:
    """The run reads cached copies of the file's training and validation splits; an error names the
    user's file and line, not the copy's."""
    from recgo.errors import InvalidInputError
    from recgo.train.data import CriteoFile

    good = "\t".join(["1"] + ["0"] * 13 + ["68fd1e64"] * 26) + "\n"
    f = tmp_path / "mine.txt"
    f.write_text("".join("x\tbad\n" if i == bad else good for i in range(1, 21)))
    src = CriteoFile(f, batch_size=1, validation_fraction=0.1)
    want = rf"{tmp_path}/mine\.txt line {bad} column 1 \(label\)"
    with pytest.raises(InvalidInputError, match=want):
        src.validation()
        it = src.stream(depth=0)
        for _ in range(18):
            next(it)


@pytest.mark.parametrize("field, value, message", [
    ("data", 5, "data must be a path"), ("checkpoint", 5, "checkpoint must be a path"),
    ("checkpoint", "runs/new/", "names a folder"), ("dist_timeout", float("inf"), "positive, finite seconds")])
def test_config_fields_of_the_wrong_kind_are_named(field: str, value: object, message: str) -> None:
    """YAML can give any type: each field's problem is named (these gave tracebacks, a trailing '/'
    failed only after the whole run, an infinite timeout inside the ranks)."""
    with pytest.raises(InvalidInputError, match=message):
        _small(**{field: value}).validate()


def test_resume_says_when_it_starts_over_and_refuses_a_shorter_run(tmp_path: Path) -> None:
    from recgo.train.run import train

    cfg = _small(steps=4, eval_every=4, checkpoint=str(tmp_path / "ck"))
    with pytest.warns(UserWarning, match=r"--resume: torch has no checkpoint at .*ck\.torch; it starts from step 0"):
        train(cfg, ["torch"], resume=True, progress=False)
    shorter = _small(steps=2, eval_every=2, checkpoint=str(tmp_path / "ck"))
    with pytest.raises(InvalidInputError, match="at step 4, past steps 2"):
        train(shorter, ["torch"], resume=True, progress=False)


def test_cli_refuses_steps_with_epochs_and_runs_a_backend_once(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from recgo.__main__ import main

    assert main(["train", "--steps", "3", "--epochs", "1", "--no-progress"]) == 2
    assert "give --steps or --epochs, not both" in capsys.readouterr().err
    seen: list[list[str]] = []

    def fake_train(cfg: TrainConfig, backends: list[str], **kw: object) -> None:
        seen.append(list(backends))

    monkeypatch.setattr("recgo.train.run.train", fake_train)
    assert main(["train", "--steps", "1", "--backend", "torch,recgo,torch", "--no-progress"]) == 0
    assert seen == [["torch", "recgo"]]


def test_a_new_run_clears_the_last_report_and_nan_metrics_are_json_null(tmp_path: Path) -> None:
    """A run that ended without its report left the last run's report.json/md and plots looking like
    its own; a NaN metric wrote report.json with a bare NaN, which JSON parsers refuse."""
    import json

    from recgo.train import report

    for name in report.REPORT_FILES:
        (tmp_path / name).write_text("the last run's")
    (tmp_path / "notes.txt").write_text("mine")
    report.prepare(tmp_path, clear=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    cleaned = report._finite({"auc": math.nan, "curve": [1.0, math.inf, torch.tensor(math.nan)], "n": 3})
    assert json.loads(json.dumps(cleaned, allow_nan=False)) == {"auc": None, "curve": [1.0, None, None], "n": 3}


def test_config_fields_of_the_other_model_warn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """catalog/activation/max_len set for a DLRM run (or max_rows for bst) did nothing, silently, and
    the report listed them as the run's settings."""
    pytest.importorskip("yaml")
    from recgo.train import cli

    conf = tmp_path / "c.yaml"
    conf.write_text("catalog: true\nactivation: gelu\nsparse_lr: 0.1\ndense_lr: 1e-3\n")  # 1e-3: a YAML string
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train", "--config", str(conf), "--model", "dlrm"])
    with pytest.warns(UserWarning, match=r"\['activation', 'catalog'\] do not apply to --model dlrm"):
        cfg, _ = cli._config(args)
    assert cfg.dense_lr == 1e-3
