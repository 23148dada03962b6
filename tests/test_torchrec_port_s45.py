"""Session 45's porting pass: TorchRec's tutorials and examples run with recgo swapped in, and what they
tripped on.

* TorchRec's notebooks finish a DMP model's output with ``.wait()`` (``model(kjt).wait()``, its sharded
  modules return a ``LazyAwaitable``): recgo's ``KeyedTensor`` and the sharded sequence collection's dict
  had no ``wait`` (``AttributeError``).
* The sharding notebook passes ``env=ShardingEnv.from_process_group(dist.group.WORLD)`` to DMP: recgo
  refused every ``env=``, pointing at a ``group=`` argument that does not exist.
* TorchRec's planner asked to plan recgo's collections returns an empty plan; ``plan=`` that raised
  without saying why it was empty.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

import recgo
from spawned import one_rank, spawn

tr = pytest.importorskip("torchrec")

WORLD = 2


def _batch(lib: Any, rank: int) -> Any:
    """A rank's own batch of features "product" and "user" (3 samples; an empty bag included)."""
    g = torch.Generator().manual_seed(40 + rank)
    lengths = torch.tensor([2, 0, 1, 1, 3, 1])
    return lib.KeyedJaggedTensor(keys=["product", "user"], values=torch.randint(0, 30, (8,), generator=g),
                                 lengths=lengths)


def _waits(rank: int, world: int) -> dict[str, Any]:
    """One rank: the intro notebook's DMP of a lone collection (pooled, then sequence), ``env=`` as the
    sharding notebook gives it, the output finished with ``.wait()`` and compared with TorchRec's
    unsharded module holding the same weights, on this rank's batch."""
    from torchrec.distributed.types import ShardingEnv

    from recgo.distributed import shard_model

    torch.set_num_threads(1)
    env = ShardingEnv.from_process_group(dist.group.WORLD)
    out: dict[str, Any] = {}
    bag = [recgo.EmbeddingBagConfig(name=f"{f}_table", embedding_dim=4, num_embeddings=30, feature_names=[f])
           for f in ("product", "user")]
    ebc = recgo.EmbeddingBagCollection(tables=bag, seed=5)
    ref = tr.EmbeddingBagCollection(tables=[c.to_torchrec() for c in bag])
    ref.load_state_dict(ebc.state_dict())
    model = shard_model(ebc, device=torch.device("cpu"), env=env, timeout=60)
    for lib in (recgo, tr):  # recgo's batch, and TorchRec's as the notebook builds it
        kt = model(_batch(lib, rank))
        assert kt.wait() is kt
        out[f"pooled {lib.__name__}"] = (kt.wait().values() - ref(_batch(tr, rank)).values()).abs().max().item()
    seq = [recgo.EmbeddingConfig(name=f"{f}_table", embedding_dim=4, num_embeddings=30, feature_names=[f])
           for f in ("product", "user")]
    ec = recgo.EmbeddingCollection(tables=seq, seed=6)
    ref_ec = tr.EmbeddingCollection(tables=[c.to_torchrec() for c in seq])
    ref_ec.load_state_dict(ec.state_dict())
    sharded = shard_model(module=ec, env=env, timeout=60)
    for lib in (recgo, tr):
        jts = sharded(_batch(lib, rank))
        assert jts.wait() is jts and isinstance(jts, dict)
        want = ref_ec(_batch(tr, rank))
        out[f"sequence {lib.__name__}"] = max((jts.wait()[k].values() - want[k].values()).abs().max().item()
                                              for k in want)
        out[f"sequence lengths {lib.__name__}"] = all(
            torch.equal(jts[k].lengths().long(), want[k].lengths().long()) for k in want)
    return out


def test_dmp_output_wait_and_env_on_two_ranks(tmp_path: Path) -> None:
    """``model(kjt).wait()`` on 2 gloo ranks gives each rank TorchRec's pooled and sequence lookups of
    its own batch (the same weights), with ``env=`` over the world group taken."""
    results = spawn(_waits, WORLD, tmp_path)
    for rank, res in enumerate(results):
        assert "error" not in res, f"rank {rank}: {res.get('error')}"
        for what, diff in res.items():
            if what.startswith("sequence lengths"):
                assert diff is True, f"rank {rank}: {what}"
            else:
                assert diff <= 1e-6, f"rank {rank}: {what} differs from TorchRec's by {diff}"


