"""Row-wise tables split unevenly (``row_splits=``, a rank holding none of a table's rows included) on
a world of 2 gloo ranks: training equals the single-process collections (pooled, fused and with a
torch optimizer, built directly and by ``from_ebc``; sequence), the layout queries and state dicts
follow the split, a checkpoint saved under one split loads under another, the even one or a world of
one rank (rows re-distributed by ID) and trains on identically, ``gather_state_dict`` assembles the
tables, and bad splits raise naming the table. Before, every row-wise table was split evenly and
there was no way to say otherwise. One spawned world runs every case."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import recgo
from recgo.modules import optim
from sharded_checks import check_steps, check_update, close, sequence_losses
from spawned import one_rank, spawn

SHARDING = {"tr": "row_wise", "tz": "row_wise", "th": "hash"}
SPLITS = {"tr": [40, 5], "tz": [0, 30]}  # rank 0 holds none of tz
OTHER = {"tr": [5, 40], "tz": [30, 0]}


def configs() -> list[recgo.EmbeddingBagConfig]:
    C = recgo.EmbeddingBagConfig
    return [C(45, 3, "tr", ["r1"]), C(30, 4, "tz", ["z1"], pooling="mean"), C(61, 4, "th", ["h1", "h2"])]


def _sequence_case(rank: int) -> list[int]:
    """A sequence collection whose row-wise tables are split unevenly (rank 1 holds none of item's
    rows) against the single-process EmbeddingCollection: rows per lookup and updated weights."""
    from recgo.distributed import ShardedEmbeddingCollection
    from test_distributed_sequence import configs as seq_configs, global_batch, rank_slice

    cfgs = seq_configs()
    ref = recgo.EmbeddingCollection(cfgs, optimizer=optim.SGD(lr=0.3), seed=7)
    sh = ShardedEmbeddingCollection.from_ec(ref, {"item": "row_wise", "cat": "row_wise", "user": "hash"},
                                            row_splits={"item": [61, 0], "cat": [3, 20]}, timeout=60)
    ids = {c.name: sh.local_ids(c.name) for c in cfgs}
    for step in range(3):
        kjt = global_batch(step)
        mine, ranges = rank_slice(kjt, rank)
        loss_ref, loss = sequence_losses(ref(kjt), sh(mine), mine, ranges, step, "sequence split")
        loss_ref.backward()
        loss.backward()
        check_update(sh.embeddings, ref.embeddings, cfgs, ids, None, f"sequence split step {step}")
    return ids["item"].tolist()


def _checkpoints(rank: int, world: int, ckpt: Path) -> dict[str, torch.Tensor]:
    """Save under SPLITS, load into the even split and train on, save, load into OTHER and train on,
    each against the one single-process collection, every load giving the rows and state saved (bit for
    bit, gathered on rank 0); returns what the first save saved, gathered (the parent loads that
    checkpoint on one rank; rank 1 returns {})."""
    from recgo.distributed import ShardedEmbeddingBagCollection as S, gather_state_dict

    cfgs, opt = configs(), optim.Adagrad(lr=0.2)
    ref = recgo.EmbeddingBagCollection(cfgs, optimizer=opt, seed=3)
    split = S(cfgs, SHARDING, optimizer=opt, seed=3, row_splits=SPLITS, timeout=60)
    check_steps(split, ref, cfgs, rank, world, "uneven, before the save")
    split.save(ckpt / "uneven")
    saved = gather_state_dict(split, dst=0, optimizer_state=True)  # {} on rank 1
    even = S(cfgs, SHARDING, optimizer=opt, seed=11, timeout=60)
    even.load(ckpt / "uneven")
    same(gather_state_dict(even, dst=0, optimizer_state=True), saved, "the uneven checkpoint loaded evenly")
    check_steps(even, ref, cfgs, rank, world, "even, loaded from the uneven split")
    even.save(ckpt / "even")
    saved_even = gather_state_dict(even, dst=0, optimizer_state=True)
    other = S(cfgs, SHARDING, optimizer=opt, seed=12, row_splits=OTHER, timeout=60)
    other.load(ckpt / "even")
    same(gather_state_dict(other, dst=0, optimizer_state=True), saved_even, "the even checkpoint loaded split")
    check_steps(other, ref, cfgs, rank, world, "another split, loaded from the even one")
    whole = gather_state_dict(other, dst=0, optimizer_state=True)
    for k, v in whole.items():  # the whole tables, assembled from OTHER's ranks, are the reference's
        table, attr = k.split(".")[1:]
        close(v.to(torch.float32), getattr(ref.embedding_bags[table], attr).detach().to(torch.float32), f"gathered {k}")
    return saved


def same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], what: str) -> None:
    """Gathered state dicts equal, bit for bit (a load copies rows, it computes nothing)."""
    assert got.keys() == want.keys(), what
    for k in want:
        assert torch.equal(got[k], want[k]), f"{what}: {k}"


def _bad_splits(rank: int) -> dict[str, str]:
    """Splits that cannot be, on every rank alike, and splits the ranks disagree on."""
    from recgo.distributed import ShardedEmbeddingBagCollection as S
    from recgo.errors import InvalidInputError, NotFoundError

    dyn = [*configs(), recgo.EmbeddingBagConfig(100, 4, "dyn", ["y1"], dynamic=recgo.DynamicConfig())]
    cases: dict[str, Any] = {
        "one rank's rows": (configs(), {"tr": [45]}), "negative": (configs(), {"tr": [-1, 46]}),
        "short": (configs(), {"tr": [20, 20]}), "long": (configs(), {"tz": [20, 20]}),
        "zeros": (configs(), {"tr": [0, 0]}),
        "hash table": (configs(), {"th": [30, 31]}), "unknown table": (configs(), {"nope": [1, 1]}),
        "not a mapping": (configs(), [40, 5]), "not counts": (configs(), {"tr": "40,5"}),
        "dynamic table": (dyn, {"dyn": [50, 50]}), "disagreeing ranks": (configs(), SPLITS if rank == 0 else OTHER)}
    out = {}
    for name, (cfgs, splits) in cases.items():
        sharding = {**SHARDING, "dyn": "hash"} if cfgs is dyn else SHARDING
        try:
            S(cfgs, sharding, optimizer=optim.SGD(lr=0.1), row_splits=splits, timeout=60)
            out[name] = "accepted"
        except (InvalidInputError, NotFoundError) as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    return out


def _world(rank: int, world: int, ckpt: str) -> dict[str, Any]:
    from recgo.distributed import ShardedEmbeddingBagCollection as S
    from recgo.errors import InvalidInputError

    cfgs, out = configs(), {}
    for opt in (None, optim.Adagrad(lr=0.2)):  # dense gradients and a torch optimizer, then a fused one
        ref = recgo.EmbeddingBagCollection(cfgs, optimizer=opt, seed=7)
        sh = S(cfgs, SHARDING, optimizer=opt, seed=7, row_splits=SPLITS, timeout=60)
        check_steps(sh, ref, cfgs, rank, world, f"split, {opt}")
        taken = S.from_ebc(recgo.EmbeddingBagCollection(cfgs, optimizer=opt, seed=5), SHARDING, row_splits=SPLITS,
                           timeout=60)
        check_steps(taken, recgo.EmbeddingBagCollection(cfgs, optimizer=opt, seed=5), cfgs, rank, world,
                    f"split from_ebc, {opt}")
    out["rows"] = {t: sh.local_ids(t).tolist() for t in ("tr", "tz")}
    out["owners"] = sh.owners("tr", torch.arange(45)).tolist()
    out["locate"] = sh.locate("tz", torch.arange(30)).tolist()
    out["repr"] = repr(sh)
    out["row_splits"] = sh.row_splits()
    state = sh.state_dict()
    out["state ids"] = state[f"embedding_bags.tr.rank{rank}_of_{world}.shard_ids"].tolist()
    try:
        S(cfgs, SHARDING, optimizer=optim.Adagrad(lr=0.2), timeout=60).load_state_dict(state)
        out["state into the even split"] = "accepted"
    except InvalidInputError as exc:
        out["state into the even split"] = str(exc)
    same = S(cfgs, SHARDING, optimizer=optim.Adagrad(lr=0.2), row_splits=SPLITS, seed=1, timeout=60)
    same.load_state_dict(state)
    out["state into the same split"] = all(torch.equal(same.embedding_bags[c.name].weight, sh.embedding_bags[c.name].weight)
                                           for c in cfgs)
    from recgo.distributed import shard_model

    model = shard_model(torch.nn.ModuleDict({"ebc": recgo.EmbeddingBagCollection(cfgs, seed=7)}), SHARDING,
                        row_splits=SPLITS, ddp=False, timeout=60)
    out["shard_model splits"] = model["ebc"].row_splits()
    out["sequence item rows"] = _sequence_case(rank)
    out["saved"] = _checkpoints(rank, world, Path(ckpt))
    out["bad"] = _bad_splits(rank)
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Path]:
    tmp: Path = tmp_path_factory.mktemp("uneven")
    res = spawn(_world, 2, tmp, str(tmp / "ckpt"), wait=300)
    for r, x in enumerate(res):
        assert "error" not in x, f"rank {r}: {x['error']}"
    return res, tmp


def test_uneven_splits_train_as_one_process(world: tuple[list[dict[str, Any]], Path]) -> None:
    """(The equality itself is checked in the ranks: check_steps, sequence_losses, check_update.)"""
    res, _ = world
    for rank, r in enumerate(res):
        assert r["rows"]["tr"] == (list(range(40)) if rank == 0 else list(range(40, 45)))
        assert r["rows"]["tz"] == ([] if rank == 0 else list(range(30)))
        assert r["owners"] == [0] * 40 + [1] * 5
        assert r["locate"] == ([-1] * 30 if rank == 0 else list(range(30)))
        assert r["row_splits"] == r["shard_model splits"] == {"tr": (40, 5), "tz": (0, 30)}
        assert "row_splits={'tr': (40, 5), 'tz': (0, 30)}" in r["repr"]
        assert r["sequence item rows"] == (list(range(61)) if rank == 0 else [])


def test_state_dicts_follow_the_split(world: tuple[list[dict[str, Any]], Path]) -> None:
    res, _ = world
    for rank, r in enumerate(res):
        assert r["state ids"] == (list(range(40)) if rank == 0 else list(range(40, 45)))
        assert "holds table 'tr''s shard of rank" in r["state into the even split"]
        assert r["state into the same split"]


def test_checkpoints_move_rows_between_splits_and_world_sizes(world: tuple[list[dict[str, Any]], Path]) -> None:
    """Between splits on 2 ranks: checked in the ranks (each collection's first rows and the steps
    after). Here the uneven world-2 checkpoint loads on one rank, every row where it belongs."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    res, tmp = world
    saved = res[0]["saved"]
    with one_rank(tmp):
        one = ShardedEmbeddingBagCollection(configs(), SHARDING, optimizer=optim.Adagrad(lr=0.2), seed=1)
        one.load(tmp / "ckpt" / "uneven")
        for k, v in saved.items():
            table, attr = k.split(".")[1:]
            assert torch.equal(getattr(one.embedding_bags[table], attr).detach(), v), k
        assert len(saved) == 3 * len(configs())


