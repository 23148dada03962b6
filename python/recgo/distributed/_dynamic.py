"""Dynamic-ID tables in a sharded collection.

Each rank's shard of a dynamic table is a dynamic table of its own (same :class:`recgo.DynamicConfig`,
``num_embeddings`` bounding each shard), holding the IDs the layout sends it: by virtual bucket
(``"hash"``, RecIS's sharding of its hash tables) or all of them (``"table_wise"`` / ``"plan"``). The
owner admits, looks up, updates and evicts its IDs once per step, as the one table of a single
process does for all of them. This module holds what differs from fixed tables: the checks, the
per-rank views (``local_ids``, ``locate``) and the checkpoint rows, which a load re-distributes by
ID when the world size changes.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from .. import _lib, dynamic
from ..errors import CapacityError, InvalidInputError, RecgoIOError

SHARDINGS = ("hash", "table_wise", "plan")
_META = {n: _lib.const(f"DynamicMeta{n}") for n in ("Dim", "MaxRows", "Step", "Admitted", "Evicted", "HighWater",
                                                     "Seed")}


def check(configs: Sequence[Any], shardings: Sequence[str], optimizer: Any) -> None:
    """Refuse what a sharded dynamic table cannot be: sharded by ID ranges or replicated (its IDs have
    no range), or trained by a torch optimizer (the owner's fused update is what resets a reused row's
    state, and the merged gradient of a row that only the owner knows has no dense place)."""
    names = [c.name for c in configs if c.dynamic is not None]
    bad = {c.name: s for c, s in zip(configs, shardings) if c.dynamic is not None and s not in SHARDINGS}
    if bad:
        raise InvalidInputError(f"dynamic-ID tables shard by ID, {' or '.join(SHARDINGS)}, not {bad} (their IDs "
                                "have no range to cut or replicate)")
    if names and optimizer is None:
        raise InvalidInputError(f"dynamic-ID tables {names} need a fused optimizer (optimizer=) in a sharded "
                                "collection: each owner updates its rows as it admits and evicts them")


def local_ids(coll: Any, table: str) -> torch.Tensor:
    """The IDs holding a row in this rank's shard, in the order of their rows."""
    e = dynamic.export_state(coll, table)
    ids, counts = e["dynamic_ids"], e["dynamic_counts"]
    return ids[counts > 0]


def locate(coll: Any, table: str, ids: torch.Tensor) -> torch.Tensor:
    """Each ID's row in this rank's shard (a look, admitting nothing), −1 where it has none or another
    rank owns it."""
    rows = dynamic.lookup(coll, table, ids, train=False)
    rows[coll.owners(table, ids) != coll.groups.rank] = -1
    return rows


def export(coll: Any, table: str) -> dict[str, torch.Tensor]:
    """The shard's checkpoint entries: the ID map and admission state (``dynamic_*``) with the rows in
    use (``weight``, ``optimizer_state``), from one snapshot."""
    return dynamic._export(coll, table, rows=True)


def _check_seeds(coll: Any, table: str, parts: Sequence[dict[str, torch.Tensor]], where: str) -> None:
    """Refuse saved parts whose admission sketches were hashed with another seed than this shard's
    table (the merged sketch's counts would land on other IDs), as the engine refuses such a
    checkpoint of one table. A part without a sketch, or saved before the meta held the seed, passes."""
    seed = _META["Seed"]
    own = int(dynamic.export_state(coll, table)["dynamic_meta"][seed])
    for p in parts:
        m = p["dynamic_meta"]
        if p["dynamic_sketch"].numel() and m.numel() > seed and int(m[seed]) != own:
            raise InvalidInputError(
                f"{where}: table {table!r}: the saved admission sketch was hashed with seed {int(m[seed]) % 2**64}, "
                f"the table's seed is {own % 2**64} (its counts would land on other IDs): load it into tables of "
                f"seed {int(m[seed]) % 2**64}")


def restore(coll: Any, table: str, parts: Sequence[dict[str, torch.Tensor]], own: int | None, where: str) -> None:
    """Load table ``table``'s shard from the saved shards ``parts`` (:func:`prepare`, then its import)."""
    prepare(coll, table, parts, own, where)()


