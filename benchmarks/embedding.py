"""Embedding training step, side by side: recgo vs TorchRec vs plain PyTorch on identical inputs.

One step = forward (pooled lookups) + backward + optimizer update (SGD, lr 0.01) of 26 tables.

Variants (same weights, same batches, one process, interleaved timing in a shuffled order per round):
  recgo            recgo.EmbeddingBagCollection with the fused SGD (update inside backward)
  recgo_sparse     recgo's collection handing sparse gradients to torch.optim.SGD
  torchrec_fused   torchrec FusedEmbeddingBagCollection (FBGEMM's CPU kernels, fused SGD) — the
                   fastest CPU configuration TorchRec offers
  torchrec_ebc     torchrec EmbeddingBagCollection + torch.optim.SGD (dense gradients, its default)
  torch            26 nn.EmbeddingBag(sparse=True) + torch.optim.SGD
Plus zipf26_adam: recgo's fused Adam vs nn.EmbeddingBag + torch.optim.SparseAdam (TorchRec's fused
CPU path has no Adam), and zipf26_forward_only (inference, no grad).

Workloads: (a) synthetic, 26 tables, Zipf(α=1.05) IDs scattered over the rows, D=64, B=4096,
pooling 1–30; (b) the real Criteo sample's 26 categorical ID streams (../shared/data/criteo),
one ID per feature, vocabularies built from the sample. Also measured: memory bandwidth (a large
tensor copy) to report the fraction recgo achieves, the dedup hit rate and recgo's stage split.
"""

from __future__ import annotations

import functools
import gc
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import DATA as SAMPLES, Bench  # noqa: E402

import recgo  # noqa: E402
from recgo import modules  # noqa: E402
from recgo.modules._stages import STAGES  # noqa: E402

DATA = SAMPLES / "criteo"
LR = 0.01


def zipf_batches(num_tables: int, rows: int, batch: int, nbatches: int, alpha: float,
                 seed: int) -> list[recgo.KeyedJaggedTensor]:
    """Batches whose IDs follow Zipf(alpha) over each table's rows (hot rows scattered by a random
    permutation), pooling factors uniform in 1..30."""
    gen = torch.Generator().manual_seed(seed)
    probs = torch.arange(1, rows + 1, dtype=torch.float64).pow(-alpha)
    perms = [torch.randperm(rows, generator=gen) for _ in range(num_tables)]
    keys = [f"f{t}" for t in range(num_tables)]
    out = []
    for _ in range(nbatches):
        lengths = torch.randint(1, 31, (num_tables, batch), generator=gen)
        vals = []
        for t in range(num_tables):
            ranks = torch.multinomial(probs, int(lengths[t].sum()), replacement=True, generator=gen)
            vals.append(perms[t][ranks])
        out.append(recgo.KeyedJaggedTensor(keys, torch.cat(vals), lengths=lengths.reshape(-1)))
    return out


def criteo_batches(batch: int, max_rows: int | None) -> tuple[list[recgo.KeyedJaggedTensor], list[int]] | None:
    """The Criteo train head's 26 categorical columns as ID streams (empty value → empty bag)."""
    path = DATA / "criteo_dac_train_head10109.txt"
    if not path.exists():
        return None
    lines = path.read_text().splitlines()[:max_rows]
    vocab: list[dict[str, int]] = [{} for _ in range(26)]
    cols: list[list[int]] = [[] for _ in range(26)]
    for line in lines:
        fields = line.split("\t")[14:40]
        for c, v in enumerate(fields):
            cols[c].append(-1 if v == "" else vocab[c].setdefault(v, len(vocab[c])))
    ids = torch.tensor(cols, dtype=torch.int64)  # [26, N]
    keys = [f"f{t}" for t in range(26)]
    out = []
    for lo in range(0, ids.shape[1] - batch + 1, batch):
        chunk = ids[:, lo:lo + batch]
        lengths = (chunk >= 0).to(torch.int64).reshape(-1)
        out.append(recgo.KeyedJaggedTensor(keys, chunk[chunk >= 0], lengths=lengths))
    return out, [max(1, len(v)) for v in vocab]


def measure_bandwidth(mb: int) -> float:
    """Bytes/s of a large tensor copy (read + write), best of five: the machine's memory bandwidth
    as seen from this process."""
    n = mb * (1 << 20) // 4
    src, dst = torch.rand(n), torch.empty(n)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * n * 4 / best


