"""TrainPipeline / DataPipeline: the pipelined schedule trains exactly like the serial one, the
collection uses the batch's prepared dedup, rank/world size come from the process group, and a
checkpoint (model + reader position) resumes to the same batch stream and the same final weights."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import recgo
from recgo.data import SyntheticField, SyntheticSource
from recgo.data import _prepared
from recgo.feature import Feature

SOURCE = SyntheticSource(2400, [SyntheticField("u", 300, 1.1), SyntheticField("h", 800, 0.9, 0.8, 4.0),
                                SyntheticField("i", 500, 1.0, 0.9)], dense=3, seed=5)
FEATURES = [Feature("u").hash().mod(200), Feature("h").truncate(6, keep="last").mod(400),
            Feature("i").fill_missing(0).mod(300)]


class Model(nn.Module):
    """A small DLRM-like model: pooled embeddings + bottom MLP on dense, concatenated, top MLP."""

    def __init__(self, fused: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.ebc = recgo.EmbeddingBagCollection([
            recgo.EmbeddingBagConfig(name="t_ui", embedding_dim=8, num_embeddings=300, feature_names=["u", "i"]),
            recgo.EmbeddingBagConfig(name="t_h", embedding_dim=8, num_embeddings=400, feature_names=["h"], pooling="mean"),
        ], optimizer=recgo.modules.optim.RowWiseAdagrad(lr=0.05) if fused else None)
        self.bottom = nn.Linear(3, 8)
        self.top = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, sparse: recgo.KeyedJaggedTensor, dense: torch.Tensor) -> torch.Tensor:
        pooled = self.ebc(sparse).values()
        return self.top(torch.cat([pooled, self.bottom(dense)], dim=1))


def trainer(depth: int, fused: bool = True, tables=None, **kw) -> recgo.TrainPipeline:
    model = Model(fused)
    params = [p for n, p in model.named_parameters() if not n.startswith("ebc")] if fused else list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.05)
    return recgo.TrainPipeline(model, opt, SOURCE, FEATURES, 100, depth=depth, tables=tables, **kw)


def weights(tp: recgo.TrainPipeline) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in tp.model.state_dict().items()}


@pytest.mark.parametrize("fused", [True, False])
def test_pipelined_training_equals_serial(fused: bool) -> None:
    serial = trainer(0, fused)
    losses0 = serial.run(progress=False)
    assert len(losses0) == 24
    for depth, threads in ((1, 1), (3, 2)):
        tp = trainer(depth, fused, threads=threads)
        assert tp.run(progress=False) == losses0
        for k, v in weights(serial).items():
            assert torch.equal(v, weights(tp)[k]), (depth, k)
    # The same model without the prepared dedup (the collection deduplicates itself) ends equal.
    plain = trainer(2, fused, tables=[])
    assert plain.data.tables == []
    assert plain.run(progress=False) == losses0
    for k, v in weights(serial).items():
        assert torch.equal(v, weights(plain)[k])
    assert losses0[-1] < losses0[0]


def test_collection_uses_prepared_dedup() -> None:
    tp = trainer(2)
    assert [t["name"] for t in tp.data.tables] == ["t_ui", "t_h"]
    batch = next(tp.data)
    kjt = batch.sparse
    assert _prepared.prepared_handle(kjt.values(), kjt.lengths()) is not None
    out = tp.model(kjt, batch.dense)
    assert out.shape == (100, 1)
    # Changing an ID in place makes the prepared dedup stale: the collection deduplicates the batch
    # itself, so the gradient is the one of a plain copy of the changed batch.
    kjt.values()[0] += 1
    twin = copy.deepcopy(tp.model)
    tp.model(kjt, batch.dense).sum().backward()  # the fused update runs in backward
    plain = recgo.KeyedJaggedTensor(kjt.keys(), kjt.values().clone(), lengths=kjt.lengths().clone())
    twin(plain, batch.dense).sum().backward()
    want = twin.state_dict()
    for k, v in tp.model.state_dict().items():
        assert torch.equal(v, want[k]), k
    # A copy of the batch is not the prepared memory: the ordinary forward ran.
    assert _prepared.prepared_handle(plain.values(), plain.lengths()) is None
    tp.close()


@pytest.mark.parametrize("depth", [0, 2])
def test_resume_equals_uninterrupted(tmp_path: Path, depth: int) -> None:
    full = trainer(depth, fused=True)
    stream = []
    for b in recgo.DataPipeline(SOURCE, FEATURES, 100, depth=depth):
        stream.append(b.sparse.values().clone())
    full.run(progress=False)
    first = trainer(depth, fused=True)
    first.run(steps=9, progress=False)
    ckpt = tmp_path / "ckpt.pt"
    first.save(ckpt)
    first.close()
    again = trainer(depth, fused=True)
    again.load(ckpt)
    assert again.steps == 9
    seen = []
    orig_next = again.data.__next__

    def spy():
        b = orig_next()
        seen.append(b.sparse.values().clone())
        return b

    losses = []
    while True:
        try:
            losses.append(float(again.progress(iter(spy, None))))
        except StopIteration:
            break
    assert len(seen) == 15
    for a, b in zip(seen, stream[9:]):
        assert torch.equal(a, b)
    for k, v in weights(full).items():
        assert torch.equal(v, weights(again)[k]), k


def test_rank_from_process_group(tmp_path: Path) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialized")
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        pipe = recgo.DataPipeline(SOURCE, FEATURES, 100, depth=1)
        assert (pipe.rank, pipe.world_size) == (0, 1)
        pipe.close()
        pipe = recgo.DataPipeline(SOURCE, FEATURES, 100, depth=1, rank=1, world_size=2)
        assert sum(b.labels.numel() for b in pipe) == 1200
    finally:
        dist.destroy_process_group()


def test_progress_bar_shows_rate(capsys: pytest.CaptureFixture[str]) -> None:
    tp = trainer(2)
    losses = tp.run(steps=12, progress=True)
    assert len(losses) == 12
    err = capsys.readouterr().err
    assert "samples_per_s" in err and "12/12" in err
    tp.close()


def test_progress_bar_shows_the_last_step_when_the_data_ends(capsys: pytest.CaptureFixture[str]) -> None:
    # run() to the end of the data: the bar's loss and rate are refreshed every ten steps, and the
    # data ends after a number of steps that is not a multiple of ten; the final step must be shown too
    tp = trainer(2)
    losses = tp.run(progress=True)
    assert len(losses) % 10 != 0
    err = capsys.readouterr().err
    assert f"loss={losses[-1]:.4f}" in err
    tp.close()


def test_bad_arguments() -> None:
    with pytest.raises(recgo.InvalidInputError, match="batch size 0"):
        recgo.DataPipeline(SOURCE, FEATURES, 0)
    with pytest.raises(recgo.InvalidInputError, match="is not an output feature"):
        recgo.DataPipeline(SOURCE, FEATURES, 10, tables=[{"name": "x", "keys": ["nope"]}])
    with pytest.raises(recgo.InvalidInputError, match="not a field of the source"):
        recgo.DataPipeline(SOURCE, [Feature("zzz").mod(3)], 10)
    with pytest.raises(recgo.InvalidInputError, match="must be a recgo.data source"):
        recgo.DataPipeline("file.txt", FEATURES, 10)  # type: ignore[arg-type]
    with pytest.raises(recgo.InvalidInputError, match="shard must be a ShardedEmbeddingBagCollection"):
        recgo.DataPipeline(SOURCE, FEATURES, 10, shard=Model(True).ebc)
    # world_size 0 read everything as one rank, and a float rank was truncated
    for rank, world, message in ((0, 0, "world_size must be ≥ 1"), (2, 2, "rank in \\[0, world_size\\)"),
                                 (0.0, 2, "rank must be an integer")):
        with pytest.raises(recgo.InvalidInputError, match=message):
            recgo.DataPipeline(SOURCE, FEATURES, 10, rank=rank, world_size=world)
    # a float op argument was truncated: mod(1.5) made every ID 0
    for op in (lambda f: f.mod(1.5), lambda f: f.truncate(2.7), lambda f: f.hash(seed=True),
               lambda f: f.fill_missing(0.5)):
        with pytest.raises(recgo.InvalidInputError, match="must be an integer"):
            op(Feature("u"))


class SharedModel(nn.Module):
    """Table t_ui serves "u" pooled (the EBC) and "i" as a sequence (the EC shares it), Adagrad fused."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.ebc = recgo.EmbeddingBagCollection(
            [recgo.EmbeddingBagConfig(name="t_ui", embedding_dim=8, num_embeddings=300, feature_names=["u"])],
            optimizer=recgo.modules.optim.Adagrad(lr=0.5), seed=1)
        self.ec = recgo.EmbeddingCollection(
            [recgo.EmbeddingConfig(name="t_ui", embedding_dim=8, num_embeddings=300, feature_names=["i"])], share=self.ebc)
        self.top = nn.Linear(16 + 3, 1)

    def forward(self, sparse: recgo.KeyedJaggedTensor, dense: torch.Tensor) -> torch.Tensor:
        ji = sparse.to_dict()["i"]
        seq = self.ec(recgo.KeyedJaggedTensor(["i"], ji.values(), lengths=ji.lengths()))["i"]
        B = dense.shape[0]
        last = torch.zeros(B, 8).index_add(0, torch.repeat_interleave(torch.arange(B), seq.lengths()), seq.values())
        return self.top(torch.cat([self.ebc(sparse).values(), last, dense], dim=1))


