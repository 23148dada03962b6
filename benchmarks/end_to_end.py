"""Whole training steps of real ranking models, side by side, and the AUC each backend reaches.

Built on ``recgo.train`` (the main job): the same model, data, initial weights and optimizers with
recgo's collections, TorchRec's (``FusedEmbeddingBagCollection``; ``EmbeddingCollection`` +
``apply_optimizer_in_backward``) or plain ``nn.EmbeddingBag``/``nn.Embedding(sparse=True)``.

* Throughput (interleaved steps, shuffled order per round, medians): DLRM on the synthetic
  Criteo-scale data (26 tables capped at 1M rows, D=64, B=4096), and the BST sequence model on the
  Taobao UserBehavior sample (D=64, B=1024, histories of up to 200 events, and of up to 50). The
  sequence cases also time "dense only": the same Transformer and MLP (forward, backward, Adam) on
  precomputed inputs with no embedding work at all, the floor every backend's step stands on, and
  "embedding only": each backend's lookups, padded view, backward and update with no Transformer.
  The ``_catalog`` cases train the same sequence models on tables sized to the whole UserBehavior
  dataset's vocabulary (4.16M items, 9,439 categories, 988k users; ``TrainConfig.catalog``), the size a
  model trained on all of it has, where the sample's own vocabulary gives tables of 55k items.
* AUC parity (full runs from the same weights): DLRM on the Criteo sample (fixed split: last 10 % of
  the labelled train head held out) and BST on the Taobao sample (each user's last 10 events held out;
  learning rates warmed up and decayed linearly, see :func:`taobao_config`). For scale, the Taobao case
  also trains recgo from weights nudged by one ulp and plain torch, whose gaps show how far rounding
  alone moves the final AUC after that many Adagrad steps. ``--only taobao-auc`` runs that case alone
  and folds its figures into the previous results files.
* The ablation of RecIS Fig. 7 on the sequence model (``recgo.train.ablation``): samples/s with
  the pipeline, the fused transforms and dedup switched off one after the other.
"""

from __future__ import annotations

import copy
import gc
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _steps import embedding_only_step, first_batches, steppers  # noqa: E402
from harness import DATA, Bench  # noqa: E402

import recgo  # noqa: E402
from recgo.train import TrainConfig, Trainer, make_source  # noqa: E402
from recgo.train.ablation import markdown as ablation_markdown, run_ablation  # noqa: E402
from recgo.train.models import bst_inputs  # noqa: E402

CRITEO = DATA / "criteo" / "criteo_dac_train_head10109.txt"
TAOBAO = DATA / "taobao" / "taobao_UserBehavior_head.csv"


def backends() -> list[str]:
    """Backends this installation can build for every model (recgo's sequence collection may be absent)."""
    return ["recgo", "torchrec", "torch"]


def _dense_only(trainer: Trainer, batches: list) -> "callable":
    """A step of the trainer's dense half alone (forward, BCE, backward, Adam; a copy of it) on inputs
    precomputed from ``batches``, which require grad as the embeddings do in a real step."""
    m = trainer.model
    with torch.no_grad():
        inputs = [[x.detach().clone() for x in bst_inputs(m.forward_sparse(m.sparse.prepare(b.sparse)), m.max_len)]
                  for b in batches]
    for xs in inputs:
        for x in xs:
            if x.dtype.is_floating_point:
                x.requires_grad_()
    dense = copy.deepcopy(m.dense)
    opt = torch.optim.Adam(dense.parameters(), lr=trainer.cfg.dense_lr)
    state = [0]

    def step() -> None:
        i = state[0] % len(batches)
        state[0] += 1
        for x in inputs[i]:
            x.grad = None
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(dense(*inputs[i]), batches[i].labels)
        loss.backward()
        opt.step()
    return step