def bag_inputs(batches: list[recgo.KeyedJaggedTensor]) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Per batch, each feature's (values, offsets) as nn.EmbeddingBag takes them."""
    out = []
    for b in batches:
        per = []
        for jt in b.to_dict().values():
            values, lengths = jt.values(), jt.lengths()
            offs = torch.zeros(lengths.numel(), dtype=torch.int64)
            torch.cumsum(lengths[:-1], 0, out=offs[1:])
            per.append((values, offs))
        out.append(per)
    return out


class Workload:
    """The variants' modules over one set of tables and batches (identical initial weights)."""

    def __init__(self, rows: list[int], dim: int, batches: list[recgo.KeyedJaggedTensor],
                 variants: list[str]) -> None:
        import torchrec
        from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection

        self.batches, self.i = batches, 0
        self.tr_batches = [b.to_torchrec() for b in batches]
        self.cfgs = [torchrec.EmbeddingBagConfig(num_embeddings=r, embedding_dim=dim, name=f"t{t}",
                                                 feature_names=[f"f{t}"]) for t, r in enumerate(rows)]
        gen = torch.Generator().manual_seed(0)
        width = dim * len(rows)
        self.grads = [torch.randn(b.stride(), width, generator=gen) for b in batches]
        self.steps = {}
        if "recgo" in variants:
            self.recgo = recgo.EmbeddingBagCollection(self.cfgs, optimizer=modules.SGD(lr=LR), seed=1)
            self.steps["recgo"] = functools.partial(self._train_step, self.recgo, self.batches)
        init = {k: v for k, v in self.recgo.state_dict().items() if k.endswith(".weight")}
        if "recgo_sparse" in variants:
            self.recgo_sparse = recgo.EmbeddingBagCollection(self.cfgs, sparse_grad=True, seed=1)
            self.recgo_sparse_opt = torch.optim.SGD(self.recgo_sparse.parameters(), lr=LR)
            self.steps["recgo_sparse"] = functools.partial(self._train_step, self.recgo_sparse, self.batches,
                                                         self.recgo_sparse_opt)
        if "torchrec_fused" in variants:
            self.fused = FusedEmbeddingBagCollection(tables=self.cfgs, optimizer_type=torch.optim.SGD,
                                                     optimizer_kwargs={"lr": LR}, device=torch.device("cpu"))
            self.fused.load_state_dict(init)
            self.steps["torchrec_fused"] = functools.partial(self._train_step, self.fused, self.tr_batches)
        if "torchrec_ebc" in variants:
            self.tebc = torchrec.EmbeddingBagCollection(tables=self.cfgs, device=torch.device("cpu"))
            self.tebc.load_state_dict(init)
            self.tebc_opt = torch.optim.SGD(self.tebc.parameters(), lr=LR)
            self.steps["torchrec_ebc"] = functools.partial(self._train_step, self.tebc, self.tr_batches, self.tebc_opt)
        if "torch" in variants:
            self.bags = nn.ModuleList(nn.EmbeddingBag(r, dim, mode="sum", sparse=True) for r in rows)
            with torch.no_grad():
                for t, bag in enumerate(self.bags):
                    bag.weight.copy_(init[f"embedding_bags.t{t}.weight"])
            self.bags_opt = torch.optim.SGD(self.bags.parameters(), lr=LR)
            self.feature_slices = bag_inputs(batches)
            self.steps["torch"] = self._torch_step

    def _next(self) -> int:
        self.i = (self.i + 1) % len(self.batches)
        return self.i

    def _train_step(self, model, batches, opt=None) -> None:
        """Runs model on the next of batches and backward with its fixed gradient; steps opt when
        given (None: the module updates its weights itself in backward)."""
        i = self._next()
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        model(batches[i]).values().backward(self.grads[i])
        if opt is not None:
            opt.step()

    def _torch_step(self) -> None:
        i = self._next()
        self.bags_opt.zero_grad(set_to_none=True)
        out = torch.cat([bag(v, o) for bag, (v, o) in zip(self.bags, self.feature_slices[i])], 1)
        out.backward(self.grads[i])
        self.bags_opt.step()

    def forward_only(self) -> dict:
        """Inference steps (no grad) of the variants that differ in their forward kernels."""
        def run(f):
            def step() -> None:
                i = self._next()
                with torch.no_grad():
                    f(i)
            return step

        out = {"recgo": run(lambda i: self.recgo(self.batches[i]))}
        if hasattr(self, "fused"):
            out["torchrec_fused"] = run(lambda i: self.fused(self.tr_batches[i]))
        if hasattr(self, "bags"):
            out["torch"] = run(lambda i: torch.cat([bag(v, o) for bag, (v, o) in
                                                    zip(self.bags, self.feature_slices[i])], 1))
        return out

    def check_parity(self) -> float:
        """Max |difference| of the pooled output between recgo and TorchRec's fused EBC on batch 0,
        before timing (they start from identical weights)."""
        with torch.no_grad():
            a = self.recgo(self.batches[0]).values()
            b = self.fused(self.tr_batches[0]).values() if hasattr(self, "fused") else a
        return float((a - b).abs().max())

    def dedup(self) -> tuple[float, int, int]:
        """Dedup hit rate (1 − distinct/lookups) over the batches, and the totals."""
        uniq = look = 0
        for b in self.batches:
            for u, n in self.recgo.lookup_stats(b).values():
                uniq, look = uniq + u, look + n
        return 1 - uniq / max(1, look), uniq, look


