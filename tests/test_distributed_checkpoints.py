"""A sharded collection's own checkpoint folder in one process (a one-rank gloo world): a save
replaces the set of another world size, and a load refuses a folder whose files come from different
saves. The multi-rank checkpoints (save on 4, load on 2 and 1) are in test_distributed.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from recgo.errors import RecgoIOError
from recgo.modules import optim
from sharded_batches import SHARDING, configs


def test_save_replaces_the_shard_set_of_another_world_size(tmp_path: Path) -> None:
    """A folder that held a world-3 checkpoint holds only the new world-1 set after save (load refused
    the mixed folder: 'expected one complete set of shard files'), and load takes it."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    ck = tmp_path / "ck"
    ck.mkdir()
    for r in range(3):
        (ck / f"shard-{r}-of-3.pt").write_bytes(b"an older run's shard")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        sh = ShardedEmbeddingBagCollection(configs(), SHARDING | {"tp": "hash"}, optimizer=optim.SGD(lr=0.1), seed=4)
        sh.save(ck)
        assert sorted(p.name for p in ck.iterdir()) == ["shard-0-of-1.pt"]
        again = ShardedEmbeddingBagCollection(configs(), SHARDING | {"tp": "hash"}, optimizer=optim.SGD(lr=0.1), seed=5)
        again.load(ck)
        for c in configs():
            assert torch.equal(again.embedding_bags[c.name].weight, sh.embedding_bags[c.name].weight)
        # a collection with fewer tables: refused by name (it loaded the subset silently), or strict=False
        rest = {k: v for k, v in (SHARDING | {"tp": "hash"}).items() if k != configs()[0].name}
        fewer = ShardedEmbeddingBagCollection(configs()[1:], rest, optimizer=optim.SGD(lr=0.1))
        with pytest.raises(RecgoIOError, match=rf"holds tables \['{configs()[0].name}'\] this collection does not have"):
            fewer.load(ck)
        fewer.load(ck, strict=False)
        for c in configs()[1:]:
            assert torch.equal(fewer.embedding_bags[c.name].weight, sh.embedding_bags[c.name].weight)
        # a collection with a table the checkpoint lacks (a model grown since): refused by name with
        # strict; strict=False left it refused too ("missing or has another shape"), now it stays as built
        from recgo import EmbeddingBagConfig

        grown_cfgs = [*configs(), EmbeddingBagConfig(7, 4, "grown", ["f_grown"])]
        grown = ShardedEmbeddingBagCollection(grown_cfgs, SHARDING | {"tp": "hash", "grown": "hash"},
                                              optimizer=optim.SGD(lr=0.1), seed=6)
        built = grown.embedding_bags["grown"].weight.detach().clone()
        with pytest.raises(RecgoIOError, match=r"has no table 'grown'; load\(directory, strict=False\)"):
            grown.load(ck)
        grown.load(ck, strict=False)
        assert torch.equal(grown.embedding_bags["grown"].weight, built)
        for c in configs():
            assert torch.equal(grown.embedding_bags[c.name].weight, sh.embedding_bags[c.name].weight)
        # another shape is refused whatever strict says, naming both shapes
        c0 = configs()[0]
        wider = [EmbeddingBagConfig(c0.num_embeddings, c0.embedding_dim * 2, c0.name, c0.feature_names), *configs()[1:]]
        other = ShardedEmbeddingBagCollection(wider, SHARDING | {"tp": "hash"}, optimizer=optim.SGD(lr=0.1))
        with pytest.raises(RecgoIOError, match=rf"table '{c0.name}' has another shape in the checkpoint"):
            other.load(ck, strict=False)
    finally:
        dist.destroy_process_group()


def test_load_refuses_a_set_whose_save_did_not_finish_everywhere(tmp_path: Path) -> None:
    """A save that one rank never finished leaves its new file beside the other rank's file of the save
    before; load mixed the two silently (rows of two steps, the step of whichever file came last).
    Every file now carries its save's id. Built here from two world-1 saves named as a world-2 set."""
    import shutil

    from recgo.distributed import ShardedEmbeddingBagCollection
    from recgo.errors import RecgoIOError

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        sh = ShardedEmbeddingBagCollection(configs(), SHARDING | {"tp": "hash"}, optimizer=optim.SGD(lr=0.1), seed=4)
        sh.save(tmp_path / "a")
        sh.save(tmp_path / "b")
        for name, folders in (("torn", ("a", "b")), ("whole", ("a", "a"))):
            (tmp_path / name).mkdir()
            for r, src in enumerate(folders):
                shutil.copy(tmp_path / src / "shard-0-of-1.pt", tmp_path / name / f"shard-{r}-of-2.pt")
        again = ShardedEmbeddingBagCollection(configs(), SHARDING | {"tp": "hash"}, optimizer=optim.SGD(lr=0.1), seed=5)
        with pytest.raises(RecgoIOError, match="different saves"):
            again.load(tmp_path / "torn")
        again.load(tmp_path / "whole")
        for c in configs():
            assert torch.equal(again.embedding_bags[c.name].weight, sh.embedding_bags[c.name].weight)
        # a truncated file of a whole set is named as such (it was reported as a set of two saves)
        cut = tmp_path / "whole" / "shard-1-of-2.pt"
        cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
        with pytest.raises(RecgoIOError, match=r"shard-1-of-2.pt: cannot read the checkpoint"):
            again.load(tmp_path / "whole")
    finally:
        dist.destroy_process_group()
