"""Behaviour-sequence lookup training step, side by side: recgo vs TorchRec vs plain PyTorch.

One step = forward (one embedding per element of every user's history) + backward (a fixed random
gradient of the [N, 64] output) + optimizer update of the rows, on a Taobao-shaped batch: B 1024
users, history lengths drawn from the real sample's per-user distribution
(../shared/data/taobao/taobao_UserBehavior_head.csv, capped at 200; a fitted lognormal when the
file is absent), D 64, item IDs Zipf(α=1.05) over 1M rows (hot rows scattered by a permutation).

Variants (same initial weights, same batches, one process, interleaved in a shuffled order per round):
  SGD (lr 0.01)
    recgo            recgo.EmbeddingCollection with the fused SGD (merge per row, update in backward)
    torchrec         torchrec EmbeddingCollection + torch.optim.SGD (its default dense gradients:
                     the way TorchRec's unsharded EmbeddingCollection is trained)
    torchrec_fused   torchrec FusedEmbeddingCollection (FBGEMM's CPU kernels, fused SGD), for reference
    torch            nn.Embedding(1M, 64, sparse=True) + torch.optim.SGD
  row-wise Adagrad (lr 0.01)
    recgo            recgo RowWiseAdagrad (one accumulator per row)
    torchrec         torchrec EmbeddingCollection + torch.optim.Adagrad (dense gradients)
    torch            nn.Embedding(sparse=True) + torch.optim.Adagrad (sparse; per-value state)
torch has no row-wise Adagrad, so the torch-side variants run its nearest equivalent, Adagrad.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import DATA as SAMPLES, Bench  # noqa: E402

import recgo  # noqa: E402
from recgo import modules  # noqa: E402

DATA = SAMPLES / "taobao" / "taobao_UserBehavior_head.csv"
LR = 0.01
CAP = 200


def history_lengths() -> tuple[torch.Tensor, str]:
    """Per-user history lengths of the Taobao sample (capped at CAP), or a fitted lognormal's draws."""
    if DATA.exists():
        counts: dict[str, int] = {}
        with DATA.open() as f:
            for line in f:
                parts = line.rstrip("\n").split(",")
                if len(parts) == 5 and parts[4]:  # the file's last line is truncated
                    counts[parts[0]] = counts.get(parts[0], 0) + 1
        return torch.tensor(list(counts.values()), dtype=torch.int64).clamp(max=CAP), f"{DATA.name} ({len(counts)} users)"
    gen = torch.Generator().manual_seed(0)
    # lognormal(μ=4.0, σ=0.9) (median ≈ 55) stands in for the real sample's user-history lengths
    draws = torch.exp(torch.randn(5000, generator=gen, dtype=torch.float64) * 0.9 + 4.0)
    return draws.round().clamp(1, CAP).to(torch.int64), "fitted lognormal(4.0, 0.9) (sample absent)"


def make_batches(pool: torch.Tensor, rows: int, batch: int, nbatches: int, alpha: float,
                 seed: int) -> list[recgo.KeyedJaggedTensor]:
    """Batches of `batch` histories, lengths drawn from `pool`, Zipf(alpha) item IDs over `rows`."""
    gen = torch.Generator().manual_seed(seed)
    probs = torch.arange(1, rows + 1, dtype=torch.float64).pow(-alpha)
    perm = torch.randperm(rows, generator=gen)
    out = []
    for _ in range(nbatches):
        lengths = pool[torch.randint(0, pool.numel(), (batch,), generator=gen)]
        ranks = torch.multinomial(probs, int(lengths.sum()), replacement=True, generator=gen)
        out.append(recgo.KeyedJaggedTensor(["hist_item_ids"], perm[ranks], lengths=lengths))
    return out