def prepare(coll: Any, table: str, parts: Sequence[dict[str, torch.Tensor]], own: int | None,
            where: str) -> Callable[[], None]:
    """Check the saved shards ``parts`` of table ``table`` (:func:`export` entries, or an unsharded
    collection's state for the table) against this rank's shard and return the import that loads them
    (nothing changes until it is called; the engine checks the rest and leaves the shard as it was on
    error). ``own`` is the index of this rank's own part when the world is the one that saved them:
    when the layout has not moved an ID either (the same sharding, as the rows in use show; with no row
    in use anywhere, only when no other part has pending sightings), it loads as it was (bit-exact, its
    free list and admission sketch included). Otherwise each part gives the rows whose IDs this rank
    now owns, in part order, and the admission sketches merge by their largest counters (a pending
    ID's sightings are counted at least as often as before, so it is admitted no later)."""
    keeps = []
    for p in parts:
        hw = int(p["dynamic_meta"][_META["HighWater"]])
        used = p["dynamic_counts"][:hw] > 0
        keeps.append((hw, used, used & (coll.owners(table, p["dynamic_ids"][:hw]) == coll.groups.rank)))
    # The layout is the saving one as far as the rows in use tell. With none in use anywhere they tell
    # nothing (a table moved to another rank before any ID reached min_count): another part's pending
    # sightings may be of IDs this rank now owns, so the sketches merge below.
    same = own is not None and all(bool(torch.equal(k, u)) if i == own else not bool(k.any())
                                   for i, (_, u, k) in enumerate(keeps))
    if same and not any(bool(u.any()) for _, u, _ in keeps):
        same = not any(bool(p["dynamic_sketch"].any()) for i, p in enumerate(parts) if i != own)
    if same:
        return lambda: load_exact(coll, table, parts[own])
    ids, counts, last, weights, states = [], [], [], [], []
    for p, (hw, _, keep) in zip(parts, keeps):
        ids.append(p["dynamic_ids"][:hw][keep])
        counts.append(p["dynamic_counts"][:hw][keep])
        last.append(p["dynamic_last_seen"][:hw][keep])
        weights.append(p["weight"][:hw][keep])
        if "optimizer_state" in p:
            states.append(p["optimizer_state"][:hw][keep])
    meta = parts[0]["dynamic_meta"]
    n = sum(len(x) for x in ids)
    if n > int(meta[_META["MaxRows"]]):
        raise CapacityError(f"{where}: table {table!r}: {n} saved IDs belong to rank {coll.groups.rank}, more than "
                            f"its shard's bound of {int(meta[_META['MaxRows']])} rows (num_embeddings bounds each "
                            "rank's shard): raise it, or load onto more ranks")
    sketches = [p["dynamic_sketch"] for p in parts]
    if any(s.shape != sketches[0].shape for s in sketches):
        raise RecgoIOError(f"{where}: table {table!r}: the shards' admission sketches differ in size")
    _check_seeds(coll, table, parts, where)
    sketch = torch.stack(sketches).amax(0) if sketches[0].numel() else sketches[0]
    adds = torch.stack([p["dynamic_sketch_adds"] for p in parts]).amax(0) if sketch.numel() else \
        parts[0]["dynamic_sketch_adds"][:0]
    totals = {k.lower(): agg(int(p["dynamic_meta"][_META[k]]) for p in parts)
              for k, agg in (("Step", max), ("Admitted", sum), ("Evicted", sum))}
    dim = int(meta[_META["Dim"]])
    rows = torch.cat(weights) if weights else torch.zeros(0, dim, dtype=torch.float32)
    state = torch.cat(states) if states else None
    return lambda: dynamic.import_rows(coll, table, torch.cat(ids), rows, state, counts=torch.cat(counts),
                                       last_seen=torch.cat(last), sketch=sketch, sketch_adds=adds, **totals)


def load_exact(coll: Any, table: str, entries: dict[str, torch.Tensor]) -> None:
    """Load an :func:`export` of ``table``'s shard as it was (bit-exact, its free list and admission
    sketch included): a load onto the layout that saved it, or a refused load's undo."""
    dynamic.import_state(coll, table, entries, entries["weight"], entries.get("optimizer_state"))
