"""All-or-nothing training calls of the sharded collections, on a world of 2 (the unsharded ones':
tests/test_reliability_atomic_training.py). Each rank's whole state (every state_dict entry's bytes,
optimizer state and step included, and each dynamic table's stats) is compared before and after:

(a) a training forward whose batch has, on one rank, a fixed table's out-of-range ID, while the
    dynamic-ID tables' IDs would admit new rows on both ranks: every rank raises (the other naming
    the refusing rank) and no rank changes;
(b) the same with a dynamic table's CapacityError on one rank's shard (more distinct IDs routed to
    it than its row bound), beside a second dynamic table that would admit on both ranks;
(c) a forward, then a load (``load`` of a saved set, or ``load_state_dict``) that gives the rows the
    forward resolved to other IDs, then that forward's backward: the dynamic tables hold exactly the
    loaded state (no gradient lands in the loaded IDs' rows), the fixed tables take their gradients
    (their rows are their IDs).

Every case runs for the pooled and the sequence collection, with a fused Adam (merged updates) and
SGD (the owners' linear update, another path), in one spawn; the world trains a step after each
refusal (the ranks' steps still pair up)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

import recgo
from recgo.modules import optim
from recgo.modules.embedding import load_checkpoint, save_checkpoint
from spawned import ok, spawn

SHARDING = {"a": "table_wise", "b": "row_wise", "u": "hash", "v": "hash"}
FEATURES = ["fa", "fb", "fu", "fv"]
V_ROWS = 4  # table v's row bound (each rank's shard holds 4 rows)
VARIANTS = [("pooled", "adam"), ("pooled", "sgd"), ("sequence", "adam"), ("sequence", "sgd")]


def build(sequence: bool, opt: str, seed: int) -> Any:
    """Fixed tables a (table-wise) and b (row-wise), dynamic-ID tables u and v (hashed), fused ``opt``."""
    from recgo.distributed import ShardedEmbeddingBagCollection, ShardedEmbeddingCollection

    C = recgo.EmbeddingConfig if sequence else recgo.EmbeddingBagConfig
    D = recgo.DynamicConfig
    cfgs = [C(20, 4, "a", ["fa"]), C(30, 3, "b", ["fb"]), C(64, 4, "u", ["fu"], dynamic=D(seed=3)),
            C(V_ROWS, 2, "v", ["fv"], dynamic=D(seed=4))]
    o = optim.Adam(lr=0.1) if opt == "adam" else optim.SGD(lr=0.5)
    Coll = ShardedEmbeddingCollection if sequence else ShardedEmbeddingBagCollection
    return Coll(cfgs, SHARDING, optimizer=o, seed=seed, timeout=30)


def batch(fa: list[int], fb: list[int], fu: list[int], fv: list[int]) -> recgo.KeyedJaggedTensor:
    """A batch of one sample: each feature's IDs in one bag."""
    vals = [torch.tensor(x, dtype=torch.int64) for x in (fa, fb, fu, fv)]
    return recgo.KeyedJaggedTensor(FEATURES, torch.cat(vals), lengths=torch.tensor([len(x) for x in (fa, fb, fu, fv)]))


def loss(out: Any) -> torch.Tensor:
    """A loss that weights every output value differently (pooled KeyedTensor or sequence dict)."""
    vals = out.values() if isinstance(out, recgo.KeyedTensor) else torch.cat([j.values().reshape(-1) for j in out.values()])
    vals = vals.reshape(-1)
    return (vals * torch.linspace(-1.0, 2.0, vals.numel())).sum()


def state(sh: Any, memory: bool = True) -> dict[str, Any]:
    """Every state_dict entry's bytes (weights, optimizer state and step, dynamic ID maps) and each
    dynamic table's stats (without ``memory``, not their reserved and resident bytes: a load into a
    shard that held more rows keeps their pages)."""
    out: dict[str, Any] = {k: (v.dtype, tuple(v.shape), v.detach().contiguous().numpy().tobytes())
                           for k, v in sh.state_dict().items()}
    for t in ("u", "v"):
        st = recgo.dynamic.stats(sh, t)
        out["stats:" + t] = st if memory else dataclasses.replace(st, reserved_bytes=0, resident_bytes=0)
    return out


