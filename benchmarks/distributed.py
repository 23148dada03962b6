"""Sharded embeddings across ranks: recgo.distributed vs TorchRec DistributedModelParallel (issue 13).

Part 1, world 2 (two processes on this machine, gloo, torch.multiprocessing spawn): the same tables
(8 × 100k × 64), the same per-rank batches (B=512 per rank, Zipf(1.05) IDs) and the same optimizer
(SGD, lr 0.05, fused on both sides) trained by recgo's ShardedEmbeddingBagCollection (flat exchange,
owner pooling "auto") and by TorchRec's DMP with the plan its own EmbeddingShardingPlanner makes.
recgo runs twice: table-wise on the placement TorchRec's planner chose (the same plan on both sides,
the headline figures) and hash-sharded (RecIS). Steps are timed interleaved (harness), bytes sent
to the other rank per step counted on both sides at the torch.distributed calls (for recgo also with
owner pooling off, owner_pooling="rows", to show what it saves). Two bag shapes: 1–30 IDs per bag
(the project's zipf workload) and one ID per bag (one-hot, like Criteo's categorical columns). The
byte floor: an exact (fp32) model-parallel step must bring one pooled vector per (bag, table)
whose rows live on another rank and send its gradient back; counted from the batches and reported
next to the measured bytes.

Part 2, simulated 16 nodes × 8 ranks (no processes): both exchange modes' exact inter-node traffic
for one step over the Criteo, Avazu and Taobao samples (/work/shared/data), rows shuffled with a fixed
seed and dealt out to the 128 ranks; retained = hierarchical ÷ flat inter-node IDs, as in RecIS
Table 3, and Eq. 3 checked against a direct count of Σ_n Σ_x (G_n(x) − 1). Criteo uses both of its
heads (train and the next day's test lines), and a sweep over the train head alone shows how the
reduction grows with the samples per rank.

    python benchmarks/distributed.py [--quick]
"""

from __future__ import annotations

import csv
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import DATA, Bench, worker_argv, CaseResult  # noqa: E402

TABLES, ROWS, DIM, LR = 8, 100_000, 64, 0.05
WORLD = 2
B_LOCAL = 512


def zipf_batches(batch: int, n: int, seed: int, max_len: int) -> list[Any]:
    """n batches of `batch` samples × TABLES features, Zipf(1.05) IDs scattered by a fixed permutation
    per table (the same permutations on every rank), bag lengths uniform in 1..max_len."""
    import recgo

    perm_gen = torch.Generator().manual_seed(12345)
    perms = [torch.randperm(ROWS, generator=perm_gen) for _ in range(TABLES)]
    gen = torch.Generator().manual_seed(seed)
    probs = torch.arange(1, ROWS + 1, dtype=torch.float64).pow(-1.05)
    out = []
    for _ in range(n):
        lengths = torch.randint(1, max_len + 1, (TABLES, batch), generator=gen)
        vals = [perms[t][torch.multinomial(probs, int(lengths[t].sum()), replacement=True, generator=gen)]
                for t in range(TABLES)]
        out.append(recgo.KeyedJaggedTensor([f"f{t}" for t in range(TABLES)], torch.cat(vals), lengths=lengths.reshape(-1)))
    return out


