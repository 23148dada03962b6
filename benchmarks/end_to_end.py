"""A whole training step of a small DLRM-style model, side by side: the embedding collection is recgo's,
TorchRec's fused one, or 26 ``nn.EmbeddingBag``; everything else is identical torch code.

Model: pooled embeddings of 26 sparse features (D=64) concatenated with 13 dense features, an MLP
(1677 → 512 → 256 → 1), binary cross-entropy; dense parameters train with ``torch.optim.SGD`` and the
embeddings with their collection's fused SGD (``nn.EmbeddingBag``: sparse gradients + SGD), all at
lr 0.01, B = 4096. Workloads as in ``embedding.py``: (a) Zipf(1.05) IDs over 26 × 200k rows, pooling
1–30; (b) the Criteo sample's ID streams.

This is where the embedding engine meets torch's own threads. torch's OpenMP workers spin for a
while after each parallel op (libgomp's default spin count), and on a small machine they then hold
cores that recgo's Go workers need for the embedding step that follows. The script therefore runs
itself twice, with the OpenMP settings it was given (``openmp_default``) and with
``GOMP_SPINCOUNT=10000`` (a short spin, ``openmp_spin10k``); the setting must be in the environment
before torch is imported, so it cannot be changed from inside a running process.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from embedding import bag_inputs, criteo_batches, zipf_batches  # noqa: E402
from harness import Bench  # noqa: E402

import recgo  # noqa: E402
from recgo import modules  # noqa: E402

LR = 0.01
SPIN_ENV = {"GOMP_SPINCOUNT": "10000"}


def mlp(width: int) -> nn.Module:
    """The dense tower, seeded so every variant starts from the same weights."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(width, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 1))


class Model:
    """One variant: an embedding collection, the dense tower and their optimizers."""

    def __init__(self, pooled: Callable[[Any], torch.Tensor], batches: list[Any], dense: list[torch.Tensor],
                 labels: list[torch.Tensor],
                 width: int, sparse_opt: torch.optim.Optimizer | None = None) -> None:
        self.pooled, self.batches, self.dense, self.labels = pooled, batches, dense, labels
        self.tower = mlp(width)
        self.opt = torch.optim.SGD(self.tower.parameters(), lr=LR)
        self.sparse_opt = sparse_opt
        self.i = 0

    def step(self) -> None:
        """One training step on the next batch."""
        self.i = (self.i + 1) % len(self.batches)
        self.opt.zero_grad(set_to_none=True)
        if self.sparse_opt is not None:
            self.sparse_opt.zero_grad(set_to_none=True)
        x = torch.cat([self.pooled(self.batches[self.i]), self.dense[self.i]], 1)
        loss = nn.functional.binary_cross_entropy_with_logits(self.tower(x), self.labels[self.i])
        loss.backward()
        self.opt.step()
        if self.sparse_opt is not None:
            self.sparse_opt.step()


def build(rows: list[int], batches: list[recgo.KeyedJaggedTensor]) -> dict[str, Model]:
    """The three variants over the same tables (identical initial weights) and batches."""
    import torchrec
    from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection

    dim = 64
    cfgs = [torchrec.EmbeddingBagConfig(num_embeddings=r, embedding_dim=dim, name=f"t{t}", feature_names=[f"f{t}"])
            for t, r in enumerate(rows)]
    gen = torch.Generator().manual_seed(1)
    b = batches[0].stride()
    dense = [torch.randn(b, 13, generator=gen) for _ in batches]
    labels = [torch.randint(0, 2, (b, 1), generator=gen).float() for _ in batches]
    width = dim * len(rows) + 13

    rg = recgo.EmbeddingBagCollection(cfgs, optimizer=modules.SGD(lr=LR), seed=1)
    init = {k: v for k, v in rg.state_dict().items() if k.endswith(".weight")}
    fused = FusedEmbeddingBagCollection(tables=cfgs, optimizer_type=torch.optim.SGD, optimizer_kwargs={"lr": LR},
                                        device=torch.device("cpu"))
    fused.load_state_dict(init)
    bags = nn.ModuleList(nn.EmbeddingBag(r, dim, mode="sum", sparse=True) for r in rows)
    with torch.no_grad():
        for t, bag in enumerate(bags):
            bag.weight.copy_(init[f"embedding_bags.t{t}.weight"])
    slices = bag_inputs(batches)
    tr_batches = [kjt.to_torchrec() for kjt in batches]
    index = {id(kjt): i for i, kjt in enumerate(batches)}

    def torch_pooled(kjt: recgo.KeyedJaggedTensor) -> torch.Tensor:
        return torch.cat([bag(v, o) for bag, (v, o) in zip(bags, slices[index[id(kjt)]])], 1)

    return {
        "recgo": Model(lambda kjt: rg(kjt).values(), batches, dense, labels, width),
        "torchrec_fused": Model(lambda kjt: fused(kjt).values(), tr_batches, dense, labels, width),
        "torch": Model(torch_pooled, batches, dense, labels, width,
                       sparse_opt=torch.optim.SGD(bags.parameters(), lr=LR)),
    }


def run(bench: Bench, quick: bool) -> dict[str, float]:
    """Time both workloads in this process; return the speedups."""
    out: dict[str, float] = {}
    batch = 512 if quick else 4096
    rows = 10_000 if quick else 200_000
    workloads = [("zipf26", [rows] * 26, zipf_batches(26, rows, batch, 2 if quick else 4, 1.05, seed=7))]
    crit = criteo_batches(batch, None)
    if crit is None:
        bench.note("Criteo sample not found: workload (b) skipped")
    else:
        workloads.append(("criteo26", crit[1], crit[0]))
    for name, vocab, batches in workloads:
        models = build(vocab, batches)
        res = bench.compare(name, {k: m.step for k, m in models.items()}, items=batches[0].stride(), warmup=2)
        out[f"{name}_speedup_vs_torchrec"] = res.ratio("recgo", "torchrec_fused")
        out[f"{name}_speedup_vs_torch"] = res.ratio("recgo", "torch")
        del models
        gc.collect()
    return out


def main() -> None:
    bench = Bench("end_to_end", description=__doc__, repeats=15)
    child = os.environ.get("RECGO_E2E_CHILD")
    if child:  # the second pass: time, print the summary as JSON and leave writing to the parent
        print("RESULT " + json.dumps(run(bench, bench.quick)), flush=True)
        return
    default = run(bench, bench.quick)
    cmd = [sys.executable, __file__] + (["--quick"] if bench.quick else []) + ["--repeats", str(bench.repeats)]
    env = os.environ | SPIN_ENV | {"RECGO_E2E_CHILD": "1"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    spin = json.loads(line[len("RESULT "):])
    summary = {f"{k}_openmp_default": v for k, v in default.items()}
    summary |= {f"{k}_openmp_spin10k": v for k, v in spin.items()}
    bench.summary(**summary)
    bench.data["openmp_spin10k"] = {"env": SPIN_ENV, "speedups": spin, "stdout": proc.stdout[-4000:]}
    omp = {k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    bench.note(f"the table is the pass with this process's OpenMP settings {omp}; the *_openmp_spin10k "
               f"figures come from a second process with {SPIN_ENV} (its times are in the JSON)")
    bench.note("one step = embedding forward + MLP forward + BCE loss + backward + dense SGD step (+ the "
               "sparse SGD step for torch; recgo and TorchRec update embeddings inside backward)")
    bench.write()


if __name__ == "__main__":
    main()
