"""recgo under ``torch.set_default_dtype(torch.float64)`` (a common setting in numerics-minded code):
the tables, their outputs and everything recgo allocates stay float32, sharded and meta-built
collections included, and casts of a meta collection are refused as a built one's are."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import recgo
from recgo.errors import InvalidInputError
from recgo.modules import optim
from spawned import one_rank

CFGS = [recgo.EmbeddingBagConfig(40, 4, "t", ["f"]), recgo.EmbeddingBagConfig(30, 4, "u", ["g"])]


@pytest.fixture
def float64_default() -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@pytest.fixture
def one_rank_world(tmp_path: Path) -> Iterator[None]:
    with one_rank(tmp_path):
        yield


def _kjt() -> recgo.KeyedJaggedTensor:
    return recgo.KeyedJaggedTensor(["f", "g"], torch.tensor([1, 2, 39, 3, 3, 29]),
                                   lengths=torch.tensor([2, 1, 2, 1]))


@pytest.mark.parametrize("sharding", ["hash", "table_wise", "row_wise", "data_parallel"])
def test_sharded_dense_gradients_and_meta_builds_under_a_float64_default(
        sharding: str, float64_default: None, one_rank_world: None) -> None:
    """A sharded collection without a fused optimizer (dense gradients) and one built on meta both
    train as the unsharded float32 collection does (the gradient and the seeded rows were allocated
    in the default dtype: a dtype mismatch in backward, and at construction)."""
    from recgo.distributed import shard_model

    with torch.device("meta"):
        model = torch.nn.ModuleDict({"ebc": recgo.EmbeddingBagCollection(CFGS, seed=3)})
    shard_model(model, sharding, timeout=30)  # no dense part: the model itself, its tables replaced
    sharded = model["ebc"]
    ref = recgo.EmbeddingBagCollection(CFGS, seed=3)
    out, want = sharded(_kjt()).values(), ref(_kjt()).values()
    assert out.dtype == torch.float32 and torch.equal(out, want)
    (out * torch.arange(16.0).reshape(2, 8)).sum().backward()
    (want * torch.arange(16.0).reshape(2, 8)).sum().backward()
    for name in ("t", "u"):
        g, r = sharded.embedding_bags[name].weight.grad, ref.embedding_bags[name].weight.grad
        assert g.dtype == torch.float32 and torch.equal(g.to_dense(), r.to_dense())


def test_meta_collections_report_float32_and_refuse_casts(float64_default: None) -> None:
    """On meta, weights, optimizer state and outputs are float32 as built ones are (and as TorchRec's
    meta modules report); .half() / .double() on meta raise instead of being dropped at to_empty."""
    ebc = recgo.EmbeddingBagCollection(CFGS, optimizer=optim.Adagrad(lr=0.1), device="meta")
    assert {t.dtype for t in ebc.state_dict().values() if t.is_floating_point()} == {torch.float32}
    assert ebc(_kjt()).values().dtype == torch.float32
    ec = recgo.EmbeddingCollection([recgo.EmbeddingConfig(40, 4, "t", ["f"])], device="meta")
    kjt = recgo.KeyedJaggedTensor(["f"], torch.tensor([1, 2, 3]), lengths=torch.tensor([2, 1]))
    assert ec(kjt)["f"].values().dtype == torch.float32
    for cast in (lambda m: m.half(), lambda m: m.double(), lambda m: m.to(torch.bfloat16)):
        for module in (ebc, ec):
            with pytest.raises(InvalidInputError, match="cannot cast a recgo embedding collection"):
                cast(module)
    ebc.to_empty(device="cpu")  # still materialises
    assert ebc.embedding_bags["t"].weight.dtype == torch.float32


def test_dynamic_import_rows_under_a_float64_default(float64_default: None) -> None:
    """import_rows' default optimizer state is float32 (it refused the state the caller never
    passed), and a float64 state is narrowed as the weights are."""
    ebc = recgo.EmbeddingBagCollection(
        [recgo.EmbeddingBagConfig(100, 4, "t", ["f"], dynamic=recgo.DynamicConfig())], optimizer=optim.Adagrad(lr=0.1))
    recgo.dynamic.import_rows(ebc, "t", torch.tensor([5, 7]), torch.ones(2, 4))
    recgo.dynamic.import_rows(ebc, "t", torch.tensor([5, 7]), torch.ones(2, 4), torch.full((2, 4), 0.5))
    out = ebc(recgo.KeyedJaggedTensor(["f"], torch.tensor([5, 7]), lengths=torch.tensor([1, 1])))
    assert torch.equal(out.values(), torch.ones(2, 4, dtype=torch.float32))


def test_kjt_to_dtype_rounds_the_weights() -> None:
    """TorchRec's KJT.to(device, dtype=) casts the weights; recgo's rounds them (kept float32)."""
    w = torch.tensor([1 / 3, 0.1, 2.0])
    kjt = recgo.KeyedJaggedTensor(["f"], torch.tensor([1, 2, 3]), w, lengths=torch.tensor([3]))
    assert kjt.to("cpu", dtype=torch.float32) is kjt
    half = kjt.to("cpu", dtype=torch.float16)
    assert torch.equal(half.weights(), w.half().float()) and torch.equal(half.values(), kjt.values())
    with pytest.raises(InvalidInputError, match="floating dtype"):
        kjt.to("cpu", dtype=torch.int32)