def test_shared_table_takes_one_merged_update_per_step() -> None:
    """TrainPipeline's step equals the same step run by hand inside ec.merged_update(), and differs from
    two separate Adagrad updates (so the scope is what the pipeline used)."""
    tp = recgo.TrainPipeline(SharedModel(), None, SOURCE, FEATURES, 100, depth=0)
    assert recgo.pipeline.shared_collections(tp.model) == [tp.model.ec]
    batch = next(recgo.DataPipeline(SOURCE, FEATURES, 100, depth=0))
    merged, separate = SharedModel(), SharedModel()
    with merged.ec.merged_update():
        recgo.pipeline.bce_loss(merged(batch.sparse, batch.dense), batch.labels).backward()
    recgo.pipeline.bce_loss(separate(batch.sparse, batch.dense), batch.labels).backward()
    tp.progress()
    got = tp.model.ebc.embedding_bags["t_ui"].weight.detach()
    torch.testing.assert_close(got, merged.ebc.embedding_bags["t_ui"].weight.detach(), rtol=0, atol=0)
    assert not torch.allclose(got, separate.ebc.embedding_bags["t_ui"].weight.detach())
    tp.close()


def test_optimizer_none_warns_about_parameters_nothing_would_train() -> None:
    with pytest.warns(RuntimeWarning, match=r"2 trainable parameters \(top.weight, top.bias\) are in no optimizer"):
        recgo.TrainPipeline(SharedModel(), None, SOURCE, FEATURES, 100, depth=0)
    model = SharedModel()
    model.top.requires_grad_(False)  # only the fused tables train: nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recgo.TrainPipeline(model, None, SOURCE, FEATURES, 100, depth=0)