def run_case(bench: Bench, name: str, wl: Workload, dim: int, repeats: int | None = None) -> dict:
    """Time the variants (``repeats`` rounds, default the bench's), attribute recgo's time to stages
    and compute its achieved bandwidth."""
    print(f"[{name}] parity max|recgo - torchrec_fused| = {wl.check_parity():.2e}", flush=True)
    hit, uniq, look = wl.dedup()
    nb = len(wl.batches)
    warmup = 2
    calls = {"warm": 0}
    per_step: list[dict[str, float]] = []  # each timed recgo step's stage seconds and the rest
    steps = dict(wl.steps)
    inner = steps["recgo"]

    def counted() -> None:  # the recgo step, with its engine stage times attributed (after warm-up)
        if calls["warm"] < warmup:  # first calls fault in buffers and set up the ops: not a step's split
            calls["warm"] += 1
            inner()
            return
        before, t0 = modules.stage_times(), time.perf_counter()
        inner()
        wall = time.perf_counter() - t0
        after = modules.stage_times()
        split = {k: after[k] - before[k] for k in STAGES}
        # The rest of the step is Python, autograd, the output allocation and the engine's validation.
        split["python_and_other"] = max(0.0, wall - sum(split.values()))
        per_step.append(split)

    steps["recgo"] = counted
    batch = wl.batches[0].stride()
    res = bench.compare(name, steps, items=batch, warmup=warmup, repeats=repeats)
    # Per stage, the median over the timed recgo steps (warm-up excluded), like the step times.
    stage_s = {k: statistics.median(st[k] for st in per_step) for k in per_step[0]}
    step_s = res.median("recgo")
    # Bytes a step must move: every lookup reads its row (forward) and its output gradient
    # (backward), the output is written, each distinct row is read and written once by the update.
    lookups, distinct = look / nb, uniq / nb
    width = dim * len(wl.cfgs)
    step_bytes = 4 * (2 * lookups * dim + 2 * distinct * dim + 2 * batch * width)
    res.extra.update({"dedup_hit_rate": hit, "lookups_per_step": lookups, "distinct_rows_per_step": distinct,
                      "recgo_stage_seconds": stage_s, "recgo_bytes_per_step": step_bytes,
                      "recgo_bytes_per_s": step_bytes / step_s})
    return res.extra | {"res": res}


