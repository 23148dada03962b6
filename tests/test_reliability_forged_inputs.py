"""Inputs forged to pass a check they should fail: lengths whose int64 sum wraps around to the
number of values (``[2^63−1, 2^63−1, 3]`` over one value was accepted and handed the value out
twice), negative key widths that sum to a KeyedTensor's width (a key's columns came out repeated),
and a recgo checkpoint whose metadata checksum holds over a malformed entry list (bare ValueError,
TypeError or a garbled message)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings, strategies as st

import recgo
from recgo.errors import InvalidInputError, RecgoIOError
from recgo.modules import _checkpoint, optim

M = 2**63 - 1


@pytest.mark.parametrize("lengths", [[M, M, 3], [M, 2, M], [2**62, 2**62, 2**62, 2**62, 1]])
def test_lengths_whose_sum_wraps_around_are_refused(lengths: list[int]) -> None:
    lens = torch.tensor(lengths, dtype=torch.int64)
    with pytest.raises(InvalidInputError, match="is more than the 1 values there are"):
        recgo.JaggedTensor(torch.tensor([7.0]), lengths=lens)
    with pytest.raises(InvalidInputError, match="is more than the 1 values there are"):
        recgo.KeyedJaggedTensor(["f"], torch.tensor([5]), lengths=lens).length_per_key()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=12))
def test_lengths_that_add_up_are_taken(lengths: list[int]) -> None:
    n = sum(lengths)
    jt = recgo.JaggedTensor(torch.arange(float(n)), lengths=torch.tensor(lengths, dtype=torch.int64))
    assert [t.tolist() for t in jt.to_dense()] == [list(map(float, range(sum(lengths[:i]), sum(lengths[:i + 1]))))
                                                   for i in range(len(lengths))]
    if len(lengths) % 2 == 0 and lengths:
        kjt = recgo.KeyedJaggedTensor(["a", "b"], torch.arange(n), lengths=torch.tensor(lengths, dtype=torch.int64))
        half = len(lengths) // 2
        assert kjt.length_per_key() == [sum(lengths[:half]), sum(lengths[half:])]
    with pytest.raises(InvalidInputError):
        recgo.JaggedTensor(torch.arange(float(n + 1)), lengths=torch.tensor(lengths, dtype=torch.int64))


def test_negative_key_widths_are_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"length_per_key \[4, -2, 1\]: a key's width cannot be negative"):
        recgo.KeyedTensor(["a", "b", "c"], [4, -2, 1], torch.zeros(2, 3))
    kt = recgo.KeyedTensor(["a", "b", "c"], [1, 0, 2], torch.arange(6.0).view(2, 3))  # a zero width is fine
    assert kt.to_dict()["c"].tolist() == [[1.0, 2.0], [4.0, 5.0]]


@pytest.mark.parametrize("entries, state", [
    ([["embedding_bags.t.weight"]], "weight"),
    (None, {}),
    ([[1, 2, 3, 4]], {1: torch.zeros(1)}),
    ([["k", "torch.float32", [1], 0, 5]], {"k": torch.zeros(1)}),
    ("ab", {"a": 1, "b": 2}),
    ([["k", "torch.float32", ["1"], 0]], {"k": torch.zeros(1)}),
], ids=["one_field", "none", "int_key", "five_fields", "string", "string_dim"])
def test_a_checkpoint_with_a_malformed_entry_list_is_refused(tmp_path: Path, entries: object, state: object) -> None:
    ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(num_embeddings=10, embedding_dim=4, name="t",
                                                                 feature_names=["f"])], optimizer=optim.Adagrad(lr=0.1))
    if state == "weight":
        state = {"embedding_bags.t.weight": ebc.state_dict()["embedding_bags.t.weight"].clone()}
    path = tmp_path / "forged.ckpt"
    torch.save({"format": _checkpoint._FORMAT, "version": _checkpoint._VERSION, "entries": entries,
                "meta_crc": _checkpoint._meta_crc(entries), "state_dict": state}, path)
    before = ebc.state_dict()["embedding_bags.t.weight"].clone()
    with pytest.raises(RecgoIOError, match="checkpoint metadata is malformed"):
        ebc.load(path)
    assert torch.equal(ebc.state_dict()["embedding_bags.t.weight"], before)


@pytest.mark.parametrize("bad", [torch.tensor([-5]), torch.tensor([float("nan")]), torch.tensor([2**53])],
                         ids=["negative", "nan", "past_2_53"])
@pytest.mark.parametrize("sequence", [False, True], ids=["pooled", "sequence"])
def test_a_nested_load_checks_step_counters_as_a_direct_one(bad: torch.Tensor, sequence: bool) -> None:
    """A fused collection inside a model: ``model.load_state_dict`` skipped the collection's checks, so a
    step counter of −5 or NaN loaded (refused only at the next backward). It is refused by name, before
    any entry is copied."""
    if sequence:
        coll: torch.nn.Module = recgo.EmbeddingCollection(
            [recgo.EmbeddingConfig(num_embeddings=10, embedding_dim=4, name="t", feature_names=["f"])],
            optimizer=optim.Adam(lr=0.1))
        key = "c.embeddings.t.optimizer_step"
    else:
        coll = recgo.EmbeddingBagCollection(
            [recgo.EmbeddingBagConfig(num_embeddings=10, embedding_dim=4, name="t", feature_names=["f"])],
            optimizer=optim.Adam(lr=0.1))
        key = "c.embedding_bags.t.optimizer_step"
    model = torch.nn.ModuleDict({"c": coll})
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    weight = [k for k in sd if k.endswith("weight")][0]
    sd[weight] += 1
    sd[key] = bad
    before = model.state_dict()[weight].clone()
    with pytest.raises(InvalidInputError, match=f"checkpoint entry '{key}' = "):
        model.load_state_dict(sd)
    assert torch.equal(model.state_dict()[weight], before)


@pytest.mark.parametrize("lo, hi, match", [
    (float("nan"), None, "weight_init_min must be a finite number or None, got nan"),
    (None, float("inf"), "weight_init_max must be a finite number or None, got inf"),
    (1.0, 0.5, "weight_init_min 1.0 is above weight_init_max 0.5"),
    (0.5, None, r"weight_init_min 0.5 is above weight_init_max 0.31"),  # the default max, 1/sqrt(10)
])
@pytest.mark.parametrize("sequence", [False, True], ids=["pooled", "sequence"])
def test_init_bounds_that_cannot_draw_rows_are_refused(lo: float | None, hi: float | None, match: str,
                                                       sequence: bool) -> None:
    """NaN bounds filled the table with NaN; min > max raised torch's own error at materialisation."""
    with pytest.raises(InvalidInputError, match=match):
        if sequence:
            recgo.EmbeddingCollection([recgo.EmbeddingConfig(10, 4, "t", ["f"], weight_init_min=lo, weight_init_max=hi)])
        else:
            recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 4, "t", ["f"], weight_init_min=lo,
                                                                   weight_init_max=hi)])
    ok = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 4, "t", ["f"], weight_init_min=-0.5,
                                                                weight_init_max=0.5)])
    w = ok.embedding_bags["t"].weight
    assert float(w.min()) >= -0.5 and float(w.max()) <= 0.5