class TwoTower(nn.Module):
    """Two recgo collections over the same batch; ``shared`` names both towers' tables alike while
    grouping other features, so the pipeline can deduplicate only the first's."""

    def __init__(self, shared: bool) -> None:
        super().__init__()
        torch.manual_seed(1)
        C, opt = recgo.EmbeddingBagConfig, recgo.modules.optim.SGD(lr=0.1)
        self.user = recgo.EmbeddingBagCollection([C(name="t", embedding_dim=4, num_embeddings=300,
                                                    feature_names=["u", "i"])], optimizer=opt)
        self.item = recgo.EmbeddingBagCollection([C(name="t" if shared else "t_h", embedding_dim=4, num_embeddings=400,
                                                    feature_names=["h"])], optimizer=opt)
        self.top = nn.Linear(2 * 4 + 4 + 3, 1)

    def forward(self, sparse: recgo.KeyedJaggedTensor, dense: torch.Tensor) -> torch.Tensor:
        return self.top(torch.cat([self.user(sparse).values(), self.item(sparse).values(), dense], dim=1))


@pytest.mark.parametrize("shared", [False, True])
def test_two_collections_train_from_prepared_batches(shared: bool) -> None:
    """TrainPipeline deduplicates every collection's tables (the first of two of one name); each
    collection takes what was prepared for it and deduplicates the rest, ending equal to a run in
    which both deduplicate themselves."""
    def run(tables: list | None) -> tuple[recgo.TrainPipeline, list[float]]:
        m = TwoTower(shared)
        tp = recgo.TrainPipeline(m, torch.optim.SGD(m.top.parameters(), lr=0.05), SOURCE, FEATURES, 100, depth=2,
                                 tables=tables)
        return tp, tp.run(progress=False)

    tp, losses = run(None)
    want = [{"name": "t", "keys": ["u", "i"]}] + ([] if shared else [{"name": "t_h", "keys": ["h"]}])
    assert tp.data.tables == want
    ref, ref_losses = run([])
    assert losses == ref_losses and len(losses) == 24
    want_state = ref.model.state_dict()
    for k, v in tp.model.state_dict().items():
        assert torch.equal(v, want_state[k]), k
    tp.close()
    ref.close()


