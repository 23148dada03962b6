"""``load_state_dict`` of a collection is all or nothing across its tables: each table loaded all or
nothing on its own, but a later table refused (a dynamic-ID table's ID map the engine refuses, an
incomplete set of another world's shards, a damaged dynamic-ID entry) left the tables before it
loaded. Now every table's weights, optimizer state and step, and a dynamic-ID table's ID map, stay
exactly as they were, in the unsharded collections and in a sharded one (one rank), called directly
or through ``shard_model``'s wrapper. (``load(dir)`` of a sharded collection: test_distributed_load_atomic.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
import torch

import recgo
from recgo.errors import RecgoError
from recgo.modules import optim
from spawned import one_rank
from test_distributed_load_atomic import build, same, state, train

Damage = Callable[[dict[str, torch.Tensor]], None]


def unsharded(seed: int) -> Any:
    """The sharded test collection's tables (two fixed, then two dynamic-ID ones), unsharded."""
    C, D = recgo.EmbeddingBagConfig, recgo.DynamicConfig
    cfgs = [C(50, 4, "a", ["fa"]), C(40, 3, "b", ["fb"]), C(100, 4, "u", ["fu"], dynamic=D(seed=3)),
            C(100, 3, "v", ["fv"], dynamic=D(seed=4))]
    return recgo.EmbeddingBagCollection(cfgs, optimizer=optim.Adam(lr=0.1), seed=seed)


def _duplicate_id(key: str) -> Damage:
    def damage(sd: dict[str, torch.Tensor]) -> None:
        ids = sd[key].clone()
        ids[1] = ids[0]  # two used rows of one ID: the engine refuses the ID map
        sd[key] = ids
    return damage


def _tag(sd: dict[str, torch.Tensor], table: str) -> str:
    """The rank tag of ``table``'s entries in a one-rank collection's state dict."""
    return next(k.split(".")[2] for k in sd if k.startswith(f"embedding_bags.{table}.rank"))


def _permute_a(sd: dict[str, torch.Tensor]) -> None:
    """Table a's own entries with its rows in another order: re-distributed by ID (loaded at once)."""
    head = f"embedding_bags.a.{_tag(sd, 'a')}."
    n = sd[head + "shard_ids"].numel()
    order = torch.arange(n - 1, -1, -1)
    for e in ("shard_ids", "weight", "optimizer_state"):
        sd[head + e] = sd[head + e][order].clone()


def _b_of_another_world(sd: dict[str, torch.Tensor]) -> None:
    """Table b's entries as rank 0 of a world of 2 alone: an incomplete set, refused."""
    tag = _tag(sd, "b")
    for k in [k for k in sd if k.startswith(f"embedding_bags.b.{tag}.")]:
        sd[k.replace(tag, "rank0_of_2")] = sd.pop(k)


def _u_plain(sd: dict[str, torch.Tensor]) -> None:
    """Table u's entries under the plain names (an unsharded collection's): re-distributed by ID."""
    tag = _tag(sd, "u")
    for k in [k for k in sd if k.startswith(f"embedding_bags.u.{tag}.")]:
        v = sd.pop(k)
        if not k.endswith(".shard_ids"):
            sd[k.replace(f".{tag}", "")] = v


def _v_without_sketch(sd: dict[str, torch.Tensor]) -> None:
    del sd[next(k for k in sd if k.startswith("embedding_bags.v.") and k.endswith(".dynamic_sketch"))]


UNSHARDED: list[tuple[str, Damage, str]] = [
    ("dynamic_map", _duplicate_id("embedding_bags.v.dynamic_ids"), r"owns more than one row"),
]
SHARDED: list[tuple[str, Damage, str]] = [
    ("fixed_set", lambda sd: (_permute_a(sd), _b_of_another_world(sd)), r"table 'b''s shard of rank0_of_2"),
    ("dynamic_entry", lambda sd: (_permute_a(sd), _u_plain(sd), _v_without_sketch(sd)),
     r"table 'v': the checkpoint lacks the dynamic-table entries \['dynamic_sketch'\]"),
]


