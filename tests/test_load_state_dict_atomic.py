"""A collection's own strict ``load_state_dict`` refuses a state dict with missing or unexpected keys, or a
non-tensor or meta value for one of its tables, before it copies anything. torch's path copied every
table that matched first and raised after (a RuntimeError, the collection half loaded: the tables before
the bad key, and a dynamic-ID table's ID map imported by its pre-hook)."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

import recgo
from recgo.modules import optim

Edit = Callable[[dict[str, Any], str], None]


def _collection(sequence: bool, dynamic: bool) -> torch.nn.Module:
    kw: dict[str, Any] = {"dynamic": recgo.DynamicConfig()} if dynamic else {}
    cls, cfg = ((recgo.EmbeddingCollection, recgo.EmbeddingConfig) if sequence else
                (recgo.EmbeddingBagCollection, recgo.EmbeddingBagConfig))
    return cls([cfg(num_embeddings=10, embedding_dim=4, name="a", feature_names=["f"], **kw),
                cfg(num_embeddings=20, embedding_dim=4, name="b", feature_names=["g"])], optimizer=optim.Adagrad(lr=0.1))


def _trained(sequence: bool, dynamic: bool) -> torch.nn.Module:
    """A collection one step in, so that table a's dynamic ID map holds IDs."""
    coll = _collection(sequence, dynamic)
    kjt = recgo.KeyedJaggedTensor(["f", "g"], torch.tensor([1, 2, 3, 4]), lengths=torch.tensor([1, 1, 1, 1]))
    out = coll(kjt)
    (out.values() if not sequence else torch.cat([jt.values() for jt in out.values()])).sum().backward()
    return coll


def _drop(sd: dict[str, Any], b: str) -> None:
    del sd[b + "weight"]


def _extra(sd: dict[str, Any], b: str) -> None:
    sd[b.replace(".b.", ".c.") + "weight"] = torch.zeros(3, 4)


def _as_list(sd: dict[str, Any], b: str) -> None:
    sd[b + "weight"] = sd[b + "weight"].tolist()


def _meta(sd: dict[str, Any], b: str) -> None:
    sd[b + "weight"] = torch.empty(20, 4, device="meta")


@pytest.mark.parametrize("edit, error, match", [
    (_drop, recgo.StateDictKeysError, r'Missing key\(s\) in state_dict: ".*\.b\.weight"'),
    (_extra, recgo.StateDictKeysError, r'Unexpected key\(s\) in state_dict: ".*\.c\.weight"'),
    (_as_list, recgo.InvalidInputError, r"\.b\.weight' is a list, not a tensor"),
    (_meta, recgo.InvalidInputError, r"\.b\.weight' is a meta tensor"),
], ids=["missing", "unexpected", "list", "meta"])
@pytest.mark.parametrize("sequence", [False, True], ids=["pooled", "sequence"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["fixed", "dynamic"])
def test_a_refused_state_dict_loads_nothing(edit: Edit, error: type, match: str, sequence: bool,
                                            dynamic: bool) -> None:
    src, dst = _trained(sequence, dynamic), _collection(sequence, dynamic)
    prefix = "embeddings." if sequence else "embedding_bags."
    sd = {k: v.clone() for k, v in src.state_dict().items()}
    edit(sd, prefix + "b.")
    before = {k: v.clone() for k, v in dst.state_dict().items()}
    with pytest.raises(error, match=match):
        dst.load_state_dict(sd)
    after = dst.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], v) for k, v in before.items())


def test_missing_keys_are_still_a_runtime_error_and_strict_false_loads_the_rest() -> None:
    """torch's contract stays: the error is a RuntimeError, and strict=False loads what matches and
    reports the rest."""
    src, dst = _trained(False, False), _collection(False, False)
    sd = {k: v.clone() for k, v in src.state_dict().items() if not k.startswith("embedding_bags.b.")}
    with pytest.raises(RuntimeError, match="Missing key"):
        dst.load_state_dict(sd)
    res = dst.load_state_dict(sd, strict=False)
    assert sorted(res.missing_keys) == [f"embedding_bags.b.{n}" for n in ("optimizer_state", "optimizer_step", "weight")]
    assert torch.equal(dst.embedding_bags["a"].weight, src.embedding_bags["a"].weight)
    weights_only = {k: v for k, v in src.state_dict().items() if k.endswith(".weight")}  # TorchRec's fused EBC
    dst.load_state_dict(weights_only)
    assert torch.equal(dst.embedding_bags["b"].weight, src.embedding_bags["b"].weight)