def test_a_second_pass_over_an_ended_pipeline_raises() -> None:
    """A loop that stops early is continued by the next loop; a loop started after the data ended
    raises (an epoch loop over one DataPipeline used to run its later epochs with no step, silently)."""
    pipe = recgo.DataPipeline(SOURCE, FEATURES, 1000, depth=1)
    for _ in pipe:
        break
    assert len(list(pipe)) == 2  # 2400 rows: the two batches left
    with pytest.raises(StopIteration):
        next(pipe)
    with pytest.raises(recgo.InvalidInputError, match="build a new one for another epoch"):
        for _ in pipe:
            pass
    pipe.close()


def test_iter_each_step_runs_every_batch() -> None:
    """``iter(pipe)`` before the end is seen has no side effect: TorchRec's
    ``TrainPipelineSparseDist.progress(iter(pipe))`` called each step, and ``islice`` chunks taken
    until one is empty, see every batch and then the end. (A loop begun after the last batch was taken,
    before the end was seen, runs no step, as a plain iterator's does; one begun after the end was
    seen raises.)"""
    from itertools import islice

    pipe = recgo.DataPipeline(SOURCE, FEATURES, 600, depth=1)  # 2400 rows: four batches
    chunks = []
    while chunk := list(islice(pipe, 2)):
        chunks.append(len(chunk))
    assert chunks == [2, 2]
    pipe.close()


def test_a_position_resumes_only_its_own_rank_and_world() -> None:
    """A position carries the rank and world size it was taken by: resuming another rank from it, or
    another world size (which read other rows or repeated some, silently), raises."""
    pipes = [recgo.DataPipeline(SOURCE, FEATURES, 100, depth=0, rank=r, world_size=2) for r in range(2)]
    pos = [next(iter(p)) and p.position() for p in pipes]
    assert [(p["rank"], p["world_size"]) for p in pos] == [(0, 2), (1, 2)]
    again = recgo.DataPipeline(SOURCE, FEATURES, 100, depth=0, rank=1, world_size=2, position=pos[1])
    want = next(iter(pipes[1]))
    assert torch.equal(next(iter(again)).sparse.values(), want.sparse.values())  # its own: resumes
    for rank, world in ((1, 2), (0, 1), (0, 3)):
        with pytest.raises(recgo.InvalidInputError, match="position was taken by rank 0 of a world of 2"):
            recgo.DataPipeline(SOURCE, FEATURES, 100, depth=0, rank=rank, world_size=world, position=pos[0])
    for p in (*pipes, again):
        p.close()


@pytest.mark.parametrize("field, value, match", [
    ("row", None, '"row" is missing or null'), ("file", None, '"file" is missing or null'),
    ("skipped", -1, "negative"), ("global", 2**62, None), ("offset", -5, "byte offset -5"),
])
def test_a_forged_position_is_refused(field: str, value: object, match: str | None) -> None:
    """A position field that is null read as 0 (resuming at the data's start), and counts no source
    gives (negative, a skipped count past the rows read) were taken: refused by name, the running
    pipeline left as it was."""
    pipe = recgo.DataPipeline(SOURCE, FEATURES, 100, depth=0, rank=0, world_size=1)
    next(iter(pipe))
    good = pipe.state_dict()
    pos = dict(good["position"])
    if match is None:  # more rows in all files than in this one: fine; fewer is not
        pos[field], pos["row"] = 50, 60
        match = "60 rows read in the file but 50 in all files"
    else:
        pos[field] = value
    with pytest.raises(recgo.InvalidInputError, match=match):
        pipe.load_state_dict({"position": pos})
    want = next(iter(recgo.DataPipeline(SOURCE, FEATURES, 100, depth=0, position=good["position"])))
    assert torch.equal(next(iter(pipe)).sparse.values(), want.sparse.values())
    pipe.close()


