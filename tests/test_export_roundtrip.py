"""torch.export programs that take (and give) recgo's batch types survive ``torch.export.save`` and
``load``: the pytree contexts (tuples) came back from the JSON as lists, so a loaded program refused
its own input (``ValueError: Trying to flatten user inputs with exported input tree spec``), where the
same program taking a TorchRec KeyedJaggedTensor worked. The programs here do plain torch math on the
batches' tensors (no embedding collection), so they test the pytree registration alone."""

from __future__ import annotations

import io
import json
import logging

import pytest
import torch
import torch.utils._pytree as pytree

import recgo

L = torch.tensor


def _save_load(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    # The example inputs (recgo's or TorchRec's batches) are not weights_only globals, so torch falls
    # back to a full unpickle and logs a warning whose format string wants two arguments and gets one
    # (torch/_export/serde/serialize.py); pytest's log capture raises on that. Not what is tested here.
    serde_log = logging.getLogger("torch._export.serde.serialize")
    level = serde_log.level
    serde_log.setLevel(logging.ERROR)
    try:
        return torch.export.load(buf)
    finally:
        serde_log.setLevel(level)


class _KJTMath(torch.nn.Module):
    def forward(self, k: recgo.KeyedJaggedTensor) -> torch.Tensor:
        w = k.weights_or_none()
        v = k.values().float() if w is None else k.values().float() * w
        return v.sum() + k.lengths().sum()


class _JTMath(torch.nn.Module):
    def forward(self, j: recgo.JaggedTensor) -> torch.Tensor:
        return j.values().sum(0) * j.lengths().sum()


class _KTMath(torch.nn.Module):
    def forward(self, t: recgo.KeyedTensor) -> torch.Tensor:
        return t.values() * 2


class _KTOut(torch.nn.Module):
    """Gives a KeyedTensor: the output spec goes through the same round trip."""

    def forward(self, x: torch.Tensor) -> recgo.KeyedTensor:
        return recgo.KeyedTensor(["a", "b"], [1, 2], x * 3)


@pytest.mark.parametrize("weighted", [False, True])
def test_kjt_program_takes_its_input_after_save_and_load(weighted: bool) -> None:
    kw = {"weights": L([0.5, 1.0, 2.0, 4.0])} if weighted else {}
    k = recgo.KeyedJaggedTensor(["f1", "f2"], L([1, 2, 3, 4]), lengths=L([1, 2, 1, 0]), **kw)
    ep = torch.export.export(_KJTMath(), (k,), strict=False)
    loaded = _save_load(ep)
    assert loaded.call_spec.in_spec == ep.call_spec.in_spec
    want = _KJTMath()(k)
    torch.testing.assert_close(loaded.module()(k), want)
    # another batch of the same keys and batch size (static shapes: same numbers of values)
    k2 = recgo.KeyedJaggedTensor(["f1", "f2"], L([5, 6, 7, 8]), lengths=L([2, 1, 0, 1]), **kw)
    torch.testing.assert_close(loaded.module()(k2), _KJTMath()(k2))


def test_jt_program_takes_its_input_after_save_and_load() -> None:
    j = recgo.JaggedTensor(torch.arange(6.0).reshape(3, 2), lengths=L([1, 2]))
    ep = torch.export.export(_JTMath(), (j,), strict=False)
    loaded = _save_load(ep)
    assert loaded.call_spec.in_spec == ep.call_spec.in_spec
    torch.testing.assert_close(loaded.module()(j), L([18.0, 27.0]))


def test_kt_program_takes_and_gives_keyed_tensors_after_save_and_load() -> None:
    t = recgo.KeyedTensor(["a", "b"], [1, 2], torch.arange(6.0).reshape(2, 3))
    loaded = _save_load(torch.export.export(_KTMath(), (t,), strict=False))
    torch.testing.assert_close(loaded.module()(t), t.values() * 2)

    x = torch.arange(6.0).reshape(2, 3)
    ep = torch.export.export(_KTOut(), (x,), strict=False)
    loaded = _save_load(ep)
    assert loaded.call_spec.out_spec == ep.call_spec.out_spec
    out = loaded.module()(x)
    assert isinstance(out, recgo.KeyedTensor)
    assert (out.keys(), out.length_per_key()) == (["a", "b"], [1, 2])
    torch.testing.assert_close(out["b"], x[:, 1:] * 3)


def test_contexts_round_trip_through_json_as_tuples() -> None:
    """The spec the JSON gives back equals the live one (and stays hashable), for every registered
    type, including a KeyedJaggedTensor with no keys (its batch size is in the context)."""
    batches = [recgo.KeyedJaggedTensor(["f1"], L([1, 2, 3]), lengths=L([1, 2])),
               recgo.KeyedJaggedTensor([], L([], dtype=torch.int64), lengths=L([], dtype=torch.int64), stride=3),
               recgo.JaggedTensor(L([1.0, 2.0]), lengths=L([2])),
               recgo.KeyedTensor(["a"], [2], torch.ones(1, 2))]
    for b in batches:
        spec = pytree.tree_structure((b,))
        text = pytree.treespec_dumps(spec)
        json.loads(text)  # plain JSON
        back = pytree.treespec_loads(text)
        assert back == spec, type(b).__name__
        hash(back.child(0).context)


def test_torchrec_programs_still_round_trip() -> None:
    """The reference: TorchRec's KeyedJaggedTensor through the same save and load."""
    torchrec = pytest.importorskip("torchrec")
    tk = torchrec.KeyedJaggedTensor(keys=["f1"], values=L([1, 2, 3]), lengths=L([1, 2]))
    loaded = _save_load(torch.export.export(_KJTMath(), (tk,), strict=False))
    torch.testing.assert_close(loaded.module()(tk), L(9.0))


# -- per-key views and a multi-key EmbeddingCollection under export -------------------------------
# kjt[key], split, permute, to_dict (and an EmbeddingCollection given keys it drops) read the per-key
# counts from the lengths' data: they raised GuardOnDataDependentSymNode under torch.export, where
# TorchRec's KeyedJaggedTensor exports. Exported with a dynamic number of values and batch size, the
# program must give eager's values on a batch of other sizes.

_D = {0: torch.export.Dim.DYNAMIC}
_DYN = ([_D, None, _D, None],)  # values, weights, lengths, offsets
_DYN_WEIGHTED = ([_D, _D, _D, None],)


class _PerKey(torch.nn.Module):
    def forward(self, k: recgo.KeyedJaggedTensor) -> tuple[torch.Tensor, ...]:
        a = k["a"]
        s1, s2 = k.split([1, 1])
        p = k.permute([1, 0])
        d = k.to_dict()
        w = p.weights_or_none()
        return (a.values() * 2, a.lengths(), s2.values() + 1, s1.lengths(), p.values(), p.lengths(),
                d["b"].values(), d["b"].offsets(), torch.zeros(1) if w is None else w * 3)


@pytest.mark.parametrize("weighted", [False, True])
def test_kjt_per_key_views_export_with_dynamic_sizes(weighted: bool) -> None:
    def kjt(values: list[int], lengths: list[int]) -> recgo.KeyedJaggedTensor:
        kw = {"weights": torch.arange(len(values), dtype=torch.float32) / 4} if weighted else {}
        return recgo.KeyedJaggedTensor(["a", "b"], L(values), lengths=L(lengths), **kw)

    ep = torch.export.export(_PerKey(), (kjt([1, 2, 3, 4], [1, 0, 2, 1]),),
                             dynamic_shapes=_DYN_WEIGHTED if weighted else _DYN, strict=False)
    k2 = kjt([5, 6, 7, 8, 9, 10, 11], [2, 0, 1, 3, 0, 1])  # batch 3, 7 values
    got, want = ep.module()(k2), _PerKey()(k2)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    with pytest.raises(RuntimeError):  # lengths that do not sum to the values fail at run time
        ep.module()(kjt([1, 2, 3], [1, 0, 0, 1]))


def test_kjt_per_key_views_still_validate_eagerly() -> None:
    k = recgo.KeyedJaggedTensor(["a", "b"], L([1, 2, 3]), lengths=L([2, -1, 1, 1]))
    with pytest.raises(recgo.InvalidInputError):
        k["a"]
    with pytest.raises(recgo.InvalidInputError):
        k.split([1, 1])
    with pytest.raises(recgo.InvalidInputError):
        recgo.KeyedJaggedTensor(["a", "b"], L([1, 2, 3]), lengths=L([1, 1, 1, 1])).permute([1, 0])


class _Seq(torch.nn.Module):
    def __init__(self, ec: torch.nn.Module) -> None:
        super().__init__()
        self.ec = ec

    def forward(self, k: recgo.KeyedJaggedTensor) -> tuple[torch.Tensor, ...]:
        out = self.ec(k)
        return out["b"].values() * 1, out["b"].lengths(), out["c"].values() * 1


def test_embedding_collection_with_several_keys_exports_with_dynamic_sizes() -> None:
    torchrec = pytest.importorskip("torchrec")
    cfg = [torchrec.EmbeddingConfig(num_embeddings=10, embedding_dim=4, name="t", feature_names=["b"]),
           torchrec.EmbeddingConfig(num_embeddings=10, embedding_dim=3, name="u", feature_names=["c"])]
    torch.manual_seed(0)
    m = _Seq(recgo.EmbeddingCollection(cfg).eval())  # key "a" is no table's: dropped by the collection
    k = recgo.KeyedJaggedTensor(["a", "b", "c"], L([1, 2, 3, 4, 5, 6]), lengths=L([1, 0, 2, 1, 1, 1]))
    k2 = recgo.KeyedJaggedTensor(["a", "b", "c"], L([9, 1, 2, 3, 4, 5, 6, 7, 8]),
                                 lengths=L([1, 0, 0, 2, 1, 0, 1, 1, 3]))
    with torch.no_grad():
        ep = torch.export.export(m, (k,), dynamic_shapes=_DYN, strict=False)
        got, want = ep.module()(k2), m(k2)
    assert [g.shape[0] for g in got] == [3, 3, 5]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
