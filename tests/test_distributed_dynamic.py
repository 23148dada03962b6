"""Dynamic-ID tables sharded over torch.distributed (hash by virtual bucket, or table-wise), against
the single-process recgo.EmbeddingBagCollection with the same tables on the global batch: pooled
outputs, admissions after ``min_count`` sightings, every ID's row and optimizer state after each
fused step, evaluation lookups (default vector, nothing admitted), state_dict, a checkpoint saved on
2 ranks and loaded on 1 and on 2 that continues as the uninterrupted run, and the refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

import recgo
from recgo.modules import optim
from sharded_checks import close
from spawned import ok, spawn

B_LOCAL, STEPS, SAVE_AT = 4, 4, 2
# IDs spread over int64, negative ones included; the last ten are never trained on
IDS = torch.tensor([v - 2**64 if v >= 2**63 else v for v in ((k + 1) * 0x9E3779B97F4A7C15 % 2**64 for k in range(40))],
                   dtype=torch.int64)
SHARDING = {"user": "hash", "item": "table_wise", "cat": "hash"}


def configs() -> list[recgo.EmbeddingBagConfig]:
    C, D = recgo.EmbeddingBagConfig, recgo.DynamicConfig
    return [C(100, 4, "user", ["user_id"], dynamic=D(min_count=2, default=[1.0, 2.0, 3.0, 4.0], seed=3)),
            C(100, 3, "item", ["item_id", "item_hist"], pooling="mean", dynamic=D(seed=4)),
            C(20, 5, "cat", ["cat_id"])]


def global_batch(step: int, world: int, ids: torch.Tensor = IDS[:30]) -> recgo.KeyedJaggedTensor:
    g = torch.Generator().manual_seed(900 + step)
    B = world * B_LOCAL
    keys, vals, lens = [], [], []
    for f in ("user_id", "item_id", "item_hist", "cat_id"):
        ln = torch.randint(0, 4, (B,), generator=g)
        n = int(ln.sum())
        v = torch.randint(0, 20, (n,), generator=g) if f == "cat_id" else ids[torch.randint(0, len(ids), (n,), generator=g)]
        keys.append(f)
        vals.append(v)
        lens.append(ln)
    return recgo.KeyedJaggedTensor(keys, torch.cat(vals), lengths=torch.cat(lens))


def rank_slice(kjt: recgo.KeyedJaggedTensor, rank: int, per: int = B_LOCAL) -> recgo.KeyedJaggedTensor:
    """Samples [rank·per, (rank+1)·per) of every feature."""
    feats = kjt.to_dict()
    vals, lens = [], []
    for k in kjt.keys():
        v, ln = feats[k].values(), feats[k].lengths()
        offs = torch.cat([torch.zeros(1, dtype=torch.int64), ln.cumsum(0)])
        vals.append(v[int(offs[rank * per]):int(offs[(rank + 1) * per])])
        lens.append(ln[rank * per:(rank + 1) * per])
    return recgo.KeyedJaggedTensor(kjt.keys(), torch.cat(vals), lengths=torch.cat(lens))


def make(world_kwargs: dict[str, Any]) -> Any:
    from recgo.distributed import ShardedEmbeddingBagCollection

    return ShardedEmbeddingBagCollection(configs(), SHARDING, optimizer=optim.Adam(lr=0.05), seed=5, timeout=60,
                                         **world_kwargs)


def reference() -> recgo.EmbeddingBagCollection:
    return recgo.EmbeddingBagCollection(configs(), optimizer=optim.Adam(lr=0.05), seed=5)


def train_step(sh: Any, ref: recgo.EmbeddingBagCollection, step: int, rank: int, world: int, what: str) -> None:
    """One step of both on the global batch (the sharded one on this rank's samples): equal outputs."""
    kjt = global_batch(step, world)
    want = ref(kjt).values()
    got = sh(rank_slice(kjt, rank)).values()
    close(got.detach(), want.detach()[rank * B_LOCAL:(rank + 1) * B_LOCAL], f"{what} step {step} pooled")
    R = torch.randn(want.shape, generator=torch.Generator().manual_seed(step))
    (want * R).sum().backward()
    (got * R[rank * B_LOCAL:(rank + 1) * B_LOCAL]).sum().backward()


def check_rows(sh: Any, ref: recgo.EmbeddingBagCollection, rank: int, what: str) -> int:
    """Every ID's row and Adam state on its owner equal the reference's, admitted in both or neither;
    returns the IDs this rank holds."""
    held = 0
    for c in configs():
        if c.dynamic is None:
            close(sh.embedding_bags[c.name].weight.detach(), ref.embedding_bags[c.name].weight.detach()[sh.local_ids(c.name)],
                  f"{what} {c.name}")
            continue
        mine = sh.owners(c.name, IDS) == rank
        rows = sh.locate(c.name, IDS)
        want = recgo.dynamic.lookup(ref, c.name, IDS)
        assert bool((rows[~mine] == -1).all()), f"{what} {c.name}: rows of IDs another rank owns"
        assert torch.equal(rows[mine] >= 0, want[mine] >= 0), f"{what} {c.name}: admitted differently"
        have = rows >= 0
        a, b = sh.embedding_bags[c.name], ref.embedding_bags[c.name]
        close(a.weight.detach()[rows[have]], b.weight.detach()[want[have]], f"{what} {c.name} weights")
        close(a.optimizer_state[rows[have]], b.optimizer_state[want[have]], f"{what} {c.name} state")
        assert int(a.optimizer_step) == int(b.optimizer_step)
        assert sorted(sh.local_ids(c.name).tolist()) == sorted(IDS[have].tolist())
        held += int(have.sum())
    return held


def _world(rank: int, world: int, ck: str) -> dict[str, Any]:
    from recgo.distributed import ShardedEmbeddingBagCollection
    from recgo.errors import InvalidInputError

    out: dict[str, Any] = {"held": {}}
    for mode, nodes in (("flat", 1), ("hierarchical", 2)):
        ref, sh = reference(), make({"mode": mode, "nodes": nodes})
        for step in range(STEPS):
            train_step(sh, ref, step, rank, world, mode)
            out["held"][(mode, step)] = check_rows(sh, ref, rank, f"{mode} step {step}")
            if mode == "flat" and step == SAVE_AT - 1:
                sh.save(ck)
                sd = {k: v.clone() for k, v in sh.state_dict().items()}  # the fixed table's weight is live
        if mode == "flat":
            # evaluation: unseen IDs pool as the default vector (or zeros), and nothing is admitted
            sh.eval()
            ref.eval()
            before = [recgo.dynamic.stats(sh, n).rows for n in ("user", "item")]
            kjt = global_batch(99, world, IDS)
            with torch.no_grad():
                close(sh(rank_slice(kjt, rank)).values(), ref(kjt).values()[rank * B_LOCAL:(rank + 1) * B_LOCAL], "eval")
            assert [recgo.dynamic.stats(sh, n).rows for n in ("user", "item")] == before
            out["stats"], out["ref_stats"] = recgo.dynamic.stats(sh, "user"), recgo.dynamic.stats(ref, "user")
            # state_dict: a fresh collection on the same ranks takes the step-SAVE_AT state and continues
            # as the original did
            again = make({})
            assert f"embedding_bags.user.rank{rank}_of_{world}.dynamic_ids" in sd
            again.load_state_dict(sd)
            out["state_dict_held"] = check_rows(again, _replay(SAVE_AT, world), rank, "state_dict")
            # the same through torch.distributed.checkpoint: every rank's entries, resized on load
            dcp.save({"model": sd}, checkpoint_id=ck + "-dcp")
            third = make({})
            loaded = {"model": third.state_dict()}
            dcp.load(loaded, checkpoint_id=ck + "-dcp", planner=recgo.dynamic.DCPLoadPlanner())
            third.load_state_dict(loaded["model"])
            out["dcp_held"] = check_rows(third, _replay(SAVE_AT, world), rank, "dcp")
    out["sequence_rows"] = _sequence(rank, world)
    # shards of 4 rows, each holding 3 IDs: together more than one rank's bound
    small = ShardedEmbeddingBagCollection([recgo.EmbeddingBagConfig(4, 2, "s", ["s_id"], dynamic=recgo.DynamicConfig())],
                                          "hash", optimizer=optim.SGD(lr=0.1), timeout=60)
    mine = [i for i in range(1, 200) if int(small.owners("s", torch.tensor([i]))) == rank][:3]
    small(recgo.KeyedJaggedTensor(["s_id"], torch.tensor(mine), lengths=torch.tensor([3]))).values().sum().backward()
    small.save(ck + "-small")
    errors = {}
    for name, kw in {"row_wise": {"sharding": {"user": "row_wise"}}, "data_parallel": {"sharding": {"user": "data_parallel"}},
                     "torch optimizer": {"optimizer": None}}.items():
        try:
            from recgo.distributed import ShardedEmbeddingBagCollection

            ShardedEmbeddingBagCollection(configs(), kw.get("sharding", SHARDING), optimizer=kw.get("optimizer", optim.SGD(lr=0.1)),
                                          timeout=60)
        except InvalidInputError as exc:
            errors[name] = str(exc)
    out["errors"] = errors
    dist.barrier()
    return out


def _sequence(rank: int, world: int) -> int:
    """A sharded sequence collection with a dynamic table looks up and trains as the unsharded one."""
    from recgo.distributed import ShardedEmbeddingCollection

    cfgs = [recgo.EmbeddingConfig(100, 4, "user", ["user_id", "item_hist"], dynamic=recgo.DynamicConfig(seed=9))]
    ref = recgo.EmbeddingCollection(cfgs, optimizer=optim.Adagrad(lr=0.3))
    sh = ShardedEmbeddingCollection(cfgs, "hash", optimizer=optim.Adagrad(lr=0.3), timeout=60)
    n = 0
    for step in range(3):
        full = global_batch(step, world)
        kjt = recgo.KeyedJaggedTensor(["user_id", "item_hist"], torch.cat([full["user_id"].values(), full["item_hist"].values()]),
                                      lengths=torch.cat([full["user_id"].lengths(), full["item_hist"].lengths()]))
        mine = rank_slice(kjt, rank)
        want, got = ref(kjt), sh(mine)
        loss_ref, loss = torch.zeros(()), torch.zeros(())
        for i, k in enumerate(kjt.keys()):
            w, g = want[k].values(), got[k].values()
            lo = int(kjt[k].lengths()[:rank * B_LOCAL].sum())
            close(g.detach(), w.detach()[lo:lo + len(g)], f"sequence step {step} {k}")
            R = torch.randn(w.shape, generator=torch.Generator().manual_seed(step * 10 + i))
            loss_ref = loss_ref + (w * R).sum()
            loss = loss + (g * R[lo:lo + len(g)]).sum()
            n += len(g)
        loss_ref.backward()
        loss.backward()
    mine = sh.owners("user", IDS) == rank
    rows, want_rows = sh.locate("user", IDS), recgo.dynamic.lookup(ref, "user", IDS)
    assert torch.equal(rows[mine] >= 0, want_rows[mine] >= 0)
    have = rows >= 0
    close(sh.embeddings["user"].weight.detach()[rows[have]], ref.embeddings["user"].weight.detach()[want_rows[have]],
          "sequence weights")
    return n


def _moved(rank: int, world: int, ck: str) -> dict[str, Any]:
    """Load the 2-rank checkpoint on 2 ranks whose table-wise table now lives on the other rank: the
    rows follow their IDs (not each rank's own file)."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    sh = ShardedEmbeddingBagCollection(configs(), SHARDING, optimizer=optim.Adam(lr=0.05), timeout=60,
                                       table_ranks={"item": 0})
    sh.load(ck)
    return {"held": check_rows(sh, _replay(SAVE_AT, 2), rank, "moved"), "item": len(sh.local_ids("item"))}


def _pending_moved(rank: int, world: int, ck: str) -> dict[str, Any]:
    """A min_count=2 table-wise table on rank 1 sees ID 5 (from rank 0) and 7 (rank 1) once, no ID
    admitted; loaded onto a layout that holds it on rank 0 (save/load, and every rank's state-dict
    entries), the second sighting admits both, as in one process. The move went unseen (no row in
    use showed it) and rank 0 kept its own empty sketch: neither was admitted."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    C = [recgo.EmbeddingBagConfig(100, 2, "t", ["f"], dynamic=recgo.DynamicConfig(min_count=2))]

    def on(r: int) -> Any:
        return ShardedEmbeddingBagCollection(C, "table_wise", table_ranks={"t": r}, optimizer=optim.SGD(lr=0.1),
                                             timeout=60)

    ids = torch.tensor([5, 7])
    mine = recgo.KeyedJaggedTensor(["f"], ids[rank:rank + 1], lengths=torch.tensor([1]))
    out: dict[str, Any] = {}
    for how in ("load", "load_state_dict"):
        sh = on(1)
        sh(mine).values().sum().backward()
        moved = on(0)
        if how == "load":
            sh.save(f"{ck}-pending")
            moved.load(f"{ck}-pending")
        else:
            parts: list[Any] = [None] * world
            dist.all_gather_object(parts, {k: v.clone() for k, v in sh.state_dict().items()})
            moved.load_state_dict({k: v for p in parts for k, v in p.items()})
        moved(mine).values().sum().backward()
        out[how] = moved.locate("t", ids).tolist()
    return out


def _overfull(rank: int, world: int, ck: str) -> dict[str, Any]:
    """Load shards that together hold more IDs than this rank's shard may: a named CapacityError."""
    from recgo.distributed import ShardedEmbeddingBagCollection
    from recgo.errors import CapacityError

    small = ShardedEmbeddingBagCollection([recgo.EmbeddingBagConfig(4, 2, "s", ["s_id"], dynamic=recgo.DynamicConfig())],
                                          "hash", optimizer=optim.SGD(lr=0.1), timeout=60)
    try:
        small.load(ck)
    except CapacityError as exc:
        return {"error_message": str(exc)}
    return {"loaded": True}


def _replay(steps: int, world: int) -> recgo.EmbeddingBagCollection:
    """The reference after ``steps`` training steps on the global batches of a world of ``world``."""
    ref = reference()
    for step in range(steps):
        kjt = global_batch(step, world)
        want = ref(kjt).values()
        R = torch.randn(want.shape, generator=torch.Generator().manual_seed(step))
        (want * R).sum().backward()
    return ref


def _resume(rank: int, world: int, ck: str, saved_world: int) -> dict[str, Any]:
    """Load the step-SAVE_AT checkpoint of a world of ``saved_world`` and train on: equal to the
    uninterrupted reference at every later step (the global batches are the saving world's)."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    sh = ShardedEmbeddingBagCollection(configs(), SHARDING, optimizer=optim.Adam(lr=0.05), seed=11, timeout=60)
    sh.load(ck)
    ref = _replay(SAVE_AT, saved_world)
    out = {"held": check_rows(sh, ref, rank, "loaded")}
    per = saved_world * B_LOCAL // world
    for step in range(SAVE_AT, STEPS):
        kjt = global_batch(step, saved_world)
        want = ref(kjt).values()
        got = sh(rank_slice(kjt, rank, per)).values()
        close(got.detach(), want.detach()[rank * per:(rank + 1) * per], f"resumed step {step}")
        R = torch.randn(want.shape, generator=torch.Generator().manual_seed(step))
        (want * R).sum().backward()
        (got * R[rank * per:(rank + 1) * per]).sum().backward()
        out["held"] = check_rows(sh, ref, rank, f"resumed step {step}")
    return out


def _full_shard(rank: int, world: int) -> dict[str, Any]:
    """A step whose IDs overflow one owner's 2-row shard, caught on every rank, then a step that fits,
    against the single-process collection that never saw the refused step."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    def cfg(rows: int) -> recgo.EmbeddingBagConfig:
        return recgo.EmbeddingBagConfig(rows, 2, "t", ["f"], dynamic=recgo.DynamicConfig(init_min=-0.5, init_max=0.5, seed=3))

    sh = ShardedEmbeddingBagCollection([cfg(2)], "hash", optimizer=optim.SGD(lr=0.5), timeout=30)
    ref = recgo.EmbeddingBagCollection([cfg(10)], optimizer=optim.SGD(lr=0.5))
    cand = torch.arange(1, 200)
    own = [cand[sh.owners("t", cand) == r] for r in range(world)]
    out: dict[str, Any] = {"errors": []}
    # rank 0 sends 4 IDs it owns; rank 1 nothing: the owner's shard cannot hold them
    for _ in range(2):  # a loop that catches the error and goes on, twice
        ids = own[0][:4] if rank == 0 else torch.zeros(0, dtype=torch.int64)
        try:
            sh(recgo.KeyedJaggedTensor(["f"], ids, lengths=torch.tensor([len(ids)]))).values().sum().backward()
            out["errors"].append(None)
        except Exception as exc:
            out["errors"].append((type(exc).__name__, str(exc)))
    out["refused"] = recgo.dynamic.stats(sh, "t")
    # a step that fits: rank 0's bag [a0, a1] (its own IDs), rank 1's [b0, a0] (a0 crosses the exchange)
    a0, a1, b0 = int(own[0][0]), int(own[0][1]), int(own[1][0])
    kjt = recgo.KeyedJaggedTensor(["f"], torch.tensor([a0, a1, b0, a0]), lengths=torch.tensor([2, 2]))
    mine = recgo.KeyedJaggedTensor(["f"], torch.tensor([[a0, a1], [b0, a0]][rank]), lengths=torch.tensor([2]))
    want, got = ref(kjt).values(), sh(mine).values()
    close(got.detach(), want.detach()[rank:rank + 1], "pooled after the refused step")
    R = torch.tensor([[1.0, -2.0], [0.5, 3.0]])
    (want * R).sum().backward()
    (got * R[rank:rank + 1]).sum().backward()
    ids = torch.tensor([a0, a1, b0])
    rows, want_rows = sh.locate("t", ids), recgo.dynamic.lookup(ref, "t", ids)
    mine_ids = sh.owners("t", ids) == rank
    assert bool((rows[mine_ids] >= 0).all()) and bool((rows[~mine_ids] == -1).all()), rows
    close(sh.embedding_bags["t"].weight.detach()[rows[mine_ids]], ref.embedding_bags["t"].weight.detach()[want_rows[mine_ids]],
          "rows after the refused step")
    out["trained"], out["ref"] = recgo.dynamic.stats(sh, "t"), recgo.dynamic.stats(ref, "t")
    dist.barrier()
    return out


def test_full_shard_refuses_the_step_on_every_rank(tmp_path: Path) -> None:
    """A step whose IDs one owner's shard cannot hold raised CapacityError on that owner alone, mid-
    exchange: its peer, caught and sent on, met it in ops of other sizes (gloo aborted the process) or
    timed out with its shard's clock a step ahead. Every rank now raises CapacityError at the same
    point (the others naming the owner and table), nothing changes, and the next step trains on
    every rank as the single-process collection that never saw the refused batch."""
    res = spawn(_full_shard, 2, tmp_path, wait=120)
    ok(res)
    for r, out in enumerate(res):
        assert all(e is not None and e[0] == "CapacityError" for e in out["errors"]), (r, out["errors"])
        want = "this batch needs 4 rows" if r == 0 else 'rank 0\'s shard of table "t" cannot hold this step\'s IDs'
        assert all(want in e[1] for e in out["errors"]), (r, out["errors"])
        assert out["refused"].step == 0 and out["refused"].rows == 0, (r, out["refused"])  # nothing changed
        assert out["trained"].step == out["ref"].step == 1, (r, out["trained"])
    assert res[0]["trained"].rows == 2 and res[1]["trained"].rows == 1, res


def test_sharded_dynamic_tables_equal_one_process(tmp_path: Path) -> None:
    ck = str(tmp_path / "ck")
    res = spawn(_world, 2, tmp_path, ck)
    ok(res)
    for mode in ("flat", "hierarchical"):
        held = [sum(r["held"][(mode, s)] for r in res) for s in range(STEPS)]
        assert held[0] > 0 and held[-1] > held[0], f"{mode}: the tables admitted no IDs over the steps: {held}"
        assert all(r["held"][(mode, STEPS - 1)] > 0 for r in res), "a rank holds none of the hash table's IDs"
    assert all(r["sequence_rows"] > 0 for r in res)
    assert all(r["dcp_held"] == r["state_dict_held"] > 0 for r in res), res  # DCP loads them too
    # the shards together hold, admitted and step as the one table did
    assert sum(r["stats"].rows for r in res) == res[0]["ref_stats"].rows
    assert sum(r["stats"].admitted for r in res) == res[0]["ref_stats"].admitted
    assert all(r["stats"].step == res[0]["ref_stats"].step for r in res)
    for r in res:
        assert "shard by ID" in r["errors"]["row_wise"]
        assert "shard by ID" in r["errors"]["data_parallel"]
        assert "fused optimizer" in r["errors"]["torch optimizer"]
    # the checkpoint of 2 ranks continues on 1 rank and on 2 (re-distributed, and as saved)
    for world in (1, 2):
        out = spawn(_resume, world, tmp_path, ck, 2)
        ok(out)
        assert sum(o["held"] for o in out) > 0
    moved = spawn(_moved, 2, tmp_path, ck)
    ok(moved)
    assert moved[0]["item"] > 0 and moved[1]["item"] == 0, moved  # the item table moved to rank 0, whole
    pending = spawn(_pending_moved, 2, tmp_path, ck)
    ok(pending)
    for how in ("load", "load_state_dict"):  # rank 0 now holds both, as the one table admitted them
        assert sorted(pending[0][how]) == [0, 1] and pending[1][how] == [-1, -1], pending
    # 6 IDs saved by 2 ranks do not fit one rank's 4-row shard: refused by name, nothing half-loaded
    over = spawn(_overfull, 1, tmp_path, ck + "-small")
    assert "6 saved IDs belong to rank 0" in over[0].get("error_message", ""), over