def test_load_state_dict_restarts_an_ended_pipeline_and_a_refused_one_leaves_it_running() -> None:
    """load_state_dict after the pass ended resumes from the position (a loop over it raised "delivered
    all its data"); one that is refused (another rank's position) used to close the pipeline first."""
    pipe = recgo.DataPipeline(SOURCE, FEATURES, 1000, depth=1)
    first = pipe.state_dict()
    want = [b.sparse.values().clone() for b in pipe]  # the whole pass
    pipe.load_state_dict(first)
    assert [torch.equal(b.sparse.values(), w) for b, w in zip(pipe, want)] == [True] * len(want)
    pipe.load_state_dict(first)
    other = recgo.DataPipeline(SOURCE, FEATURES, 1000, depth=0, rank=1, world_size=2)
    next(other)
    with pytest.raises(recgo.InvalidInputError, match="position was taken by rank 1 of a world of 2"):
        pipe.load_state_dict(other.state_dict())
    with pytest.raises(recgo.InvalidInputError, match="expected {'position': ...}"):
        pipe.load_state_dict({})
    assert torch.equal(next(pipe).sparse.values(), want[0])  # still running, from where it was
    for p in (pipe, other):
        p.close()


def test_a_torchrec_dlrm_trains_with_its_own_argument_order() -> None:
    """TorchRec's DLRM takes (dense_features, sparse_features): TrainPipeline called it (sparse, dense)
    and torch raised inside a Linear ("must be Tensor, not KeyedJaggedTensor"). It now reads the order
    from the forward's parameter names; ``forward=`` overrides it."""
    tr = pytest.importorskip("torchrec")
    from torchrec.models.dlrm import DLRM

    tables = [tr.EmbeddingBagConfig(name="t_ui", embedding_dim=8, num_embeddings=300, feature_names=["u", "i"]),
              tr.EmbeddingBagConfig(name="t_h", embedding_dim=8, num_embeddings=400, feature_names=["h"])]
    torch.manual_seed(0)
    model = recgo.from_torchrec(DLRM(embedding_bag_collection=tr.EmbeddingBagCollection(tables=tables),
                                     dense_in_features=3, dense_arch_layer_sizes=[16, 8], over_arch_layer_sizes=[8, 1]),
                                optimizer=recgo.modules.optim.Adagrad(lr=0.05))
    twin = copy.deepcopy(model)
    dense = [p for n, p in model.named_parameters() if "embedding_bag" not in n]
    losses = recgo.TrainPipeline(model, torch.optim.SGD(dense, lr=0.05), SOURCE, FEATURES, 100).run(3, progress=False)
    twin_dense = [p for n, p in twin.named_parameters() if "embedding_bag" not in n]
    swapped = recgo.TrainPipeline(twin, torch.optim.SGD(twin_dense, lr=0.05), SOURCE, FEATURES, 100,
                                  forward=lambda m, b: m(dense_features=b.dense, sparse_features=b.sparse))
    assert swapped.run(3, progress=False) == losses and len(losses) == 3


def test_a_feature_two_tables_list_trains_through_the_pipeline() -> None:
    """The pipeline deduplicates a batch key in one group only, so a collection with a feature two tables
    list was refused ("feature is in tables ..."); the key now goes with the first table, the other
    deduplicates itself, and training equals a run without prepared dedups."""
    def model() -> nn.Module:
        return nn.ModuleDict({"ebc": recgo.EmbeddingBagCollection([
            recgo.EmbeddingBagConfig(name="t_ui", embedding_dim=4, num_embeddings=300, feature_names=["u", "i"]),
            recgo.EmbeddingBagConfig(name="t_u2", embedding_dim=4, num_embeddings=300, feature_names=["u"])],
            optimizer=recgo.modules.optim.SGD(lr=0.1), seed=3)})

    assert recgo.pipeline.tables_of(model()) == [{"name": "t_ui", "keys": ["u", "i"]}]
    runs = []
    for tables in (None, []):  # prepared dedups, none
        tp = recgo.TrainPipeline(model(), None, SOURCE, FEATURES, 100, tables=tables,
                                 forward=lambda m, b: m["ebc"](b.sparse).values().sum(1), loss_fn=lambda o, y: o.pow(2).sum())
        runs.append((tp.run(4, progress=False), {k: v.clone() for k, v in tp.model.state_dict().items()}))
        tp.close()
    assert runs[0][0] == runs[1][0]
    for k, v in runs[0][1].items():
        assert torch.equal(v, runs[1][1][k]), k


