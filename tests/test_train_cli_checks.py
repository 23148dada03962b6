"""``recgo train``'s checks and consistency: a BST ``dim`` its attention heads cannot split, an absurd
``max_len`` and bad ``--ablation-*`` flags are one-line errors before any training; flags that do nothing
warn; the ablation trains the main run's data source; a resumed CLI run reports the uninterrupted run's
evaluations; the ablation shows a progress bar; BST batches are padded to their longest history."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from recgo.__main__ import main
from recgo.errors import InvalidInputError
from recgo.jagged import JaggedTensor
from recgo.train import TrainConfig, Trainer, make_source
from recgo.train.loop import MAX_DIM, MAX_LEN, MAX_NPROC
from recgo.train.models import BST, bst_inputs


def _not_trained(*a: Any, **kw: Any) -> None:
    raise AssertionError("trained before the bad input was refused")


# For runs that evaluate: an evaluation scores the whole held-out split in batches of the batch size.
EVAL_BATCH = 256


def _dlrm_yaml(tmp_path: Path, **extra: Any) -> Path:
    p = tmp_path / "tiny.yaml"
    fields = {"max_rows": 200, "dim": 4, "seed": 1, **extra}
    p.write_text("".join(f"{k}: {v}\n" for k, v in fields.items()))
    return p


# -- 1. a BST dim its heads cannot split ------------------------------------------------------------


def test_an_odd_bst_dim_is_a_one_line_error_before_training(tmp_path: Path, monkeypatch, capsys) -> None:
    """torch's ``AssertionError: embed_dim must be divisible by num_heads`` came mid-run (with --nproc 2 a
    TrainingProcessError with the traceback)."""
    with pytest.raises(InvalidInputError, match=r"^dim must be a multiple of 2 for --model bst .*got 3$"):
        TrainConfig(model="bst", dim=3).validate()
    TrainConfig(model="dlrm", dim=3).validate()  # the pooled models have no heads
    import recgo.train.run as run

    monkeypatch.setattr(run, "train", _not_trained)
    conf = tmp_path / "c.yaml"
    conf.write_text("model: bst\ndim: 3\nsteps: 3\n")
    for extra in ([], ["--nproc", "2"]):
        assert main(["train", "--no-progress", "--config", str(conf), "--out", str(tmp_path / "o"), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "dim must be a multiple of 2" in err and "Traceback" not in err


def test_an_absurd_max_len_is_refused() -> None:
    TrainConfig(model="bst", max_len=MAX_LEN).validate()
    with pytest.raises(InvalidInputError, match=rf"^max_len must be at most {MAX_LEN} events"):
        TrainConfig(model="bst", max_len=MAX_LEN + 1).validate()


@pytest.mark.parametrize("fields, match", [
    ({"activation": [1]}, r"^activation must be one of .*got \[1\]"),
    ({"sparse_optimizer": {"sgd": 1}}, r"^sparse_optimizer must be one of"),
    ({"dim": MAX_DIM + 1}, rf"^dim must be at most {MAX_DIM}"),
    ({"nproc": 10**30}, rf"^nproc must be an integer in \[1, {MAX_NPROC}\]"),
])
def test_a_config_field_of_another_type_or_past_its_bound_is_refused(fields: dict, match: str) -> None:
    """A YAML list for a choice raised TypeError (unhashable) out of validate; an nproc past what the
    spawner indexes an OverflowError inside torch.multiprocessing; a dim of 10^30 a RuntimeError out of
    torch's allocator (with its C++ trace)."""
    with pytest.raises(InvalidInputError, match=match):
        TrainConfig(**fields).validate()


def test_initial_weights_past_the_machines_memory_are_refused_before_allocating() -> None:
    """dim 10^8 over 10^5-row tables asked torch for 40 GB per table: an allocator error, or the OOM killer
    where memory overcommits. The size is checked against the machine's memory first."""
    from recgo.errors import CapacityError
    from recgo.train.backends import TableSpec, initial_weights

    with pytest.raises(CapacityError, match=r"initial weights take .* GiB \(2000000000 rows of dim 1048576\)"):
        initial_weights([TableSpec("a", 10**9, ("a",)), TableSpec("b", 10**9, ("b",))], 1 << 20, 0)
    assert initial_weights([TableSpec("a", 3, ("a",))], 2, 0)["a"].shape == (3, 2)


# -- 2 and 7. the ablation's flags, --checkpoint-every --------------------------------------------


