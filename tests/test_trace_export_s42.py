"""recgo's batch and output types under torch.export, torch.compile and torch.fx, where TorchRec's work.

What was wrong (each test fails on the code before the fix):

* Building a batch inside an exported or ``fullgraph``-compiled module failed, though the docs and the
  ``torch.fx`` refusal point to ``torch.export`` for that: ``KeyedJaggedTensor.from_offsets_sync`` and
  ``JaggedTensor(offsets=)`` raised ``AttributeError: ... '_weights'`` (export flattened the half-built
  object while explaining a data-dependent error), ``JaggedTensor(lengths=)`` a raw
  ``GuardOnDataDependentSymNode``, and ``torch.compile(fullgraph=True)`` dynamo ``UserError``\\ s: the
  constructors' checks read the offsets' and lengths' values in Python. Traced, they are now run-time
  asserts of the program (eager checks and messages unchanged).
* ``KeyedTensor.to`` on a collection's pooled output broke ``torch.fx.symbolic_trace`` (the checking
  constructor branched on a Proxy), and ``KeyedTensor.from_tensor_list`` on traced tensors raised a raw
  ``TypeError`` from ``int(Proxy)``.
* A module returning a KeyedTensor whose width is a dynamic dim exported with the symbolic width in the
  tree spec: the program later read outputs of another width under the example's widths (silently
  wrong values) and ``torch.export.save`` failed. It is refused now, naming the key.
* Strict ``torch.export`` of a module reading a KJT's per-key views failed with ``'function' object has
  no attribute 'is_quantized'`` (message callables passed to ``torch._check``).
* Flattened against a tree spec, a KeyedTensor with the spec's keys in the same order but other widths
  was taken (and read back under the spec's widths).
* Unflattening a KeyedTensor skipped the constructor's shape checks: a ``tree_map`` that cut columns
  gave a KeyedTensor whose reads raised a raw ``RuntimeError`` later.
"""

from __future__ import annotations

import io

import pytest
import torch
import torch.fx._pytree as fx_pytree
import torch.utils._pytree as pytree

import recgo
from recgo.errors import InvalidInputError
from recgo.jagged import JaggedTensor
from recgo.sparse import KeyedJaggedTensor, KeyedTensor

L = torch.tensor
_V, _O = L([1, 2, 3, 4]), L([0, 1, 3, 4, 4])


