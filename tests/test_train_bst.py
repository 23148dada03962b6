"""The sequence model's input path: Taobao samples through the Go pipeline equal the Python-built ones,
the padded view's gradient, BST's inputs, resume through the pipeline, and the ablation (RecIS Fig. 7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

from recgo.errors import InvalidInputError
from recgo.jagged import JaggedTensor
from recgo.train import TrainConfig, Trainer, make_source
from recgo.train.data import TaobaoSequences
from recgo.train.models import bst_inputs
from train_resume import assert_resume_equals_whole

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TAOBAO = DATA / "taobao" / "taobao_UserBehavior_head.csv"
needs_taobao = pytest.mark.skipif(not TAOBAO.exists(), reason="Taobao sample not present")


def _same(a, b) -> None:
    assert a.sparse.keys() == b.sparse.keys()
    assert torch.equal(a.sparse.values(), b.sparse.values())
    assert torch.equal(a.sparse.lengths(), b.sparse.lengths())
    assert torch.equal(a.labels, b.labels) and a.dense.shape == b.dense.shape


@needs_taobao
@pytest.mark.parametrize("fuse, depth", [(True, 2), (False, 0)])
def test_pipeline_batches_equal_python_batches(fuse: bool, depth: int) -> None:
    """Through the cached CSV, the Go reader and the FeatureEngine (fused or field by field, ahead or
    serial), every training batch of an epoch and past its end equals the one built in Python."""
    s = TaobaoSequences(TAOBAO, batch_size=1024, max_len=7, seed=3, fuse=fuse)
    stream = s.stream(depth=depth)
    n = s.batches_per_epoch()
    for i in range(n + 2):
        _same(next(stream), s.train_batch(i))
    assert stream.state_dict()["epoch"] == 1
    stream.close()
    lens = s.train_batch(0).sparse.lengths().view(5, 1024)
    assert int(lens[:2].max()) == 7  # histories reach the cap, which the engine's truncate enforces


@needs_taobao
def test_catalog_tables_place_the_sample_at_distinct_rows() -> None:
    """catalog=True: tables of the whole dataset's vocabulary, every sample ID at its own seeded row of
    them, the same samples (each batch is the plain source's mapped row by row), pipeline included."""
    from recgo.train.data import USERBEHAVIOR_VOCABULARY

    plain = TaobaoSequences(TAOBAO, batch_size=512, max_len=7, seed=3)
    cat = TaobaoSequences(TAOBAO, batch_size=512, max_len=7, seed=3, catalog=True)
    assert cat.table_rows == USERBEHAVIOR_VOCABULARY and plain.table_rows["item"] == 55368
    maps = {t: {} for t in cat.table_rows}
    stream = cat.stream(depth=2)
    for i in range(3):
        a, b = plain.train_batch(i), next(stream)
        _same(b, cat.train_batch(i))
        assert torch.equal(a.labels, b.labels) and torch.equal(a.sparse.lengths(), b.sparse.lengths())
        for k in a.sparse.keys():
            t = cat.feature_table[k]
            x, y = a.sparse[k].values().tolist(), b.sparse[k].values().tolist()
            assert max(y) < cat.table_rows[t]
            for u, v in zip(x, y):
                assert maps[t].setdefault(u, v) == v  # one row per ID
    stream.close()
    for t, m in maps.items():
        assert len(set(m.values())) == len(m)  # distinct IDs, distinct rows
        assert max(m.values()) > plain.table_rows[t]  # spread over the table, not its first rows
    with pytest.raises(Exception, match="catalog must be true or false"):
        TrainConfig(model="bst", data=str(TAOBAO), catalog="yes").validate()


@needs_taobao
def test_pipeline_stream_resumes_mid_epoch() -> None:
    s = TaobaoSequences(TAOBAO, batch_size=256, max_len=7, seed=3)
    first = s.stream(depth=2)
    for _ in range(5):
        next(first)
    state = first.state_dict()
    want = [next(first) for _ in range(3)]
    first.close()
    again = s.stream(state, depth=0)
    for w in want:
        _same(next(again), w)
    again.close()


def _reference_padded(values: torch.Tensor, lengths: list[int], length: int, keep: str) -> torch.Tensor:
    rows, start = [], 0
    for n in lengths:
        seg = values[start:start + n]
        seg = seg[-length:] if keep == "last" else seg[:length]
        if length and seg.shape[0] < length:
            seg = torch.cat([seg, seg.new_zeros(length - seg.shape[0], *values.shape[1:])])
        rows.append(seg[:length])
        start += n
    return torch.stack(rows)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=8), st.integers(0, 5), st.sampled_from(["first", "last"]))
