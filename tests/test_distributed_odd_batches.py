"""Sharded pooled collections fed odd but legal batches, and illegal ones, on one world of 2 ranks.

Legal: a rank with no samples (flat and hierarchical), a rank whose bags are all empty, ranks with
different batch sizes, a feature or a whole table with no IDs anywhere in a step, IDs all owned by one
rank (hash, row-wise, table-wise, plan), int32 batches on one rank and int64 on the other, float64
weights on one rank, per-ID weights on a rank with no samples, keys in another order on each rank
(features read by two tables too, pooled and sequence), a key no table reads on one rank only,
dynamic-ID tables hashed by IDs at the ends of int64, and a rank with no samples under ``shard_model``
(DDP beside the shards): outputs, rows and optimizer state equal the single-process collection's on the
concatenated global batch (1e-6 relative). The 2 × 2 hierarchical cases (:func:`hierarchical_cases`)
run in test_distributed.py's world of 4.

Illegal on one rank only (an ID past int64's table, float IDs in a TorchRec batch, a missing feature):
every rank raises ``InvalidInputError`` at that step, and the next good step trains as if the refused
ones never came. A NaN per-ID weight is not refused (neither by the unsharded collection nor by
TorchRec's): the sharded result equals the single-process one, NaN where it is."""

from __future__ import annotations

import traceback
import warnings
from typing import Any, Callable

import pytest
import torch

import recgo
from recgo.modules import optim
from sharded_batches import SHARDING, configs, global_batch
from sharded_checks import check_update, close, sequence_losses
from spawned import ok, spawn

FIXED = {**SHARDING, "tp": "table_wise"}  # "plan" needs a plan: its own case builds one
Make = Callable[[int, Any], tuple[recgo.KeyedJaggedTensor, list[int]]]


def split(g: recgo.KeyedJaggedTensor, sizes: list[int]) -> list[recgo.KeyedJaggedTensor]:
    """g's samples cut into consecutive batches of ``sizes`` samples (weights too), one per rank."""
    d, out, start = g.to_dict(), [], 0
    for s in sizes:
        vals, lens, wts = [], [], []
        for k in g.keys():
            v, ln = d[k].values(), d[k].lengths()
            offs = torch.cat([torch.zeros(1, dtype=torch.int64), ln.cumsum(0)])
            lo, hi = int(offs[start]), int(offs[start + s])
            vals.append(v[lo:hi])
            lens.append(ln[start:start + s])
            if g.weights_or_none() is not None:
                wts.append(d[k].weights()[lo:hi])
        out.append(recgo.KeyedJaggedTensor(g.keys(), torch.cat(vals), lengths=torch.cat(lens),
                                           weights=torch.cat(wts) if wts else None))
        start += s
    return out


def rebuilt(g: recgo.KeyedJaggedTensor, keys: list[str] | None = None, values: Callable | None = None,
            lengths: Callable | None = None, weights: Any = None) -> recgo.KeyedJaggedTensor:
    """g with its features in ``keys`` order (default g's), each feature's values and lengths mapped by
    ``values(key, v)`` / ``lengths(key, ln)``, and ``weights`` (default: none)."""
    d = g.to_dict()
    keys = keys or g.keys()
    vals = [values(k, d[k].values()) if values else d[k].values() for k in keys]
    lens = [lengths(k, d[k].lengths()) if lengths else d[k].lengths() for k in keys]
    return recgo.KeyedJaggedTensor(keys, torch.cat(vals), lengths=torch.cat(lens), weights=weights)


def emptied(g: recgo.KeyedJaggedTensor, feats: set[str]) -> recgo.KeyedJaggedTensor:
    """g with no IDs in the features ``feats`` (every bag of theirs empty)."""
    return rebuilt(g, values=lambda k, v: v[:0] if k in feats else v,
                   lengths=lambda k, ln: torch.zeros_like(ln) if k in feats else ln)