def throughput(bench: Bench, case: str, cfg: TrainConfig, names: list[str], tag: str | None = None) -> dict[str, float]:
    """Interleaved training steps of every backend on the same few batches; returns recgo's speedups
    (and, for the sequence model, the split into the dense floor and each backend's embedding work),
    keyed by ``tag`` (default: the case name's first word)."""
    source = make_source(cfg)
    trainers = {b: Trainer(cfg, source, b) for b in names}
    batches = first_batches(source)
    variants = steppers(trainers, batches)
    if cfg.model == "bst":
        variants["dense only"] = _dense_only(trainers["recgo"], batches)
    batch = batches[0].size
    res = bench.compare(case, variants, items=batch, warmup=2)
    tag = tag or case.split("_")[0]
    out = {f"throughput_vs_{o}_{tag}": res.ratio("recgo", o) for o in names if o != "recgo"}
    if cfg.model == "bst":
        emb = bench.compare(f"{case}_embedding_only",
                            {b: embedding_only_step(trainers[b].model.sparse, batches, cfg.dim, cfg.max_len)
                             for b in names}, items=batch, warmup=2)
        for o in names:
            out[f"{tag}_embedding_only_ms_{o}"] = 1e3 * emb.median(o)
            if o != "recgo":
                out[f"{tag}_embedding_only_vs_{o}"] = emb.ratio("recgo", o)
        ms = {v: 1e3 * res.median(v) for v in variants}
        floor = ms["dense only"]
        out[f"{tag}_dense_only_ms"] = floor
        for b in names:
            out[f"{tag}_step_ms_{b}"] = ms[b]
        out[f"{tag}_ceiling_vs_torchrec"] = ms["torchrec"] / floor
        lens = batches[0].sparse.lengths().view(len(source.keys), -1)[0].double()
        bench.note(f"{case}: B {batch}, D {cfg.dim}, history cap {cfg.max_len} (mean history {lens.mean():.1f} "
                   f"events, {100 * float((lens == cfg.max_len).double().mean()):.0f}% at the cap); dense only "
                   f"{floor:.0f} ms of TorchRec's {ms['torchrec']:.0f} ms step: recgo's speedup over TorchRec is at most "
                   f"{ms['torchrec'] / floor:.2f}x even with free embeddings; the embedding work alone (lookups, padded "
                   f"view, backward, update; case {case}_embedding_only): "
                   + ", ".join(f"{b} {1e3 * emb.median(b):.0f} ms" for b in names))
    trainers.clear()
    gc.collect()
    return out


def _nudge_one_ulp(trainer: Trainer) -> None:
    """Move every embedding weight of the trainer by one ulp towards +inf."""
    own = trainer.model.sparse.module.state_dict()
    with torch.no_grad():
        for k, w in own.items():
            if k.endswith(".weight"):
                w.copy_(torch.nextafter(w, torch.full_like(w, float("inf"))))


@torch.no_grad()
def _validation_scores(trainer: Trainer) -> torch.Tensor:
    """The trained model's logits on the whole validation split, in order."""
    m = trainer.model
    m.eval()
    out = torch.cat([m.forward_dense(b.dense, m.forward_sparse(m.sparse.prepare(b.sparse))) for b in trainer._val])
    m.train()
    return out.double()


