"""ShardedEmbeddingCollection (sequence lookups over torch.distributed) on a world of 2 gloo ranks:
hash, table-wise, row-wise and data-parallel tables, flat and hierarchical exchange, equal the
single-process recgo.EmbeddingCollection on the same global batch (rows per lookup, gradients, weights
after several fused or torch-optimizer steps, 1e-6 relative); checkpoints; bad input. One spawned world
runs every case."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import pytest
import torch
import torch.distributed as dist
from torch import nn

import recgo
from recgo.modules import optim
from sharded_batches import local_slice
from sharded_checks import check_update, close, sequence_losses
from sharded_shared import shared_feature_case, shared_feature_pipeline_case
from spawned import spawn

WORLD, B_LOCAL, STEPS = 2, 5, 3
SHARDINGS: list[Any] = ["hash", "table_wise",
                        {"item": "row_wise", "cat": "hash", "user": "data_parallel"}]
OPTS: list[Any] = [None, optim.SGD(lr=0.3), optim.Adagrad(lr=0.2)]


def configs() -> list[recgo.EmbeddingConfig]:
    C = recgo.EmbeddingConfig
    return [C(61, 4, "item", ["hist_item", "target_item"]), C(23, 8, "cat", ["hist_cat"]), C(9, 3, "user", ["user_id"])]


def global_batch(step: int) -> recgo.KeyedJaggedTensor:
    """World × local samples: skewed IDs (many repeats within and across ranks), empty histories."""
    g = torch.Generator().manual_seed(500 + step)
    B = WORLD * B_LOCAL
    keys, vals, lens = [], [], []
    for cfg in configs():
        for f in cfg.feature_names:
            ln = torch.randint(0, 6, (B,), generator=g) if f.startswith("hist") else torch.ones(B, dtype=torch.int64)
            keys.append(f)
            vals.append((torch.rand(int(ln.sum()), generator=g) ** 3 * cfg.num_embeddings).long())
            lens.append(ln)
    return recgo.KeyedJaggedTensor(keys, torch.cat(vals), lengths=torch.cat(lens))


def rank_slice(kjt: recgo.KeyedJaggedTensor, rank: int) -> tuple[recgo.KeyedJaggedTensor, dict[str, slice]]:
    """Samples [rank·local, (rank+1)·local) of every feature, and each key's value range in the global batch."""
    return local_slice(kjt, rank, B_LOCAL)