class Workload:
    """One optimizer's variants over one table and the batches (identical initial weights)."""

    def __init__(self, rows: int, dim: int, batches: list[recgo.KeyedJaggedTensor], rowwise: bool) -> None:
        import torchrec

        self.batches, self.i = batches, 0
        self.tr_batches = [b.to_torchrec() for b in batches]
        gen = torch.Generator().manual_seed(1)
        self.grads = [torch.randn(b.values().numel(), dim, generator=gen) for b in batches]
        cfg = [torchrec.EmbeddingConfig(num_embeddings=rows, embedding_dim=dim, name="item",
                                        feature_names=["hist_item_ids"])]
        opt = modules.RowWiseAdagrad(lr=LR, eps=1e-8) if rowwise else modules.SGD(lr=LR)
        self.recgo = recgo.EmbeddingCollection(cfg, optimizer=opt, seed=1)
        init = self.recgo.embeddings["item"].weight.detach()
        torch_opt = (functools.partial(torch.optim.Adagrad, lr=LR, eps=1e-8) if rowwise
                     else functools.partial(torch.optim.SGD, lr=LR))
        self.tec = torchrec.EmbeddingCollection(tables=cfg, device=torch.device("cpu"))
        self.tec.load_state_dict({"embeddings.item.weight": init})
        self.tec_opt = torch_opt(self.tec.parameters())
        self.emb = nn.Embedding(rows, dim, sparse=True)
        with torch.no_grad():
            self.emb.weight.copy_(init)
        self.emb_opt = torch_opt(self.emb.parameters())
        self.steps = {"recgo": self._recgo_step, "torchrec": self._torchrec_step, "torch": self._torch_step}
        self.fused = None
        if not rowwise:
            try:
                from torchrec.modules.fused_embedding_modules import FusedEmbeddingCollection

                self.fused = FusedEmbeddingCollection(tables=cfg, optimizer_type=torch.optim.SGD,
                                                      optimizer_kwargs={"lr": LR}, device=torch.device("cpu"))
                self.fused.load_state_dict({"embeddings.item.weight": init})
                self.steps["torchrec_fused"] = self._fused_step
            except Exception as exc:  # an optional reference: its absence is noted, not fatal
                self.fused_error = f"{type(exc).__name__}: {exc}"

    def _next(self) -> int:
        self.i = (self.i + 1) % len(self.batches)
        return self.i

    def _recgo_step(self) -> None:
        i = self._next()
        self.recgo(self.batches[i])["hist_item_ids"].values().backward(self.grads[i])

    def _torchrec_step(self) -> None:
        i = self._next()
        self.tec_opt.zero_grad(set_to_none=True)
        self.tec(self.tr_batches[i])["hist_item_ids"].values().backward(self.grads[i])
        self.tec_opt.step()

    def _fused_step(self) -> None:
        i = self._next()
        self.fused(self.tr_batches[i])["hist_item_ids"].values().backward(self.grads[i])

    def _torch_step(self) -> None:
        i = self._next()
        self.emb_opt.zero_grad(set_to_none=True)
        self.emb(self.batches[i].values()).backward(self.grads[i])
        self.emb_opt.step()

    def check_parity(self) -> float:
        """Max |recgo − torchrec| of batch 0's output before timing (identical initial weights)."""
        with torch.no_grad():
            a = self.recgo(self.batches[0])["hist_item_ids"].values()
            b = self.tec(self.tr_batches[0])["hist_item_ids"].values()
        return float((a - b).abs().max())

    def dedup(self) -> float:
        """Dedup hit rate (1 − distinct/lookups) over the batches."""
        u = n = 0
        for b in self.batches:
            du, dn = self.recgo.lookup_stats(b)["item"]
            u, n = u + du, n + dn
        return 1 - u / max(1, n)


def main() -> None:
    bench = Bench("sequence", description=__doc__, repeats=21)
    quick = bench.quick
    rows, dim, batch = (100_000, 64, 256) if quick else (1_000_000, 64, 1024)
    nb = 2 if quick else 4
    pool, source = history_lengths()
    bench.data["length_source"] = source
    bench.data["length_distribution"] = {
        "users": pool.numel(), "mean": float(pool.double().mean()), "median": float(pool.double().median()),
        "p90": float(pool.double().quantile(0.9)), "capped_at_200": float((pool == CAP).double().mean())}
    batches = make_batches(pool, rows, batch, nb, 1.05, seed=7)
    n = sum(b.values().numel() for b in batches) / nb
    print(f"lengths from {source}; {n:.0f} lookups per batch; torch threads {torch.get_num_threads()}, "
          f"recgo threads {recgo.num_threads()}", flush=True)
    summary: dict[str, float] = {}
    for rowwise, case in ((False, "sgd"), (True, "rowwise_adagrad")):
        wl = Workload(rows, dim, batches, rowwise)
        print(f"[{case}] parity max|recgo - torchrec| = {wl.check_parity():.2e}", flush=True)
        hit = wl.dedup()
        res = bench.compare(f"taobao_seq_{case}", wl.steps, items=batch, warmup=2)
        res.extra.update({"dedup_hit_rate": hit, "lookups_per_step": n})
        if getattr(wl, "fused_error", None):
            bench.note(f"{case}: torchrec FusedEmbeddingCollection unavailable ({wl.fused_error})")
        suffix = "" if case == "sgd" else "_rowwise_adagrad"
        summary[f"ec_speedup_vs_torchrec{suffix}"] = res.ratio("recgo", "torchrec")
        summary[f"ec_speedup_vs_torch{suffix}"] = res.ratio("recgo", "torch")
        if "torchrec_fused" in wl.steps:
            summary["ec_speedup_vs_torchrec_fused"] = res.ratio("recgo", "torchrec_fused")
        summary[f"dedup_hit_rate{suffix}"] = hit
        del wl
    summary["lookups_per_step"] = n
    summary["torch_threads"] = torch.get_num_threads()
    summary["recgo_threads"] = recgo.num_threads()
    bench.summary(**summary)
    d = bench.data["length_distribution"]
    bench.note(f"history lengths from {source}: mean {d['mean']:.1f}, median {d['median']:.0f}, p90 {d['p90']:.0f}, "
               f"{d['capped_at_200']:.1%} capped at 200; {n:.0f} lookups per step; D {dim}, {rows:,} rows, Zipf 1.05")
    bench.note("one step = forward + backward + update; items/s = users (sequences) per second; "
               "see the module docstring for variants")
    bench.note_load()
    bench.write()


if __name__ == "__main__":
    main()
