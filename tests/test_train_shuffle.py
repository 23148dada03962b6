"""``recgo train --shuffle``: windowed shuffling of the training data, a new order every epoch, the
same on every backend, resumable, and bad labels still located."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from recgo.errors import InvalidInputError
from recgo.pipeline import MAX_SHUFFLE
from recgo.train import TrainConfig, Trainer, make_source
from recgo.train.cli import _config, add_parser
from recgo.train.data import CriteoFile
from train_resume import assert_resume_equals_whole


def _numbered(path: Path, n: int, bad_label_at: int | None = None) -> None:
    """A Criteo file whose line i (from 0) has I1 = i, so a batch's dense column names its rows."""
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(n):
        label = "7" if i == bad_label_at else str(int(torch.rand(1, generator=g) < 0.3))
        cats = torch.randint(0, 1 << 20, (26,), generator=g).tolist()
        rows.append("\t".join([label, str(i)] + ["1"] * 12 + [f"{v:08x}" for v in cats]))
    path.write_text("\n".join(rows) + "\n")


def _rows(batch) -> list[int]:
    return torch.expm1(batch.dense[:, 0].double()).round().long().tolist()  # the reader's log(1 + I1)


def _epoch(stream, n: int) -> list[int]:
    return [r for _ in range(n) for r in _rows(next(stream))]


def test_each_epoch_is_a_new_order_of_the_training_rows(tmp_path: Path) -> None:
    data = tmp_path / "day.txt"
    _numbered(data, 1000)  # 900 training lines, 9 batches of 100 an epoch
    src = CriteoFile(data, batch_size=100, rows=1000).shuffled(300, seed=4)
    s = src.stream(depth=2)
    one, two = _epoch(s, 9), _epoch(s, 9)
    s.close()
    for epoch in (one, two):
        assert sorted(epoch) == list(range(900))  # every row once (900 is a multiple of the batch)
        # a window of 300 rows is handed out whole before the next one is read
        for w in range(3):
            assert sorted(epoch[w * 300:(w + 1) * 300]) == list(range(w * 300, (w + 1) * 300))
    assert one != list(range(900)) and two != list(range(900)) and one != two
    again = CriteoFile(data, batch_size=100, rows=1000).shuffled(300, seed=4).stream(depth=0)
    assert _epoch(again, 9) == one  # the same seed draws the same order
    again.close()
    other = CriteoFile(data, batch_size=100, rows=1000).shuffled(300, seed=5).stream(depth=0)
    assert _epoch(other, 9) != one
    other.close()
    plain = CriteoFile(data, batch_size=100, rows=1000).stream(depth=0)
    assert _epoch(plain, 9) == list(range(900))
    plain.close()


def test_two_ranks_shuffle_their_own_shares(tmp_path: Path) -> None:
    data = tmp_path / "day.txt"
    _numbered(data, 1000)
    got = []
    for rank in range(2):
        s = CriteoFile(data, batch_size=100, rows=1000).shuffled(200, seed=1).shard(rank, 2).stream(depth=0)
        rows = _epoch(s, 4)  # 900 // 200 batches a rank
        s.close()
        assert all(r % 2 == rank for r in rows) and len(set(rows)) == 400
        got += rows
    assert len(set(got)) == 800


def test_each_rank_resumes_mid_window_into_the_uninterrupted_epochs(tmp_path: Path) -> None:
    """79 training rows on 2 ranks in batches of 10: 3 steps an epoch, though rank 0's share holds 40
    rows. A resume inside a shuffle window counted only the rows before the window as this epoch's,
    so rank 0 took a 4th batch and its epochs slid against rank 1's (found by a probe)."""
    data = tmp_path / "day.txt"
    _numbered(data, 87)  # 79 training lines, 8 validation ones

    def stream(rank: int, state=None):
        src = CriteoFile(data, batch_size=10, rows=1000, validation_fraction=0.1).shard(rank, 2).shuffled(25, seed=3)
        return src.stream(state, depth=0)
    for rank in range(2):
        s = stream(rank)
        want = [_rows(next(s)) for _ in range(10)]
        s.close()
        for cut in range(1, 9):
            s = stream(rank)
            got = [_rows(next(s)) for _ in range(cut)]
            state = s.state_dict()
            s.close()
            s = stream(rank, state)
            got += [_rows(next(s)) for _ in range(10 - cut)]
            s.close()
            assert got == want, (rank, cut, state)

def _cfg(data: Path, **kw) -> TrainConfig:
    base = dict(model="dlrm", data=str(data), steps=12, batch_size=100, dim=4, max_rows=500, eval_every=6, seed=2,
                shuffle=250)
    base.update(kw)
    return TrainConfig(**base)


def test_backends_see_the_same_order_and_resume_mid_window_exactly(tmp_path: Path) -> None:
    data = tmp_path / "day.txt"
    _numbered(data, 1000)  # 12 steps cross an epoch (9 batches)
    cfg = _cfg(data, checkpoint=str(tmp_path / "ck"))
    seen = {}
    for backend in ("torch", "recgo"):
        tr = Trainer(cfg, make_source(cfg), backend)
        stream = tr.source.stream(depth=0)
        seen[backend] = _epoch(stream, 12)
        stream.close()
    assert seen["torch"] == seen["recgo"]
    # 4 steps: row 400, the middle of the second window
    assert_resume_equals_whole(lambda: Trainer(cfg, make_source(cfg), "torch"), 4, tmp_path / "ck")
    unshuffled = _cfg(data, shuffle=0)
    with pytest.raises(InvalidInputError, match=r"other settings: \['shuffle'\]"):
        Trainer(unshuffled, make_source(unshuffled), "torch").load(tmp_path / "ck")


def test_a_bad_label_is_named_by_its_windows_lines(tmp_path: Path) -> None:
    data = tmp_path / "day.txt"
    _numbered(data, 1000, bad_label_at=450)  # line 451, in the second window of 250 (lines 251..500)
    cfg = _cfg(data)
    with pytest.raises(InvalidInputError, match=r"day\.txt lines 251\.\.500 \(one of these; shuffled in windows "
                                                r"of 250 rows\) column 1 \(label\): label 7"):
        Trainer(cfg, make_source(cfg), "torch").run()
    two = CriteoFile(data, batch_size=100, rows=1000).shuffled(300, seed=0).shard(0, 2)
    s = two.stream(depth=0)
    with pytest.raises(InvalidInputError, match=r"lines 1\.\.599 \(one of these"):  # rank 0's rows 0, 2, .., 598
        _epoch(s, 4)
    s.close()


@pytest.mark.parametrize("rows", [-1, MAX_SHUFFLE + 1, True, 2.5])
def test_bad_shuffle_windows_are_refused(tmp_path: Path, rows) -> None:
    with pytest.raises(InvalidInputError, match="shuffle"):
        TrainConfig(shuffle=rows).validate()


def test_the_flag_reaches_the_config() -> None:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["train", "--shuffle", "4096", "--steps", "3"])
    cfg, _ = _config(args)
    assert cfg.shuffle == 4096 and make_source(cfg).shuffle_rows == 4096