@pytest.mark.parametrize("flags, msg", [
    (["--ablation-steps", "0"], "--ablation-steps must be a positive integer, got 0"),
    (["--ablation-repeats", "-1"], "--ablation-repeats must be a positive integer, got -1"),
])
def test_bad_ablation_flags_fail_before_training(tmp_path: Path, monkeypatch, capsys, flags: list[str],
                                                 msg: str) -> None:
    """They were refused after the whole training run, whose report was lost (--out already cleared)."""
    import recgo.train.run as run

    monkeypatch.setattr(run, "train", _not_trained)
    out = tmp_path / "o"
    out.mkdir()
    (out / "report.json").write_text("{}")  # the last run's report stays
    rc = main(["train", "--no-progress", "--model", "bst", "--ablation", "--steps", "3", "--out", str(out), *flags])
    assert rc == 2
    assert capsys.readouterr().err == f"error: InvalidInputError: {msg}\n"
    assert (out / "report.json").exists()


def test_flags_that_do_nothing_warn(tmp_path: Path, monkeypatch, capsys) -> None:
    """--ablation-steps/--ablation-repeats without --ablation and --checkpoint-every (flag or YAML) without
    --checkpoint did nothing in silence."""
    import recgo.train.run as run

    monkeypatch.setattr(run, "train", lambda *a, **kw: None)  # a report of None: nothing more to print
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        rc = main(["train", "--no-progress", "--config", str(_dlrm_yaml(tmp_path, checkpoint_every=5)),
                   "--ablation-steps", "5", "--ablation-repeats", "2", "--out", str(tmp_path / "o")])
    assert rc == 0
    err = capsys.readouterr().err
    assert "warning: --checkpoint-every applies with --checkpoint; no checkpoint is written\n" in err
    assert "warning: --ablation-steps and --ablation-repeats apply with --ablation; no ablation runs\n" in err
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        rc = main(["train", "--no-progress", "--config", str(_dlrm_yaml(tmp_path)), "--checkpoint-every", "5",
                   "--checkpoint", str(tmp_path / "ck"), "--out", str(tmp_path / "o")])
    assert rc == 0 and "warning" not in capsys.readouterr().err


# -- 3. the ablation's data ------------------------------------------------------------------------


def test_the_ablation_trains_the_main_runs_source(monkeypatch) -> None:
    """With catalog, holdout_events and shuffle set, the ablation built a TaobaoSequences of its own without
    them: other table sizes, another split and file order."""
    import recgo.train.ablation as A

    cfg = TrainConfig(model="bst", batch_size=64, catalog=True, holdout_events=3, shuffle=100, steps=2)
    main_run = make_source(cfg)
    seen: list[Any] = []

    class Spy:
        def __init__(self, cfg: TrainConfig, source: Any, backend: str, world: Any = None) -> None:
            seen.append(source)
            raise KeyboardInterrupt  # enough: the first round's source

    monkeypatch.setattr(A, "Trainer", Spy)
    with pytest.raises(KeyboardInterrupt):
        A.run_ablation(cfg, steps=1, repeats=1)
    (got,) = seen
    assert got.table_rows == main_run.table_rows
    assert got._train_rows() == main_run._train_rows()
    assert torch.equal(got._train, main_run._train) and torch.equal(got._val_samples, main_run._val_samples)
    assert (got.holdout, got.catalog, got.max_len, got.batch_size) == (3, True, cfg.max_len, 64)
    assert (got.shuffle_rows, got.shuffle_seed) == (main_run.shuffle_rows, main_run.shuffle_seed) == (100, 0)


# -- 5. the ablation's progress ---------------------------------------------------------------------


class _FakeTrainer:
    """A Trainer whose run takes no time: 10 samples in 1 s, one progress tick per step."""

    backends: list[str] = []

    def __init__(self, cfg: TrainConfig, source: Any, backend: str, world: Any = None) -> None:
        self.cfg, self.backend = cfg, backend
        _FakeTrainer.backends.append(backend)

    def run(self, warmup: int = 3, progress: Any = None) -> Any:
        from recgo.train.loop import History

        h = History(self.backend, stage_seconds={"prep": 0.0, "sparse": 1.0, "dense": 0.0, "update": 0.0},
                    timed_steps=1, samples=10)
        for _ in range(self.cfg.steps):
            if progress is not None:
                progress.update(1)
        return h

    def close(self) -> None:
        pass


def test_the_ablation_shows_one_progress_bar(monkeypatch, capsys) -> None:
    import recgo.train.ablation as A

    monkeypatch.setattr(A, "Trainer", _FakeTrainer)
    cfg = TrainConfig(model="bst", batch_size=64, steps=2)
    variants = A.VARIANTS[:2]
    rows = A.run_ablation(cfg, steps=4, warmup=1, repeats=2, variants=variants, progress=True)
    assert [r["samples_per_second"] for r in rows] == [10.0, 10.0]
    err = capsys.readouterr().err
    total = 2 * len(variants) * (4 + 1)
    assert f"{total}/{total}" in err and "ablation 2/2: pipeline off" in err
    A.run_ablation(cfg, steps=4, warmup=1, repeats=2, variants=variants, progress=False)
    assert capsys.readouterr().err == ""


