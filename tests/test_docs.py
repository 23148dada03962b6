"""The README and the pages under docs/ stay true: their links resolve, and the single-process
examples a newcomer copies first run as printed, without a warning (a deprecated name in an example
would teach it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import recgo
from recgo import _extras
from recgo.modules import optim

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _prose(text: str) -> str:
    """The page without its fenced code blocks (a comment line there is not a heading)."""
    return FENCE.sub("", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", _prose(page.read_text()), re.M)}


def _block(page: Path, starts_with: str) -> str:
    """The page's python block whose first line starts with starts_with."""
    for lang, body in FENCE.findall(page.read_text()):
        if lang == "python" and body.startswith(starts_with):
            return body
    raise AssertionError(f"{page.name} has no python block starting with {starts_with!r}")


def _run(code: str, filename: str, scope: dict) -> None:
    """Run a page's example with recgo's warnings as errors (an example must not teach a deprecated
    name); TorchRec's and FBGEMM's import-time DeprecationWarnings are theirs, not the page's."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"(fbgemm_gpu|torchrec)(\.|$)")
        exec(compile(code, filename, "exec"), scope)


def test_the_slug_rule_matches_githubs_on_this_projects_headings() -> None:
    assert _slug("Training (`recgo train`)") == "training-recgo-train"
    assert _slug("Threads, copies, checkpoints (the reliability contract)") == (
        "threads-copies-checkpoints-the-reliability-contract")
    assert _slug("Install (a wheel)") == "install-a-wheel"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    bad = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{target}: no heading with that anchor in {dest.name}")
    assert not bad, f"{page.name}: " + "; ".join(bad)


def test_every_docs_page_is_in_the_readmes_guide() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [p.name for p in PAGES[1:] if f"(docs/{p.name})" not in readme]
    assert not missing, f"docs pages the README's guide does not list: {missing}"


def _kjt(keys: list[str], lengths: list[int], rows: int) -> recgo.KeyedJaggedTensor:
    g = torch.Generator().manual_seed(0)
    lengths_t = torch.tensor(lengths)
    values = torch.randint(0, rows, (int(lengths_t.sum()),), generator=g)
    return recgo.KeyedJaggedTensor(keys=keys, values=values, lengths=lengths_t)


def test_the_readmes_first_example_trains_and_checkpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = _block(ROOT / "README.md", "import torch\nimport recgo")
    assert code == _block(ROOT / "docs" / "embedding.md", "import torch\nimport recgo")  # the page repeats it
    scope: dict = {}  # the example defines all it uses
    _run(code, "README.md", scope)
    pooled, ebc = scope["pooled"], scope["ebc"]
    assert pooled.values().shape == (2, 3 * 64)  # user_id and friend_ids on users, item_id on item
    # item is mean-pooled; the second sample has no item: zeros, as TorchRec gives
    assert torch.equal(pooled["item_id"][1], torch.zeros(64))
    assert (tmp_path / "ckpt.pt").exists()
    # the backward updated rows: a fresh forward differs from the first one
    assert not torch.equal(ebc(scope["kjt"]).values(), pooled.values())


def test_the_sequence_pages_first_example_pads_the_history() -> None:
    code = _block(ROOT / "docs" / "sequence.md", "import recgo\nfrom recgo.modules import optim\n\nec = recgo.EmbeddingCollection(")
    scope = {"recgo": recgo, "optim": optim, "kjt": _kjt(["hist_item_ids"], [3, 0, 250], 1_000_000)}
    _run(code, "docs/sequence.md", scope)
    x, mask = scope["x"], scope["mask"]
    assert x.shape == (3, 200, 64) and mask.shape == (3, 200)
    assert int((~mask).sum()) == 3 + 0 + 200  # the third history keeps its last 200 events


def test_the_feature_pages_example_builds_and_runs() -> None:
    code = _block(ROOT / "docs" / "features.md", "import recgo\nfrom recgo import Feature, FeatureEngine")
    scope = {"raw_kjt": _kjt(["hist"], [2, 60], 10**9),  # recgo: the snippet imports it
             "prices": torch.tensor([0.5, 20.0]), "sites": [b"a.example", b""]}
    _run(code, "docs/features.md", scope)
    kjt = scope["kjt"]
    assert set(kjt.keys()) == {"hist", "price", "site", "hist_x_site"}
    assert kjt["hist"].lengths().tolist() == [2, 50]


class _SmallDLRM(torch.nn.Module):
    """The model the pipeline page leaves to the reader: a fused collection named ``ebc`` over the
    page's 26 features and a linear layer over the pooled rows and the 13 dense columns."""

    def __init__(self) -> None:
        super().__init__()
        tables = [recgo.EmbeddingBagConfig(100_000, 4, f"t{i}", [f"C{i}"]) for i in range(1, 27)]
        self.ebc = recgo.EmbeddingBagCollection(tables, optimizer=optim.SGD(lr=0.1), seed=0)
        self.top = torch.nn.Linear(26 * 4 + 13, 1)

    def forward(self, sparse: recgo.KeyedJaggedTensor, dense: torch.Tensor) -> torch.Tensor:
        return self.top(torch.cat([self.ebc(sparse).values(), dense], dim=1))