def equal_steps(rank: int, make: Make, *, sharding: Any = FIXED, opt: Any = None, weighted: bool = False,
                steps: int = 2, mine: Callable | None = None, cfgs: list[Any] | None = None, **kwargs: Any) -> str:
    """``steps`` fused steps of a sharded collection of ``cfgs`` (default sharded_batches.configs) on
    this rank's part of make(step, sh)'s global batch (cut into the sizes it gives; ``mine(rank, kjt)``
    changes the part as the rank passes it) against the single-process collection on the whole batch:
    outputs, rows, state."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    cfgs, opt = cfgs or configs(), opt or optim.Adam(lr=0.05)
    ref = recgo.EmbeddingBagCollection(cfgs, optimizer=opt, seed=7, is_weighted=weighted)
    sh = ShardedEmbeddingBagCollection(cfgs, sharding, optimizer=opt, seed=7, timeout=20, is_weighted=weighted,
                                       **kwargs)
    ids = {c.name: sh.local_ids(c.name) for c in cfgs}
    for step in range(steps):
        g, sizes = make(step, sh)
        part = split(g, sizes)[rank]
        part = mine(rank, part) if mine else part
        lo, hi = sum(sizes[:rank]), sum(sizes[:rank + 1])
        want_kt, got_kt = ref(g), sh(part)
        assert got_kt.keys() == want_kt.keys(), (got_kt.keys(), want_kt.keys())
        want, got = want_kt.values(), got_kt.values()
        assert got.shape == (hi - lo, want.shape[1]), got.shape
        close(got, want[lo:hi].detach(), f"step {step} pooled")
        R = torch.randn(want.shape, generator=torch.Generator().manual_seed(step))
        (want * R).sum().backward()
        (got * R[lo:hi]).sum().backward()
        check_update(sh.embedding_bags, ref.embedding_bags, cfgs, ids, None, f"step {step}")
    return "ok"


def _shared(rank: int, sizes: list[int], sequence: bool = False) -> str:
    """Features read by two tables each (outputs ``feature@table``), keys in reverse order on rank 1,
    ``sizes`` samples per rank: the pooled collection (:func:`equal_steps`) or the sequence one."""
    C = recgo.EmbeddingBagConfig
    cfgs = [C(30, 4, "a", ["f", "g"]), C(20, 4, "b", ["f", "h"], pooling="mean"), C(9, 4, "c", ["h"])]
    sharding = {"a": "hash", "b": "row_wise", "c": "table_wise"}

    def make(step: int, sh: Any) -> tuple[recgo.KeyedJaggedTensor, list[int]]:
        return global_batch(step, 2, cfgs=[C(9, 4, "x", ["f", "g", "h"])]), sizes
    if not sequence:
        return equal_steps(rank, make, sharding=sharding, cfgs=cfgs, mine=_reverse_keys_on_rank1)
    from recgo.distributed import ShardedEmbeddingCollection

    seq = [recgo.EmbeddingConfig(c.num_embeddings, c.embedding_dim, c.name, c.feature_names) for c in cfgs]
    ref = recgo.EmbeddingCollection(seq, optimizer=optim.Adagrad(lr=0.1), seed=7)
    sh = ShardedEmbeddingCollection(seq, sharding, optimizer=optim.Adagrad(lr=0.1), seed=7, timeout=20)
    ids = {c.name: sh.local_ids(c.name) for c in seq}
    for step in range(2):
        g, _ = make(step, sh)
        part, d = split(g, sizes)[rank], g.to_dict()
        ranges = {}
        for k in g.keys():  # this rank's values of each key in the global batch
            offs = torch.cat([torch.zeros(1, dtype=torch.int64), d[k].lengths().cumsum(0)])
            ranges[k] = slice(int(offs[sum(sizes[:rank])]), int(offs[sum(sizes[:rank + 1])]))
        want, got = ref(g), sh(_reverse_keys_on_rank1(rank, part))
        assert list(got) == list(want), (list(got), list(want))
        loss_ref, loss = sequence_losses(want, got, part.to_dict(), ranges, step, "shared features")
        loss_ref.backward()
        loss.backward()
        check_update(sh.embeddings, ref.embeddings, seq, ids, None, f"shared features step {step}")
    return "ok"


def _owned_by_rank0(step: int, sh: Any) -> tuple[recgo.KeyedJaggedTensor, list[int]]:
    """Every ID rank 0 owns (a table rank 1 holds whole keeps its IDs)."""
    f2t = {f: c for c in configs() for f in c.feature_names}

    def own(k: str, v: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(f2t[k].num_embeddings)
        owned = rows[sh.owners(f2t[k].name, rows) == 0]
        return owned[v % owned.numel()] if owned.numel() else v
    return rebuilt(global_batch(step, 2), values=own), [4, 4]


def _all_bags_empty_on_rank1(step: int, sh: Any) -> tuple[recgo.KeyedJaggedTensor, list[int]]:
    g = global_batch(step, 2)
    d = g.to_dict()
    return rebuilt(g, values=lambda k, v: v[:int(d[k].lengths()[:4].sum())],
                   lengths=lambda k, ln: torch.cat([ln[:4], torch.zeros_like(ln[4:])])), [4, 4]


def _plan(batches: list[recgo.KeyedJaggedTensor]) -> Any:
    """A greedy planner plan for the tables on 1 node × 2 ranks (the same on every rank)."""
    from recgo import planner as P

    specs = [P.TableSpec(c.name, c.num_embeddings, c.embedding_dim) for c in configs()]
    f2t = {f: c.name for c in configs() for f in c.feature_names}
    one = [rebuilt(b, keys=[k for k in b.keys() if k != "h2"]) for b in batches]  # one feature per table
    one = [recgo.KeyedJaggedTensor([f2t[k] for k in b.keys()], b.values(), lengths=b.lengths()) for b in one]
    with warnings.catch_warnings():  # a thin profile is enough to place five small tables
        warnings.simplefilter("ignore", P.ThinProfileWarning)
        prof = P.profile(one, specs, sample_rate=1.0)
    return P.plan(prof, P.Topology(nodes=1, gpus_per_node=2, hbm_bytes=2000, host_bytes=1 << 20, batch_size=8),
                  strategy="greedy_size")


def _reverse_keys_on_rank1(rank: int, k: recgo.KeyedJaggedTensor) -> recgo.KeyedJaggedTensor:
    return rebuilt(k, keys=list(reversed(k.keys()))) if rank else k


def _int32_on_rank1(rank: int, k: recgo.KeyedJaggedTensor) -> recgo.KeyedJaggedTensor:
    return recgo.KeyedJaggedTensor(k.keys(), k.values().int(), lengths=k.lengths().int()) if rank else k


def _float64_weights_on_rank1(rank: int, k: recgo.KeyedJaggedTensor) -> recgo.KeyedJaggedTensor:
    return rebuilt(k, weights=k.weights().double() if rank else k.weights())


def _unread_key_on_rank1(rank: int, k: recgo.KeyedJaggedTensor) -> recgo.KeyedJaggedTensor:
    if not rank:
        return k
    B = k.lengths().numel() // len(k.keys())
    return recgo.KeyedJaggedTensor(k.keys() + ["unread"], torch.cat([k.values(), torch.full((B,), 2**62)]),
                                   lengths=torch.cat([k.lengths(), torch.ones(B, dtype=torch.int64)]))


def _legal_cases(rank: int) -> dict[str, Callable[[], str]]:
    gb = global_batch
    plan = _plan([gb(s, 2) for s in range(2)])
    return {
        "batch sizes 3 and 5": lambda: equal_steps(rank, lambda s, sh: (gb(s, 2), [3, 5])),
        "rank 1 has no samples": lambda: equal_steps(rank, lambda s, sh: (gb(s, 2), [8, 0])),
        "rank 0 has no samples": lambda: equal_steps(rank, lambda s, sh: (gb(s, 2), [0, 8])),
        "no rank has samples": lambda: equal_steps(rank, lambda s, sh: (gb(s, 2, local=0), [0, 0])),
        "rank 1 has no samples, hierarchical 2 x 1": lambda: equal_steps(
            rank, lambda s, sh: (gb(s, 2), [8, 0]), mode="hierarchical", nodes=2, ranks_per_node=1),
        "rank 0 has no samples, hierarchical 1 x 2": lambda: equal_steps(
            rank, lambda s, sh: (gb(s, 2), [0, 8]), mode="hierarchical", nodes=1, ranks_per_node=2,
            owner_pooling="auto"),
        "rank 1's bags all empty": lambda: equal_steps(rank, _all_bags_empty_on_rank1),
        "feature h2 empty everywhere": lambda: equal_steps(rank, lambda s, sh: (emptied(gb(s, 2), {"h2"}), [4, 4])),
        # a table without IDs at one step: its optimizer step counter still advances as one process's
        "row-wise table without IDs at step 1": lambda: equal_steps(
            rank, lambda s, sh: (emptied(gb(s, 2), {"r1"} if s == 1 else set()), [4, 4]), steps=3),
        "mean tables without IDs at step 0": lambda: equal_steps(
            rank, lambda s, sh: (emptied(gb(s, 2), {"t1", "p1"} if s == 0 else set()), [4, 4]), steps=3),
        "no IDs at all": lambda: equal_steps(rank, lambda s, sh: (emptied(gb(s, 2), set(gb(s, 2).keys())), [4, 4])),
        "IDs all owned by rank 0, Adam": lambda: equal_steps(rank, _owned_by_rank0),
        "IDs all owned by rank 0, row-wise Adagrad": lambda: equal_steps(rank, _owned_by_rank0,
                                                                          opt=optim.RowWiseAdagrad(lr=0.1)),
        "IDs all owned by rank 0, planned": lambda: equal_steps(
            rank, _owned_by_rank0, sharding={**FIXED, "tp": "plan", "tt": "plan"}, plan=plan),
        "int32 on rank 1, int64 on rank 0": lambda: equal_steps(rank, lambda s, sh: (gb(s, 2), [4, 4]),
                                                                 mine=_int32_on_rank1),
        "float64 weights on rank 1": lambda: equal_steps(rank, lambda s, sh: (gb(s, 2, weighted=True), [4, 4]),
                                                          weighted=True, mine=_float64_weights_on_rank1),
        "weighted, rank 0 has no samples": lambda: equal_steps(
            rank, lambda s, sh: (gb(s, 2, weighted=True), [0, 8]), weighted=True),
        "keys reversed on rank 1": lambda: equal_steps(rank, lambda s, sh: (gb(s, 2), [4, 4]),
                                                       mine=_reverse_keys_on_rank1),
        "features read by two tables, keys reversed on rank 1, no samples on rank 0": lambda: _shared(rank, [0, 8]),
        "the same, sequence, batch sizes 5 and 3": lambda: _shared(rank, [5, 3], sequence=True),
        "the same, sequence, no samples on rank 1": lambda: _shared(rank, [8, 0], sequence=True),
        "a key no table reads on rank 1 only": lambda: equal_steps(rank, lambda s, sh: (gb(s, 2), [4, 4]),
                                                                   mine=_unread_key_on_rank1),
        "dynamic IDs at int64's ends": lambda: _dynamic_extremes(rank),
        "shard_model, rank 1 has no samples": lambda: _shard_model_empty_rank(rank),
    }


EXTREMES = torch.tensor([-2**63, 2**63 - 1, -2**63 + 1, 2**63 - 2, -1, 0, 1, 2**62, -2**62, 12345, -54321, 777])


def hierarchical_cases(rank: int, world: int) -> dict[str, str]:
    """On 2 nodes × 2 ranks (test_distributed.py's world 4): ranks and a whole node without samples,
    for each kind of owner return, and IDs all owned by rank 0; each case's outcome or traceback."""
    topo = {"mode": "hierarchical", "nodes": 2, "ranks_per_node": 2}

    def case(sizes: list[int], returns: str) -> Callable[[], str]:
        return lambda: equal_steps(rank, lambda s, sh: (global_batch(s, 2), sizes), owner_pooling=returns, **topo)
    cases = {f"{sizes} {returns}": case(sizes, returns)
             for sizes in ([0, 0, 5, 3], [1, 2, 0, 5], [8, 0, 0, 0]) for returns in ("rows", "pooled", "auto")}
    cases["owned by rank 0"] = lambda: equal_steps(rank, lambda s, sh: (_owned_by_rank0(s, sh)[0], [0, 4, 4, 0]),
                                                   **topo)
    return run_cases(cases)


def run_cases(cases: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Each case's outcome, or "FAILED" and its traceback (the next case still runs)."""
    out: dict[str, Any] = {}
    for name, case in cases.items():
        try:
            out[name] = case()
        except Exception as exc:  # noqa: BLE001 - reported per case
            out[name] = f"FAILED {type(exc).__name__}: {exc}\n{traceback.format_exc()}"
    return out


def _dynamic_extremes(rank: int) -> str:
    """A dynamic-ID table hashed over the ranks, fed IDs at both ends of int64 (and a few between so
    that both ranks own some): outputs, then each owned ID's row, against one process's."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    cfgs = [recgo.EmbeddingBagConfig(100, 4, "u", ["u1"], dynamic=recgo.DynamicConfig(seed=3))]
    ref = recgo.EmbeddingBagCollection(cfgs, optimizer=optim.Adagrad(lr=0.1), seed=5)
    sh = ShardedEmbeddingBagCollection(cfgs, "hash", optimizer=optim.Adagrad(lr=0.1), seed=5, timeout=20)
    for step in range(3):
        gen = torch.Generator().manual_seed(step)
        ln = torch.randint(0, 4, (8,), generator=gen)
        g = recgo.KeyedJaggedTensor(["u1"], EXTREMES[torch.randint(0, len(EXTREMES), (int(ln.sum()),), generator=gen)],
                                    lengths=ln)
        want, got = ref(g).values(), sh(split(g, [4, 4])[rank]).values()
        close(got, want[4 * rank:4 * rank + 4].detach(), f"dynamic step {step}")
        R = torch.randn(want.shape, generator=torch.Generator().manual_seed(step))
        (want * R).sum().backward()
        (got * R[4 * rank:4 * rank + 4]).sum().backward()
    owned = sh.owners("u", EXTREMES) == rank
    rows, ref_rows = sh.locate("u", EXTREMES)[owned], recgo.dynamic.lookup(ref, "u", EXTREMES)[owned]
    assert bool((rows >= 0).all()) and bool((ref_rows >= 0).all()), (rows, ref_rows)
    close(sh.embedding_bags["u"].weight.detach()[rows], ref.embedding_bags["u"].weight.detach()[ref_rows],
          "dynamic rows")
    return f"ok {int(owned.sum())}"


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ebc = recgo.EmbeddingBagCollection(configs(), optimizer=optim.Adagrad(lr=0.1), seed=7)
        self.top = torch.nn.Linear(sum(c.embedding_dim * len(c.feature_names) for c in configs()), 1)

    def forward(self, kjt: Any) -> torch.Tensor:
        return self.top(self.ebc(kjt).values())


def _shard_model_empty_rank(rank: int) -> str:
    """shard_model (DDP over the dense layer, gradient division as DMP's) with no samples on rank 1:
    the mean over the world of the ranks' summed losses is one process's summed loss over the world."""
    from recgo.distributed import shard_model

    torch.manual_seed(0)
    ref = _Model()
    torch.manual_seed(0)
    model = shard_model(_Model(), FIXED, timeout=20)
    dense = torch.optim.SGD(model.module.top.parameters(), lr=0.1)
    dense_ref = torch.optim.SGD(ref.top.parameters(), lr=0.1)
    sh = model.module.ebc
    for step in range(2):
        g = global_batch(step, 2)
        want, got = ref(g), model(split(g, [8, 0])[rank])
        close(got, want[:8][rank * 8:].detach(), f"shard_model step {step} outputs")
        (want.sum() / 2).backward()
        got.sum().backward()
        dense_ref.step()
        dense.step()
        dense_ref.zero_grad()
        dense.zero_grad()
        for c in configs():
            close(sh.embedding_bags[c.name].weight.detach(),
                  ref.ebc.embedding_bags[c.name].weight.detach()[sh.local_ids(c.name)], f"step {step} {c.name}")
        close(model.module.top.weight.detach(), ref.top.weight.detach(), f"step {step} dense")
    return "ok"


def _refused_steps(rank: int) -> dict:
    """Steps 1-3 carry a batch rank 1 alone gets wrong; steps 0 and 4 are good. Each rank's errors, and
    whether the collection after step 4 equals one process's trained on steps 0 and 4 only."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TorchRecKJT

    from recgo.distributed import ShardedEmbeddingBagCollection

    cfgs, opt = configs(), optim.Adagrad(lr=0.1)
    ref = recgo.EmbeddingBagCollection(cfgs, optimizer=opt, seed=7)
    sh = ShardedEmbeddingBagCollection(cfgs, FIXED, optimizer=opt, seed=7, timeout=20)
    raised: dict[int, str] = {}
    for step in range(5):
        g = global_batch(step, 2)
        mine: Any = split(g, [4, 4])[rank]
        if rank == 1 and step == 1:  # the hash table's last ID: legal for a dynamic table, not this one
            mine = rebuilt(mine, values=lambda k, v: torch.full_like(v, 2**63 - 1) if k == "h1" else v)
        if rank == 1 and step == 2:
            mine = TorchRecKJT(keys=mine.keys(), values=mine.values().float(), lengths=mine.lengths())
        if rank == 1 and step == 3:
            mine = rebuilt(mine, keys=[k for k in mine.keys() if k != "r1"])
        try:
            (sh(mine).values() ** 2).sum().backward()
        except Exception as exc:  # noqa: BLE001 - the outcome is the error
            raised[step] = f"{type(exc).__name__}: {exc}"
        if step in (0, 4):
            (ref(g).values() ** 2).sum().backward()
    for c in cfgs:
        want = ref.embedding_bags[c.name].weight.detach()[sh.local_ids(c.name)]
        close(sh.embedding_bags[c.name].weight.detach(), want, f"after the refusals {c.name}")
    return raised


def _nan_weight(rank: int) -> str:
    """A NaN per-ID weight in rank 1's part of the batch: the pooled outputs and the rows after the
    step equal one process's, NaN in the same places (the row the weight scales)."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    cfgs, opt = configs(), optim.SGD(lr=0.1)
    sh = ShardedEmbeddingBagCollection(cfgs, FIXED, optimizer=opt, seed=7, timeout=20, is_weighted=True)
    ref = recgo.EmbeddingBagCollection(cfgs, optimizer=opt, seed=7, is_weighted=True)
    g = global_batch(0, 2, weighted=True)
    w = g.weights().clone()
    w[split(g, [4, 4])[0].values().numel()] = float("nan")  # rank 1's first ID
    g = rebuilt(g, weights=w)
    want, got = ref(g).values(), sh(split(g, [4, 4])[rank]).values()
    torch.testing.assert_close(got, want[4 * rank:4 * rank + 4].detach(), equal_nan=True)
    want.sum().backward()
    got.sum().backward()
    nan_rows = 0
    for c in cfgs:
        a = sh.embedding_bags[c.name].weight.detach()
        torch.testing.assert_close(a, ref.embedding_bags[c.name].weight.detach()[sh.local_ids(c.name)], equal_nan=True)
        nan_rows += int(a.isnan().any(1).sum())
    return f"ok {nan_rows}"


def _modes(rank: int) -> dict:
    """Rank 1 in eval() mode while rank 0 trains, on a dynamic-ID table (whose shards an evaluation
    step does not admit to): each rank's error; then both in eval(), then both training, where the
    rows equal one process's trained on the last batch alone."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    cfgs = [recgo.EmbeddingBagConfig(100, 4, "u", ["u1"], dynamic=recgo.DynamicConfig(seed=3))]
    ref = recgo.EmbeddingBagCollection(cfgs, optimizer=optim.Adagrad(lr=0.1), seed=5)
    sh = ShardedEmbeddingBagCollection(cfgs, "hash", optimizer=optim.Adagrad(lr=0.1), seed=5, timeout=20)
    ids = torch.arange(40)
    g = recgo.KeyedJaggedTensor(["u1"], ids, lengths=torch.full((8,), 5))
    out: dict = {}
    sh.train(rank == 0)
    try:
        sh(split(g, [4, 4])[rank]).values().sum().backward()
    except Exception as exc:  # noqa: BLE001 - the outcome is the error
        out["mixed"] = f"{type(exc).__name__}: {exc}"
    sh.eval()
    with torch.no_grad():
        sh(split(g, [4, 4])[rank])
    sh.train()
    sh(split(g, [4, 4])[rank]).values().sum().backward()
    ref(g).values().sum().backward()
    owned = sh.owners("u", ids) == rank
    rows, ref_rows = sh.locate("u", ids)[owned], recgo.dynamic.lookup(ref, "u", ids)[owned]
    out["held"] = int((rows >= 0).sum())
    close(sh.embedding_bags["u"].weight.detach()[rows], ref.embedding_bags["u"].weight.detach()[ref_rows], "rows")
    return out


def _world(rank: int, world: int) -> dict:
    """Every case in turn (one process start-up for all)."""
    torch.set_num_threads(1)
    return run_cases({**_legal_cases(rank), "refused": lambda: _refused_steps(rank),
                      "nan weight": lambda: _nan_weight(rank), "modes": lambda: _modes(rank)})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return spawn(_world, 2, tmp_path_factory.mktemp("odd"), wait=240)


def test_odd_batches_train_as_one_process_and_bad_ones_stop_every_rank(world: list[dict]) -> None:
    res = world
    ok(res)
    legal = [n for n in res[0] if n not in ("refused", "nan weight", "modes")]
    for r, got in enumerate(res):
        for name in legal:
            assert str(got[name]).startswith("ok"), f"rank {r}, {name}: {got[name]}"
    assert sum(int(res[r]["dynamic IDs at int64's ends"].split()[1]) for r in range(2)) == len(EXTREMES)
    assert all(int(res[r]["dynamic IDs at int64's ends"].split()[1]) > 0 for r in range(2)), res
    own = {1: "id 9223372036854775807 out of range [0, 61)", 2: "values: dtype float32 is not supported",
           3: "lacks features ['r1']"}
    for r, got in enumerate(res):
        raised = got["refused"]
        assert isinstance(raised, dict), f"rank {r}: {raised}"
        assert sorted(raised) == [1, 2, 3], (r, raised)
        for step, words in own.items():
            assert raised[step].startswith("InvalidInputError: "), raised[step]
            assert words in raised[step], (r, step, raised[step])
            if r == 0:  # the engine numbers steps from 1
                assert f"rank 1 refused its batch of step {step + 1}" in raised[step], raised[step]
    nan = [str(got["nan weight"]) for got in res]
    assert nan[0].startswith("ok") and nan[1].startswith("ok"), nan
    assert sum(int(n.split()[1]) for n in nan) > 0, nan  # the NaN did reach a row, on its owner


def test_ranks_in_different_modes_raise_on_both(world: list[dict]) -> None:
    """A rank in eval() mode beside a training one: both raise at the step's first op (the evaluating
    rank's dynamic shard admitted nothing while its peer admitted its IDs, silently, before), and the
    ranks train on alike once their modes agree."""
    ok(world)
    for r, got in enumerate(world):
        modes = got["modes"]
        assert isinstance(modes, dict), f"rank {r}: {modes}"
        other = 1 - r
        mine, theirs = ("a training", "an evaluation (eval())") if r == 0 else ("an evaluation (eval())", "a training")
        assert modes.get("mixed", "").startswith(
            f"InvalidInputError: exchange: rank {other} runs step 1 as {theirs} step while rank {r} runs it as {mine} "
            "step"), (r, modes)
    assert sum(got["modes"]["held"] for got in world) == 40, world