def steps(sh: Any) -> dict[str, int]:
    """Each table's optimizer step, by table name."""
    return {k.split(".")[1]: int(v) for k, v in sh.state_dict().items() if k.endswith(".optimizer_step")}


def changed(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The keys whose values differ, or that only one side has."""
    return sorted(k for k in a.keys() | b.keys() if k not in a or k not in b or a[k] != b[k])


def owned(sh: Any, table: str, rank: int, n: int, start: int) -> list[int]:
    """n IDs from ``start`` on that rank ``rank`` owns in ``table``."""
    cand = torch.arange(start, start + 200 * n + 200)
    got = cand[sh.owners(table, cand) == rank][:n].tolist()
    assert len(got) == n
    return got


def attempt(fn: Any) -> tuple[str, str] | None:
    """Run fn; the type and message of what it raised, None if nothing."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - every refusal is reported to the parent
        return type(exc).__name__, str(exc)
    return None


def _variant(rank: int, tmp: Path, sequence: bool, opt: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sh = build(sequence, opt, seed=5)
    # v: two IDs each owner holds (rank r asks one of each owner's), the rest kept for the cases
    v_own = [owned(sh, "v", r, 10, 1) for r in range(2)]
    v_warm = [v_own[0][rank], v_own[1][rank]]

    def train(fa: list[int], fb: list[int], fu: list[int], fv: list[int]) -> None:
        loss(sh(batch(fa, fb, fu, fv))).backward()

    for s in range(2):  # a trained state: rows, optimizer state and steps, admissions on both ranks
        train([s + rank, 7], [3 + rank, 29 - s], [1000 + 10 * s + rank, 1100 + rank], v_warm)

    def new_u(start: int) -> list[int]:  # one new u ID for each owner, other ones on each rank
        return [owned(sh, "u", r, 1, start + 100000 * rank)[0] for r in range(2)]

    def admitted() -> list[int]:
        return [recgo.dynamic.stats(sh, t).admitted for t in ("u", "v")]

    # (a) rank 1's batch has a's ID 20 (of 20 rows); its u and v IDs, and rank 0's, are new, one for
    # each owner: every shard of both dynamic tables would admit
    fu, fv = new_u(2000), [v_own[0][2 + rank], v_own[1][2 + rank]]
    before, seen = state(sh), admitted()
    out["a"] = attempt(lambda: train([1, 20] if rank == 1 else [2], [4], fu, fv))
    out["a_changed"] = changed(state(sh), before)
    # (a') rank 0's batch has a negative ID of row-wise b
    out["a2"] = attempt(lambda: train([3], [-1] if rank == 0 else [5], fu, fv))
    out["a2_changed"] = changed(state(sh), before)
    train([1], [4], fu, fv)  # the world still steps together, and that batch admits on every shard
    out["a_admits"] = [n - m for n, m in zip(admitted(), seen)]

    # (b) rank 0 sends 5 distinct v IDs rank 1 owns (its shard holds 4 rows, all in use); the u IDs
    # would be admitted on both ranks
    fu, full, held = new_u(3000), v_own[1][4:9], [v_own[0][2 + rank], v_own[1][2 + rank]]
    before, seen = state(sh), admitted()
    out["b"] = attempt(lambda: train([1], [2], fu, full if rank == 0 else held))
    out["b_changed"] = changed(state(sh), before)
    # (b') the owner's own batch overflows its shard
    out["b2"] = attempt(lambda: train([1], [2], fu, full if rank == 1 else held))
    out["b2_changed"] = changed(state(sh), before)
    train([1], [2], fu, held)
    out["b_admits"] = [n - m for n, m in zip(admitted(), seen)]

    # (c) a forward on IDs sh holds and new ones, a load of another run's state whose rows hold other
    # IDs, then the forward's backward
    other = build(sequence, opt, seed=9)
    o_v = [v_own[0][4 + rank], v_own[1][4 + rank]]
    for s in range(3):  # more u rows than sh will hold: every row the forward resolves is replaced
        loss(other(batch([5], [6], [7000 + 100 * s + 10 * rank + k for k in range(6)], o_v))).backward()
    ck = tmp / f"ck-{'seq' if sequence else 'pooled'}-{opt}"
    other.save(ck)
    loaded, loaded_steps = state(other, memory=False), steps(other)
    loaded_sd = {k: v.detach().clone() for k, v in other.state_dict().items()}
    for how in ("load", "load_state_dict"):
        fu = [1000 + rank, 1100 + rank, 4000 + rank, 4100 + rank]
        pending = loss(sh(batch([1], [2], fu, v_warm)))
        ids = {"u": torch.tensor(fu), "v": torch.tensor(v_warm)}
        rows = {t: sh.locate(t, i) for t, i in ids.items()}  # this rank's rows the forward resolved
        if how == "load":
            sh.load(ck)
        else:
            sh.load_state_dict(loaded_sd)
        # the test means something: those rows now hold other IDs
        for t, i in ids.items():
            held = sh.locate(t, i)
            assert bool((held == -1).all()), (t, held)  # none of the forward's IDs is loaded
            out.setdefault("c_replaced", {})[(how, t)] = int((rows[t] >= 0).sum())
        pending.backward()
        out[f"c_{how}_changed"] = changed(state(sh, memory=False), loaded)
        out[f"c_{how}_steps"] = (steps(sh), loaded_steps)
        dist.barrier()

    # (e) a refused load between a forward and its backward: the backward does what it does without it
    tag = f"{'seq' if sequence else 'pooled'}-{opt}"
    good, bad = tmp / f"good-{tag}", tmp / f"bad-{tag}"
    sh.save(good)
    if rank == 0:  # the set of (c) without the rows of row-wise b that rank 1 holds (15..29): rank 1 refuses it
        shutil.copytree(ck, bad)
        for f in bad.iterdir():
            doc = load_checkpoint(f)
            keep = doc["tables.b.ids"] < 15
            for k in ("ids", "weight", "state"):
                if f"tables.b.{k}" in doc:
                    doc[f"tables.b.{k}"] = doc[f"tables.b.{k}"][keep].clone()
            save_checkpoint(doc, f)
    dist.barrier()
    bad_sd = {k: v.detach().clone() for k, v in sh.state_dict().items()}
    dup = [k for k in bad_sd if k.split(".")[1] == "v" and k.endswith(".dynamic_ids")]
    assert len(dup) == 1 and bad_sd[dup[0]].numel() >= 2, dup
    bad_sd[dup[0]][1] = bad_sd[dup[0]][0]  # table v's ID map owns an ID twice: the engine refuses it, after u
    fu = [7000 + rank, 7110 + rank, 1000 + rank]
    for how, refused in (("load", lambda: sh.load(bad)), ("load_state_dict", lambda: sh.load_state_dict(bad_sd))):
        ran = []
        for attempt_load in (True, False):
            pending = loss(sh(batch([1], [2], fu, o_v)))
            if attempt_load:
                out[f"e_{how}"] = attempt(refused)
            pending.backward()
            ran.append(state(sh, memory=False))
            sh.load(good)
        out[f"e_{how}_changed"] = changed(ran[0], ran[1])
    return out


def _world(rank: int, world: int, tmp: str) -> dict[str, Any]:
    """Every variant's cases on this rank."""
    return {v: _variant(rank, Path(tmp), v[0] == "sequence", v[1]) for v in VARIANTS}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("s44")
    got = spawn(_world, 2, tmp, str(tmp), wait=120)
    ok(got)
    return got


@pytest.mark.parametrize("variant", VARIANTS, ids=["-".join(v) for v in VARIANTS])
def test_an_out_of_range_id_on_one_rank_changes_no_rank(results: list[dict[str, Any]], variant: tuple[str, str]) -> None:
    r0, r1 = (res[variant] for res in results)
    for r, res in enumerate((r0, r1)):
        assert res["a"] is not None and res["a"][0] == "InvalidInputError", (r, res["a"])
        assert res["a_changed"] == [], (r, res["a_changed"])
        assert res["a2"] is not None and res["a2"][0] == "InvalidInputError", (r, res["a2"])
        assert res["a2_changed"] == [], (r, res["a2_changed"])
        assert res["a_admits"] == [2, 2], (r, res["a_admits"])  # what the refused batch would have admitted
    assert 'table "a": id 20 out of range' in r1["a"][1], r1["a"]
    assert "rank 1 refused its batch" in r0["a"][1] and "no shard changed" in r0["a"][1], r0["a"]
    assert "rank 0 refused its batch" in r1["a2"][1] and "id -1" in r0["a2"][1], (r0["a2"], r1["a2"])


@pytest.mark.parametrize("variant", VARIANTS, ids=["-".join(v) for v in VARIANTS])
def test_a_full_dynamic_shard_changes_no_rank(results: list[dict[str, Any]], variant: tuple[str, str]) -> None:
    r0, r1 = (res[variant] for res in results)
    for r, res in enumerate((r0, r1)):
        for case in ("b", "b2"):
            assert res[case] is not None and res[case][0] == "CapacityError", (r, case, res[case])
            assert res[case + "_changed"] == [], (r, case, res[case + "_changed"])
        assert res["b_admits"] == [2, 0], (r, res["b_admits"])
    for case in ("b", "b2"):
        assert 'dynamic table "v"' in r1[case][1], r1[case]  # the owner's own error
        assert "rank 1's shard of table \"v\" cannot hold" in r0[case][1], r0[case]


@pytest.mark.parametrize("variant", VARIANTS, ids=["-".join(v) for v in VARIANTS])
def test_a_backward_after_a_load_leaves_the_loaded_dynamic_rows(results: list[dict[str, Any]],
                                                               variant: tuple[str, str]) -> None:
    for r, res in enumerate(res[variant] for res in results):
        assert all(n > 0 for n in res["c_replaced"].values()), (r, res["c_replaced"])
        for how in ("load", "load_state_dict"):
            diff = res[f"c_{how}_changed"]
            # the fixed tables' rows are their IDs: their gradients land (on the rank holding them); the
            # dynamic tables' rows, ID maps and optimizer state are the loaded ones, and every table's
            # optimizer counts the step (as the unsharded collections' do)
            dyn = [k for k in diff if k.split(".")[1] not in ("a", "b") and not k.endswith(".optimizer_step")]
            assert dyn == [], (r, how, diff)
            now, loaded = res[f"c_{how}_steps"]
            assert now == {t: n + 1 for t, n in loaded.items()}, (r, how, now, loaded)


@pytest.mark.parametrize("variant", VARIANTS, ids=["-".join(v) for v in VARIANTS])
def test_a_refused_load_between_a_forward_and_its_backward_changes_nothing(results: list[dict[str, Any]],
                                                                          variant: tuple[str, str]) -> None:
    """Rank 1 refuses the set; rank 0's checks pass. Rank 0 imported its dynamic shards before the
    ranks agreed and put them back after: the import replaced every row for the pending backward,
    which dropped its dynamic tables' gradients there (that step lost on one rank, the load refused)."""
    r0, r1 = (res[variant] for res in results)
    for r, res in enumerate((r0, r1)):
        assert res["e_load"] is not None and res["e_load"][0] == "RecgoIOError", (r, res["e_load"])
        assert res["e_load_changed"] == [], (r, res["e_load"], res["e_load_changed"])
    assert "rank 1 refused the checkpoint" in r0["e_load"][1], r0["e_load"]


@pytest.mark.parametrize("variant", VARIANTS[:1], ids=["-".join(v) for v in VARIANTS[:1]])
def test_a_refused_load_state_dict_between_a_forward_and_its_backward_changes_nothing(
        results: list[dict[str, Any]], variant: tuple[str, str]) -> None:
    for r, res in enumerate(res[variant] for res in results):
        assert res["e_load_state_dict"] is not None and res["e_load_state_dict"][0] == "InvalidInputError", r
        assert res["e_load_state_dict_changed"] == [], (r, res["e_load_state_dict_changed"])