# -- 4. a resumed CLI run -------------------------------------------------------------------------------


def _evals(out: Path) -> list[Any]:
    r = json.loads((out / "report.json").read_text())["backends"]["recgo"]
    return [(e["step"], e["auc"], e["log_loss"]) for e in r["evals"]], r["train_loss"]


def test_a_resumed_cli_run_reports_the_uninterrupted_runs_evaluations(tmp_path: Path) -> None:
    """With --eval-every at its default (above --steps), the CLI stored eval_every = steps in a 3-step
    run's checkpoint, so its step-3 evaluation stayed in the resumed 6-step run's report, which the
    uninterrupted run does not have."""
    base = ["train", "--no-progress", "--config", str(_dlrm_yaml(tmp_path)), "--batch-size", str(EVAL_BATCH)]
    assert main([*base, "--steps", "6", "--out", str(tmp_path / "full")]) == 0
    ck = str(tmp_path / "ck" / "run")
    assert main([*base, "--steps", "3", "--checkpoint", ck, "--out", str(tmp_path / "part")]) == 0
    assert main([*base, "--steps", "6", "--checkpoint", ck, "--resume", "--out", str(tmp_path / "res")]) == 0
    full, resumed = _evals(tmp_path / "full"), _evals(tmp_path / "res")
    assert [e[0] for e in full[0]] == [6]
    assert resumed == full


def test_a_checkpoint_with_another_eval_every_resumes_to_this_runs_grid(tmp_path: Path) -> None:
    """A checkpoint written with eval_every 3 (as the CLI stored for a 3-step run) and resumed with 100:
    its step-3 evaluation is off the resumed run's grid and goes."""
    kw = dict(model="dlrm", batch_size=EVAL_BATCH, dim=4, max_rows=200, seed=1)
    first = Trainer(TrainConfig(steps=3, eval_every=3, **kw), make_source(TrainConfig(**kw)), "recgo")
    first.run()
    first.save(tmp_path / "ck")
    first.close()
    cfg = TrainConfig(steps=6, eval_every=100, **kw)
    resumed = Trainer(cfg, make_source(cfg), "recgo")
    resumed.load(tmp_path / "ck")
    assert resumed.history.evals == []
    resumed.run()
    assert [e["step"] for e in resumed.history.evals] == [6]
    resumed.close()


# -- 6. BST padding ----------------------------------------------------------------------------------


def _sequence_lookups(lengths: list[int], dim: int, seed: int = 0) -> dict[str, JaggedTensor]:
    g = torch.Generator().manual_seed(seed)
    ln = torch.tensor(lengths)
    n, b = int(ln.sum()), len(lengths)
    one = torch.ones(b, dtype=torch.int64)
    return {"hist_item": JaggedTensor(torch.randn(n, dim, generator=g), lengths=ln),
            "hist_cat": JaggedTensor(torch.randn(n, dim, generator=g), lengths=ln),
            "target_item": JaggedTensor(torch.randn(b, dim, generator=g), lengths=one),
            "target_cat": JaggedTensor(torch.randn(b, dim, generator=g), lengths=one),
            "user_id": JaggedTensor(torch.randn(b, dim, generator=g), lengths=one)}


@pytest.mark.parametrize("lengths", [[3, 1, 5, 2], [1, 1], [7, 12, 3]])
def test_bst_pads_to_the_longest_history_with_the_same_results(lengths: list[int]) -> None:
    """Every batch was padded to max_len (max_len 100000 attended over 100001 tokens and hung); padded to
    its longest history (capped at max_len) the logits and gradients are those of the max_len padding."""
    max_len, dim = 10, 8
    emb = _sequence_lookups(lengths, dim)
    hist, mask, target, user = bst_inputs(emb, max_len)
    assert hist.shape[1] == mask.shape[1] == min(max(lengths), max_len)
    summed = JaggedTensor(emb["hist_item"].values() + emb["hist_cat"].values(), lengths=emb["hist_item"].lengths())
    full, full_mask = summed.to_padded(max_len, keep="last")
    torch.manual_seed(0)
    model = BST(dim, max_len, user_width=dim)
    for train in (True, False):
        model.train(train)
        model.zero_grad()
        short = model(hist, mask, target, user)
        short.sum().backward()
        grads = {k: p.grad.clone() for k, p in model.named_parameters()}
        model.zero_grad()
        long = model(full, full_mask, target, user)
        long.sum().backward()
        torch.testing.assert_close(short, long, rtol=1e-5, atol=1e-6)
        for k, p in model.named_parameters():
            torch.testing.assert_close(grads[k], p.grad, rtol=1e-5, atol=1e-6, msg=k)