class ByteCounter:
    """Counts the bytes each torch.distributed collective call sends to other ranks (patched in)."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self.bytes = 0
        self.on = False
        self._orig = {}
        rank, world = dist.get_rank(), dist.get_world_size()

        def a2a_single(output, input, output_split_sizes=None, input_split_sizes=None, *a, **k):
            if self.on:
                es = input.element_size()
                if input_split_sizes:
                    sizes = list(input_split_sizes)
                    row = input.numel() // max(1, input.shape[0]) if input.dim() else 1
                    self.bytes += (sum(sizes) - sizes[rank]) * row * es
                else:
                    self.bytes += input.numel() * es * (world - 1) // world
            return self._orig["all_to_all_single"](output, input, output_split_sizes, input_split_sizes, *a, **k)

        def per_tensor(name, fraction):
            def f(*a, **k):
                if self.on:
                    ts = [x for x in list(a) + list(k.values()) if isinstance(x, torch.Tensor)]
                    if ts:
                        t = ts[-1] if name.startswith("all_gather") else ts[0]
                        self.bytes += int(t.numel() * t.element_size() * fraction)
                return self._orig[name](*a, **k)
            return f

        patches = {"all_to_all_single": a2a_single,
                   "all_reduce": per_tensor("all_reduce", 2 * (world - 1) / world),
                   "reduce_scatter_tensor": per_tensor("reduce_scatter_tensor", (world - 1) / world),
                   "all_gather_into_tensor": per_tensor("all_gather_into_tensor", (world - 1) / world)}
        for name, fn in patches.items():
            self._orig[name] = getattr(dist, name)
            setattr(dist, name, fn)

    def measure(self, fn) -> int:
        self.bytes, self.on = 0, True
        try:
            fn()
        finally:
            self.on = False
        return self.bytes


class StepProfile:
    """Where a step's time goes, on this rank (steps run apart from the interleaved timing): wall
    time inside torch.distributed's all_to_all_single (moving bytes and waiting for the peer; TorchRec
    issues its all-to-alls asynchronously, so its waits land elsewhere), inside each of recgo's Go
    exports, the rest (Python, autograd, the loss), and the process CPU time (every thread: Go, gloo,
    Python), per step."""

    def __init__(self) -> None:
        import torch.distributed as dist
        from recgo import _lib

        self.on = False
        self.acc: dict[str, float] = {}
        orig_a2a, orig_call = dist.all_to_all_single, _lib.call

        def timed(key: str, fn: Any, *a: Any, **k: Any) -> Any:
            if not self.on:
                return fn(*a, **k)
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.acc[key] = self.acc.get(key, 0.0) + time.perf_counter() - t0

        dist.all_to_all_single = lambda *a, **k: timed("all_to_all_single", orig_a2a, *a, **k)
        _lib.call = lambda f, *a: timed("go:" + getattr(f, "__name__", "?").removeprefix("recgo_"), orig_call, f, *a)

    def measure(self, fn: Any, steps: int) -> dict[str, float]:
        """ms per step: wall, cpu, all_to_all_single, go (all exports) and per export, other; and the
        minor page faults per step (memory the process touches afresh)."""
        import resource

        self.acc, self.on = {}, True
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        c0, t0 = time.process_time(), time.perf_counter()
        try:
            for _ in range(steps):
                fn()
        finally:
            self.on = False
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
        out = {"wall": wall, "cpu": cpu, **self.acc}
        out["go"] = sum(v for k, v in self.acc.items() if k.startswith("go:"))
        out["other"] = wall - out["go"] - self.acc.get("all_to_all_single", 0.0)
        return {**{k: round(v / steps * 1e3, 3) for k, v in out.items()}, "page_faults": faults / steps}


def _torchrec_model(lr: float, dim: int = DIM):
    import torch.distributed as dist
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec import EmbeddingBagCollection as TEBC, EmbeddingBagConfig as TCfg
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.types import ShardingEnv

    ebc = TEBC(tables=[TCfg(name=f"t{t}", embedding_dim=dim, num_embeddings=ROWS, feature_names=[f"f{t}"])
                       for t in range(TABLES)], device=torch.device("meta"))
    sharder = EmbeddingBagCollectionSharder(fused_params={"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": lr})
    planner = EmbeddingShardingPlanner(topology=Topology(world_size=dist.get_world_size(), compute_device="cpu"))
    plan = planner.collective_plan(ebc, [sharder], dist.GroupMember.WORLD)
    model = DistributedModelParallel(ebc, device=torch.device("cpu"), plan=plan, sharders=[sharder],
                                     env=ShardingEnv.from_process_group(dist.GroupMember.WORLD))
    types, ranks = {}, {}
    for mod_plan in plan.plan.values():
        for name, ps in mod_plan.items():
            types[name] = f"{ps.sharding_type}@{ps.ranks}"
            if ps.sharding_type == "table_wise" and ps.ranks:
                ranks[name] = int(ps.ranks[0])
    return model, types, ranks


def byte_floor(batch: Any, owner_of, dim: int = DIM) -> int:
    """Bytes one rank must send per exact step: for every (table, bag) with an ID owned elsewhere,
    the owner returns one fp32 pooled vector and the requester sends one fp32 gradient back; counted
    over the bags this rank serves as owner plus those it requests (in world 2 both directions
    between the pair). ``owner_of(t, ids)`` gives each ID's rank."""
    import torch.distributed as dist

    me = dist.get_rank()
    d = batch.to_dict()
    mine = 0  # bags this rank requests that need another rank's rows (one gradient sent each)
    for t in range(TABLES):
        jt = d[f"f{t}"]
        owners = owner_of(t, jt.values())
        bag = torch.repeat_interleave(torch.arange(jt.lengths().numel()), jt.lengths())
        mine += int(torch.unique(bag[owners != me]).numel())
    counts = [torch.tensor([mine]) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, torch.tensor([mine]))
    served = sum(int(c) for r, c in enumerate(counts) if r != me)  # world 2: the peer's remote bags
    return (mine + served) * dim * 4