@pytest.mark.parametrize("opt, column, value, match", [
    (optim.Adagrad(lr=0.1), 0, -1.0, "negative running sums of squared gradients \\(Adagrad's\\)"),
    (optim.RowWiseAdagrad(lr=0.1), 0, -1.0, "negative running sums of squared gradients \\(RowWiseAdagrad's\\)"),
    (optim.Adam(lr=0.1), 5, -1.0, "negative running sums of squared gradients \\(Adam's\\)"),  # v of column 1
    (optim.Adam(lr=0.1), 0, float("nan"), "not finite"),
    (optim.AdamW(lr=0.1), 7, float("inf"), "not finite"),
], ids=["adagrad", "rowwise", "adam_v", "adam_nan", "adamw_inf"])
@pytest.mark.parametrize("nested", [False, True], ids=["direct", "nested"])
def test_an_optimizer_state_no_training_leaves_is_refused(opt: Any, column: int, value: float, match: str,
                                                          nested: bool) -> None:
    """A negative Adagrad sum (or Adam second moment) or a NaN state loaded silently and the next step
    took the row to −1e9 or NaN. Adam's first moment may be negative: that loads."""
    ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(num_embeddings=10, embedding_dim=4, name="t",
                                                                 feature_names=["f"])], optimizer=opt)
    model = torch.nn.ModuleDict({"c": ebc}) if nested else ebc
    pre = "c." if nested else ""
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    key = f"{pre}embedding_bags.t.optimizer_state"
    sd[key].view(10, -1)[3, column] = value
    with pytest.raises(InvalidInputError, match=f"checkpoint entry '{key}' holds .*{match}"):
        model.load_state_dict(sd)
    if isinstance(opt, optim.Adam):
        sd = {k: v.clone() for k, v in model.state_dict().items()}
        sd[key].view(10, -1)[3, 0] = -2.5  # a first moment
        model.load_state_dict(sd)
        assert float(model.state_dict()[key].view(10, -1)[3, 0]) == -2.5


