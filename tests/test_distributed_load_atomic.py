"""A sharded collection's ``load(dir)`` is all or nothing: a checkpoint refused part way (a later
table of another shape, an ID out of range, a table missing, rows no file holds, a dynamic-ID table
damaged or refused by the engine, a later file corrupted) left the tables before it loaded, the model
half old and half new. Now the weights, optimizer state, steps and dynamic-ID state stay exactly as
they were, in one process and on every rank of a world of 2 when one rank's checks fail."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist

import recgo
from recgo.errors import RecgoError, RecgoIOError
from recgo.modules import optim
from recgo.modules.embedding import load_checkpoint, save_checkpoint
from spawned import ok, one_rank, spawn

SHARDING = {"a": "hash", "b": "row_wise", "u": "hash", "v": "hash"}
FILE = "shard-0-of-1.pt"


def build(seed: int) -> Any:
    """Two fixed tables, then two dynamic-ID ones (a load checks them in this order)."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    C, D = recgo.EmbeddingBagConfig, recgo.DynamicConfig
    cfgs = [C(50, 4, "a", ["fa"]), C(40, 3, "b", ["fb"]), C(100, 4, "u", ["fu"], dynamic=D(seed=3)),
            C(100, 3, "v", ["fv"], dynamic=D(seed=4))]
    return ShardedEmbeddingBagCollection(cfgs, SHARDING, optimizer=optim.Adam(lr=0.1), seed=seed, timeout=20)


def train(sh: Any, step: int, rank: int = 0) -> None:
    """One fused step on a small batch of every feature (the dynamic IDs spread over int64)."""
    g = torch.Generator().manual_seed(100 + 10 * step + rank)
    lens = torch.randint(1, 4, (4 * 4,), generator=g)
    vals = [torch.randint(0, n, (int(lens[4 * i:4 * i + 4].sum()),), generator=g) for i, n in enumerate((50, 40, 30, 30))]
    vals[2], vals[3] = vals[2] * 7919 + 10**12, vals[3] * 104729 - 10**15
    kjt = recgo.KeyedJaggedTensor(["fa", "fb", "fu", "fv"], torch.cat(vals), lengths=lens)
    sh(kjt).values().sum().backward()