def test_padded_view_gradient_matches_slicing(lengths: list[int], length: int, keep: str) -> None:
    """to_padded's scatter forward and gather backward equal slicing and concatenating, rows cut off
    included (their gradient is zero)."""
    n = sum(lengths)
    values = torch.randn(n, 3, dtype=torch.float64, requires_grad=True)
    got, mask = JaggedTensor(values, lengths=torch.tensor(lengths)).to_padded(length, keep=keep)
    ref_values = values.detach().clone().requires_grad_()
    want = _reference_padded(ref_values, lengths, length, keep)
    assert torch.equal(got, want)
    assert mask.tolist() == [[j >= min(k, length) for j in range(length)] for k in lengths]
    w = torch.randn_like(want)
    (got * w).sum().backward()
    (want * w).sum().backward()
    torch.testing.assert_close(values.grad, ref_values.grad, rtol=0, atol=0)


def test_bst_inputs_sum_before_padding() -> None:
    """Summing item and category rows on the jagged side equals padding each and summing."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([3, 0, 6, 1])
    item, cat = torch.randn(10, 4, generator=g), torch.randn(10, 4, generator=g)
    one = torch.ones(4, dtype=torch.int64)
    emb = {"hist_item": JaggedTensor(item, lengths=lengths), "hist_cat": JaggedTensor(cat, lengths=lengths),
           "target_item": JaggedTensor(torch.randn(4, 4, generator=g), lengths=one),
           "target_cat": JaggedTensor(torch.randn(4, 4, generator=g), lengths=one),
           "user_id": JaggedTensor(torch.randn(4, 4, generator=g), lengths=one)}
    hist, mask, target, user = bst_inputs(emb, 4)
    a, m = emb["hist_item"].to_padded(4, keep="last")
    b, _ = emb["hist_cat"].to_padded(4, keep="last")
    assert torch.equal(hist, a + b) and torch.equal(mask, m)
    assert torch.equal(target, emb["target_item"].values() + emb["target_cat"].values())
    assert torch.equal(user, emb["user_id"].values())


@pytest.mark.parametrize("key,lengths,match", [
    ("hist_cat", [6, 0, 3, 1], "hist_item and hist_cat differ in length"),  # the same 10 rows, paired wrongly
    ("target_item", [1, 0, 2, 1], "target_item must hold exactly one ID per sample"),
    ("user_id", [1, 1, 1], "user_id must hold exactly one ID per sample"),
])
def test_bst_inputs_refuse_rows_that_do_not_pair_up(key: str, lengths: list[int], match: str) -> None:
    """Rows are summed flat, so histories of equal total but different per-sample lengths, or a target
    missing from one sample and doubled in another, used to mix samples' rows in silence."""
    one = torch.ones(4, dtype=torch.int64)
    emb = {k: JaggedTensor(torch.zeros(10 if k.startswith("hist") else 4, 4),
                           lengths=torch.tensor([3, 0, 6, 1]) if k.startswith("hist") else one)
           for k in ("hist_item", "hist_cat", "target_item", "target_cat", "user_id")}
    ln = torch.tensor(lengths)
    emb[key] = JaggedTensor(torch.zeros(int(ln.sum()), 4), lengths=ln)
    with pytest.raises(InvalidInputError, match=match):
        bst_inputs(emb, 4)


@needs_taobao
@pytest.mark.parametrize("backend", ["recgo", "torchrec"])
def test_bst_resume_through_the_pipeline_equals_uninterrupted(tmp_path: Path, backend: str) -> None:
    """Resume equals the uninterrupted run, TorchRec's included: its EmbeddingCollection's
    in-backward Adagrad state is saved with the checkpoint (it was dropped, and the runs parted)."""
    if backend == "torchrec":
        pytest.importorskip("torchrec")
    cfg = TrainConfig(model="bst", data=str(TAOBAO), batch_size=64, dim=8, max_len=7, steps=6, eval_every=6,
                      seed=3, checkpoint=str(tmp_path / "ck"))
    source = make_source(cfg)
    for trainer in assert_resume_equals_whole(lambda: Trainer(cfg, source, backend), 3, tmp_path / "ck"):
        trainer.close()