def _refused(make: Callable[[int], Any], damage: Damage, match: str, wrap: Callable[[Any], Any] = lambda m: m) -> None:
    """Load a trained collection's damaged state dict into another: it raises and changes nothing;
    the undamaged one then loads everything."""
    src, dst = make(4), make(5)
    for s in range(2):
        train(src, s)
    train(dst, 7)
    good, before = state(src), state(dst)
    assert len(same(before, good)) > 10  # the load would change nearly everything
    bad = {k: v.clone() for k, v in good.items()}
    damage(bad)
    with pytest.raises(RecgoError, match=match):
        wrap(dst).load_state_dict(bad)
    assert same(state(dst), before) == []
    wrap(dst).load_state_dict(good)
    assert same(state(dst), good) == []


@pytest.mark.parametrize("name,damage,match", UNSHARDED, ids=[c[0] for c in UNSHARDED])
def test_an_unsharded_load_refused_at_a_later_table_changes_none(name: str, damage: Damage, match: str) -> None:
    _refused(unsharded, damage, match)


@pytest.mark.parametrize("name,damage,match", SHARDED, ids=[c[0] for c in SHARDED])
def test_a_sharded_load_refused_at_a_later_table_changes_none(tmp_path: Path, name: str, damage: Damage,
                                                              match: str) -> None:
    with one_rank(tmp_path):
        _refused(build, damage, match)


def test_a_load_through_shard_models_wrapper_refused_changes_no_table(tmp_path: Path) -> None:
    from recgo.distributed import shard_model
    from test_distributed_load_atomic import SHARDING

    with one_rank(tmp_path):
        src = build(4)
        train(src, 0)
        model = shard_model(torch.nn.ModuleDict({"ebc": unsharded(5), "dense": torch.nn.Linear(2, 2)}), SHARDING,
                            timeout=20)
        train(model.module["ebc"], 7)
        before = state(model)
        good = {f"ebc.{k}": v for k, v in state(src).items()} | {k: v for k, v in before.items() if k.startswith("dense.")}
        bad = {k: v.clone() for k, v in state(src).items()}
        _permute_a(bad)
        _b_of_another_world(bad)
        with pytest.raises(RecgoError, match=r"table 'b''s shard of rank0_of_2"):
            model.load_state_dict({f"ebc.{k}": v for k, v in bad.items()} | {k: v for k, v in good.items()
                                                                             if k.startswith("dense.")})
        assert same(state(model), before) == []
        model.load_state_dict(good)
        assert same(state(model), good) == []


def test_a_sequence_collections_load_refused_at_a_later_table_changes_none() -> None:
    C, D = recgo.EmbeddingConfig, recgo.DynamicConfig

    def make(seed: int) -> Any:
        return recgo.EmbeddingCollection([C(50, 4, "a", ["fa"]), C(100, 4, "v", ["fv"], dynamic=D(seed=4))],
                                         optimizer=optim.Adam(lr=0.1), seed=seed)

    def step(ec: Any, s: int) -> None:
        g = torch.Generator().manual_seed(s)
        lens = torch.randint(1, 4, (8,), generator=g)
        vals = [torch.randint(0, 50, (int(lens[:4].sum()),), generator=g),
                torch.randint(0, 10**6, (int(lens[4:].sum()),), generator=g) * 7919]
        out = ec(recgo.KeyedJaggedTensor(["fa", "fv"], torch.cat(vals), lengths=lens))
        sum(jt.values().sum() for jt in out.values()).backward()

    src, dst = make(4), make(5)
    step(src, 1)
    step(dst, 2)
    good, before = state(src), state(dst)
    bad = {k: v.clone() for k, v in good.items()}
    _duplicate_id("embeddings.v.dynamic_ids")(bad)
    with pytest.raises(RecgoError, match=r"owns more than one row"):
        dst.load_state_dict(bad)
    assert same(state(dst), before) == []
    dst.load_state_dict(good)
    assert same(state(dst), good) == []


def _sparse_b(sd: dict[str, torch.Tensor]) -> None:
    sd["embedding_bags.b.weight"] = sd["embedding_bags.b.weight"].to_sparse()  # torch cannot copy it in


CHECKED_FIRST: list[tuple[str, Damage, str]] = [
    *UNSHARDED,
    ("sparse_entry", _sparse_b, r"embedding_bags.b.weight' is a torch.sparse_coo torch.float32 tensor, not a dense"),
]


