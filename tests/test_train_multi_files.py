"""``recgo train --data day_*``: several Criteo files train as one stream in natural order, the last
file's tail held out; one file stays the one-file run; a resume crosses file boundaries exactly."""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import pytest
import torch

from recgo.errors import InvalidInputError
from recgo.train import TrainConfig, Trainer, make_source
from recgo.train.criteo_files import CriteoFiles, count_rows, data_files
from recgo.train.data import CriteoFile
from train_resume import assert_resume_equals_whole
from test_train import _criteo_lines
from test_train_nproc import _close_tables

SIZES = (70, 50, 90)  # rows of day_0, day_1, day_10 (natural order; day_10 sorts before day_2 as text)


def _days(tmp_path: Path) -> list[Path]:
    files = []
    for i, (name, n) in enumerate(zip(("day_0.txt", "day_1.txt.gz", "day_10.txt"), SIZES)):
        plain = tmp_path / name.removesuffix(".gz")
        _criteo_lines(plain, n, seed=i)
        if name.endswith(".gz"):
            (tmp_path / name).write_bytes(gzip.compress(plain.read_bytes() + b"\n\r\n"))  # blank lines end it
            plain.unlink()
        files.append(tmp_path / name)
    (tmp_path / "day_2.txt").write_text("")  # not matched by the pattern below
    return files


def _cfg(data, **kw) -> TrainConfig:
    base = dict(model="dlrm", data=data, batch_size=16, steps=10, eval_every=5, dim=4, max_rows=500, seed=1)
    base.update(kw)
    cfg = TrainConfig(**base)
    cfg.validate()
    return cfg


def _rows(source, path: Path) -> torch.Tensor:
    from recgo.data import CriteoSource

    pipe = source._pipeline(CriteoSource(path), drop_last=False)
    return torch.cat([torch.cat([b.dense, b.labels[:, None]], 1) for b in pipe])


def test_files_train_in_natural_order_and_the_last_files_tail_is_validation(tmp_path: Path) -> None:
    files = _days(tmp_path)
    cfg = _cfg(str(tmp_path / "day_1.*"))  # one file: the one-file run, a path as before
    assert cfg.data == str(files[1]) and type(make_source(cfg)) is CriteoFile
    cfg = _cfg([str(tmp_path / "day_1.*"), str(tmp_path / "day_0.txt"), str(files[2])])
    assert cfg.data == [str(f) for f in files]
    source = make_source(cfg)
    assert isinstance(source, CriteoFiles) and [count_rows(f) for f in files[:2]] == [70, 50]
    n_val = 9  # int(90 × 0.1) of the last file
    assert source.batches_per_epoch() == (70 + 50 + 90 - n_val) // 16
    single = CriteoFile(files[2], batch_size=16, rows=500)
    val = torch.cat([torch.cat([b.dense, b.labels[:, None]], 1) for b in source.validation()])
    assert val.shape[0] == n_val and torch.equal(
        val, torch.cat([torch.cat([b.dense, b.labels[:, None]], 1) for b in single.validation()]))
    # the training stream: day_0, day_1, then day_10's training lines, across the boundaries
    want = torch.cat([_rows(source, files[0]), _rows(source, files[1]), _rows(source, single._train)])
    stream = source.stream(depth=0)
    got = torch.cat([torch.cat([b.dense, b.labels[:, None]], 1) for b in (next(stream) for _ in range(12))])
    stream.close()
    assert torch.equal(got, want[:12 * 16])


def test_resume_is_exact_across_a_file_boundary(tmp_path: Path) -> None:
    files = _days(tmp_path)
    cfg = _cfg([str(f) for f in files], checkpoint=str(tmp_path / "ck"))
    # 3 steps: 48 rows of day_0's 70, so the next batch spans day_0 and day_1
    assert_resume_equals_whole(lambda: Trainer(cfg, make_source(cfg), "recgo"), 3, tmp_path / "ck")
    other = _cfg([str(f) for f in files[1:]], checkpoint=str(tmp_path / "ck"))
    with pytest.raises(InvalidInputError, match="trained on 3 files"):
        Trainer(other, make_source(other), "recgo").load(tmp_path / "ck")


def test_a_bad_label_names_its_file_and_line(tmp_path: Path) -> None:
    files = _days(tmp_path)
    lines = files[2].read_text().splitlines()
    lines[4] = "7" + lines[4][1:]
    files[2].write_text("\n".join(lines) + "\n")
    plain = tmp_path / "day_1.txt"
    plain.write_bytes(gzip.decompress(files[1].read_bytes()))
    files[1].unlink()
    lines = plain.read_text().splitlines()
    lines[2] = "3" + lines[2][1:]
    plain.write_text("\n".join(lines) + "\n")
    source = make_source(_cfg([str(files[0]), str(plain), str(files[2])]))
    stream = source.stream(depth=0)
    with pytest.raises(InvalidInputError, match=r"day_1\.txt line 3 column 1 \(label\): label 3"):
        for _ in range(8):
            next(stream)
    stream.close()


def test_what_cannot_work_is_named(tmp_path: Path) -> None:
    files = _days(tmp_path)
    with pytest.raises(InvalidInputError, match="given twice"):
        data_files([str(files[0]), str(tmp_path / "." / "day_0.txt")])
    with pytest.raises(InvalidInputError, match="--model bst reads one UserBehavior CSV"):
        _cfg([str(f) for f in files], model="bst")
    assert count_rows(tmp_path / "day_2.txt") == 0  # an earlier empty file adds no rows
    (tmp_path / "day_99.txt").write_text("\n")
    with pytest.raises(InvalidInputError, match="day_99.txt: 0 lines"):  # an empty last file: no validation
        make_source(_cfg(str(tmp_path / "day_*")))


def test_the_cli_takes_several_paths_and_keeps_one_as_a_path(tmp_path: Path) -> None:
    from recgo.train.cli import _config, add_parser

    files = _days(tmp_path)
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["train", "--data", str(files[0]), str(files[1]), "--steps", "2"])
    assert _config(args)[0].data == [str(files[0]), str(files[1])]
    args = parser.parse_args(["train", "--data", str(files[0]), "--steps", "2"])
    assert _config(args)[0].data == str(files[0])


def test_two_ranks_over_several_files_train_as_one_process_on_the_global_batch(tmp_path: Path) -> None:
    """``recgo train --nproc 2 --data day_*``: the ranks' halves of each global batch cross the files'
    boundaries (a gzip file among them) as one process's batches do: the same losses, AUC and tables."""
    from recgo.train.distributed import launch

    files = [str(f) for f in _days(tmp_path)]
    cfg = _cfg(files, batch_size=8, nproc=2)
    report = launch(cfg, ["recgo"], 2, progress=False, weights_dir=str(tmp_path / "w"), threads=1)
    single = _cfg(files, batch_size=16)
    ref = Trainer(single, make_source(single), "recgo")
    ref.run()
    got = report["backends"]["recgo"]
    assert report["summary"]["global_batch"] == 16
    assert got["train_loss"] == pytest.approx(ref.history.train_loss, rel=2e-5)
    assert got["final_auc"] == pytest.approx(ref.history.evals[-1]["auc"], abs=1e-6)
    saved = torch.load(tmp_path / "w" / "recgo.pt", weights_only=False)
    want = {k.split(".")[1]: v for k, v in ref.model.sparse.module.state_dict().items() if k.endswith("weight")}
    assert sorted(saved["tables"]) == sorted(want)
    _close_tables(saved["tables"], want, cfg.sparse_lr)  # Adagrad's first step near g = 0: see there