def auc_gap(bench: Bench, case: str, cfg: TrainConfig, names: list[str], rounding: bool = False) -> dict[str, float]:
    """Train every backend for the configured steps; returns |AUC(recgo) − AUC(TorchRec)| (and, with
    ``rounding``, the gaps of recgo from one-ulp-nudged weights and of plain torch, for scale, and how far
    each run's validation logits lie from recgo's: RMS difference over RMS of recgo's centred logits)."""
    source = make_source(cfg)
    runs = [(b, b, False) for b in names]
    if rounding:
        runs += [("recgo, weights +1 ulp", "recgo", True), ("torch", "torch", False)]
    final, scores = {}, {}
    for label, b, nudge in runs:
        trainer = Trainer(cfg, source, b)
        if nudge:
            _nudge_one_ulp(trainer)
        h = trainer.run()
        trainer.close()
        final[label] = h.evals[-1]
        if rounding:
            scores[label] = _validation_scores(trainer)
        bench.data.setdefault("auc_runs", {}).setdefault(case, {})[label] = {"evals": h.evals,
                                                                            "train_loss": h.train_loss}
        del trainer
        gc.collect()
    line = ", ".join(f"{b} AUC {e['auc']:.4f} (log loss {e['log_loss']:.4f})" for b, e in final.items())
    print(f"  {case}: {line}", flush=True)
    n_val = sum(b.size for b in source.validation())
    bench.note(f"{case} after {cfg.steps} steps ({n_val} validation samples): {line}")
    out = {f"auc_gap_{case}": abs(final["recgo"]["auc"] - final["torchrec"]["auc"]),
           f"auc_{case}_recgo": final["recgo"]["auc"], f"auc_{case}_torchrec": final["torchrec"]["auc"]}
    if rounding:
        out[f"auc_gap_{case}_recgo_one_ulp"] = abs(final["recgo"]["auc"] - final["recgo, weights +1 ulp"]["auc"])
        out[f"auc_gap_{case}_torch_vs_torchrec"] = abs(final["torch"]["auc"] - final["torchrec"]["auc"])
        ref = scores["recgo"]
        spread = float((ref - ref.mean()).pow(2).mean().sqrt())
        for label, key in (("torchrec", "torchrec"), ("recgo, weights +1 ulp", "recgo_one_ulp"), ("torch", "torch")):
            if label in scores:
                out[f"score_rel_diff_{case}_{key}"] = float((scores[label] - ref).pow(2).mean().sqrt()) / spread
        bench.note(f"{case}: validation logits' RMS difference from recgo's, relative to their spread: "
                   + ", ".join(f"{k.split(case + '_')[-1]} {v:.2e}" for k, v in out.items() if k.startswith("score_")))
    return out


def taobao_config(quick: bool) -> TrainConfig:
    """The Taobao AUC case's run: BST with GELU at B 256, D 16, histories of up to 50 events, each user's last
    10 events held out, the dense learning rate (3e-3) warmed up linearly over 100 steps and decayed linearly
    to 0 at the last step (sparse Adagrad at a constant rate)."""
    return TrainConfig(model="bst", data=str(TAOBAO), batch_size=256, dim=16, max_len=50, seed=0,
                       holdout_events=10, activation="gelu", dense_lr=3e-3, lr_decay="linear",
                       warmup_steps=10 if quick else 100,
                       steps=60 if quick else 600, eval_every=30 if quick else 100)


def taobao_auc(bench: Bench) -> dict[str, float]:
    """The Taobao AUC case (recgo, TorchRec, recgo from weights one ulp away, plain torch)."""
    cfg = taobao_config(bench.quick)
    bench.data["taobao_auc_config"] = {k: getattr(cfg, k) for k in (
        "batch_size", "dim", "max_len", "steps", "eval_every", "holdout_events", "sparse_optimizer", "sparse_lr",
        "dense_lr", "warmup_steps", "lr_decay", "activation", "seed")}
    out = auc_gap(bench, "taobao", cfg, ["recgo", "torchrec"], rounding=True)
    bench.note(f"taobao config: {bench.data['taobao_auc_config']}. With ReLU and a constant dense learning rate "
               "from step 0 (the previous configuration) this run is chaotic: a ReLU of one sample flipping on a "
               "rounding error changes the gradient of its rows whole, and Adagrad's near ±lr moves on rows with "
               "tiny accumulated gradients make that an lr-sized change of the rows, so two runs one ulp apart end "
               "at visibly different AUCs (docs/training.md, 'Whole models')")
    return out


