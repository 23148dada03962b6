"""Whole training steps of real ranking models, side by side, and the AUC each backend reaches.

Built on ``recgo.train`` (the main job): the same model, data, initial weights and optimizers with
recgo's collections, TorchRec's (``FusedEmbeddingBagCollection``; ``EmbeddingCollection`` +
``apply_optimizer_in_backward``) or plain ``nn.EmbeddingBag``/``nn.Embedding(sparse=True)``.

* Throughput (interleaved steps, shuffled order per round, medians): DLRM on the synthetic
  Criteo-scale data (26 tables capped at 1M rows, D=64, B=4096), and the BST sequence model on the
  Taobao UserBehavior sample (history of 50 events, D=64, B=1024).
* AUC parity (full runs from the same weights): DLRM on the Criteo sample (fixed split: last 10 % of
  the labelled train head held out) and BST on the Taobao sample (each user's last event held out).
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Bench  # noqa: E402

import recgo  # noqa: E402
from recgo.train import TrainConfig, Trainer, make_source  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
CRITEO = DATA / "criteo" / "criteo_dac_train_head10109.txt"
TAOBAO = DATA / "taobao" / "taobao_UserBehavior_head.csv"


def backends() -> list[str]:
    """Backends this installation can build for every model (recgo's sequence collection may be absent)."""
    return ["recgo", "torchrec", "torch"]


def throughput(bench: Bench, case: str, cfg: TrainConfig, names: list[str]) -> dict[str, float]:
    """Interleaved training steps of every backend on the same few batches; returns recgo's speedups."""
    source = make_source(cfg)
    trainers = {b: Trainer(cfg, source, b) for b in names}
    stream = source.stream(depth=0)
    batches = [next(stream) for _ in range(4)]
    stream.close()
    state = {b: 0 for b in names}

    def stepper(b: str):
        def step() -> None:
            trainers[b].train_step(batches[state[b] % len(batches)], timed=False)
            state[b] += 1
        return step

    batch = batches[0].size
    res = bench.compare(case, {b: stepper(b) for b in names}, items=batch, warmup=2)
    out = {f"throughput_vs_{o}_{case.split('_')[0]}": res.ratio("recgo", o) for o in names if o != "recgo"}
    del trainers
    gc.collect()
    return out


def auc_gap(bench: Bench, case: str, cfg: TrainConfig, names: list[str]) -> dict[str, float]:
    """Train every backend for the configured steps; returns |AUC(recgo) − AUC(TorchRec)|."""
    source = make_source(cfg)
    final = {}
    for b in names:
        h = Trainer(cfg, source, b).run()
        final[b] = h.evals[-1]
        bench.data.setdefault("auc_runs", {}).setdefault(case, {})[b] = {"evals": h.evals,
                                                                        "train_loss": h.train_loss}
        gc.collect()
    line = ", ".join(f"{b} AUC {e['auc']:.4f} (log loss {e['log_loss']:.4f})" for b, e in final.items())
    print(f"  {case}: {line}", flush=True)
    bench.note(f"{case} after {cfg.steps} steps: {line}")
    return {f"auc_gap_{case}": abs(final["recgo"]["auc"] - final["torchrec"]["auc"]),
            f"auc_{case}_recgo": final["recgo"]["auc"], f"auc_{case}_torchrec": final["torchrec"]["auc"]}


def main() -> None:
    bench = Bench("end_to_end", description=__doc__, repeats=9)
    q = bench.quick
    names = backends()
    summary: dict[str, float] = {}
    dlrm = TrainConfig(model="dlrm", batch_size=512 if q else 4096, dim=16 if q else 64,
                       max_rows=20_000 if q else 1_000_000, seed=0)
    summary |= throughput(bench, "dlrm_synthetic", dlrm, names)
    if TAOBAO.exists():
        bst = TrainConfig(model="bst", data=str(TAOBAO), batch_size=256 if q else 1024, dim=16 if q else 64,
                          max_len=20 if q else 50, seed=0)
        summary |= throughput(bench, "sequence_taobao", bst, names)
        seq_auc = TrainConfig(model="bst", data=str(TAOBAO), batch_size=256, dim=16, max_len=50, seed=0,
                              steps=60 if q else 600, eval_every=30 if q else 100)
        summary |= auc_gap(bench, "taobao", seq_auc, ["recgo", "torchrec"])
    else:
        bench.note("Taobao sample not found: sequence cases skipped")
    if CRITEO.exists():
        crit = TrainConfig(model="dlrm", data=str(CRITEO), batch_size=512, dim=16, max_rows=100_000, seed=0,
                           steps=34 if q else 170, eval_every=17)
        summary |= auc_gap(bench, "criteo", crit, ["recgo", "torchrec"])
    else:
        bench.note("Criteo sample not found: the Criteo AUC case skipped")
    from end_to_end_nproc import nproc_cases  # the --nproc 2 cases, in their own module

    summary |= nproc_cases(bench, names)
    bench.summary(**summary)
    bench.note("one step = input conversion + embedding forward + dense forward + BCE + backward + dense Adam "
               "(+ the sparse optimizer step for plain torch; recgo and TorchRec update embeddings inside backward)")
    bench.note(f"torch threads {__import__('torch').get_num_threads()}, recgo threads {recgo.num_threads()}")
    bench.write()


if __name__ == "__main__":
    main()