@pytest.mark.parametrize("opt, dtype, value, match", [
    (optim.Adagrad(lr=0.1), torch.int64, -5, "negative running sums"),
    (optim.Adam(lr=0.1), torch.float64, 1e39, "not finite"),  # finite in float64, inf as float32
], ids=["adagrad_int64", "adam_float64"])
def test_an_optimizer_state_is_checked_as_the_engine_holds_it(opt: Any, dtype: torch.dtype, value: float,
                                                              match: str) -> None:
    """An int64 state of -5 Adagrad sums, and a float64 one of 1e39, loaded (the check skipped integer
    states and ran in float64) and the next step took the row to NaN."""
    ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 4, "t", ["f"])], optimizer=opt)
    sd = {k: v.clone() for k, v in ebc.state_dict().items()}
    key = "embedding_bags.t.optimizer_state"
    sd[key] = torch.full(sd[key].shape, value, dtype=dtype)
    before = ebc.embedding_bags["t"].optimizer_state.clone()
    with pytest.raises(InvalidInputError, match=f"checkpoint entry '{key}' holds .*{match}"):
        ebc.load_state_dict(sd)
    assert torch.equal(ebc.embedding_bags["t"].optimizer_state, before)


@pytest.mark.parametrize("sep", ["", None, 3])
def test_an_empty_sequence_separator_is_refused(sep: object) -> None:
    """``Column(sep="")`` was read as the default ``"|"`` with no word."""
    from recgo.data import Column

    with pytest.raises(InvalidInputError, match="the sequence separator must be a non-empty string"):
        Column("hist", "sequence", sep=sep)  # type: ignore[arg-type]
    assert Column("hist", "sequence", sep=";").to_dict()["sep"] == ";"


def test_a_training_state_nested_past_the_parsers_stack_is_refused(tmp_path: Path) -> None:
    """load_state decoded a forged structure entry (checksums recomputed) nested deeper than json's
    recursion limit into a RecursionError, not the RecgoIOError naming the file."""
    skeleton = ("[" * 100_000).encode()
    _checkpoint.save_checkpoint({_checkpoint._SKELETON: torch.frombuffer(bytearray(skeleton), dtype=torch.uint8)},
                                tmp_path / "deep.ckpt")
    with pytest.raises(RecgoIOError, match=r"deep\.ckpt: the training-state structure does not decode"):
        _checkpoint.load_state(tmp_path / "deep.ckpt")