def _merge_into_previous(bench: Bench, summary: dict[str, float]) -> None:
    """``--only taobao-auc``: fold this run's Taobao AUC figures into the previous full run's results (every
    other summary key, case and note kept) instead of replacing them."""
    from harness import machine_info

    jpath, mpath = bench.args.out / "end_to_end.json", bench.args.out / "end_to_end.md"
    doc = json.loads(jpath.read_text())
    doc["summary"].update(summary)
    doc["data"].setdefault("auc_runs", {}).update(bench.data.get("auc_runs", {}))
    doc["data"]["taobao_auc_config"] = bench.data["taobao_auc_config"]
    command = "python " + " ".join(sys.argv)
    doc.setdefault("partial_runs", []).append({"command": command, "quick": bench.quick, "updated": sorted(summary),
                                               "machine": machine_info()})
    jpath.write_text(json.dumps(doc, indent=2, default=float) + "\n")
    lines = mpath.read_text().splitlines()
    shown = {k: i for i, line in enumerate(lines) for k in summary if line.startswith(f"- `{k}`: ")}
    for k, v in summary.items():
        if k in shown:
            lines[shown[k]] = f"- `{k}`: {v:.4g}"
    last = max(i for i, line in enumerate(lines) if line.startswith("- `"))
    lines[last + 1:last + 1] = [f"- `{k}`: {v:.4g}" for k, v in summary.items() if k not in shown]
    lines = [line for line in lines if not line.startswith(("- taobao after", "- taobao config", "- taobao: ",
                                                             "- the Taobao AUC figures"))]
    notes = [f"- {n}" for n in bench.notes] + [
        f"- the Taobao AUC figures above come from `{command}` (only that case re-run); every other figure is "
        f"from `{doc['command']}`"]
    at = next((i for i, line in enumerate(lines) if line.startswith("- criteo after")), last + 2)
    lines[at:at] = notes
    mpath.write_text("\n".join(lines) + "\n")
    print("\n".join(notes))


def main() -> None:
    bench = Bench("end_to_end", description=__doc__, repeats=9, options=lambda p: p.add_argument(
        "--only", choices=["taobao-auc"], help="run only this case and merge it into the results in --out"))
    q = bench.quick
    if bench.args.only is not None:
        previous = bench.args.out / "end_to_end.json"
        if not TAOBAO.exists() or not previous.exists():  # checked before any training
            raise SystemExit(f"--only {bench.args.only}: needs {TAOBAO} and a full run's {previous} to merge into")
        if bool(json.loads(previous.read_text()).get("quick")) != q:  # quick figures under a full run's keys
            raise SystemExit(f"--only {bench.args.only}: {previous} is a {'full' if q else '--quick'} run's; merge "
                             f"a {'full' if q else '--quick'} run into it (or give --out another run's folder)")
        _merge_into_previous(bench, taobao_auc(bench))
        return
    names = backends()
    summary: dict[str, float] = {}
    dlrm = TrainConfig(model="dlrm", batch_size=512 if q else 4096, dim=16 if q else 64,
                       max_rows=20_000 if q else 1_000_000, seed=0)
    summary |= throughput(bench, "dlrm_synthetic", dlrm, names)
    ablation_md: list[str] = []
    if TAOBAO.exists():
        bst = TrainConfig(model="bst", data=str(TAOBAO), batch_size=256 if q else 1024, dim=16 if q else 64,
                          max_len=50 if q else 200, seed=0)
        summary |= throughput(bench, "sequence_taobao", bst, names)
        bst50 = TrainConfig(**{**bst.__dict__, "max_len": 20 if q else 50})
        summary |= throughput(bench, "sequenceL50_taobao", bst50, names)
        for tag, c in (("sequence_catalog", bst), ("sequenceL50_catalog", bst50)):  # tables of the whole dataset
            summary |= throughput(bench, f"{tag}_taobao", TrainConfig(**{**c.__dict__, "catalog": True}), names, tag=tag)
        summary |= taobao_auc(bench)
        rows = run_ablation(bst50, steps=3 if q else 12, warmup=2, repeats=2 if q else 3)
        bench.data["ablation"] = rows
        bench.data["ablation_config"] = {"batch_size": bst50.batch_size, "dim": bst50.dim, "max_len": bst50.max_len}
        for r in rows:
            key = r["variant"].split(" (")[0].replace(" ", "_").lower()
            summary[f"ablation_{key}_samples_per_second"] = r["samples_per_second"]
        ablation_md = ablation_markdown(rows) + [f"(B {bst50.batch_size}, D {bst50.dim}, history cap {bst50.max_len}.)",
                                                 "", "![ablation](end_to_end_ablation.png)", ""]
        from recgo.train.ablation import plot as ablation_plot

        bench.args.out.mkdir(parents=True, exist_ok=True)
        if not ablation_plot(rows, bench.args.out / "end_to_end_ablation.png"):
            ablation_md = ablation_md[:-3]
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
    bench.write("\n".join(ablation_md))


if __name__ == "__main__":
    main()