def _worker(rank: int, store: str, argv: list[str], out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    import recgo

    recgo.share_cores(WORLD)  # torch's and Go's workers: the ranks share the cores
    from recgo.distributed import ShardedEmbeddingBagCollection
    from recgo.modules import optim
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TKJT

    counter = ByteCounter()
    profile = StepProfile()
    cfgs = [recgo.EmbeddingBagConfig(ROWS, DIM, f"t{t}", [f"f{t}"]) for t in range(TABLES)]
    theirs, plan_types, plan_ranks = _torchrec_model(LR)
    table_ranks = {f"t{t}": plan_ranks.get(f"t{t}", t % WORLD) for t in range(TABLES)}

    def sharded(sharding: str, pooling: str, wire: str = "fp32") -> Any:
        return ShardedEmbeddingBagCollection(cfgs, sharding, mode="flat", optimizer=optim.SGD(lr=LR), seed=0, timeout=300,
                                             table_ranks=table_ranks if sharding == "table_wise" else None,
                                             owner_pooling=pooling, wire_dtype=wire)

    ours = {"recgo_table_wise": sharded("table_wise", "auto"), "recgo_hash": sharded("hash", "auto")}
    lossy = {"recgo_table_wise_fp16_LOSSY": sharded("table_wise", "auto", "fp16")}
    # the same tables as dynamic-ID tables (each rank's shard maps its IDs to rows on demand)
    dyn = [recgo.EmbeddingBagConfig(ROWS, DIM, f"t{t}", [f"f{t}"], dynamic=recgo.DynamicConfig(seed=t)) for t in range(TABLES)]
    dynamic = {"recgo_hash_dynamic": ShardedEmbeddingBagCollection(dyn, "hash", mode="flat", optimizer=optim.SGD(lr=LR),
                                                                   timeout=300)}
    rows_only = {"recgo_table_wise": sharded("table_wise", "rows"), "recgo_hash": sharded("hash", "rows")}
    owners = {"recgo_table_wise": lambda t, ids: torch.full_like(ids, table_ranks[f"t{t}"]),
              "recgo_hash": lambda t, ids: ours["recgo_hash"].owners(f"t{t}", ids)}
    bench = Bench("distributed", argv, repeats=9)  # the parent's --quick and --repeats
    quick = bench.quick
    B = B_LOCAL
    res: dict[str, Any] = {"torchrec_plan": plan_types, "recgo_table_ranks": table_ranks, "cases": [], "bytes": {},
                           "threads_per_rank": {"torch": torch.get_num_threads(), "recgo": recgo.num_threads()}}
    for case, max_len in (("zipf", 30), ("zipf_onehot", 1)):
        batches = zipf_batches(B, 4, seed=100 * rank + max_len, max_len=max_len)
        tbatches = [TKJT.from_lengths_sync(b.keys(), b.values(), b.lengths()) for b in batches]
        R = torch.randn(B, TABLES * DIM, generator=torch.Generator().manual_seed(rank))
        it: dict[str, int] = {}

        def step_of(name: str, model: Any):
            def recgo_step() -> None:
                i = it[name] = (it.get(name, 0) + 1) % len(batches)
                (model(batches[i]).values() * R).sum().backward()
            return recgo_step

        def torchrec_step() -> None:
            i = it["torchrec"] = (it.get("torchrec", 0) + 1) % len(batches)
            (theirs(tbatches[i]).wait().values() * R).sum().backward()

        steps = {name: step_of(name, m) for name, m in ours.items()}
        got: dict[str, Any] = {}
        for name in ours:
            got[name] = statistics.median(counter.measure(steps[name]) for _ in range(3))
            got[name + "_traffic"] = ours[name].traffic()
            got[name + "_rows_only"] = statistics.median(counter.measure(step_of(name + "_rows", rows_only[name]))
                                                         for _ in range(3))
            got[name + "_floor"] = statistics.median(byte_floor(b, owners[name]) for b in batches)
        for name, m in {**lossy, **dynamic}.items():
            steps[name] = step_of(name, m)
            got[name] = statistics.median(counter.measure(steps[name]) for _ in range(3))
        got["torchrec"] = statistics.median(counter.measure(torchrec_step) for _ in range(3))
        dist.barrier()
        c = bench.compare(case, {**steps, "torchrec_dmp": torchrec_step}, items=B * WORLD, warmup=1)
        res["cases"].append({"case": case, "times": c.times, "items": B * WORLD})
        n_prof = 8 if quick else 24  # after the timing: every variant warm
        res.setdefault("profile", {})[case] = {}
        for name, fn in (("recgo_table_wise", steps["recgo_table_wise"]), ("torchrec_dmp", torchrec_step)):
            dist.barrier()
            res["profile"][case][name] = profile.measure(fn, n_prof)
        res["bytes"][case] = got
    if not quick:
        res["sweep"] = bytes_sweep(counter, rank)
    if rank == 0:
        torch.save(res, os.path.join(out, "world2.pt"))
    dist.barrier()
    dist.destroy_process_group()


SWEEP_DIMS, SWEEP_LENS = (16, 64, 128), (1, 4, 30, 100)


def bytes_sweep(counter: ByteCounter, rank: int) -> list[dict[str, Any]]:
    """Bytes sent to the other rank per step (rank 0) over embedding dims × bag lengths (uniform in
    1..max_len), on TorchRec's table-wise plan for both, recgo with owner pooling auto: where the ratio
    falls, and the exact floor next to it. The main workload is D=64, max_len=30."""
    import recgo
    from recgo.distributed import ShardedEmbeddingBagCollection
    from recgo.modules import optim
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TKJT

    rows = []
    for dim in SWEEP_DIMS:
        theirs, _, plan_ranks = _torchrec_model(LR, dim)
        ranks = {f"t{t}": plan_ranks.get(f"t{t}", t % WORLD) for t in range(TABLES)}
        ours = ShardedEmbeddingBagCollection([recgo.EmbeddingBagConfig(ROWS, dim, f"t{t}", [f"f{t}"]) for t in range(TABLES)],
                                             "table_wise", mode="flat", optimizer=optim.SGD(lr=LR), seed=0, timeout=300,
                                             table_ranks=ranks)
        R = torch.randn(B_LOCAL, TABLES * dim, generator=torch.Generator().manual_seed(rank))
        for max_len in SWEEP_LENS:
            batch = zipf_batches(B_LOCAL, 1, seed=100 * rank + max_len + 7, max_len=max_len)[0]
            tb = TKJT.from_lengths_sync(batch.keys(), batch.values(), batch.lengths())
            (ours(batch).values() * R).sum().backward()  # warm: the first step of each side
            (theirs(tb).wait().values() * R).sum().backward()
            mine = counter.measure(lambda: (ours(batch).values() * R).sum().backward())
            tr = counter.measure(lambda: (theirs(tb).wait().values() * R).sum().backward())
            floor = byte_floor(batch, lambda t, ids: torch.full_like(ids, ranks[f"t{t}"]), dim)
            rows.append({"dim": dim, "max_len": max_len, "recgo": mine, "torchrec": tr, "floor": floor,
                         "ratio": mine / tr, "floor_ratio": floor / tr})
        del ours, theirs
    return rows


def world2(argv: list[str]) -> dict[str, Any]:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(_worker, args=(os.path.join(tmp, "store"), argv, tmp), nprocs=WORLD, start_method="spawn")
        return torch.load(os.path.join(tmp, "world2.pt"), weights_only=False)


# -- part 2: simulated 16 × 8 ------------------------------------------------------------------------

def _columns(rows: list[list[str]]) -> list[list[int]]:
    """Categorical columns → per-column vocabulary indices (-1 for empty)."""
    cols: list[list[int]] = [[] for _ in rows[0]]
    vocab: list[dict[str, int]] = [{} for _ in rows[0]]
    for r in rows:
        for c, v in enumerate(r):
            cols[c].append(-1 if v == "" else vocab[c].setdefault(v, len(vocab[c])))
    return cols


def _criteo_rows(limit: int | None = None) -> list[list[str]] | None:
    """The 26 categorical fields of the Criteo sample's lines: the labelled train head, then the test head
    (the next day's first lines; no label column), or the train head's first ``limit`` lines alone."""
    train, test = DATA / "criteo" / "criteo_dac_train_head10109.txt", DATA / "criteo" / "criteo_dac_test_head10000.txt"
    if not train.exists():
        return None
    rows = [line.split("\t")[14:40] for line in train.read_text().splitlines()]
    if limit is not None:
        rows = rows[:limit]
    elif test.exists():
        rows += [line.split("\t")[13:39] for line in test.read_text().splitlines()]
    return [r + [""] * (26 - len(r)) for r in rows]


# Criteo's simulation over how many real samples each of the 128 ranks gets: the train head's first
# quarter, half and all of it, then train + test heads (the headline: the most real lines there are).
CRITEO_SWEEP = {"criteo_train_quarter": 2527, "criteo_train_half": 5054, "criteo_train_head": 10109, "criteo": None}


def load_dataset(name: str) -> list[list[int]] | None:
    """(columns × samples) categorical IDs of a data sample, or None when it is absent."""
    if name in CRITEO_SWEEP:
        rows = _criteo_rows(CRITEO_SWEEP[name])
        if rows is None:
            return None
    elif name == "avazu":
        p = DATA / "avazu" / "avazu_train_rows00001-08999.csv"
        if not p.exists():
            return None
        with p.open() as f:
            rd = csv.reader(f)
            next(rd)
            rows = [r[3:] for r in rd]  # drop id, click, hour
    else:
        p = DATA / "taobao" / "taobao_UserBehavior_head.csv"
        if not p.exists():
            return None
        with p.open() as f:
            rows = [r[:3] for r in csv.reader(f)]  # user, item, category
    return _columns(rows)


def simulate(name: str, nodes: int = 16, per: int = 8) -> dict[str, Any] | None:
    from recgo.distributed import eq3_reduction, simulate_traffic

    cols = load_dataset(name)
    if cols is None:
        return None
    ids = torch.tensor(cols, dtype=torch.int64)  # [tables, N]
    world = nodes * per
    n = ids.shape[1] // world * world
    order = torch.randperm(ids.shape[1], generator=torch.Generator().manual_seed(0))[:n]
    ids = ids[:, order].view(ids.shape[0], world, -1)
    batches = [[col[r][col[r] >= 0] for col in ids] for r in range(world)]
    t0 = time.perf_counter()
    sim = simulate_traffic(batches, nodes, per)
    sim["seconds"] = time.perf_counter() - t0
    sim["eq3_rhs"] = eq3_reduction(batches, nodes, per)
    sim["eq3_exact"] = sim["flat_inter"] - sim["hier_inter"] == sim["eq3_rhs"]
    sim["samples_per_rank"] = ids.shape[2]
    sim["tables"] = ids.shape[0]
    sim["dedup_retained"] = sim["requested"] / max(1, sim["lookups"])
    return sim


def main() -> None:
    bench = Bench("distributed", description=__doc__)
    print("world 2: recgo sharded vs TorchRec DMP (gloo, spawn)", flush=True)
    w2 = world2(worker_argv(bench))
    for c in w2["cases"]:
        bench.cases.append(CaseResult(c["case"], c["times"], c["items"]))
    main_case = {c.case: c for c in bench.cases}
    b = w2["bytes"]
    sims = {name: simulate(name) for name in ("criteo", "avazu", "taobao")}
    criteo_sweep = {name: simulate(name) for name in CRITEO_SWEEP if name != "criteo"}
    bench.data = {"world2_bytes_per_step_rank0": b, "torchrec_plan": w2["torchrec_plan"],
                  "world2_step_profile_rank0_ms": w2["profile"],
                  "threads_per_rank": w2["threads_per_rank"],
                  "recgo_table_ranks": w2["recgo_table_ranks"], "simulated_16x8": sims,
                  "simulated_16x8_criteo_samples_sweep": criteo_sweep}
    summary: dict[str, Any] = {}
    for case, suffix in (("zipf", ""), ("zipf_onehot", "_onehot")):
        v, tr = b[case], b[case]["torchrec"]
        for name, tag in (("recgo_table_wise", ""), ("recgo_hash", "_hash")):
            summary[f"speedup_vs_torchrec_dmp{suffix}{tag}"] = main_case[case].ratio(name, "torchrec_dmp")
            summary[f"exchange_bytes_vs_torchrec{suffix}{tag}"] = v[name] / tr
        summary[f"exchange_bytes_vs_torchrec{suffix}_fp16_LOSSY"] = v["recgo_table_wise_fp16_LOSSY"] / tr
        summary[f"speedup_vs_torchrec_dmp{suffix}_fp16_LOSSY"] = main_case[case].ratio("recgo_table_wise_fp16_LOSSY",
                                                                                        "torchrec_dmp")
        summary[f"dynamic_hash_speed_vs_fixed_hash{suffix}"] = main_case[case].ratio("recgo_hash_dynamic", "recgo_hash")
        summary[f"exchange_bytes_dynamic_vs_fixed_hash{suffix}"] = v["recgo_hash_dynamic"] / v["recgo_hash"]
        pr = w2["profile"][case]
        summary[f"cpu_speedup_vs_torchrec_dmp{suffix}"] = pr["torchrec_dmp"]["cpu"] / pr["recgo_table_wise"]["cpu"]
        if case == "zipf":
            summary["exchange_bytes_floor_vs_torchrec"] = v["recgo_table_wise_floor"] / tr
            summary["exchange_bytes_floor_vs_torchrec_hash"] = v["recgo_hash_floor"] / tr
    if "sweep" in w2:
        bench.data["world2_bytes_sweep_rank0"] = w2["sweep"]
        low = min(w2["sweep"], key=lambda r: r["ratio"])
        summary["exchange_bytes_vs_torchrec_sweep_min"] = low["ratio"]
        summary["exchange_bytes_vs_torchrec_sweep_min_at"] = f"D={low['dim']}, bags of 1..{low['max_len']}"
    summary["eq3_exact"] = all(s["eq3_exact"] for s in sims.values() if s)
    for name, s in sims.items():
        if s:
            summary[f"inter_node_reduction_16x8_{name}"] = s["inter_node_reduction"]
            summary[f"retained_16x8_{name}"] = s["retained"]
    if criteo_sweep.get("criteo_train_head"):
        summary["inter_node_reduction_16x8_criteo_train_head"] = criteo_sweep["criteo_train_head"]["inter_node_reduction"]
    summary["eq3_exact"] = summary["eq3_exact"] and all(s["eq3_exact"] for s in criteo_sweep.values() if s)
    bench.summary(**summary)
    bench.note(f"TorchRec's planner chose: {w2['torchrec_plan']}; recgo_table_wise used the same table → rank "
               f"placement {w2['recgo_table_ranks']}, recgo_hash RecIS hash sharding; both with owner_pooling='auto'. "
               "The headline speedup_vs_torchrec_dmp / exchange_bytes_vs_torchrec are recgo_table_wise's (the same plan "
               "on both sides); the _hash keys are hash sharding's.")
    bench.note("recgo_hash_dynamic: the same 8 tables as dynamic-ID tables (recgo.DynamicConfig, admission at the first "
               "sighting), hash-sharded: each owner resolves the IDs it receives in its shard's ID map, and the IDs "
               "travel as full int64 (a dynamic table has no range to narrow them to). dynamic_hash_speed_vs_fixed_hash "
               "is its step speed over recgo_hash's (below 1: slower), exchange_bytes_dynamic_vs_fixed_hash its bytes "
               "over recgo_hash's.")
    for case, v in b.items():
        tr = v["torchrec"]
        bench.note(f"{case}: bytes sent to the other rank per step (rank 0): TorchRec {tr:,.0f}; "
                   + "; ".join(f"{n} {v[n]:,.0f} ({v[n] / tr:.2f}× TorchRec; owner pooling off: {v[n + '_rows_only']:,.0f}; "
                               f"exact floor {v[n + '_floor']:,.0f} = {v[n + '_floor'] / tr:.2f}× TorchRec)"
                               for n in ("recgo_table_wise", "recgo_hash"))
                   + f"; recgo_table_wise_fp16_LOSSY {v['recgo_table_wise_fp16_LOSSY']:,.0f} "
                   f"({v['recgo_table_wise_fp16_LOSSY'] / tr:.2f}× TorchRec, float16 vectors on the wire: NOT exact)")
    z = b["zipf"]
    tr, tw, floor = z["torchrec"], z["recgo_table_wise"], z["recgo_table_wise_floor"]
    bench.note(
        f"Byte floor (zipf, exact fp32): a model-parallel step must return one pooled vector ({DIM} × 4 B) for every "
        f"(bag, table) whose rows live on the other rank and send its gradient back. On TorchRec's table-wise plan each "
        f"rank requests its {B_LOCAL} bags × {TABLES // WORLD} remote tables and serves as many for its peer: "
        f"{floor:,.0f} B per rank per step, which TorchRec pays too. That is {floor / tr:.2f}× TorchRec's measured "
        f"{tr:,.0f} B, so exchange_bytes_vs_torchrec ≤ 0.5 cannot be reached exactly on this workload by any system: "
        f"TorchRec's bytes above the floor are its IDs and lengths ({tr - floor:,.0f} B), recgo's ({tw - floor:,.0f} B) its "
        f"distinct IDs (in the narrowest width the table's size allows), one index per value into them and the "
        f"per-bag segment lengths (each in the narrowest width that fits). With hash sharding nearly every bag has IDs "
        f"on both ranks, so the floor is {z['recgo_hash_floor']:,.0f} B ({z['recgo_hash_floor'] / tr:.2f}×). Only a lossy "
        f"wire goes below 0.5: recgo_table_wise_fp16_LOSSY (opt-in wire_dtype='fp16', vectors rounded to float16) sent "
        f"{z['recgo_table_wise_fp16_LOSSY']:,.0f} B ({z['recgo_table_wise_fp16_LOSSY'] / tr:.2f}×). With one ID per bag "
        f"(zipf_onehot) the rows of distinct IDs cost less than pooled vectors (IDs repeat across bags), which "
        f"owner_pooling='auto' picks, so recgo ends below that case's pooled floor.")
    for case, pr in w2["profile"].items():
        r, t = pr["recgo_table_wise"], pr["torchrec_dmp"]
        go = ", ".join(f"{k[3:]} {v:.2f}" for k, v in sorted(r.items(), key=lambda kv: -kv[1]) if k.startswith("go:"))
        bench.note(f"Step profile, {case} (rank 0, ms per step, steps run after the timing above, one variant at a time): recgo_table_wise "
                   f"wall {r['wall']:.2f}, CPU {r['cpu']:.2f} (all threads); in all_to_all_single {r.get('all_to_all_single', 0):.2f} "
                   f"(bytes moving and waiting for the peer), in Go {r['go']:.2f} ({go}), other {r['other']:.2f} "
                   f"(Python, autograd, the loss); {r['page_faults']:,.0f} page faults per step. torchrec_dmp wall {t['wall']:.2f}, "
                   f"CPU {t['cpu']:.2f}, {t['page_faults']:,.0f} page faults. CPU time is the "
                   f"steadier measure on this shared machine: cpu_speedup_vs_torchrec_dmp{'' if case == 'zipf' else '_onehot'} "
                   f"= {t['cpu'] / r['cpu']:.2f}.")
    lines = []
    if "sweep" in w2:
        lines += ["## Bytes per step over embedding dim × bag length (rank 0, table-wise, TorchRec's plan)", "",
                  "| D | bag length | TorchRec B | recgo B | recgo ÷ TorchRec | exact floor ÷ TorchRec |",
                  "|---:|---|---:|---:|---:|---:|"]
        lines += [f"| {r['dim']} | 1..{r['max_len']} | {r['torchrec']:,} | {r['recgo']:,} | {r['ratio']:.3f} | "
                  f"{r['floor_ratio']:.3f} |" for r in w2["sweep"]]
        lines += [""]
    lines += ["## Simulated 16 nodes × 8 ranks (one step, hash sharding)", "",
             "| data | tables | samples/rank | lookups | distinct per rank | flat inter-node IDs | hierarchical inter-node IDs | retained | reduction | Eq. 3 exact |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, s in {**sims, **criteo_sweep}.items():
        if s:
            lines.append(f"| {name} | {s['tables']} | {s['samples_per_rank']} | {s['lookups']:,} | {s['requested']:,} | "
                         f"{s['flat_inter']:,} | {s['hier_inter']:,} | {s['retained']:.3f} | {s['inter_node_reduction']:.3f} | {s['eq3_exact']} |")
        else:
            lines.append(f"| {name} | data absent | | | | | | | | |")
    bench.note("Simulated 16 × 8: criteo is every real Criteo line there is here (the 10,109-line labelled train head "
               "and the 10,000-line head of the next day's test file, shuffled together, 157 samples per rank); the "
               "criteo_train_* rows use the train head alone, a quarter, half and all of it (19, 39, 78 samples per rank). "
               "The inter-node reduction grows with the samples each rank holds, since a node's ranks then share more "
               "IDs; RecIS's clusters train on thousands per rank, so these small samples understate it.")
    bench.note(f"The machine has {os.cpu_count()} cores shared with other jobs; both ranks and every variant share them "
               f"(threads per rank: {w2['threads_per_rank']}).")
    bench.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
