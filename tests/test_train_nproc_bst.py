"""``recgo train --model bst --nproc 2``: the sequence model on two gloo ranks, every backend (recgo's
ShardedEmbeddingCollection, TorchRec DMP over EmbeddingCollection, torch DDP over nn.Embedding), trains
what one process trains on the same global batches (Taobao sample; skipped without it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from recgo.train import TrainConfig, Trainer, make_source
from recgo.train.distributed import launch

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TAOBAO = DATA / "taobao" / "taobao_UserBehavior_head.csv"
needs_taobao = pytest.mark.skipif(not TAOBAO.exists(), reason="Taobao sample not present")
B_RANK = 32


def _cfg(**kw) -> TrainConfig:
    base = dict(model="bst", data=str(TAOBAO), steps=3, batch_size=B_RANK, dim=8, max_len=7, eval_every=3, seed=3)
    base.update(kw)
    return TrainConfig(**base)


@needs_taobao
def test_bst_on_two_ranks_trains_like_one_process(tmp_path: Path) -> None:
    pytest.importorskip("torchrec")
    cfg = _cfg(nproc=2)
    report = launch(cfg, ["recgo", "torchrec", "torch"], 2, out=tmp_path / "rep", progress=False,
                    weights_dir=str(tmp_path / "w"), threads=1, one_world=True)
    single = _cfg(batch_size=2 * B_RANK)
    ref = Trainer(single, make_source(single), "recgo")
    ref.run()
    ref_tables = {k.split(".")[1]: v for k, v in ref.model.sparse.module.state_dict().items() if k.endswith("weight")}
    ref_dense = ref.model.dense.state_dict()
    ref.close()
    for backend in ("recgo", "torchrec", "torch"):
        got = report["backends"][backend]
        assert got["train_loss"] == pytest.approx(ref.history.train_loss, rel=2e-5), backend
        assert got["final_auc"] == pytest.approx(ref.history.evals[-1]["auc"], abs=1e-4), backend
        saved = torch.load(tmp_path / "w" / f"{backend}.pt", weights_only=False)
        assert set(saved["tables"]) == set(ref_tables) == {"item", "cat", "user"}
        diff = torch.cat([(saved["tables"][n] - ref_tables[n]).abs().flatten() for n in ref_tables])
        # Adagrad's first step is lr·g/(|g| + eps): for a gradient near zero, float summation order can
        # flip it, so a few elements may differ by up to 2·lr; the rest agree closely.
        assert float((diff > 1e-5).float().mean()) < 1e-3 and float(diff.max()) <= 2 * cfg.sparse_lr, backend
        # The attention's key bias has a zero true gradient (softmax ignores a shift shared by all keys):
        # Adam normalises its float noise into steps of up to lr, hence an absolute 1 % of dense_lr.
        for k, v in ref_dense.items():
            torch.testing.assert_close(saved["dense"][k], v, rtol=1e-4, atol=1e-2 * cfg.dense_lr,
                                       msg=lambda m: f"{backend} {k}: {m}")
    assert set(report["placement"]["recgo"].values()) == {"hash"}
    assert "| torchrec |" in (tmp_path / "rep" / "report.md").read_text()
    # Stop after 2 of the 3 steps, resume, finish: recgo's final tables and dense weights, losses and
    # AUC are the uninterrupted run's (fail_at step 1: a run that started over would raise there).
    ck = str(tmp_path / "ck")
    launch(_cfg(nproc=2, steps=2, checkpoint=ck), ["recgo"], 2, progress=False, threads=1)
    resumed = launch(_cfg(nproc=2, checkpoint=ck), ["recgo"], 2, progress=False, threads=1, resume=True,
                     weights_dir=str(tmp_path / "r"), fail_at=(1, 1))
    whole, again = (torch.load(p / "recgo.pt", weights_only=False) for p in (tmp_path / "w", tmp_path / "r"))
    for part in ("tables", "dense"):
        for k in whole[part]:
            assert torch.equal(whole[part][k], again[part][k]), (part, k)
    got, want = resumed["backends"]["recgo"], report["backends"]["recgo"]
    assert got["train_loss"] == want["train_loss"] and got["final_auc"] == want["final_auc"]