def _kjt_from_offsets(v: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    return KeyedJaggedTensor.from_offsets_sync(["a", "b"], v, o)["b"].values().sum()


def _jt_from_lengths(v: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    return JaggedTensor(v.float(), lengths=o[1:] - o[:-1]).to_padded_dense(2).sum()


def _jt_from_offsets(v: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    return JaggedTensor(v.float(), offsets=o).lengths().sum()


def _jt_from_both(v: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    return JaggedTensor(v.float(), lengths=o[1:] - o[:-1], offsets=o).values().sum()


def _kjt_from_both(v: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    return KeyedJaggedTensor(["a", "b"], v, lengths=o[1:] - o[:-1], offsets=o)["a"].values().sum()


_BUILDS = [_kjt_from_offsets, _jt_from_lengths, _jt_from_offsets, _jt_from_both, _kjt_from_both]


class _Build(torch.nn.Module):
    def __init__(self, build) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.build = build

    def forward(self, v: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        return self.build(v, o)


@pytest.mark.parametrize("strict", [False, True], ids=["non_strict", "strict"])
@pytest.mark.parametrize("build", _BUILDS, ids=lambda f: f.__name__)
def test_batch_built_in_exported_module(build, strict: bool) -> None:  # type: ignore[no-untyped-def]
    """(strict: its program checked nothing until session 44, see ensure)"""
    m = _Build(build)
    program = torch.export.export(m, (_V, _O), strict=strict).module()
    assert torch.equal(program(_V, _O), m(_V, _O))
    other = L([0, 2, 2, 3, 4])
    assert torch.equal(program(_V, other), m(_V, other))
    # offsets that fall (lengths below zero) are refused by the program at run time
    with pytest.raises(RuntimeError):
        program(_V, L([0, 3, 1, 4, 4]))


@pytest.mark.parametrize("build", _BUILDS[:3], ids=lambda f: f.__name__)
def test_batch_built_in_fullgraph_compiled_module(build) -> None:  # type: ignore[no-untyped-def]
    m = _Build(build)
    compiled = torch.compile(m, backend="eager", fullgraph=True)
    assert torch.equal(compiled(_V, _O), m(_V, _O))
    with pytest.raises(RuntimeError):
        compiled(_V, L([1, 1, 3, 4, 4]))  # offsets must start at 0
    # without fullgraph, dynamo breaks the graph to read the counts: refused by the eager message
    with pytest.raises(InvalidInputError, match="offsets must rise monotonically|lengths: an entry is negative"):
        torch.compile(build, backend="eager")(_V, L([0, 3, 1, 4, 4]))


def test_eager_checks_and_messages_kept_beside_the_traced_ones() -> None:
    # the traced module still builds; eagerly the constructors refuse as before, by the same messages
    assert torch.equal(torch.export.export(_Build(_jt_from_offsets), (_V, _O), strict=False).module()(_V, _O),
                       L(4))
    with pytest.raises(InvalidInputError, match="offsets must rise monotonically from 0 to the 4 rows"):
        JaggedTensor(_V.float(), offsets=L([0, 3, 1, 4, 4]))
    with pytest.raises(InvalidInputError, match="lengths sum to 3 but values has 4 rows"):
        JaggedTensor(_V.float(), lengths=L([1, 1, 1]))
    with pytest.raises(InvalidInputError, match="lengths: negative entry"):
        JaggedTensor(_V.float(), lengths=L([-1, 5]))
    with pytest.raises(InvalidInputError, match="offsets must rise monotonically from 0 to the 4 values"):
        KeyedJaggedTensor.from_offsets_sync(["a", "b"], _V, L([0, 3, 1, 4, 4]))
    with pytest.raises(InvalidInputError, match="lengths and offsets disagree"):
        KeyedJaggedTensor(["a", "b"], _V, lengths=L([1, 1, 1, 1]), offsets=_O)


def test_export_error_inside_a_constructor_is_the_constructors() -> None:
    # a half-built batch flattens (export flattens the caller's locals to explain an error there)
    for cls in (JaggedTensor, KeyedJaggedTensor):
        assert all(leaf is None for _, leaf in pytree.tree_leaves_with_path(cls.__new__(cls)))

    class BadWeights(torch.nn.Module):
        def forward(self, v: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
            return KeyedJaggedTensor.from_offsets_sync(["a", "b"], v, o, weights=torch.ones(3))["b"].values().sum()

    with pytest.raises(InvalidInputError, match="3 weights for 4 values"):
        torch.export.export(BadWeights(), (_V, _O), strict=False)


def _tables() -> list[recgo.EmbeddingBagConfig]:
    return [recgo.EmbeddingBagConfig(num_embeddings=20, embedding_dim=3, name="t1", feature_names=["f1"]),
            recgo.EmbeddingBagConfig(num_embeddings=20, embedding_dim=2, name="t2", feature_names=["f2"])]


def test_keyed_tensor_to_on_a_traced_collection_output() -> None:
    torchrec = pytest.importorskip("torchrec")
    from torchrec.sparse.jagged_tensor import KeyedTensor as TorchrecKT

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ebc = recgo.EmbeddingBagCollection(_tables(), seed=3)

        def forward(self, dense: torch.Tensor, kjt: KeyedJaggedTensor) -> torch.Tensor:
            pooled = self.ebc(kjt).to(dense.device)
            regrouped = TorchrecKT.regroup([pooled], [["f2", "f1"]])[0]
            return regrouped.sum(1) + pooled["f1"].sum(1) + pooled.values().sum(1) + dense.sum(1)

    m = Model().eval()
    kjt = KeyedJaggedTensor(["f1", "f2"], L([1, 2, 3, 4, 5]), lengths=L([1, 2, 0, 2]))
    dense = torch.randn(2, 2)
    for trace in (torch.fx.symbolic_trace, torchrec.fx.symbolic_trace):
        assert torch.equal(trace(m)(dense, kjt), m(dense, kjt))


def test_keyed_tensor_from_tensor_list_traces_with_fx() -> None:
    class Build(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            kt = KeyedTensor.from_tensor_list(["a", "b"], [a, b])
            return KeyedTensor.regroup([kt], [["b", "a"]])[0] + kt.to("cpu")["a"].sum(1, keepdim=True)

    gm = torch.fx.symbolic_trace(Build())
    for width in (3, 5):  # the widths are read from the tensors at run time, as in TorchRec's
        a, b = torch.randn(2, width), torch.randn(2, 2)
        assert torch.equal(gm(a, b), Build()(a, b))


class _KTOut(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> KeyedTensor:
        return KeyedTensor.from_tensor_list(["a", "b"], [a * 2, b + 1])


def test_dynamic_keyed_tensor_width_is_refused_at_export() -> None:
    b = torch.randn(2, 4)
    width = torch.export.Dim("width", min=2, max=64)
    with pytest.raises(InvalidInputError, match=r"key 'a' has a dynamic width.*keep that width static"):
        torch.export.export(_KTOut(), (torch.randn(2, 3), b), dynamic_shapes=({1: width}, None), strict=False)
    # a dynamic batch (the widths static) exports, saves and gives the right keyed values
    batch = torch.export.Dim("batch")
    ep = torch.export.export(_KTOut(), (torch.randn(2, 3), b),
                             dynamic_shapes=({0: batch}, {0: batch}), strict=False)
    torch.export.save(ep, io.BytesIO())
    a5, b5 = torch.randn(5, 3), torch.randn(5, 4)
    got = ep.module()(a5, b5)
    assert got.length_per_key() == [3, 4] and torch.equal(got["b"], b5 + 1)
    # torch.compile keeps a dynamic width (its output is rebuilt, not read through a tree spec)
    compiled = torch.compile(_KTOut(), backend="eager", dynamic=True)
    for w in (3, 5):
        out = compiled(torch.randn(2, w), b)
        assert out.length_per_key() == [w, 4] and torch.equal(out["b"], b + 1)


def test_strict_export_reads_kjt_per_key_views() -> None:
    class Views(torch.nn.Module):
        def forward(self, k: KeyedJaggedTensor) -> torch.Tensor:
            return (k["b"].values().sum() + k.to_dict()["c"].values().sum()
                    + k.split([1, 2])[1].values().sum() + k.permute([2, 0])["c"].values().sum())

    kjt = KeyedJaggedTensor(["a", "b", "c"], torch.arange(7), lengths=L([1, 2, 0, 1, 1, 2]))
    ep = torch.export.export(Views(), (kjt,), strict=True)
    assert torch.equal(ep.module()(kjt), Views()(kjt))


def test_flatten_spec_refuses_other_widths_in_the_same_key_order() -> None:
    spec = pytree.tree_flatten(KeyedTensor(["a", "b"], [2, 3], torch.zeros(1, 5)))[1]
    with pytest.raises(InvalidInputError, match=r"keys \['a', 'b'\] of widths \[2, 3\].*widths \[3, 2\]"):
        fx_pytree.tree_flatten_spec(KeyedTensor(["a", "b"], [3, 2], torch.zeros(1, 5)), spec)
    with pytest.raises(InvalidInputError, match="laid along dim 0"):
        fx_pytree.tree_flatten_spec(KeyedTensor(["a", "b"], [2, 3], torch.zeros(5, 1), key_dim=0), spec)
    # the spec's own layout passes through, and keys in another order are regrouped, as before
    kt = KeyedTensor(["a", "b"], [2, 3], torch.arange(5.).view(1, 5))
    assert fx_pytree.tree_flatten_spec(kt, spec)[0] is kt.values()
    swapped = KeyedTensor(["b", "a"], [3, 2], torch.arange(5.).view(1, 5))
    assert torch.equal(fx_pytree.tree_flatten_spec(swapped, spec)[0], L([[3., 4., 0., 1., 2.]]))


def test_unflatten_checks_the_keyed_tensor_shape() -> None:
    kt = KeyedTensor(["a", "b"], [2, 3], torch.arange(10.).view(2, 5))
    with pytest.raises(InvalidInputError, match="do not hold the keys' 5 columns"):
        pytree.tree_map(lambda t: t[:, :3], kt)
    cast = pytree.tree_map(lambda t: t.to(torch.bfloat16), kt)  # a map that keeps the shape still works
    assert cast["b"].dtype == torch.bfloat16 and cast.length_per_key() == [2, 3]



class _PerKeyFromLengths(torch.nn.Module):
    def forward(self, v: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        kjt = KeyedJaggedTensor(["a", "b"], v, lengths=lengths)
        return kjt["a"].values().sum() * 10 + kjt["b"].lengths().sum()


@pytest.mark.parametrize("trace", ["export", "export_strict", "compile_fullgraph"])
def test_traced_lengths_are_asserted_one_by_one(trace: str) -> None:
    """Traced, a KJT built from lengths asserted each key's sum, not each length: [2, -1 | 1, 2]
    (key sums 1 and 3 over 4 values) ran and read key a's values as [1, 2] (13 instead of the eager
    refusal). Session 44."""
    m, ones = _PerKeyFromLengths(), L([1, 1, 1, 1])
    if trace == "compile_fullgraph":
        program = torch.compile(m, backend="eager", fullgraph=True)
    else:
        program = torch.export.export(m, (_V, ones), strict=trace == "export_strict").module()
    assert torch.equal(program(_V, ones), L(32))
    assert torch.equal(program(_V, L([0, 2, 2, 0])), m(_V, L([0, 2, 2, 0])))
    with pytest.raises(RuntimeError):
        program(_V, L([2, -1, 1, 2]))
    with pytest.raises(InvalidInputError, match="lengths: negative entry"):
        m(_V, L([2, -1, 1, 2]))
