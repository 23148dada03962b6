"""The training job's conditioning knobs: the dense learning-rate warmup and decay (resumed runs included),
BST's activation and the Taobao split holding out each user's last N events."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from recgo.errors import InvalidInputError
from recgo.train import TrainConfig, Trainer, make_source
from recgo.train.data import TaobaoSequences
from recgo.train.loop import lr_factor
from recgo.train.models import BST
from train_resume import assert_resume_equals_whole

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TAOBAO = DATA / "taobao" / "taobao_UserBehavior_head.csv"
needs_taobao = pytest.mark.skipif(not TAOBAO.exists(), reason="Taobao sample not present")


def test_lr_factor_warms_up_then_decays_to_zero() -> None:
    cfg = TrainConfig(steps=10, warmup_steps=4, lr_decay="linear")
    got = [lr_factor(cfg, s) for s in range(10)]
    assert got[:4] == [0.25, 0.5, 0.75, 1.0]
    assert got[4:] == pytest.approx([(10 - s) / 6 for s in range(4, 10)])
    assert got[-1] > 0 and lr_factor(cfg, 10) == 0.0
    assert [lr_factor(TrainConfig(steps=10), s) for s in (0, 9)] == [1.0, 1.0]
    assert [lr_factor(TrainConfig(steps=10, warmup_steps=2), s) for s in (0, 1, 9)] == [0.5, 1.0, 1.0]


@pytest.mark.parametrize("field, value", [("warmup_steps", -1), ("warmup_steps", 1.5), ("lr_decay", "cosine"),
                                          ("activation", "tanh"), ("holdout_events", 0), ("checkpoint_every", -1),
                                          ("depth", -2), ("seed", -1), ("seed", 2**64), ("sparse_lr", float("nan")),
                                          ("dense_lr", -1.0), ("dense_lr", float("inf")), ("sparse_lr", "0.1")])
def test_bad_schedule_fields_are_refused(field: str, value: object) -> None:
    with pytest.raises(InvalidInputError, match=field):
        TrainConfig(**{field: value}).validate()


def test_bst_activation() -> None:
    """GELU reaches the encoder's feed-forward and the top MLP; the default stays ReLU."""
    torch.manual_seed(0)
    gelu, relu = BST(8, 5, 8, activation="gelu"), BST(8, 5, 8)
    assert any(isinstance(m, nn.GELU) for m in gelu.top) and not any(isinstance(m, nn.ReLU) for m in gelu.top)
    assert any(isinstance(m, nn.ReLU) for m in relu.top)
    layer = gelu.encoder.layers[0]
    x = torch.linspace(-3, 3, 7)
    assert torch.allclose(layer.activation(x), nn.functional.gelu(x))
    with pytest.raises(InvalidInputError, match="activation"):
        BST(8, 5, 8, activation="swish")


@needs_taobao
def test_taobao_holdout_keeps_each_users_last_events() -> None:
    one = TaobaoSequences(TAOBAO, batch_size=64, max_len=5, seed=0, pipeline=False)
    three = TaobaoSequences(TAOBAO, batch_size=64, max_len=5, seed=0, pipeline=False, holdout=3)
    users = three._data["users"]
    for s in (one, three):
        train, val = s._train[:, 0], s._val_samples[:, 0]
        last_train = torch.full((815,), -1).scatter_reduce(0, users[train], train, "amax")
        first_val = torch.full((815,), 1 << 40).scatter_reduce(0, users[val], val, "amin")
        assert bool((last_train < first_val).all())  # validation events follow every training event of the user
        assert train.numel() + val.numel() == one._train.shape[0] + one._val_samples.shape[0]
    # each user's events with a history: three held out unless the user has fewer
    per_user = torch.bincount(users[one._train[:, 0]], minlength=815) // 2 + 1
    assert three._val_samples.shape[0] == 2 * int(per_user.clamp(max=3).sum())
    assert one._val_samples.shape[0] == 2 * 815
    with pytest.raises(InvalidInputError, match="holdout"):
        TaobaoSequences(TAOBAO, holdout=0)


@needs_taobao
@pytest.mark.parametrize("backend", ["recgo", "torch"])
def test_warmup_scales_the_dense_learning_rate_and_survives_resume(backend: str, tmp_path: Path) -> None:
    """A run saved mid-warmup and resumed at full rate equals the uninterrupted one: the loaded Adam state
    carries the warmup's rate, which the resumed trainer must replace."""
    cfg = TrainConfig(model="bst", data=str(TAOBAO), batch_size=64, dim=8, max_len=7, steps=4, eval_every=4,
                      seed=3, warmup_steps=2, activation="gelu")
    source = make_source(cfg)
    whole = Trainer(cfg, source, backend)
    whole.run(steps=1)
    assert whole.opt.param_groups[0]["lr"] == pytest.approx(cfg.dense_lr / 2)
    whole.run()
    assert whole.opt.param_groups[0]["lr"] == pytest.approx(cfg.dense_lr)
    for trainer in assert_resume_equals_whole(lambda: Trainer(cfg, source, backend), 1, tmp_path / "ck", whole):
        trainer.close()