def adam_case(bench: Bench, rows: list[int], dim: int, batches: list[recgo.KeyedJaggedTensor]):
    """Adam, which TorchRec's fused CPU path lacks: recgo's fused lazy Adam vs nn.EmbeddingBag +
    torch.optim.SparseAdam (the same lazy, touched-rows-only semantics)."""
    cfgs = [recgo.EmbeddingBagConfig(num_embeddings=r, embedding_dim=dim, name=f"t{t}", feature_names=[f"f{t}"])
            for t, r in enumerate(rows)]
    ebc = recgo.EmbeddingBagCollection(cfgs, optimizer=modules.Adam(lr=1e-3), seed=1)
    bags = nn.ModuleList(nn.EmbeddingBag(r, dim, mode="sum", sparse=True) for r in rows)
    with torch.no_grad():
        for t, bag in enumerate(bags):
            bag.weight.copy_(ebc.embedding_bags[f"t{t}"].weight)
    opt = torch.optim.SparseAdam(bags.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(3)
    grads = [torch.randn(b.stride(), dim * len(rows), generator=gen) for b in batches]
    slices = bag_inputs(batches)
    state = {"i": 0}

    def nxt() -> int:
        state["i"] = (state["i"] + 1) % len(batches)
        return state["i"]

    def recgo_step() -> None:
        i = nxt()
        ebc(batches[i]).values().backward(grads[i])

    def torch_step() -> None:
        i = nxt()
        opt.zero_grad(set_to_none=True)
        torch.cat([bag(v, o) for bag, (v, o) in zip(bags, slices[i])], 1).backward(grads[i])
        opt.step()

    return bench.compare("zipf26_adam", {"recgo_adam": recgo_step, "torch_sparse_adam": torch_step},
                         items=batches[0].stride(), warmup=2)


def main() -> None:
    # 21 rounds: a shared 2-core machine moves single steps by ±30%, and the medians should settle.
    bench = Bench("embedding", description=__doc__, repeats=21)
    quick = bench.quick
    dim = 64
    rows_a, batch_a, nb = (10_000, 256, 2) if quick else (200_000, 4096, 4)
    variants = ["recgo", "recgo_sparse", "torchrec_fused", "torchrec_ebc", "torch"]
    bw = measure_bandwidth(256 if quick else 1024)
    print(f"memory bandwidth (copy): {bw / 1e9:.1f} GB/s; torch threads {torch.get_num_threads()}, "
          f"recgo threads {recgo.num_threads()}", flush=True)

    batches = zipf_batches(26, rows_a, batch_a, nb, 1.05, seed=7)
    wl = Workload([rows_a] * 26, dim, batches, variants)
    a = run_case(bench, "zipf26", wl, dim)
    res_a = a.pop("res")
    fwd = bench.compare("zipf26_forward_only", wl.forward_only(), items=batch_a)
    del wl
    gc.collect()
    adam = adam_case(bench, [rows_a] * 26, dim, batches)
    gc.collect()

    summary = {
        "speedup_vs_torchrec": res_a.ratio("recgo", "torchrec_fused"),
        "speedup_vs_torch": res_a.ratio("recgo", "torch"),
        "speedup_vs_torchrec_ebc": res_a.ratio("recgo", "torchrec_ebc"),
        "forward_speedup_vs_torchrec": fwd.ratio("recgo", "torchrec_fused"),
        "adam_speedup_vs_torch_sparse_adam": adam.ratio("recgo_adam", "torch_sparse_adam"),
        "bandwidth_fraction": a["recgo_bytes_per_s"] / bw,
        "memory_bandwidth_gbps": bw / 1e9,
        "recgo_gbps": a["recgo_bytes_per_s"] / 1e9,
        "dedup_hit_rate": a["dedup_hit_rate"],
        "torch_threads": torch.get_num_threads(),
        "recgo_threads": recgo.num_threads(),
    }
    crit = criteo_batches(512 if quick else 4096, None)
    if crit is None:
        bench.note("Criteo sample not found: workload (b) skipped")
    else:
        cb, vocab = crit
        wl = Workload(vocab, dim, cb, variants)
        # Short steps: one preemption moves a single timing a lot, so take many more rounds (they are
        # cheap).
        b = run_case(bench, "criteo26", wl, dim, repeats=None if quick else 4 * bench.repeats)
        res_b = b.pop("res")
        summary["speedup_vs_torchrec_criteo"] = res_b.ratio("recgo", "torchrec_fused")
        summary["speedup_vs_torch_criteo"] = res_b.ratio("recgo", "torch")
        summary["dedup_hit_rate_criteo"] = b["dedup_hit_rate"]
        bench.data["criteo26"] = b
    bench.data["zipf26"] = a
    bench.summary(**summary)
    for case, d in bench.data.items():
        st = d["recgo_stage_seconds"]
        total = sum(st.values())
        split = ", ".join(f"{k} {v * 1e3:.2f} ms ({v / total:.0%})" for k, v in st.items())
        bench.note(f"{case}: dedup hit rate {d['dedup_hit_rate']:.1%} ({d['lookups_per_step']:.0f} lookups, "
                   f"{d['distinct_rows_per_step']:.0f} distinct rows per step); recgo stages per step (medians): {split}; "
                   f"recgo moves {d['recgo_bytes_per_s'] / 1e9:.2f} GB/s")
    bench.note(f"memory bandwidth (1 GiB tensor copy, read+write): {bw / 1e9:.1f} GB/s; "
               f"torch threads {torch.get_num_threads()}, recgo (GOMAXPROCS) threads {recgo.num_threads()}")
    bench.note("one step = forward + backward + SGD update; items/s = samples/s; see the module docstring for variants")
    bench.note_load()
    bench.write()


if __name__ == "__main__":
    main()