def _cases(rank: int, ckpt: str) -> dict[str, Any]:
    from recgo.distributed import ShardedEmbeddingCollection
    from recgo.errors import InvalidInputError, NotFoundError

    cfgs = configs()
    checked = 0
    for mode, nodes in (("flat", 1), ("hierarchical", 2)):
        for sharding in SHARDINGS:
            for opt in OPTS:
                what = f"{mode} {sharding} {opt}"
                ref = recgo.EmbeddingCollection(cfgs, optimizer=opt, seed=7)
                sh = ShardedEmbeddingCollection.from_ec(ref, sharding, mode=mode, nodes=nodes, timeout=60)
                ids = {c.name: sh.local_ids(c.name) for c in cfgs}
                torch_opts = None
                if opt is None:
                    torch_opts = [torch.optim.Adagrad(m.parameters(), lr=0.2) for m in (ref, sh)]
                for step in range(STEPS):
                    kjt = global_batch(step)
                    mine, ranges = rank_slice(kjt, rank)
                    want, got = ref(kjt), sh(mine)
                    assert list(got) == kjt.keys()
                    loss_ref, loss = sequence_losses(want, got, mine, ranges, step, what)
                    loss_ref.backward()
                    loss.backward()
                    check_update(sh.embeddings, ref.embeddings, cfgs, ids, torch_opts, f"{what} step {step}")
                    checked += 1
                    t = sh.traffic()
                    assert t["requested"] > 0 and t["pooled_vecs"] == 0  # rows, never owner partial sums
    # state_dict names, checkpoint round trip (save on 2 ranks, load into a fresh collection)
    ref = recgo.EmbeddingCollection(cfgs, optimizer=optim.Adagrad(lr=0.2), seed=3)
    sh = ShardedEmbeddingCollection.from_ec(ref, "hash", timeout=60)
    assert all(k.startswith("embeddings.") for k in sh.state_dict())
    mine, _ = rank_slice(global_batch(0), rank)
    sum(v.values().sum() for v in sh(mine).values()).backward()
    sh.save(ckpt)
    dist.barrier()
    other = ShardedEmbeddingCollection(cfgs, "hash", optimizer=optim.Adagrad(lr=0.2), seed=11, timeout=60)
    other.load(ckpt)
    for c in cfgs:
        assert torch.equal(other.embeddings[c.name].weight, sh.embeddings[c.name].weight)
        assert torch.equal(other.embeddings[c.name].optimizer_state, sh.embeddings[c.name].optimizer_state)
    with torch.no_grad():
        out = sh(mine)
        assert not out["hist_item"].values().requires_grad
        # a key no table reads (one KJT feeding a pooled and a sequence collection) is ignored, and
        # the outputs come in config order whatever the KJT's
        n = mine.stride()
        extra = recgo.KeyedJaggedTensor(["user", *reversed(mine.keys())],
                                        torch.cat([torch.full((n,), 10**9), *[mine[k].values() for k in reversed(mine.keys())]]),
                                        lengths=torch.cat([torch.ones(n, dtype=torch.int64),
                                                           *[mine[k].lengths() for k in reversed(mine.keys())]]))
        got = sh(extra)
        assert list(got) == [f for c in cfgs for f in c.feature_names]
        assert all(torch.equal(got[k].values(), out[k].values()) for k in out)
    # bad input, on every rank alike (so no rank waits in an exchange)
    errors = {}
    bad = {"unknown": recgo.KeyedJaggedTensor(["nope"], torch.tensor([1]), lengths=torch.tensor([1])),
           "missing": recgo.KeyedJaggedTensor(["hist_item"], torch.tensor([1]), lengths=torch.tensor([1])),
           "range": recgo.KeyedJaggedTensor(mine.keys(), torch.cat([torch.tensor([61]), mine.values()[1:]]),
                                            lengths=mine.lengths()),
           "negative": recgo.KeyedJaggedTensor(mine.keys(), torch.cat([torch.tensor([-1]), mine.values()[1:]]),
                                               lengths=mine.lengths())}
    for name, kjt in bad.items():
        try:
            sh(kjt)
        except (InvalidInputError, NotFoundError) as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"
    for kw in ({"owner_pooling": "pooled"}, {"wire_dtype": "fp16"}):
        try:
            ShardedEmbeddingCollection(cfgs, "hash", **kw)
        except InvalidInputError as exc:
            errors[next(iter(kw))] = str(exc)
    sh.check_peers(30)  # every rank is still in step after the refused batches
    return {"checked": checked, "errors": errors, "shard_model": _shard_model_case(rank),
            "state_dict": _state_dict_case(rank, os.path.dirname(ckpt))}


