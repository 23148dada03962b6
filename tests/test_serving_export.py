"""The serving path of a trained model: torch.export with a dynamic batch (one request is a batch of
one), torch.compile of the eval model, and a program that runs in a process without recgo
(``recgo.to_torchrec`` before the export). Every output is compared with the eager recgo model's."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental import _config as fx_config

import recgo
from recgo import KeyedJaggedTensor
from raw_inputs import FromRawTensors

L = torch.tensor
_DYN = ([{0: torch.export.Dim.DYNAMIC}, None, {0: torch.export.Dim.DYNAMIC}, None],)  # values, weights, lengths, offsets

# (values, lengths) over the keys f and g: batch 2 (the export's example), 1, 1 with no IDs, 0, 3, a large one
_BATCHES = [([1, 2, 3, 4, 5], [2, 1, 1, 1]), ([7, 8], [1, 1]), ([], [0, 0]), ([], []),
            ([1, 2, 3], [1, 0, 1, 1, 0, 0]), ([i % 50 for i in range(600)], [2] * 300)]


def _kjt(values: list[int], lengths: list[int], dtype: torch.dtype = torch.int64) -> KeyedJaggedTensor:
    return KeyedJaggedTensor(["f", "g"], L(values, dtype=dtype), lengths=L(lengths, dtype=dtype))


class _Sequence(torch.nn.Module):
    def __init__(self, offsets: bool = False) -> None:
        super().__init__()
        self.ec = recgo.EmbeddingCollection([recgo.EmbeddingConfig(100, 4, "t", ["f"]),
                                             recgo.EmbeddingConfig(50, 4, "u", ["g"])], seed=0)
        self.offsets = offsets

    def forward(self, k: KeyedJaggedTensor) -> tuple[torch.Tensor, ...]:
        out = self.ec(k)
        g = out["g"].offsets() if self.offsets else out["g"].lengths()
        return out["f"].values() * 2, out["f"].lengths(), out["g"].values() + 1, g


class _Pooled(torch.nn.Module):
    def __init__(self, dynamic: bool = False) -> None:
        super().__init__()
        table = recgo.DynamicConfig() if dynamic else None
        self.ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(100, 4, "t", ["f"], dynamic=table),
                                                 recgo.EmbeddingBagConfig(50, 3, "u", ["g"], pooling="mean")], seed=0)
        self.top = torch.nn.Linear(7, 2)

    def forward(self, k: KeyedJaggedTensor) -> torch.Tensor:
        return self.top(self.ebc(k).values())


def _same(got: object, want: object) -> None:
    got_t, want_t = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    assert len(got_t) == len(want_t)
    for g, w in zip(got_t, want_t):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_sequence_export_takes_a_batch_of_one_and_of_zero() -> None:
    """Exported with a dynamic batch from a batch of two, the program refused a batch of one or
    zero (``Guard failed: k._lengths.size()[0] >= 4``): slicing the lengths per key and the
    contiguity checks of the slices guarded the batch against one. (The outputs' ``offsets()``,
    computed in the caller's code, still guard it: see the next test.)"""
    model = _Sequence().eval()
    with torch.no_grad():
        ep = torch.export.export(model, (_kjt(*_BATCHES[0]),), dynamic_shapes=_DYN, strict=False)
        for values, lengths in _BATCHES:
            _same(ep.module()(_kjt(values, lengths)), model(_kjt(values, lengths)))
        # int32 IDs and lengths: the collection reads them as int64, as eager
        _same(ep.module()(_kjt([1, 2], [1, 1], torch.int32)), model(_kjt([1, 2], [1, 1])))


class _PositionWeighted(torch.nn.Module):
    """TorchRec's FeatureProcessedEmbeddingBagCollection (position weights) converted to recgo's."""

    def __init__(self) -> None:
        super().__init__()
        torchrec = pytest.importorskip("torchrec")
        from torchrec.modules.feature_processor_ import PositionWeightedModuleCollection
        from torchrec.modules.fp_embedding_modules import FeatureProcessedEmbeddingBagCollection

        cfg = [torchrec.EmbeddingBagConfig(num_embeddings=100, embedding_dim=4, name=n, feature_names=[f])
               for n, f in (("t", "f"), ("u", "g"))]
        fp = FeatureProcessedEmbeddingBagCollection(torchrec.EmbeddingBagCollection(tables=cfg, is_weighted=True),
                                                    PositionWeightedModuleCollection({"f": 5, "g": 5}))
        self.fp = recgo.from_torchrec(fp)

    def forward(self, k: KeyedJaggedTensor) -> torch.Tensor:
        return self.fp(k).values() * 1


@pytest.mark.parametrize("kind", ["pooled", "dynamic", "sequence", "position_weighted"])
def test_export_with_size_oblivious_shapes_takes_any_batch(kind: str) -> None:
    """A pooled output's batch is the lengths' size over the key count, and torch guards that
    quotient against one in every op that follows (TorchRec's collection gives the same program):
    exported under ``backed_size_oblivious``, as docs/embedding.md says, the program takes batches
    of one, zero and of many, and int32 inputs; a dynamic-ID table in eval admits nothing."""
    dynamic = kind == "dynamic"
    if kind == "sequence":
        model: torch.nn.Module = _Sequence(offsets=True)
    elif kind == "position_weighted":
        model = _PositionWeighted()
    else:
        model = _Pooled(dynamic)
    if dynamic:
        model(_kjt([1, 2, 10**12, 3, 4], [2, 1, 1, 1]))  # admits 1, 2 and 10**12
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad(), fx_config.patch(backed_size_oblivious=True):
        ep = torch.export.export(model, (_kjt(*_BATCHES[0]),), dynamic_shapes=_DYN, strict=False)
    with torch.no_grad():
        unseen = [([10**12, 5], [1, 1]), ([10**15], [1, 0])] if dynamic else []  # a row, and an ID without one
        for values, lengths in [*_BATCHES, *unseen]:
            _same(ep.module()(_kjt(values, lengths)), model(_kjt(values, lengths)))
        _same(ep.module()(_kjt([1, 2, 3], [2, 1], torch.int32)), model(_kjt([1, 2, 3], [2, 1])))
    after = model.state_dict()
    assert before.keys() == after.keys()
    for key, value in before.items():
        assert torch.equal(after[key], value), key  # no update, no admission


def test_compiled_eval_model_matches_eager_over_changing_batches() -> None:
    """torch.compile(fullgraph=True) of the eval model: one graph with the collections' ops in it,
    the eager outputs over batch sizes one, zero, two and large."""
    pooled, sequence = _Pooled().eval(), _Sequence().eval()
    cp = torch.compile(pooled, fullgraph=True, backend="eager")
    cs = torch.compile(sequence, fullgraph=True, backend="eager")
    with torch.no_grad():
        for values, lengths in _BATCHES[1:]:
            k = _kjt(values, lengths)
            _same(cp(k), pooled(k))
            _same(cs(k), sequence(k))


def test_a_torchrec_program_of_the_trained_model_serves_without_recgo(tmp_path) -> None:
    """recgo's own exported program runs only beside its live collection (the engine holds the
    tables); ``recgo.to_torchrec`` then ``torch.export`` gives a program with the weights in it and
    only aten ops (a process without recgo or TorchRec loads and runs it: checked by hand in session
    38; a subprocess here would cost seconds), giving recgo's eager outputs after save and load."""
    torchrec = pytest.importorskip("torchrec")

    class Served(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = _Pooled()

        def forward(self, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            return self.inner(torchrec.KeyedJaggedTensor(keys=["f", "g"], values=values, lengths=lengths))

    model = Served().eval()
    batches = [(L(v, dtype=torch.int64), L(n, dtype=torch.int64)) for v, n in _BATCHES if n]  # TorchRec's refuses batch 0
    with torch.no_grad():
        want = [model(v, n) for v, n in batches]
        dyn = ({0: torch.export.Dim.DYNAMIC}, {0: torch.export.Dim.DYNAMIC})
        with fx_config.patch(backed_size_oblivious=True):
            ep = torch.export.export(recgo.to_torchrec(model), batches[0], dynamic_shapes=dyn, strict=False)
    ops = {n.target.namespace for n in ep.graph.nodes if isinstance(n.target, torch._ops.OpOverload)}
    assert ops == {"aten"}, ops
    torch.export.save(ep, tmp_path / "p.pt2")
    loaded = torch.export.load(tmp_path / "p.pt2").module()
    for (v, n), w in zip(batches, want):
        torch.testing.assert_close(loaded(v, n), w, rtol=0, atol=0)


def test_state_dict_serves_through_plain_embedding_bags() -> None:
    """The trained tables as plain ``nn.EmbeddingBag``s (per table, the config's pooling): the
    collection's pooled output, a bag without IDs included."""
    model = _Pooled().eval()
    state = model.ebc.state_dict()
    bags = {name: torch.nn.EmbeddingBag.from_pretrained(state[f"embedding_bags.{name}.weight"], mode=mode)
            for name, mode in (("t", "sum"), ("u", "mean"))}
    values, lengths = L([1, 2, 3, 4, 5, 6]), L([2, 0, 1, 3, 0, 0])  # batch 3
    f_offsets, g_offsets = L([0, 2, 2]), L([0, 3, 3])
    plain = torch.cat([bags["t"](values[:3], f_offsets), bags["u"](values[3:], g_offsets)], dim=1)
    with torch.no_grad():
        want = model.ebc(KeyedJaggedTensor(["f", "g"], values, lengths=lengths)).values()
    torch.testing.assert_close(plain, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("sequence", [False, True])
def test_an_eval_program_admits_nothing_after_the_module_trains_again(sequence: bool) -> None:
    """The program keeps the mode it was exported in, as torch's programs do (dropout, batch norm):
    the op read the module's ``training`` flag when it ran, so an eval program served beside a model
    that went on training admitted every new ID into its dynamic table and advanced its clocks."""
    dynamic = recgo.DynamicConfig()
    if sequence:
        coll: torch.nn.Module = recgo.EmbeddingCollection([recgo.EmbeddingConfig(100, 4, "t", ["f"], dynamic=dynamic)], seed=0)
    else:
        coll = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(100, 4, "t", ["f"], dynamic=dynamic)], seed=0)

    model = FromRawTensors(coll)
    model(L([1, 2]), L([1, 1]))  # admits 1 and 2
    with torch.no_grad():
        ep = torch.export.export(model.eval(), (L([1, 2]), L([1, 1])), strict=False)
        want = model(L([77, 1]), L([1, 1]))  # 77 has no row: the eval default
        model.train()
        got = ep.module()(L([77, 1]), L([1, 1]))
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert coll.state_dict()["embedding_bags.t.dynamic_ids" if not sequence else "embeddings.t.dynamic_ids"].tolist() == [1, 2]


@pytest.mark.parametrize("sequence", [False, True])
def test_a_managed_collision_collection_exports_with_its_remapped_features(sequence: bool) -> None:
    """``from_torchrec``'s managed-collision module (dynamic-ID tables) returning its remapped
    features: the row lookup called the engine on the export's fake IDs and failed with torch's
    ``GuardOnDataDependentSymNode``; the program now gives eager's rows and outputs, and an ID
    without a row is -1 in eval."""
    from recgo.modules.managed import ManagedCollisionEmbeddingBagCollection, ManagedCollisionEmbeddingCollection

    if sequence:
        cfg = recgo.EmbeddingConfig(100, 4, "t", ["f"], dynamic=recgo.DynamicConfig())
        mc: torch.nn.Module = ManagedCollisionEmbeddingCollection(recgo.EmbeddingCollection([cfg], seed=1), {}, True)
    else:
        bag = recgo.EmbeddingBagConfig(100, 4, "t", ["f"], dynamic=recgo.DynamicConfig())
        mc = ManagedCollisionEmbeddingBagCollection(recgo.EmbeddingBagCollection([bag], seed=1), {}, True)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mc = mc

        def forward(self, k: KeyedJaggedTensor) -> tuple[torch.Tensor, torch.Tensor]:
            out, remapped = self.mc(k)
            return (out["f"].values() if sequence else out.values()) * 1, remapped.values()

    model = Model()
    model(KeyedJaggedTensor(["f"], L([5, 6, 7]), lengths=L([2, 1])))  # admits 5, 6, 7
    model.eval()
    k = KeyedJaggedTensor(["f"], L([7, 99, 5]), lengths=L([1, 2]))
    with torch.no_grad():
        ep = torch.export.export(model, (k,), strict=False)
        got, want = ep.module()(k), model(k)
    _same(got, want)
    assert want[1].tolist()[1] == -1