def state(sh: Any) -> dict[str, torch.Tensor]:
    """Every tensor of the collection's state (rows, optimizer state and step, ID maps), copied."""
    return {k: v.detach().clone() for k, v in sh.state_dict().items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    """The keys whose tensors differ (or that only one side has)."""
    return sorted({k for k in a.keys() | b.keys() if k not in a or k not in b or not torch.equal(a[k], b[k])})


def edit(path: Path, fn: Callable[[dict[str, torch.Tensor]], None]) -> None:
    """Rewrite checkpoint file ``path`` (checksums and all) with its entries changed by ``fn``."""
    doc = load_checkpoint(path)
    fn(doc)
    save_checkpoint(doc, path)


def _keep_half(doc: dict[str, torch.Tensor], t: str) -> None:
    n = doc[f"tables.{t}.ids"].numel() // 2
    for k in ("ids", "weight", "state"):
        doc[f"tables.{t}.{k}"] = doc[f"tables.{t}.{k}"][:n].clone()


def _duplicate_id(doc: dict[str, torch.Tensor]) -> None:
    ids = doc["tables.v.dynamic_ids"]
    ids[1] = ids[0]  # two used rows of one ID: the engine refuses the ID map


def _drop(doc: dict[str, torch.Tensor], prefix: str) -> None:
    for k in [k for k in doc if k.startswith(prefix)]:
        del doc[k]


# (name, damage to the one file, expected error) — every one after table "a" was read
CASES: list[tuple[str, Callable[[dict[str, torch.Tensor]], None], str]] = [
    ("shape", lambda d: d.__setitem__("tables.b.weight", d["tables.b.weight"][:, :2].clone()),
     r"table 'b': the saved rows are \(\d+, 2\), expected"),
    ("range", lambda d: d["tables.b.ids"].__setitem__(0, 40), r"table 'b': saved IDs span .* outside the table's 40"),
    ("missing", lambda d: _drop(d, "tables.b."), r"the checkpoint has no table 'b'"),
    ("coverage", lambda d: _keep_half(d, "b"), r"table 'b': 20 of rank 0's rows are in no saved shard"),
    ("dynamic_entry", lambda d: _drop(d, "tables.v.dynamic_sketch_adds"),
     r"table 'v': the saved dynamic-ID table lacks \['dynamic_sketch_adds'\]"),
    # the engine's refusal, once table 'u' was imported (it is put back)
    ("dynamic_map", _duplicate_id, r'dynamic table "v": checkpoint: id -?\d+ owns more than one row'),
    # forged scalars and arrays: a KeyError, ValueError or IndexError, or taken (a step of -3, NaN state)
    ("world_missing", lambda d: d.pop("world"), r"entry 'world' is None, not one integer"),
    ("rows_two_values", lambda d: d.__setitem__("tables.b.rows", torch.tensor([40, 40])),
     r"table 'b': entry 'rows' is \[40, 40\]"),
    ("step_negative", lambda d: d["tables.b.step"].fill_(-3), r"table 'b': entry 'step' is \[-3\], not one integer in "
     r"\[0, 2\^53\)"),
    ("state_nan", lambda d: d["tables.b.state"].__setitem__(0, float("nan")), r"tables\.b\.state' holds values that "
     "are not finite"),
    ("dynamic_meta_short", lambda d: d.__setitem__("tables.v.dynamic_meta", d["tables.v.dynamic_meta"][:3].clone()),
     r"table 'v': dynamic_meta is not \d+ int64 values"),
]


@pytest.mark.parametrize("name,damage,match", CASES, ids=[c[0] for c in CASES])
def test_a_refused_load_leaves_every_table_as_it_was(tmp_path: Path, name: str,
                                                     damage: Callable[[dict[str, torch.Tensor]], None],
                                                     match: str) -> None:
    with one_rank(tmp_path):
        src = build(4)
        for s in range(2):
            train(src, s)
        src.save(tmp_path / "ck")
        dst = build(5)
        train(dst, 7)
        before = state(dst)
        assert len(same(before, state(src))) > 10  # the load would change nearly everything
        bad = tmp_path / name
        shutil.copytree(tmp_path / "ck", bad)
        edit(bad / FILE, damage)
        with pytest.raises(RecgoError, match=match):
            dst.load(bad)
        assert same(state(dst), before) == []
        dst.load(tmp_path / "ck")  # and a good load still loads everything
        assert same(state(dst), state(src)) == []


def test_a_stray_file_named_like_a_shard_is_named_and_survives_a_save(tmp_path: Path) -> None:
    """A file the shard pattern matches but whose name does not parse ("shard-0-of-1 copy.pt") raised
    ValueError from int() at a load, and a save deleted it as a shard file of another world size."""
    with one_rank(tmp_path):
        src = build(4)
        src.save(tmp_path / "ck")
        stray = tmp_path / "ck" / "shard-0-of-1 copy.pt"
        stray.write_bytes(b"a user's file")
        with pytest.raises(RecgoIOError, match=r"\['shard-0-of-1 copy\.pt'\] match shard-\*-of-\*\.pt but are not "
                                               "shard files"):
            src.load(tmp_path / "ck")
        src.save(tmp_path / "ck")
        assert stray.read_bytes() == b"a user's file"


def _corrupt(path: Path, key: str) -> None:
    """Change one value of entry ``key`` without its checksum (as a bit flip on disk would)."""
    raw = torch.load(path, weights_only=True)
    raw["state_dict"][key].view(-1)[0] += 1
    torch.save(raw, path)


def _world2(rank: int, world: int, tmp: str) -> dict[str, Any]:
    """A world-2 checkpoint loaded into another collection: (1) the later file corrupted (both ranks
    refuse it), (2) the rows rank 1 holds of row-wise table 'b' in no file (only rank 1's checks fail:
    rank 0, whose checks pass, must not load alone), then the good checkpoint."""
    d = Path(tmp)
    src = build(4)
    for s in range(2):
        train(src, s, rank)
    src.save(d / "ck")
    dst = build(5)
    train(dst, 7, rank)
    before = state(dst)
    if rank == 0:
        for case in ("corrupt", "rank1_rows"):
            shutil.copytree(d / "ck", d / case)
        _corrupt(d / "corrupt" / "shard-1-of-2.pt", "tables.b.weight")
        for f in (d / "rank1_rows").iterdir():  # row-wise 'b': rank 1 holds rows 20..39
            edit(f, lambda doc: [doc.__setitem__(f"tables.b.{k}", doc[f"tables.b.{k}"][doc["tables.b.ids"] < 20].clone())
                                 for k in ("weight", "state", "ids")])
    dist.barrier()
    out: dict[str, Any] = {}
    for case in ("corrupt", "rank1_rows"):
        try:
            dst.load(d / case)
            out[case] = {"type": None}
        except RecgoError as exc:
            out[case] = {"type": type(exc).__name__, "message": str(exc), "changed": same(state(dst), before)}
    dst.load(d / "ck")
    out["loaded"] = same(state(dst), state(src))
    return out


def test_a_refused_load_changes_no_rank_of_a_world(tmp_path: Path) -> None:
    got = spawn(_world2, 2, tmp_path, str(tmp_path), wait=180)
    ok(got)
    for r, res in enumerate(got):
        bad = res["corrupt"]
        assert bad["type"] == "RecgoIOError" and "shard-1-of-2.pt: checksum mismatch" in bad["message"], (r, bad)
        assert bad["changed"] == [], (r, bad)
        rows = res["rank1_rows"]
        assert rows["type"] == "RecgoIOError" and rows["changed"] == [], (r, rows)
        assert res["loaded"] == [], (r, res["loaded"])
    assert "20 of rank 1's rows are in no saved shard" in got[1]["rank1_rows"]["message"]
    assert "rank 0: loading" in got[0]["rank1_rows"]["message"] and \
        "rank 1 refused the checkpoint, so no rank loaded it" in got[0]["rank1_rows"]["message"], got[0]
    assert "20 of rank 1's rows are in no saved shard" in got[0]["rank1_rows"]["message"]


def test_a_refused_load_of_a_model_holding_the_collection_leaves_it_as_it_was(tmp_path: Path) -> None:
    """Torch loads a model's collection through its load pre-hook, not its load_state_dict (whose copy
    puts refused loads back): an entry of another shape loaded every other table before torch raised its
    size mismatch (and a table refused in the hook left the ones re-distributed before it loaded, as
    dcp.load({"model": model}) does). It is refused with the collection as it was, the hook's tables put
    back; a good state dict still loads. Found by an adversarial pass."""
    from recgo.errors import InvalidInputError

    with one_rank(tmp_path):
        src = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(50, 4, "a", ["fa"]),
                                            recgo.EmbeddingBagConfig(40, 3, "b", ["fb"])], optimizer=optim.Adam(lr=0.1),
                                           seed=4)
        dst = build(5)
        model = torch.nn.ModuleDict({"ebc": dst})
        train(dst, 7)
        before = state(dst)
        good = {f"ebc.{k}": v for k, v in src.state_dict().items()}
        narrow = {**good, "ebc.embedding_bags.b.optimizer_state": good["ebc.embedding_bags.b.optimizer_state"][:, :1]}
        with pytest.raises(InvalidInputError, match=r"embedding_bags.b.optimizer_state has shape \(40, 1\)"):
            model.load_state_dict(narrow, strict=False)
        assert same(state(dst), before) == []
        model.load_state_dict(good, strict=False)
        for t in ("a", "b"):
            assert torch.equal(dst.embedding_bags[t].weight.detach(), src.embedding_bags[t].weight.detach())