def test_unsharded_keyed_tensor_wait_is_itself() -> None:
    """A script that calls ``.wait()`` unconditionally (it ran under DMP before) keeps working on the
    unsharded collection's recgo output."""
    ebc = recgo.EmbeddingBagCollection(tables=[recgo.EmbeddingBagConfig(
        name="t", embedding_dim=3, num_embeddings=30, feature_names=["product", "user"])], seed=1)
    kt = ebc(_batch(recgo, 0))
    assert kt.wait() is kt
    assert torch.equal(kt.wait()["user"], kt.to_dict()["user"])


def test_the_ready_dict_is_a_dict_to_pytree() -> None:
    """The sharded sequence collection's ``ReadyDict`` flattens as a dict (its JaggedTensors' tensors are
    the leaves) and unflattens to a ReadyDict; as a subclass of dict pytree did not know, it was one
    leaf, so DDP's output hooks (static_graph's delayed all-reduce) and ``torch.export`` saw no tensor
    in it. Its spec survives ``treespec_dumps``/``loads`` (``torch.export.save``)."""
    import torch.utils._pytree as pytree

    from recgo.keyed import ReadyDict

    jt = recgo.JaggedTensor(torch.arange(6.0).reshape(3, 2), lengths=torch.tensor([1, 2]))
    d = ReadyDict(user=jt, product=recgo.JaggedTensor(torch.ones(1, 2), lengths=torch.tensor([0, 1])))
    leaves, spec = pytree.tree_flatten(d)
    assert sum(isinstance(x, torch.Tensor) for x in leaves) == 4  # each JaggedTensor's values and lengths
    back = pytree.tree_unflatten([x * 2 if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                                  for x in leaves], spec)
    assert type(back) is ReadyDict and list(back) == ["user", "product"] and back.wait() is back
    assert torch.equal(back["user"].values(), jt.values() * 2) and torch.equal(back["user"].lengths(), jt.lengths())
    assert pytree.treespec_loads(pytree.treespec_dumps(spec)) == spec


def test_env_and_empty_torchrec_plan_are_named(tmp_path: Path) -> None:
    """``env=`` that is not the world group, and a TorchRec plan its planner made for recgo's
    collections (empty: the planner plans TorchRec's modules only), raise saying what to do."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.types import ShardingEnv

    from recgo.distributed import shard_model

    def ebc(lib: Any) -> Any:
        return lib.EmbeddingBagCollection(device=torch.device("meta"), tables=[lib.EmbeddingBagConfig(
            name="emb", embedding_dim=4, num_embeddings=50, feature_names=["f"])])

    with one_rank(tmp_path):
        with pytest.raises(recgo.InvalidInputError, match=r"env= has no process group \(ShardingEnv.from_local\)"):
            shard_model(ebc(recgo), env=ShardingEnv.from_local(1, 0))
        with pytest.raises(recgo.InvalidInputError, match="a process group other than"):
            shard_model(ebc(recgo), env=ShardingEnv(1, 0, dist.new_group([0])))
        sharders = [EmbeddingBagCollectionSharder()]
        planner = EmbeddingShardingPlanner(topology=Topology(world_size=1, compute_device="cpu"))
        plan = planner.collective_plan(ebc(recgo), sharders, dist.group.WORLD)
        assert not plan.plan
        with pytest.raises(recgo.InvalidInputError, match="TorchRec's planner plans only TorchRec's modules"):
            shard_model(ebc(recgo), plan=plan, sharders=sharders)
        # the way that works: the model built with TorchRec's collection, which shard_model converts
        model = ebc(tr)
        plan = planner.collective_plan(model, sharders, dist.group.WORLD)
        sharded = shard_model(model, plan=plan, sharders=sharders)
        assert sharded.plan == {"": {"emb": str(plan.plan[""]["emb"].sharding_type)}}
