"""gather_state_dict(model, optimizer_state=True): the fused optimizer's per-row state and step
gathered whole with the weights, so an unsharded recgo model loads the training state with
strict=True and trains on as the sharded one would (the gathered state dict held weights only)."""

from __future__ import annotations

from pathlib import Path

import torch

import recgo
from recgo.modules import optim
from spawned import spawn

C = recgo.EmbeddingBagConfig
TABLES = [C(30, 4, "h", ["fh"]), C(20, 8, "r", ["fr"], pooling="mean"), C(7, 4, "d", ["fd"])]
SHARDING = {"h": "hash", "r": "row_wise", "d": "data_parallel"}


def _batch(step: int, world: int) -> recgo.KeyedJaggedTensor:
    g = torch.Generator().manual_seed(step)
    lengths = torch.randint(0, 4, (3 * 2 * world,), generator=g)
    rows = [30] * 2 * world + [20] * 2 * world + [7] * 2 * world
    ids = torch.cat([torch.randint(0, r, (int(n),), generator=g) for r, n in zip(rows, lengths)])
    return recgo.KeyedJaggedTensor(["fh", "fr", "fd"], ids, lengths=lengths)


def _mine(kjt: recgo.KeyedJaggedTensor, rank: int, world: int) -> recgo.KeyedJaggedTensor:
    b = kjt.stride() // world
    parts = kjt.to_dict()
    vals, lens = [], []
    for k in kjt.keys():
        jt = parts[k]
        off = jt.offsets()
        vals.append(jt.values()[off[rank * b]: off[(rank + 1) * b]])
        lens.append(jt.lengths()[rank * b: (rank + 1) * b])
    return recgo.KeyedJaggedTensor(kjt.keys(), torch.cat(vals), lengths=torch.cat(lens))


def _train_and_gather(rank: int, world: int) -> dict:
    from recgo.distributed import ShardedEmbeddingBagCollection, gather_state_dict

    sharded = ShardedEmbeddingBagCollection(TABLES, SHARDING, optimizer=optim.Adam(lr=0.05), seed=3, timeout=30)
    for step in range(3):
        sharded(_mine(_batch(step, world), rank, world)).values().pow(2).sum().backward()
    return {"state": gather_state_dict(sharded, optimizer_state=True), "weights": gather_state_dict(sharded)}


def test_the_gathered_state_trains_on_as_the_sharded_model(tmp_path: Path) -> None:
    res = spawn(_train_and_gather, 2, tmp_path, wait=120)
    assert all("error" not in r for r in res), res
    assert res[1] == {"state": {}, "weights": {}}
    ref = recgo.EmbeddingBagCollection(TABLES, optimizer=optim.Adam(lr=0.05), seed=3)
    for step in range(3):
        ref(_batch(step, 2)).values().pow(2).sum().backward()
    state, weights = res[0]["state"], res[0]["weights"]
    assert set(state) == set(ref.state_dict())  # weights, optimizer state and steps: strict=True loads
    assert set(weights) == {f"embedding_bags.{t.name}.weight" for t in TABLES}  # TorchRec's keys alone
    for k, v in ref.state_dict().items():
        assert torch.allclose(state[k].to(v.dtype), v, rtol=1e-5, atol=1e-6), k
    again = recgo.EmbeddingBagCollection(TABLES, optimizer=optim.Adam(lr=0.05), seed=9)
    again.load_state_dict(state, strict=True)
    for m in (ref, again):
        m(_batch(3, 2)).values().pow(2).sum().backward()
    for t in TABLES:
        assert torch.allclose(again.embedding_bags[t.name].weight, ref.embedding_bags[t.name].weight, rtol=1e-5,
                              atol=1e-6), t.name