def _write_criteo_gz(path: Path, lines: int) -> None:
    import gzip
    g = torch.Generator().manual_seed(1)
    labels = torch.randint(0, 2, (lines,), generator=g).tolist()
    ints = torch.randint(0, 50, (lines, 13), generator=g).tolist()
    cats = torch.randint(0, 2**32, (lines, 26), generator=g).tolist()
    with gzip.open(path, "wt") as f:
        for y, i, c in zip(labels, ints, cats):
            f.write("\t".join([str(y), *map(str, i), *(format(v, "08x") for v in c)]) + "\n")


def test_the_pipeline_pages_whole_script_trains_on_a_criteo_file(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write_criteo_gz(tmp_path / "day_0.gz", 5000)
    code = _block(ROOT / "docs" / "pipeline.md", "import torch, recgo")
    scope = {"MyDLRM": _SmallDLRM}
    _run(code, "docs/pipeline.md", scope)
    losses = scope["losses"]
    assert len(losses) == 2  # 4096 samples, then the 904 left
    assert all(0.0 < float(x) < 10.0 for x in losses)
    assert (tmp_path / "ckpt.pt").exists()


def test_the_planner_pages_example_plans_and_remaps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")  # plan.save draws the plan's PNGs
    monkeypatch.chdir(tmp_path)
    code = _block(ROOT / "docs" / "planner.md", "from recgo import planner as P")
    if not _extras.has("torchrec"):  # the page's last line exports the plan to TorchRec: the compare extra
        code = "\n".join(line for line in code.splitlines() if not line.startswith("P.torchrec_"))
    tables = [recgo.EmbeddingBagConfig(5_000, 16, f"t{i}", [f"f{i}"]) for i in range(3)]
    keys = [f"f{i}" for i in range(3)]
    # 1 % is kept: 8 × 8,192 samples of 2 IDs on average leave about 1,300 lookups per table, enough
    batches = [_kjt(keys, [1 + (i % 3) for i in range(3 * 8192)], 5_000) for _ in range(8)]
    scope = {"kjt_batches": batches, "tables": tables, "my_ebc": recgo.EmbeddingBagCollection(tables, seed=0)}
    _run(code, "docs/planner.md", scope)
    assert (tmp_path / "plan" / "plan.json").exists() and (tmp_path / "plan" / "remap.bin").exists()
    ebc = scope["ebc"]
    # remapped hot rows first, the collection still pools each ID's own row
    assert torch.allclose(ebc(batches[0]).values(), scope["my_ebc"](batches[0]).values())


def _sharding_page_rank(rank: int, world: int) -> dict:
    """One rank of the sharding page's first example on 2 nodes × 2 ranks, in the world's folder."""
    import os
    os.chdir(os.environ["RECGO_TEST_OUT"])
    code = _block(ROOT / "docs" / "sharding.md", "from recgo.distributed import ShardedEmbeddingBagCollection")
    tables = [recgo.EmbeddingBagConfig(1_000, 8, "users", ["user_id"]),
              recgo.EmbeddingBagConfig(500, 8, "item", ["item_id"]),
              recgo.EmbeddingBagConfig(10, 4, "small", ["hour"])]
    keys, b = ["user_id", "item_id", "hour"], 3
    g = torch.Generator().manual_seed(rank)
    lengths = torch.randint(0, 3, (len(keys) * b,), generator=g)
    values = torch.cat([torch.randint(0, rows, (int(n),), generator=g)
                        for rows, n in zip([1_000] * b + [500] * b + [10] * b, lengths)])
    local_kjt = recgo.KeyedJaggedTensor(keys, values, lengths=lengths)
    scope = {"tables": tables, "local_kjt": local_kjt, "optim": optim}
    _run(code, "docs/sharding.md", scope)
    # the same rows as one process's collection with the same seed
    whole = recgo.EmbeddingBagCollection(tables, seed=0)
    out = {"pooled": scope["pooled"].values().detach(), "want": whole(local_kjt).values().detach(),
           "traffic": scope["ebc"].traffic()}
    # the dynamic-ID table example: IDs far outside any range, admitted on their second sighting
    scope = {"recgo": recgo, "optim": optim, "ShardedEmbeddingBagCollection": recgo.distributed.ShardedEmbeddingBagCollection,
             "local_kjt": recgo.KeyedJaggedTensor(["user_id", "hour"], torch.tensor([-(10**15), 2**62, 3]),
                                                  lengths=torch.tensor([1, 1, 0, 1]))}
    code = _block(ROOT / "docs" / "sharding.md", "users = recgo.EmbeddingBagConfig(")
    _run(code, "docs/sharding.md", scope)
    first = scope["pooled"].values().detach()
    _run(code.split("\n", 3)[3], "docs/sharding.md", scope)  # the same batch again, on the same collection
    out["dynamic"] = (first, scope["pooled"].values().detach(), recgo.dynamic.stats(scope["ebc"], "users").rows)
    # the page's whole-model example, with the model and loss it leaves to the reader
    model_code = _block(ROOT / "docs" / "sharding.md", 'with torch.device("meta"):')
    scope = {"torch": torch, "shard_model": recgo.distributed.shard_model, "tables": tables[::2],
             "Model": _ShardedPageModel, "local_kjt": local_kjt, "labels": torch.ones(b, 1),
             "loss_fn": torch.nn.functional.binary_cross_entropy_with_logits}
    _run(model_code, "docs/sharding.md", scope)
    out["loss"] = float(scope["loss"])
    return out


class _ShardedPageModel(torch.nn.Module):
    """The sharding page's ``Model``: a fused collection over the given tables and a linear layer."""

    def __init__(self, tables: list) -> None:
        super().__init__()
        self.ebc = recgo.EmbeddingBagCollection(tables, optimizer=optim.SGD(lr=0.1), seed=0)
        self.top = torch.nn.Linear(sum(t.embedding_dim for t in tables), 1)

    def forward(self, kjt: recgo.KeyedJaggedTensor) -> torch.Tensor:
        return self.top(self.ebc(kjt).values())


def test_the_sharding_pages_example_runs_on_2_nodes_of_2(tmp_path: Path) -> None:
    from spawned import ok, spawn
    res = spawn(_sharding_page_rank, 4, tmp_path)
    ok(res)
    for r in res:
        assert r["pooled"].shape == (3, 8 + 8 + 4)
        assert torch.allclose(r["pooled"], r["want"], rtol=1e-6, atol=1e-7)
        assert r["traffic"]
        assert 0.0 < r["loss"] < 10.0
        first, second, _ = r["dynamic"]
        assert not first.any() and second[:2].abs().sum(1).gt(0).all()  # admitted on the second sighting
    assert sum(r["dynamic"][2] for r in res) == 2  # every rank fed the same two user IDs: one owner each


def test_the_sequence_pages_shared_table_takes_one_merged_step() -> None:
    page = ROOT / "docs" / "sequence.md"
    scope: dict = {"recgo": recgo, "optim": optim}
    _run(_block(page, "ebc = recgo.EmbeddingBagCollection("), "docs/sequence.md", scope)
    ebc, ec = scope["ebc"], scope["ec"]
    assert ec.embeddings.item is ebc.embedding_bags.item
    batch = recgo.KeyedJaggedTensor(["item_id", "hist_item_ids"], torch.tensor([7, 8, 7, 7, 9]),
                                    lengths=torch.tensor([1, 1, 2, 1]))
    before = ebc.embedding_bags.item.weight.detach()[[7, 8, 9]].clone()
    scope["model"] = lambda b: ebc(b).values().sum() + ec(b)["hist_item_ids"].values().sum()
    scope["batch"] = batch
    _run(_block(page, "with ec.merged_update():"), "docs/sequence.md", scope)
    assert int(ebc.state_dict()["embedding_bags.item.optimizer_step"]) == 1  # one step for both uses
    # SGD on a sum: each row moves by lr × its number of lookups over both collections
    after = ebc.embedding_bags.item.weight.detach()[[7, 8, 9]]
    assert torch.allclose(before - after, 0.05 * torch.tensor([3.0, 1.0, 1.0])[:, None].expand(3, 64))


def test_the_documented_submodules_need_no_import_of_their_own() -> None:
    """README's one-line switch, ``recgo.distributed.shard_model(model)`` after ``import recgo``,
    raised AttributeError: the submodule was never imported. recgo imports it on first use (and
    recgo.train, recgo.feature.reference, recgo.planner.synthetic/criteo, which the docs also use so)."""
    code = ("import recgo; assert 'recgo.distributed' not in __import__('sys').modules; "
            "print(recgo.distributed.shard_model.__name__, recgo.train.TrainConfig.__name__, "
            "recgo.feature.reference.reference.__name__, recgo.planner.synthetic.__name__, "
            "recgo.planner.criteo.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "python")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["shard_model", "TrainConfig", "reference", "recgo.planner.synthetic",
                                  "recgo.planner.criteo"]



@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_config_is_taken_as_its_comment_runs_it(example: Path) -> None:
    """An example YAML is read by ``recgo train`` with the flags of the command its comment gives (its
    ``--data`` file aside), with no unknown field and no warning: a field renamed in TrainConfig, or one
    that does not apply to the comment's model, would otherwise rot in the example."""
    import argparse
    import shlex

    from recgo.train import cli

    command = next(line.lstrip("# ").strip() for line in example.read_text().splitlines()
                   if "python -m recgo train" in line)
    words = shlex.split(command)
    words = words[words.index("train"):]
    argv = []
    for i, w in enumerate(words):
        if w == "--data" or words[i - 1] == "--data":
            continue
        argv.append(str(example) if words[i - 1] == "--config" else w)
    assert "--config" in argv, command
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="command"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg, _ = cli._config(parser.parse_args(argv))
    assert f"--model {cfg.model}" in command