@pytest.mark.parametrize("name,damage,match", CHECKED_FIRST, ids=[c[0] for c in CHECKED_FIRST])
@pytest.mark.parametrize("nested", [False, True], ids=["own", "nested"])
def test_an_unsharded_collection_checks_every_table_before_it_loads_one(name: str, damage: Damage, match: str,
                                                                         nested: bool) -> None:
    """Refused at a later table, loaded directly or as part of a model (torch's ``load_state_dict``,
    which recgo does not wrap): no table changed, since every entry was checked before the first copy
    (no copy of the tables is kept to put back)."""
    def wrap(c: Any) -> Any:
        return torch.nn.ModuleDict({"ebc": c}) if nested else c

    def prefixed(damage: Damage) -> Damage:
        def on_model(sd: dict[str, torch.Tensor]) -> None:
            inner = {k.removeprefix("ebc."): v for k, v in sd.items()}
            damage(inner)
            sd.clear()
            sd.update({f"ebc.{k}": v for k, v in inner.items()})
        return on_model

    src, dst = wrap(unsharded(4)), wrap(unsharded(5))
    for s in range(2):
        train(src["ebc"] if nested else src, s)
    train(dst["ebc"] if nested else dst, 7)
    good, before = state(src), state(dst)
    bad = {k: v.clone() for k, v in good.items()}
    (prefixed(damage) if nested else damage)(bad)
    with pytest.raises(RecgoError, match=match):
        dst.load_state_dict(bad)
    assert same(state(dst), before) == []
    dst.load_state_dict(good)
    assert same(state(dst), good) == []


def _peak_rss_over(fn: Callable[[], None]) -> int:
    """Bytes by which the process's resident set peaked above its size before ``fn`` ran (Linux)."""
    import re

    def kib(field: str) -> int:
        return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) * 1024  # type: ignore[union-attr]

    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) restarts at the resident size
    start = kib("VmRSS")
    fn()
    return kib("VmHWM") - start


def test_a_load_keeps_no_second_copy_of_the_tables() -> None:
    """A load of a table of 128 MB of weights and 128 MB of Adagrad sums peaks well under a second copy
    of them (it kept one, to put back if a later table was refused: +256 MB; checking the sums for
    NaN and negative values took +90 MB of temporaries)."""
    try:
        _peak_rss_over(lambda: None)
    except OSError:
        pytest.skip("no /proc/self/clear_refs to restart the peak resident size")
    C, D = recgo.EmbeddingBagConfig, recgo.DynamicConfig
    ebc = recgo.EmbeddingBagCollection([C(500_000, 64, "a", ["fa"]), C(1000, 8, "v", ["fv"], dynamic=D(seed=1))],
                                       optimizer=optim.Adagrad(lr=0.1))
    loads = [{k: v + i if v.is_floating_point() else v.clone() for k, v in ebc.state_dict().items()} for i in (1, 2)]
    ebc.load_state_dict(loads[0])  # the engine's zero optimizer state now resident: the next load adds nothing
    grown = _peak_rss_over(lambda: ebc.load_state_dict(loads[1]))
    assert grown < 500_000 * 64 * 4 // 8, f"the load's resident set peaked {grown / 2**20:.0f} MB above its start"
    assert torch.equal(ebc.embedding_bags["a"].weight, loads[1]["embedding_bags.a.weight"])
    assert torch.equal(ebc.embedding_bags["a"].optimizer_state, loads[1]["embedding_bags.a.optimizer_state"])


def test_an_unfused_sharded_collection_takes_an_unsharded_state_dict_strictly(tmp_path: Path) -> None:
    """An unfused shard keeps an optimizer_step counter that an unfused collection's state dict (recgo's
    or TorchRec's) has not: a strict load of it raised "Missing key(s) ... optimizer_step"."""
    from torchrec.modules.embedding_configs import EmbeddingBagConfig as TorchRecConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection as TorchRecEBC

    from recgo.distributed import ShardedEmbeddingBagCollection

    C = [recgo.EmbeddingBagConfig(10, 4, "a", ["fa"])]
    with one_rank(tmp_path):
        sh = ShardedEmbeddingBagCollection(C, "hash", seed=1, timeout=20)
        for src in (recgo.EmbeddingBagCollection(C, seed=7),
                    TorchRecEBC([TorchRecConfig(num_embeddings=10, embedding_dim=4, name="a", feature_names=["fa"])])):
            result = sh.load_state_dict(src.state_dict())
            assert result.missing_keys == [] and result.unexpected_keys == []
            want = src.embedding_bags["a"].weight.detach()[sh.local_ids("a")]
            assert torch.equal(sh.embedding_bags["a"].weight.detach(), want)