def test_bad_splits_raise_naming_the_table(world: tuple[list[dict[str, Any]], Path]) -> None:
    res, _ = world
    for rank, r in enumerate(res):
        bad = r["bad"]
        assert bad["one rank's rows"].startswith("InvalidInputError: table 'tr': row_splits gives 1 ranks' rows [45], "
                                                 "the world has 2 ranks"), bad
        assert bad["negative"] == 'InvalidInputError: table "tr": the row split gives rank 0 -1 rows', bad
        assert bad["short"] == "InvalidInputError: table 'tr': the row split [20, 20] covers 40 rows, the table has 45"
        assert bad["long"] == "InvalidInputError: table 'tz': the row split [20, 20] covers 40 rows, the table has 30"
        # a split of zeros is what the engine reads as "none given": it was taken for the even split
        assert bad["zeros"] == "InvalidInputError: table 'tr': the row split [0, 0] covers 0 rows, the table has 45"
        assert bad["hash table"] == ("InvalidInputError: row_splits splits table 'th', whose sharding is 'hash': only "
                                     "row_wise tables take a row split"), bad
        assert bad["unknown table"].startswith("NotFoundError: row_splits names table 'nope', which is not among"), bad
        assert bad["not a mapping"] == "InvalidInputError: row_splits: expected a mapping table → rows per rank, got list"
        assert bad["not counts"].startswith("InvalidInputError: table 'tr': row_splits gives '40,5'; expected"), bad
        assert bad["dynamic table"].startswith("InvalidInputError: row_splits splits table 'dyn', whose sharding is "
                                               "'hash'"), bad
        assert "rank 1 builds the ShardedEmbeddingBagCollection differently from rank 0" in bad["disagreeing ranks"], bad
        assert "row_splits: {'tr': (5, 40), 'tz': (30, 0)} on rank 1" in bad["disagreeing ranks"], bad