# -- lesser: progress while a large input is prepared ----------------------------------------------


class _Bars:
    """Records the bars asked for and their updates in place of tqdm."""

    def __init__(self) -> None:
        self.made: list[dict[str, Any]] = []

    def __call__(self, total: int | None, desc: str, enabled: bool, unit: str = "step", delay: float = 0.0) -> Any:
        if not enabled:
            return None
        rec = {"total": total, "desc": desc, "unit": unit, "n": 0}
        self.made.append(rec)

        class Bar:
            def update(self, n: int) -> None:
                rec["n"] += n

            def close(self) -> None:
                rec["closed"] = True

        return Bar()


def test_splitting_and_writing_samples_show_progress(tmp_path: Path, monkeypatch) -> None:
    """The Criteo split and the Taobao samples' CSV ran minutes in silence on large files."""
    import recgo.train._inputs as inputs
    import recgo.train.taobao as taobao  # the Taobao source writes the samples file

    bars = _Bars()
    monkeypatch.setattr(inputs, "progress_bar", bars)
    monkeypatch.setattr(taobao, "progress_bar", bars)
    criteo = tmp_path / "day.txt"
    criteo.write_text("".join(f"{i % 2}" + "\t1" * 13 + "\ta" * 26 + "\n" for i in range(60)))
    make_source(TrainConfig(model="dlrm", data=str(criteo), batch_size=8))  # progress off: no bar
    assert bars.made == []
    criteo.write_text(criteo.read_text() + "0" + "\t1" * 13 + "\ta" * 26 + "\n")  # a new version: split again
    make_source(TrainConfig(model="dlrm", data=str(criteo), batch_size=8), progress=True)
    (split,) = bars.made
    assert split["n"] == split["total"] == criteo.stat().st_size and split["unit"] == "B" and split["closed"]
    ub = tmp_path / "ub.csv"
    ub.write_text("".join(f"{u},{100 + (u * 7 + t) % 13},{t % 3},pv,{1000 + t}\n" for u in range(8) for t in range(12)))
    source = make_source(TrainConfig(model="bst", data=str(ub), batch_size=8), progress=True)
    source.samples_csv()
    samples = bars.made[-1]
    assert samples["n"] == samples["total"] == source._train_rows() and samples["closed"]


def test_the_ablation_without_torchrec_notes_its_row(monkeypatch) -> None:
    """Without a usable TorchRec the reference row raised ModuleNotFoundError after the main run, whose
    report was lost (--out already cleared); ``--backend all`` leaves TorchRec out with a note."""
    import recgo._extras as extras
    import recgo.train.ablation as A

    real = extras.why_not
    monkeypatch.setattr(extras, "why_not", lambda m: "torchrec is not installed" if m == "torchrec" else real(m))
    monkeypatch.setattr(A, "Trainer", _FakeTrainer)
    _FakeTrainer.backends = []
    rows = A.run_ablation(TrainConfig(model="bst", batch_size=64, steps=2), steps=1, warmup=0, repeats=1,
                          variants=(A.VARIANTS[0], A.VARIANTS[-1]))
    assert _FakeTrainer.backends == ["recgo"]
    assert rows[1]["samples_per_second"] is None
    assert rows[1]["note"] == "torchrec is not installed: the TorchRec row did not run"


def test_the_ablation_with_several_processes_is_refused_before_training(tmp_path: Path, monkeypatch, capsys) -> None:
    """It ran one unsharded process under the main run's "per rank on 2 gloo ranks" heading."""
    import recgo.train.run as run

    monkeypatch.setattr(run, "train", _not_trained)
    rc = main(["train", "--no-progress", "--model", "bst", "--ablation", "--nproc", "2", "--steps", "3",
               "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "--ablation times one process (unsharded); run it without --nproc" in capsys.readouterr().err


def test_multi_process_settings_from_the_yaml_warn_with_one_process(tmp_path: Path, monkeypatch, capsys) -> None:
    """``sharding:``/``exchange:`` in the YAML with one process were ignored in silence (the flag warned)."""
    import recgo.train.run as run

    monkeypatch.setattr(run, "train", lambda *a, **kw: None)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        rc = main(["train", "--no-progress", "--config", str(_dlrm_yaml(tmp_path, sharding="row_wise",
                                                                         exchange="hierarchical")),
                   "--out", str(tmp_path / "o")])
    assert rc == 0
    assert ("warning: sharding, exchange apply with --nproc > 1; one process holds every table whole and exchanges "
            "nothing") in capsys.readouterr().err
