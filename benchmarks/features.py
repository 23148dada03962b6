"""FeatureEngine vs the per-field torch reference (RecIS §3.1, Table 2).

For synthetic ranking-model configs of 26, 400 and 2,000 fields (chains of 2–5 transforms: hash,
mod, bucketize, truncate, filter, fill_missing, cross), B = 4096 samples, behaviour-sequence lengths
log-normal (long tail, capped at 500), this times side by side in one process:

* ``recgo_fused``: ``FeatureEngine`` on a KeyedJaggedTensor (+ dense float dict): one run + one
  fetch call per batch, fused groups in Go;
* ``recgo_unfused``: the same engine with ``fuse=False`` (one Go call per op, field by field), the
  ablation that isolates fusion from the language;
* ``torch_per_field``: :func:`recgo.feature.reference.reference`, each field's chain with vectorised
  torch ops (what the tests compare against), timed both with one torch thread and with torch's
  default thread count; the speedups use whichever was faster (on a busy 2-core machine one thread
  was many times faster: OpenMP workers spin against other processes).

Outputs are checked equal before timing. The report also gives invocations before/after fusion,
and the engine's construction time for one chain of 1,000, 3,000 and 10,000 ops (planning used to
grow cubically with chain length; the planner is now near-linear).

    python benchmarks/features.py           # full: B=4096
    python benchmarks/features.py --quick   # B=512, under a minute (torch's default-thread
                                            # variant only at 26 fields)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from harness import Bench  # noqa: E402

import recgo  # noqa: E402
from recgo.feature import Feature, FeatureEngine  # noqa: E402
from recgo.feature.reference import reference  # noqa: E402
from feature_synthetic import synthetic_batch, synthetic_features  # noqa: E402


def main() -> None:
    bench = Bench("features", description=__doc__)
    size = 512 if bench.quick else 4096
    default_threads = torch.get_num_threads()
    table2 = []
    summary = {}
    for n in (26, 400, 2000):
        feats = synthetic_features(n, seed=n)
        fused, unfused = FeatureEngine(feats), FeatureEngine(feats, fuse=False)
        batch, ints = synthetic_batch(feats, size, seed=n)
        kjt = recgo.KeyedJaggedTensor.from_jagged_dict({k: batch[k] for k in ints})
        dense = {k: v for k, v in batch.items() if k not in ints}
        out = fused(kjt, dense=dense)
        ref = reference(feats, batch, size)
        got = out.to_dict()
        for k, (v, l) in ref.items():
            assert torch.equal(got[k].values(), v) and torch.equal(got[k].lengths(), l), f"{n} fields: {k} differs from the reference"
        out2 = unfused(kjt, dense=dense)
        assert torch.equal(out2.values(), out.values()) and torch.equal(out2.lengths(), out.lengths())
        values_in = kjt.values().numel() + sum(v.numel() for v in dense.values())
        def torch_ref(threads: int, feats=feats, batch=batch) -> None:
            torch.set_num_threads(threads)
            try:
                reference(feats, batch, size)
            finally:
                torch.set_num_threads(default_threads)

        variants = {
            "recgo_fused": lambda: fused(kjt, dense=dense),
            "recgo_unfused": lambda: unfused(kjt, dense=dense),
            "torch_per_field_1_thread": lambda: torch_ref(1),
        }
        if default_threads > 1 and not (bench.quick and n > 26):  # seconds per call when it spins
            variants[f"torch_per_field_{default_threads}_threads"] = lambda: torch_ref(default_threads)
        res = bench.compare(
            f"{n}_fields",
            variants,
            items=size,
            repeats=bench.repeats if n < 2000 or bench.quick else max(3, bench.repeats - 2),
        )
        p = fused.plan()
        res.extra.update({"fields": n, "batch": size, "input_values": values_in, "output_values": out.values().numel(),
                          "calls_before": p.calls_before, "calls_after": p.calls_after,
                          "groups": [[g.op, len(g.features)] for g in p.groups]})
        table2.append((n, p.calls_before, p.calls_after, p.reduction))
        best_torch = min((v for v in variants if v.startswith("torch")), key=res.median)
        res.extra["best_torch_variant"] = best_torch
        summary[f"speedup_{n}_fields"] = round(res.ratio("recgo_fused", best_torch), 3)
        summary[f"fusion_speedup_{n}_fields"] = round(res.ratio("recgo_fused", "recgo_unfused"), 3)
        summary[f"call_reduction_{n}_fields"] = round(p.reduction, 4)
        bench.data[f"plan_{n}_fields"] = p.table()
    for n_ops in (1000, 3000, 10000):
        f = Feature("chain")
        for i in range(n_ops // 4):
            f.hash(i).mod(1 << 40).truncate(3).fill_missing(0)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            FeatureEngine([f])
            times.append(time.perf_counter() - t0)
        summary[f"build_s_{n_ops}_op_chain"] = round(sorted(times)[1], 4)
    order = ["speedup_26_fields", "speedup_400_fields", "speedup_2000_fields", "call_reduction_2000_fields"]
    bench.summary(**{k: summary[k] for k in order + [k for k in summary if k not in order]})
    bench.note(f"B = {size}; recgo threads = {recgo.num_threads()}, torch threads = {torch.get_num_threads()}; "
               "items/s counts samples. Outputs verified equal to the torch reference before timing. "
               "speedup_* compare recgo_fused with the faster torch variant of each case.")
    md = ["## Operator invocations before and after fusion (RecIS Table 2 style)", "",
          "| fields | calls field by field (Σ d_i) | fused calls (|G|) | reduction |", "|---:|---:|---:|---:|"]
    md += [f"| {n} | {b} | {a} | {r:.1%} |" for n, b, a, r in table2]
    md += ["", "Fused groups at 2,000 fields:", "", "```", bench.data["plan_2000_fields"], "```", ""]
    bench.write("\n".join(md))


if __name__ == "__main__":
    main()