def test_shuffle_delivers_every_row_once_in_a_seeded_order_and_resumes_exactly() -> None:
    """shuffle= reads windows of rows and hands each out in a seeded order (there was no shuffling):
    every row once, not in file order, the same for the same seed; a position taken inside a window
    resumes to exactly the rest, and an unshuffled pipeline refuses it."""
    plain = torch.cat([b.dense for b in recgo.DataPipeline(SOURCE, FEATURES, 100, depth=0)])
    pipe = recgo.DataPipeline(SOURCE, FEATURES, 100, depth=2, shuffle=500, seed=3)
    head = [next(pipe) for _ in range(7)]  # 700 rows: inside the second window
    state = pipe.state_dict()
    rest = list(pipe)
    got = torch.cat([b.dense for b in head + rest])
    assert got.shape == plain.shape and not torch.equal(got, plain)
    assert torch.equal(torch.unique(got, dim=0), torch.unique(plain, dim=0)) and len(torch.unique(got, dim=0)) == len(got)
    again = recgo.DataPipeline(SOURCE, FEATURES, 100, depth=0, shuffle=500, seed=3)
    assert torch.equal(torch.cat([b.dense for b in again]), got)
    again.load_state_dict(state)
    resumed = list(again)
    assert len(resumed) == len(rest)
    for a, b in zip(resumed, rest):
        assert torch.equal(a.dense, b.dense) and torch.equal(a.sparse.values(), b.sparse.values())
    with pytest.raises(recgo.InvalidInputError, match="shuffled in windows of 500 rows"):
        recgo.DataPipeline(SOURCE, FEATURES, 100, depth=0, position=state["position"])
    for p in (pipe, again):
        p.close()


def test_train_pipeline_load_refuses_a_shuffled_checkpoint_before_touching_the_model(tmp_path: Path) -> None:
    """TrainPipeline.load loaded the model and optimizer first, then the position: a position the
    pipeline refuses (here, one of a shuffled run into an unshuffled trainer) left the weights
    overwritten and the stream at the start."""
    shuffled = trainer(1, shuffle=500, seed=3)
    shuffled.run(3, progress=False)
    shuffled.save(tmp_path / "ck")
    plain = trainer(1)
    before = weights(plain)
    with pytest.raises(recgo.InvalidInputError, match="shuffled in windows of 500 rows"):
        plain.load(tmp_path / "ck")
    assert all(torch.equal(v, before[k]) for k, v in plain.model.state_dict().items())
    resumed = trainer(1, shuffle=500, seed=3)
    resumed.load(tmp_path / "ck")
    assert resumed.steps == 3
    for p in (shuffled, plain, resumed):
        p.close()


@pytest.mark.parametrize("bad", [(0, 1, 2), (3, 5), tuple(range(1, 40, 4))])
def test_shuffled_skip_bad_positions_resume_exactly(tmp_path: Path, bad: tuple[int, ...]) -> None:
    """A position taken inside a shuffle window names where the window began (global) but counts the
    rows the window skipped: with malformed rows in the first window it was refused when given back
    ("2 rows skipped of 0 read"). From every batch's position the pipeline resumes to exactly the
    rest, in the same order, and ends with the uninterrupted run's skipped count."""
    from recgo.data import Column, CSVSource
    path = tmp_path / "rows.csv"
    path.write_text("label,d,id\n" + "".join(f"{i % 2},{'bad' if i in bad else float(i)},{i}\n" for i in range(40)))

    def pipeline(**kw):
        source = CSVSource([str(path)], [Column("label", "label"), Column("d", "dense"), Column("id", "sparse", "int")],
                           skip_bad=True)
        return recgo.DataPipeline(source, [Feature("id")], 4, depth=0, shuffle=10, seed=1, **kw)

    with pipeline() as pipe:
        states, batches = [pipe.state_dict()], []
        for b in pipe:
            batches.append(b.sparse["id"].values().tolist())
            states.append(pipe.state_dict())
        skipped = pipe.stats()["skipped"]
    assert skipped == len(bad) and sum(map(len, batches)) == 40 - len(bad)
    assert any(s["position"]["skipped"] > s["position"]["global"] for s in states)  # the refused kind
    for i, state in enumerate(states):
        with pipeline(position=state["position"]) as again:
            assert [b.sparse["id"].values().tolist() for b in again] == batches[i:], i
            assert again.stats()["skipped"] == skipped, i
        with pipeline() as again:
            again.load_state_dict(state)
            assert [b.sparse["id"].values().tolist() for b in again] == batches[i:], i