class _Model(nn.Module):
    """A small BST-shaped model: the sequences summed per sample, the pooled user row, the user's row of
    a torch ``nn.EmbeddingBag`` with sparse gradients (a dense-part parameter under DDP), an MLP."""

    def __init__(self, opt: Any) -> None:
        super().__init__()
        self.user = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(9, 3, "user", ["user_id"])], optimizer=opt,
                                                 seed=5)
        self.seq = recgo.EmbeddingCollection([c for c in configs() if c.name != "user"], optimizer=opt, seed=6)
        self.torch_user = nn.EmbeddingBag(9, 2, mode="sum", sparse=True)
        self.mlp = nn.Sequential(nn.Linear(4 + 4 + 8 + 3 + 2, 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, seq: recgo.KeyedJaggedTensor, user: recgo.KeyedJaggedTensor) -> torch.Tensor:
        B = user.lengths().numel()
        parts = []
        for k, jt in self.seq(seq).items():
            rows = torch.repeat_interleave(torch.arange(B), jt.lengths())
            parts.append(torch.zeros(B, jt.values().shape[1]).index_add(0, rows, jt.values()))
        mine = self.torch_user(user.values(), user.offsets()[:-1])
        return self.mlp(torch.cat([*parts, self.user(user).values(), mine], 1)).squeeze(1)


def _split(kjt: recgo.KeyedJaggedTensor) -> tuple[recgo.KeyedJaggedTensor, recgo.KeyedJaggedTensor]:
    """The sequence features and the user feature as two batches (a sharded collection takes its own keys)."""
    keys = kjt.keys()
    seq = [i for i, k in enumerate(keys) if k != "user_id"]
    return kjt.permute(seq), kjt.permute([keys.index("user_id")])


def _shard_model_case(rank: int) -> dict[str, Any]:
    """shard_model on a model built on the meta device: its collections' shards hold the seeded rows,
    its MLP is materialised and the same on both ranks; with the reference's dense weights, two steps
    on each rank's half of the global batch (per-rank mean loss) equal one process on the global batch,
    the sparse gradients of its torch embedding too, all-reduced on one gloo thread."""
    from recgo.distributed import ShardedEmbeddingBagCollection, ShardedEmbeddingCollection, shard_model

    opt = optim.SGD(lr=0.5)
    torch.manual_seed(rank)  # the ranks' dense draws differ: DDP must start them from rank 0's
    with torch.device("meta"):
        meta = _Model(opt)
    model = shard_model(meta, "hash", timeout=60)
    inner = model.module
    assert isinstance(inner.user, ShardedEmbeddingBagCollection) and isinstance(inner.seq, ShardedEmbeddingCollection)
    torch.manual_seed(0)
    ref = _Model(opt)  # the same on both ranks
    start = {}
    for name, sh, table in (("user", inner.user.embedding_bags, ref.user.embedding_bags),
                            ("item", inner.seq.embeddings, ref.seq.embeddings), ("cat", inner.seq.embeddings, ref.seq.embeddings)):
        ids = (inner.user if name == "user" else inner.seq).local_ids(name)
        start[name] = torch.equal(sh[name].weight.detach(), table[name].weight.detach()[ids])
    threads = model.process_group._get_backend(torch.device("cpu")).options._threads
    dense_of = lambda m: [*m.mlp.parameters(), *m.torch_user.parameters()]  # noqa: E731
    first = [p.detach().clone() for p in inner.mlp.parameters()]
    gathered: list[Any] = [None] * WORLD
    dist.all_gather_object(gathered, first)
    same_dense = all(torch.equal(a, b) for a, b in zip(gathered[0], gathered[1]))
    with torch.no_grad():
        for a, b in zip(dense_of(inner), dense_of(ref)):
            a.copy_(b)
    dense = [torch.optim.SGD(dense_of(m), lr=0.5) for m in (inner, ref)]
    for step in range(2):
        kjt = global_batch(step)
        y = torch.rand(WORLD * B_LOCAL, generator=torch.Generator().manual_seed(step)).round()
        loss = nn.functional.binary_cross_entropy_with_logits(ref(*_split(kjt)), y)
        loss.backward()
        mine, _ = rank_slice(kjt, rank)
        lo = rank * B_LOCAL
        nn.functional.binary_cross_entropy_with_logits(model(*_split(mine)), y[lo:lo + B_LOCAL]).backward()
        sparse = inner.torch_user.weight.grad.is_sparse
        for o in dense:
            o.step()
            o.zero_grad()
    after = {}
    for name in ("user", "item", "cat"):
        col = inner.user if name == "user" else inner.seq
        mods = col.embedding_bags
        table = (ref.user.embedding_bags if name == "user" else ref.seq.embeddings)[name].weight.detach()
        close(mods[name].weight.detach(), table[col.local_ids(name)], f"shard_model {name} after 2 steps")
        after[name] = True
    for a, b in zip(dense_of(inner), dense_of(ref)):
        close(a.detach(), b.detach(), "shard_model dense after 2 steps")
    return {"start": start, "same_dense": same_dense, "moved": not torch.equal(first[0], ref.mlp[0].weight), "after": after,
            "threads": threads, "sparse": sparse}


def _state_dict_case(rank: int, folder: str) -> dict[str, Any]:
    """A rank's own state_dict loads back and another rank's is refused; torch.distributed.checkpoint
    saves every rank's shard (the keys name the rank, so it does not take them for replicated tensors
    and keep one rank's) and loads each rank's own rows back."""
    import torch.distributed.checkpoint as dcp

    from recgo.distributed import ShardedEmbeddingBagCollection
    from recgo.errors import InvalidInputError

    cfgs = [recgo.EmbeddingBagConfig(40, 4, "t", ["f"])]  # row-wise on 2 ranks: equal shard shapes
    build = lambda seed: ShardedEmbeddingBagCollection(cfgs, "row_wise", optimizer=optim.SGD(lr=0.1),  # noqa: E731
                                                      seed=seed, timeout=60)
    sh = build(1)
    torch.save(sh.state_dict(), os.path.join(folder, f"sd-{rank}.pt"))
    dcp.save(sh.state_dict(), checkpoint_id=os.path.join(folder, "dcp"))
    dist.barrier()
    out: dict[str, Any] = {}
    for whose in range(WORLD):
        other = build(2)
        try:
            other.load_state_dict(torch.load(os.path.join(folder, f"sd-{whose}.pt")))
            out[f"own_{whose}"] = torch.equal(other.embedding_bags["t"].weight, sh.embedding_bags["t"].weight)
        except InvalidInputError as exc:
            out[f"own_{whose}"] = str(exc)
    other = build(2)
    sd = other.state_dict()
    out["keys"] = list(sd)
    dcp.load(sd, checkpoint_id=os.path.join(folder, "dcp"))
    try:
        other.load_state_dict(sd)
        out["dcp"] = torch.equal(other.embedding_bags["t"].weight, sh.embedding_bags["t"].weight)
    except InvalidInputError as exc:
        out["dcp"] = str(exc)
    return out


# Per step, the keys each rank's loss uses: step 0 leaves the table-wise "cat" out on both ranks, step 1
# the hash-sharded "item" (and rank 1 the data-parallel "user"), step 2 uses every table somewhere.
USES = [{0: ("hist_item", "target_item", "user_id"), 1: ("hist_item", "target_item", "user_id")},
        {0: ("hist_cat", "user_id"), 1: ("hist_cat",)},
        {0: ("target_item",), 1: ("hist_item", "hist_cat", "user_id")}]


def _partial_loss(out: Any, keys: Sequence[str], ranges: Mapping[str, slice] | None, seed: int) -> torch.Tensor:
    """A random projection of the outputs of ``keys`` (of this rank's ``ranges`` of the global batch's)."""
    loss = torch.zeros(())
    for i, k in enumerate(keys):
        rows = out[k].values()[ranges[k]] if ranges is not None else out[k].values()
        loss = loss + (rows * torch.randn(rows.shape, generator=torch.Generator().manual_seed(seed + i))).sum()
    return loss


def _unused_case(rank: int) -> dict[str, Any]:
    """A table whose outputs no rank's loss uses takes no step (Adam with weight decay would move and
    decay its rows and count a step), as in the single-process collection and torch's optimizers; one
    that any rank uses is stepped on every rank. Rows, optimizer state and step counters equal the
    single-process collection's on the global loss, fused and with torch's Adam."""
    from recgo.distributed import ShardedEmbeddingCollection

    cfgs = configs()
    out: dict[str, Any] = {}
    for mode, nodes in (("flat", 1), ("hierarchical", 2)):
        for opt in (optim.Adam(lr=0.1, weight_decay=0.01), None):
            what = f"unused {mode} {'fused' if opt else 'torch'}"
            ref = recgo.EmbeddingCollection(cfgs, optimizer=opt, seed=9)
            sh = ShardedEmbeddingCollection.from_ec(ref, {"item": "hash", "cat": "table_wise", "user": "data_parallel"},
                                                    mode=mode, nodes=nodes, timeout=60)
            ids = {c.name: sh.local_ids(c.name) for c in cfgs}
            torch_opts = None if opt else [torch.optim.Adam(m.parameters(), lr=0.1, weight_decay=0.01) for m in (ref, sh)]
            unchanged = []
            for step, use in enumerate(USES):
                before = {c.name: ref.embeddings[c.name].weight.detach().clone() for c in cfgs}
                kjt = global_batch(step)
                want = ref(kjt)
                loss_ref = sum(_partial_loss(want, use[r], rank_slice(kjt, r)[1], 100 * step + 10 * r)
                               for r in range(WORLD))
                mine, _ = rank_slice(kjt, rank)
                loss = _partial_loss(sh(mine), use[rank], None, 100 * step + 10 * rank)
                loss_ref.backward()
                loss.backward()
                for o in torch_opts or []:
                    o.step()
                    o.zero_grad()
                for c in cfgs:
                    a, b = sh.embeddings[c.name], ref.embeddings[c.name]
                    close(a.weight.detach(), b.weight.detach()[ids[c.name]], f"{what} step {step} weights {c.name}")
                    if opt is not None:
                        close(a.optimizer_state, b.optimizer_state[ids[c.name]], f"{what} step {step} state {c.name}")
                        assert int(a.optimizer_step) == int(b.optimizer_step), f"{what} step {step} {c.name}"
                    if torch.equal(b.weight.detach(), before[c.name]):
                        unchanged.append((step, c.name))
            out[what] = unchanged
    return out


def _groups_case(rank: int) -> dict[str, Any]:
    """Collections built one after another reuse their process groups: each used to create its own,
    kept until exit (5 file descriptors and 3 threads per flat collection, 14 and 9 per hierarchical
    one). Counted after one collection of each mode, over six more."""
    from recgo.distributed import ShardedEmbeddingBagCollection, ShardedEmbeddingCollection
    from recgo.errors import InvalidInputError

    def build(i: int) -> None:
        mode = ("flat", "hierarchical")[i % 2]
        cls = (ShardedEmbeddingBagCollection, ShardedEmbeddingCollection)[i // 2 % 2]
        cfg = (recgo.EmbeddingBagConfig if cls is ShardedEmbeddingBagCollection else recgo.EmbeddingConfig)(20, 4, "t", ["f"])
        sh = cls([cfg], "hash", mode=mode, nodes=2 if mode == "hierarchical" else 1, optimizer=optim.SGD(lr=0.1),
                 timeout=60)
        out = sh(recgo.KeyedJaggedTensor(["f"], torch.tensor([rank, 3]), lengths=torch.tensor([1, 1])))
        (out.values() if cls is ShardedEmbeddingBagCollection else out["f"].values()).sum().backward()

    def count() -> tuple[int, int]:
        threads = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("Threads:"))
        return len(os.listdir("/proc/self/fd")), threads

    build(0)
    build(1)
    before = count()
    for i in range(6):
        build(i)
    after = count()
    # ranks given other timeouts are refused by name, and their caches stay in step for the next build
    # (keyed by each rank's own timeout, the next build's cache hit on one rank and miss on the other)
    cfg = [recgo.EmbeddingBagConfig(20, 4, "t", ["f"])]
    try:
        ShardedEmbeddingBagCollection(cfg, "hash", timeout=30 + rank, optimizer=optim.SGD(lr=0.1))
        mismatch = "built"
    except InvalidInputError as exc:
        mismatch = str(exc)
    ShardedEmbeddingBagCollection(cfg, "hash", timeout=31, optimizer=optim.SGD(lr=0.1))
    return {"before": before, "after": after, "mismatch": mismatch}


def _need_indices_case(rank: int) -> dict[str, Any]:
    """``need_indices`` carried over by ``from_ec`` (and so ``shard_model``): each output's weights are its
    feature's IDs, as the unsharded collection's, a feature two tables read and a TorchRec batch included."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TorchRecKJT

    from recgo.distributed import ShardedEmbeddingCollection
    from recgo.errors import InvalidInputError

    C = recgo.EmbeddingConfig
    ref = recgo.EmbeddingCollection([C(20, 4, "a", ["x", "y"]), C(10, 3, "b", ["x"])], need_indices=True, seed=4)
    sh = ShardedEmbeddingCollection.from_ec(ref, "hash", timeout=60)
    ids = torch.tensor([3, 3, 7 + rank, 1, 9, 0], dtype=torch.int64)
    lengths = torch.tensor([2, 1, 0, 1, 2, 0])
    batches = [recgo.KeyedJaggedTensor(["y", "x"], ids, lengths=lengths),
               TorchRecKJT(keys=["y", "x"], values=ids.int(), lengths=lengths.int())]  # kept int32, as TorchRec's
    weights = []
    for kjt in batches:
        want, got = ref(kjt), sh(kjt)
        assert list(got) == list(want) == ["x@a", "y", "x@b"]
        for k in want:
            assert torch.equal(got[k].values(), want[k].values()), k
            assert torch.equal(got[k].lengths(), want[k].lengths()), k
            assert torch.equal(got[k].weights(), want[k].weights()), k
            assert got[k].lengths().dtype == want[k].lengths().dtype == kjt.lengths().dtype, k
            assert got[k].weights().dtype == want[k].weights().dtype == kjt.values().dtype, k
        weights.append({k: got[k].weights().tolist() for k in got})
    try:
        ShardedEmbeddingCollection([C(20, 4, "a", ["x"])], "hash", need_indices=1, timeout=60)
        bad = "built"
    except InvalidInputError as exc:
        bad = str(exc)
    return {"flag": sh.need_indices(), "weights": weights, "bad": bad}


def _world(rank: int, world: int, ckpt: str) -> dict[str, Any]:
    torch.set_num_threads(1)
    return {**_cases(rank, ckpt), "unused": _unused_case(rank), "groups": _groups_case(rank), "shared": shared_feature_case(rank, world),
            "shared_pipeline": shared_feature_pipeline_case(rank, world), "need_indices": _need_indices_case(rank)}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Path]:
    """Every case of this module, run once on a spawned world of WORLD ranks."""
    tmp = tmp_path_factory.mktemp("sequence-world")
    return spawn(_world, WORLD, tmp, str(tmp / "ck")), tmp


def test_sharded_sequence_equals_one_process(world: tuple[list[dict[str, Any]], Path]) -> None:
    results, tmp_path = world
    for r, res in enumerate(results):
        assert "error" not in res, f"rank {r}: {res['error']}"
        assert res["checked"] == 2 * len(SHARDINGS) * len(OPTS) * STEPS
        errs = res["errors"]
        assert "lacks features" in errs["unknown"] and "nope" in errs["unknown"]  # the keys it had
        assert "InvalidInputError" in errs["missing"] and "lacks features" in errs["missing"]
        assert "InvalidInputError" in errs["range"] and "61" in errs["range"]
        assert "InvalidInputError" in errs["negative"] and "-1" in errs["negative"]
        assert "pooled lookups only" in errs["owner_pooling"] and "pooled lookups only" in errs["wire_dtype"]
        got = res["shard_model"]
        assert all(got["start"].values()) and got["same_dense"] and got["moved"], got
        assert got["threads"] == 1 and got["sparse"], got  # the dense part's sparse gradients on one gloo thread
        sd = res["state_dict"]
        assert sd[f"own_{r}"] is True and sd["dcp"] is True, sd  # its own state dict; DCP saved every rank's
        assert "holds table 't''s shard of rank" in sd[f"own_{1 - r}"], sd
        assert sd["keys"] == [f"embedding_bags.t.rank{r}_of_2.{k}" for k in ("weight", "optimizer_step", "shard_ids")]
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["shard-0-of-2.pt", "shard-1-of-2.pt"]


def test_a_table_no_rank_uses_takes_no_step(world: tuple[list[dict[str, Any]], Path]) -> None:
    for r, res in enumerate(world[0]):
        assert "error" not in res, f"rank {r}: {res['error']}"
        got = res["unused"]
        assert len(got) == 4, got
        for what, unchanged in got.items():  # the reference skipped exactly the unused tables, and so did the shards
            assert unchanged == [(0, "cat"), (1, "item")], (what, unchanged)


def test_collections_reuse_their_process_groups(world: tuple[list[dict[str, Any]], Path]) -> None:
    for r, res in enumerate(world[0]):
        assert "error" not in res, f"rank {r}: {res['error']}"
        assert res["groups"]["after"] == res["groups"]["before"], res["groups"]
        assert "timeout: '31 s' on rank 1, '30 s' on rank 0" in res["groups"]["mismatch"], res["groups"]


def test_a_feature_several_tables_read_is_looked_up_in_each(world: tuple[list[dict[str, Any]], Path]) -> None:
    """A feature listed by several tables (hash, table-wise and row-wise ones) is looked up in each, its
    outputs keyed ``feature@table`` as the single-process collections key them; pooled (weighted or not)
    and sequence outputs and the trained rows equal theirs. The sharded collections used to refuse such
    a feature ("duplicate feature name")."""
    for r, res in enumerate(world[0]):
        assert "error" not in res, f"rank {r}: {res['error']}"
        got = res["shared"]
        assert got["checked"] == 3 * STEPS
        assert got["pooled_keys"] == ["h@th", "g", "t@tt", "h@tt", "h@tr", "t@tr"], got
        assert got["sequence_keys"] == got["pooled_keys"], got
        assert got["traced_equal"], got  # a model iterating the sharded collection's output traces
        assert got["marked"], got
        pipe = res["shared_pipeline"]  # TrainPipeline trains it (weights checked on the rank) ...
        assert pipe["steps"] == 4, pipe
        assert "cannot be partitioned for it ahead; leave shard= out" in pipe["shard_error"], pipe  # ... shard= says why


def test_need_indices_carries_over(world: tuple[list[dict[str, Any]], Path]) -> None:
    """A sharded collection from an ``EmbeddingCollection(need_indices=True)`` gives each output its IDs as
    weights, as the unsharded one does; it used to drop the flag in silence (weights None)."""
    for r, res in enumerate(world[0]):
        assert "error" not in res, f"rank {r}: {res['error']}"
        got = res["need_indices"]
        assert got["flag"] is True
        want = {"x@a": [1, 9, 0], "y": [3, 3, 7 + r], "x@b": [1, 9, 0]}
        assert got["weights"] == [want, want], got
        assert "need_indices must be a bool, got 1" in got["bad"], got


def test_needs_an_initialised_process_group() -> None:
    from recgo.distributed import ShardedEmbeddingCollection
    from recgo.errors import InvalidInputError

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    with pytest.raises(InvalidInputError, match="init_process_group"):
        ShardedEmbeddingCollection(configs(), "hash", optimizer=optim.SGD(lr=0.1))
