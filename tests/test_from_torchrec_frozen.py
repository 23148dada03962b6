"""Frozen tables through from_torchrec: a TorchRec table frozen with ``weight.requires_grad_(False)``
stays frozen, for a torch optimizer and for the fused one (TorchRec's in-backward optimizer skips it),
whatever the order of freezing and ``apply_optimizer_in_backward``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import recgo
from recgo.modules import optim

pytest.importorskip("torchrec")
from torch.distributed.optim import _apply_optimizer_in_backward as apply_optimizer_in_backward  # noqa: E402
from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection  # noqa: E402

from test_from_torchrec import TABLES, _loss, _rows_batch, _two_tables  # noqa: E402


@pytest.mark.parametrize("meta", [False, True])
@pytest.mark.parametrize("sequence", [False, True])
def test_a_frozen_table_stays_frozen_for_a_torch_optimizer(sequence: bool, meta: bool) -> None:
    """A TorchRec table frozen with weight.requires_grad_(False) (a pretrained one) came back trainable
    from from_torchrec: a torch optimizer built after conversion over the parameters that require grad,
    as TorchRec's scripts build it, trained it."""
    prefix = "embeddings" if sequence else "embedding_bags"
    ref = _two_tables(sequence, "meta" if meta else "cpu")
    getattr(ref, prefix)["t_user"].weight.requires_grad_(False)
    new = recgo.from_torchrec(ref)
    if meta:
        new.to_empty(device="cpu")
        new.reset_parameters()
    assert {t: m.weight.requires_grad for t, m in getattr(new, prefix).items()} == {"t_user": False, "t_item": True}
    before = {t: m.weight.detach().clone() for t, m in getattr(new, prefix).items()}
    opt = torch.optim.SGD([p for p in new.parameters() if p.requires_grad], lr=0.5)
    _loss(new, _rows_batch(0, every_row=True)).backward()
    opt.step()
    assert torch.equal(getattr(new, prefix)["t_user"].weight, before["t_user"])
    assert not torch.equal(getattr(new, prefix)["t_item"].weight, before["t_item"])


@pytest.mark.parametrize("source, sequence", [("in_backward", False), ("in_backward", True), ("fused", False)])
def test_a_fused_collection_frozen_whole_or_in_part_steps_as_torchrec(source: str, sequence: bool) -> None:
    """With apply_optimizer_in_backward and a frozen table, TorchRec updates no row of it; the converted
    collection's fused SGD updated them (before session 31), then
    a collection frozen in part was refused at conversion (sessions 31 and 32). It now converts, and
    its steps leave the frozen table as TorchRec's do and move the other as TorchRec's do. A collection
    frozen whole converts frozen (no row changes) and trains again once unfrozen."""
    prefix = "embeddings" if sequence else "embedding_bags"

    def build() -> nn.Module:
        if source == "fused":
            torch.manual_seed(0)
            return FusedEmbeddingBagCollection(tables=TABLES, optimizer_type=torch.optim.SGD,
                                               optimizer_kwargs={"lr": 0.5}, device=torch.device("cpu"))
        m = _two_tables(sequence)
        apply_optimizer_in_backward(torch.optim.SGD, m.parameters(), {"lr": 0.5})
        return m

    def weights(m: nn.Module) -> dict[str, torch.Tensor]:
        return {t: v.weight.detach().clone() for t, v in getattr(m, prefix).items()}

    ref, part = build(), nn.ModuleDict({"coll": build()})
    for m in (ref, part["coll"]):
        getattr(m, prefix)["t_user"].weight.requires_grad_(False)
    before = weights(ref)
    assert weights(part["coll"]).keys() == before.keys()
    new = recgo.from_torchrec(part)["coll"]
    assert {t: v.weight.requires_grad for t, v in getattr(new, prefix).items()} == {"t_user": False, "t_item": True}
    assert new.fused_optimizer == optim.SGD(lr=0.5)
    for step in range(3):
        for m in (ref, new):
            _loss(m, _rows_batch(step, every_row=False)).backward()
    got, want = weights(new), weights(ref)
    assert torch.equal(got["t_user"], before["t_user"])
    # TorchRec's FusedEmbeddingBagCollection updates a frozen table all the same (its fused kernel covers
    # every table); recgo's leaves it, as TorchRec's in-backward optimizers do (documented difference)
    assert torch.equal(want["t_user"], before["t_user"]) != (source == "fused")
    assert not torch.equal(got["t_item"], before["t_item"])
    torch.testing.assert_close(got["t_item"], want["t_item"], rtol=1e-5, atol=1e-6)
    assert int(new.state_dict()[f"{prefix}.t_user.optimizer_step"]) == 0
    assert int(new.state_dict()[f"{prefix}.t_item.optimizer_step"]) == 3
    whole = build()
    whole.requires_grad_(False)
    new = recgo.from_torchrec(whole)
    assert new.fused_optimizer == optim.SGD(lr=0.5)
    assert not any(p.requires_grad for p in new.parameters())
    before = {k: v.clone() for k, v in new.state_dict().items()}
    _loss(new, _rows_batch(0, every_row=True)).backward()
    for k, v in new.state_dict().items():
        assert torch.equal(v, before[k]), k
    new.requires_grad_(True)  # unfrozen, the fused optimizer steps again
    _loss(new, _rows_batch(1, every_row=True)).backward()
    assert not torch.equal(getattr(new, prefix)["t_user"].weight, before[f"{prefix}.t_user.weight"])


@pytest.mark.parametrize("sequence", [False, True])
def test_a_table_frozen_before_apply_optimizer_in_backward_converts(sequence: bool) -> None:
    """A table frozen first (a pretrained one) cannot take an in-backward optimizer (torch raises for a
    parameter without grad), so the script applies it to the trainable parameters only: conversion
    (and shard_model's) refused the collection, its tables having "different in-backward optimizers".
    It converts, and steps as TorchRec's: the frozen table stays, the other trains."""
    prefix = "embeddings" if sequence else "embedding_bags"

    def build() -> nn.Module:
        m = _two_tables(sequence)
        getattr(m, prefix)["t_user"].weight.requires_grad_(False)
        apply_optimizer_in_backward(torch.optim.SGD, [p for p in m.parameters() if p.requires_grad], {"lr": 0.5})
        return m

    ref, new = build(), recgo.from_torchrec(build())
    assert new.fused_optimizer == optim.SGD(lr=0.5)
    before = {t: v.weight.detach().clone() for t, v in getattr(ref, prefix).items()}
    for step in range(2):
        for m in (ref, new):
            _loss(m, _rows_batch(step, every_row=False)).backward()
    got = {t: v.weight.detach() for t, v in getattr(new, prefix).items()}
    want = {t: v.weight.detach() for t, v in getattr(ref, prefix).items()}
    assert torch.equal(got["t_user"], before["t_user"]) and torch.equal(want["t_user"], before["t_user"])
    torch.testing.assert_close(got["t_item"], want["t_item"], rtol=1e-5, atol=1e-6)
    assert not torch.equal(got["t_item"], before["t_item"])