def test_ablation_table_plot_and_cli(tmp_path: Path) -> None:
    pytest.importorskip("torchrec")  # the ablation's last row is the TorchRec reference
    from recgo.__main__ import main
    from recgo.train.ablation import VARIANTS, dedup_switch_available

    out = tmp_path / "rep"  # without --data: the synthetic UserBehavior file (the ablation refused it after training)
    rc = main(["train", "--model", "bst", "--steps", "3", "--batch-size", "64",
               "--config", str(_yaml(tmp_path)), "--out", str(out), "--no-progress", "--ablation", "--ablation-steps", "2",
               "--ablation-repeats", "2"])
    assert rc == 0
    rows = json.loads((out / "report.json").read_text())["ablation"]
    assert [r["variant"] for r in rows] == [v.name for v in VARIANTS]
    for r in rows:
        if r["variant"] == "dedup off" and not dedup_switch_available():
            assert r["samples_per_second"] is None and "dedup" in r["note"]
        else:
            assert r["samples_per_second"] > 0 and len(r["runs"]) == 2
    assert rows[0]["vs_all_on"] == 1.0
    md = (out / "report.md").read_text()
    assert "## Ablation" in md and "| pipeline off | recgo | off | on | on |" in md
    pytest.importorskip("matplotlib")
    assert (out / "ablation.png").stat().st_size > 0


def _yaml(tmp_path: Path) -> Path:
    p = tmp_path / "cfg.yaml"
    p.write_text("dim: 8\nmax_len: 7\neval_every: 3\nseed: 3\n")
    return p


@needs_taobao
def test_bst_adagrad_first_step_agrees_on_every_backend() -> None:
    """One Adagrad step from the same weights gives the same tables on every backend to rounding: the
    item and category tables, each looked up by a history and a target feature, take one update of the
    merged gradient (two updates, one per feature, would differ; SGD could not tell them apart). Past
    the first step Adagrad's ±lr moves on rows with tiny gradients amplify rounding differences."""
    pytest.importorskip("torchrec")
    cfg = TrainConfig(model="bst", data=str(TAOBAO), batch_size=64, dim=8, max_len=7, steps=1, eval_every=1,
                      seed=3, sparse_optimizer="adagrad")
    source = make_source(cfg)
    tables = {}
    for backend in ("torch", "torchrec", "recgo"):
        tr = Trainer(cfg, source, backend)
        tr.run(warmup=0)
        tr.close()
        tables[backend] = {k.split(".")[-2]: v.clone() for k, v in tr.model.sparse.module.state_dict().items()
                           if k.endswith(".weight")}
    assert set(tables["recgo"]) == {"item", "cat", "user"}
    for backend in ("torchrec", "recgo"):
        for name, w in tables[backend].items():
            torch.testing.assert_close(w, tables["torch"][name], rtol=0, atol=2e-8)


@needs_taobao
def test_ablation_dedup_off_swap_keeps_weights_and_results() -> None:
    from recgo.train.ablation import _without_dedup, dedup_switch_available

    if not dedup_switch_available():
        pytest.skip("recgo.EmbeddingCollection has no dedup switch")
    cfg = TrainConfig(model="bst", data=str(TAOBAO), batch_size=64, dim=8, max_len=7, steps=3, eval_every=3, seed=3)
    source = make_source(cfg)
    on, off = Trainer(cfg, source, "recgo"), Trainer(cfg, source, "recgo")
    _without_dedup(off, cfg)
    for (k, a), b in zip(on.model.state_dict().items(), off.model.state_dict().values()):
        assert torch.equal(a, b), k
    on.run()
    off.run()
    assert on.history.train_loss == pytest.approx(off.history.train_loss, rel=1e-6)
    on.close()
    off.close()


@pytest.mark.parametrize("text, match", [
    ("1,2,3,pv,100\n1,x7,3,pv,101\n", r"line 2, column 2 \(item\): expected an integer ID, got 'x7'"),
    ("1,2,3,pv,100\n1,2\n1,4,3,pv,102\n", r"line 2: 2 of the 5 columns"),
])
def test_a_malformed_userbehavior_line_is_named(tmp_path: Path, text: str, match: str) -> None:
    from recgo.errors import InvalidInputError
    from recgo.train.data import TaobaoSequences
    path = tmp_path / "ub.csv"
    path.write_text(text)
    with pytest.raises(InvalidInputError, match=match):
        TaobaoSequences(path)


def test_a_short_last_userbehavior_line_is_dropped(tmp_path: Path) -> None:
    from recgo.train.taobao import _userbehavior_columns
    path = tmp_path / "ub.csv"
    path.write_text("user_id,item_id,category_id,behavior,ts\n1,2,3,pv,100\n1,4,3,pv,101\n1,5")  # the sample's cut end
    assert _userbehavior_columns(path) == ([1, 1], [2, 4], [3, 3])
