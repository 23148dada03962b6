"""Shapes beyond the headline workloads, side by side: recgo vs TorchRec's FusedEmbeddingBagCollection.

The cases a user comparing on their own model meets and that once fell behind (probed in session 28):
widths that are not a multiple of the vector width (12, 20), forward-only passes over long bags on
large tables (evaluation), and many small tables. Each variant gets its own batch type (recgo's or
TorchRec's KeyedJaggedTensor, the same IDs) and the same initial weights; a training step is forward
+ backward with the fused SGD update (lr 0.01), a forward-only step runs under ``torch.no_grad()``.

``summary``: ``speedup_vs_torchrec_<case>`` (TorchRec's median time over recgo's) per case.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Bench  # noqa: E402

import recgo  # noqa: E402

LR = 0.01


def _batches(tables: int, rows: int, batch: int, bag: tuple[int, int], n: int, seed: int) -> list[recgo.KeyedJaggedTensor]:
    """``n`` batches of uniform IDs, bag lengths uniform in ``bag`` (inclusive)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lengths = torch.randint(bag[0], bag[1] + 1, (tables * batch,), generator=g)
        out.append(recgo.KeyedJaggedTensor([f"f{t}" for t in range(tables)],
                                           torch.randint(0, rows, (int(lengths.sum()),), generator=g), lengths=lengths))
    return out


def case(bench: Bench, name: str, tables: int, rows: int, dim: int, batch: int, bag: tuple[int, int],
         train: bool) -> float:
    """Time one case and return recgo's speedup over TorchRec (median times)."""
    import torchrec
    from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection

    cfgs = [torchrec.EmbeddingBagConfig(num_embeddings=rows, embedding_dim=dim, name=f"t{t}", feature_names=[f"f{t}"])
            for t in range(tables)]
    fused = FusedEmbeddingBagCollection(tables=cfgs, optimizer_type=torch.optim.SGD, optimizer_kwargs={"lr": LR},
                                        device=torch.device("cpu"))
    holder = nn.ModuleDict({"e": fused})
    recgo.from_torchrec(holder)  # the same tables, weights and SGD (the FusedEBC itself stays as it was)
    ours = holder["e"]
    batches = _batches(tables, rows, batch, bag, 3, seed=len(name))
    theirs = [b.to_torchrec() for b in batches]
    grad = torch.randn(batch, tables * dim, generator=torch.Generator().manual_seed(1))
    first = ours(batches[0]).values()
    assert torch.allclose(first, fused(theirs[0]).values(), atol=1e-5), name  # the same tables

    def step(module: nn.Module, data: list[Any]) -> Callable[[], None]:
        it = [0]

        def run() -> None:
            b = data[it[0] % len(data)]
            it[0] += 1
            if train:
                module(b).values().backward(grad)
            else:
                with torch.no_grad():
                    module(b).values()
        return run

    res = bench.compare(name, {"recgo": step(ours, batches), "torchrec_fused": step(fused, theirs)},
                        items=batch, warmup=2)
    return res.ratio("recgo", "torchrec_fused")


def main() -> None:
    bench = Bench("shapes", description=__doc__)
    torch.set_num_threads(1)
    recgo.set_num_threads(1)
    q = bench.quick
    big = 100_000 if q else 1_000_000
    cases = [  # name, tables, rows, dim, batch, bag lengths, train
        ("d12_train", 8, 100_000, 12, 4096, (1, 10), True),
        ("d20_train", 8, 100_000, 20, 4096, (1, 10), True),
        ("d12_forward", 8, 100_000, 12, 4096, (1, 10), False),
        ("bag100_d64_forward", 2, big, 64, 2048 if not q else 512, (100, 100), False),
        ("bag1000_d128_forward", 2, big, 128, 256 if not q else 64, (1000, 1000), False),
        ("tables500_d16_forward", 500, 1000, 16, 512, (1, 1), False),
    ]
    for name, *args in cases:
        bench.summary(**{f"speedup_vs_torchrec_{name}": case(bench, name, *args)})
    bench.note("threads: torch 1, recgo 1 on both sides; TorchRec's FusedEmbeddingBagCollection runs FBGEMM's CPU "
               "kernels; recgo's collection is the same tables converted with recgo.from_torchrec")
    bench.note_load()
    bench.write()


if __name__ == "__main__":
    main()
