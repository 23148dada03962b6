"""The synthetic UserBehavior file behind `recgo train --model bst` without --data: well-formed,
deterministic, cached, with the planted structure a model can learn."""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path

import pytest
import torch

from recgo.errors import InvalidInputError
from recgo.train import synthetic_taobao as st
from recgo.train.loop import TrainConfig, Trainer, make_source


@pytest.fixture()
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_events_are_consistent_and_deterministic() -> None:
    ev = st.events(300, seed=4)
    user, item, cat = ev.unbind(1)
    assert torch.equal(ev, st.events(300, seed=4))
    assert not torch.equal(ev, st.events(300, seed=5))
    assert bool((user[1:] >= user[:-1]).all()) and user.unique().numel() == 300  # users in order, every one
    lengths = torch.bincount(user)
    assert int(lengths.min()) >= 5 and int(lengths.max()) <= 300
    assert 0 <= int(item.min()) and int(item.max()) < st.ITEMS
    # an item always has the same category
    first_cat = torch.full((st.ITEMS,), -1, dtype=torch.int64).scatter_(0, item.flip(0), cat.flip(0))
    assert torch.equal(first_cat[item], cat)


def test_users_concentrate_on_a_few_categories() -> None:
    """The planted preference: about FOCUS of each user's events fall in their preferred categories, far
    more than the same number of the catalog's most popular categories would hold."""
    ev = st.events(400, seed=0)
    user, cat = ev[:, 0], ev[:, 2]
    shares, popular = [], torch.bincount(cat, minlength=st.CATEGORIES).topk(st.PREFERRED).indices
    pop_share = []
    for u in range(400):
        c = cat[user == u]
        top = torch.bincount(c, minlength=st.CATEGORIES).topk(st.PREFERRED).values.sum()
        shares.append(float(top) / c.numel())
        pop_share.append(float(torch.isin(c, popular).double().mean()))
    assert sum(shares) / len(shares) > 0.75
    assert sum(pop_share) / len(pop_share) < 0.5


def test_file_is_userbehavior_format_and_cached(cache: Path) -> None:
    path = st.userbehavior_file(users=50, seed=1)
    assert path.parent == cache / "recgo-synthetic"
    rows = list(csv.reader(path.open()))
    ev = st.events(50, seed=1)
    assert len(rows) == ev.shape[0]
    assert all(r[3] == "pv" for r in rows)
    got = torch.tensor([[int(r[0]) - 1, int(r[1]) - 1, int(r[2]) - 1] for r in rows])
    assert torch.equal(got, ev)
    ts = [int(r[4]) for r in rows]
    assert ts == sorted(ts)
    mtime = path.stat().st_mtime_ns
    assert st.userbehavior_file(users=50, seed=1) == path and path.stat().st_mtime_ns == mtime  # reused
    assert not list(path.parent.glob("*.tmp"))


@pytest.mark.parametrize("users", [0, -3, 2.5, True])
def test_bad_user_counts_raise(users: object) -> None:
    with pytest.raises(InvalidInputError, match="users must be a positive integer"):
        st.events(users, seed=0)  # type: ignore[arg-type]


def test_bst_without_data_trains_to_a_meaningful_auc(cache: Path) -> None:
    # Enough steps for the AUC to clear the bar by a wide margin (it climbs on with more steps).
    cfg = TrainConfig(model="bst", steps=60, batch_size=256, eval_every=60)
    source = make_source(cfg)
    assert Path(source.path).parent == cache / "recgo-synthetic"
    history = Trainer(cfg, source, "recgo").run(progress=None)
    auc = history.evals[-1]["auc"]
    assert auc > 0.65, history.evals  # untrained: about 0.5


def test_a_header_line_is_skipped_and_a_bad_row_is_named(cache: Path, tmp_path: Path) -> None:
    from recgo.errors import InvalidInputError
    from recgo.train.data import TaobaoSequences

    plain = st.userbehavior_file(users=60, seed=2)
    headed = tmp_path / "headed.csv"
    headed.write_text("user_id,item_id,category_id,behavior_type,timestamp\n" + plain.read_text())
    a, b = (TaobaoSequences(p, batch_size=32, max_len=8, seed=0, pipeline=False) for p in (plain, headed))
    for i in range(3):
        x, y = a.train_batch(i), b.train_batch(i)
        assert torch.equal(x.sparse.values(), y.sparse.values()) and torch.equal(x.labels, y.labels)
    bad = tmp_path / "bad.csv"
    bad.write_text(plain.read_text() + "7,x,3,pv,9\n")
    line = len(plain.read_text().splitlines()) + 1
    with pytest.raises(InvalidInputError, match=rf"bad\.csv, line {line}, column 2 \(item\): expected an integer ID, got 'x'"):
        TaobaoSequences(bad, batch_size=32)
