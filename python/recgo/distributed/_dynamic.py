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

import warnings
from typing import Any, Callable, Sequence

import torch

from .. import _lib, dynamic
from ..errors import CapacityError, InvalidInputError

SHARDINGS = ("hash", "table_wise", "plan")
_META = {n: _lib.const(f"DynamicMeta{n}") for n in ("Dim", "MaxRows", "SketchWidth", "Step", "Admitted", "Evicted",
                                                     "HighWater", "Free", "Seed", "SketchIndexing")}


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


# A layout record (``dynamic_layout``, saved beside a shard's entries): the world size and the rank
# holding every ID of the table, or −1 where IDs go to their virtual bucket's rank (``"hash"``). On
# one world size it tells whether any ID changed its rank since the save, which the rows in use
# cannot tell when there are none (IDs only seen, not yet admitted).
LAYOUT = "dynamic_layout"
# What a part needs to take part in a load that moves no row: the bound, the step, the counters and
# the admission sketch (``DCPLoadPlanner`` reads only these of other ranks' parts on the saving world)
LIGHT = frozenset({"dynamic_meta", "dynamic_sketch", "dynamic_sketch_adds", LAYOUT})
_HASH = 0  # the engine's code of hash sharding (``_sharding.SHARDING_TYPES``)


def layout(coll: Any, table: str) -> torch.Tensor:
    """Table ``table``'s layout record in ``coll`` (see :data:`LAYOUT`)."""
    kind, rank = coll._kinds[coll._table(table)]
    return torch.tensor([coll.groups.world_size, rank if kind != _HASH else -1], dtype=torch.int64)


def restore(coll: Any, table: str, parts: Sequence[dict[str, torch.Tensor]], own: int | None, where: str) -> None:
    """Load table ``table``'s shard from the saved shards ``parts`` (:func:`prepare`, then its import)."""
    prepare(coll, table, parts, own, where)()


def prepare(coll: Any, table: str, parts: Sequence[dict[str, torch.Tensor]], own: int | None,
            where: str) -> Callable[..., None]:
    """Check the saved shards ``parts`` of table ``table`` (:func:`export` entries, or an unsharded
    collection's state for the table) against this rank's shard and return the import that loads them
    (nothing changes until it is called; the engine checks the rest and leaves the shard as it was on
    error; called with ``check_only=True`` it raises what the import would, changing nothing).
    ``own`` is the index of this rank's own part when the world is the one that saved them.

    When no ID changed its rank (:func:`_unmoved`), the own part loads as it was (bit-exact, its free
    list and admission sketch included). Otherwise each part gives the rows whose IDs this rank now
    owns, in part order, and the admission sketches merge by their largest counters (a pending ID's
    sightings are counted at least as often as before: the sketch of a table moved whole to another
    rank arrives as it was; sketches of two indexings: :func:`_merged_sketch`). A part may be *light*
    (:data:`LIGHT` alone, no ID map or rows) when it is not this rank's own: it serves a load that
    moves no row and refuses, naming ``all_shards``, one that would. The table's admitted and evicted
    counts are split over the ranks (:func:`_split_counts`), so that the shards' stats add up to the
    saved table's."""
    me = dynamic.export_state(coll, table)
    for p in parts:
        _check_shape(table, p, me, where)
    _check_seeds(coll, table, parts, where)
    rank, owners = coll.groups.rank, _owners_of(coll, table, parts)
    if _unmoved(coll, table, parts, own, owners):
        if "dynamic_ids" not in parts[own]:  # type: ignore[index]
            raise InvalidInputError(f"{where}: table {table!r}: this rank's own saved part holds no ID map")
        return lambda check_only=False: load_exact(coll, table, parts[own], check_only)  # type: ignore[index]
    light = [i for i, p in enumerate(parts) if "dynamic_ids" not in p]
    in_use = sum(_in_use(p) for p in parts)
    if light and in_use:
        raise InvalidInputError(
            f"{where}: table {table!r} was saved sharded otherwise (its layout record "
            f"{_shown(parts)}, now {layout(coll, table).tolist()}: [world, rank holding every ID, or -1 for "
            f"hash]), so its {in_use} rows in use change rank, but saved parts {light} came without their rows "
            "(on the saving world size DCPLoadPlanner reads only the admission state of other ranks' parts): "
            "load with dcp.load(..., planner=recgo.distributed.DCPLoadPlanner(all_shards=True)), or save()/load()")
    keep = [(owners[i] == rank) if owners[i] is not None else None for i in range(len(parts))]
    ids, counts, last, weights, states = [], [], [], [], []
    for p, k in zip(parts, keep):
        if k is None:
            continue
        hw = int(p["dynamic_meta"][_META["HighWater"]])
        used = p["dynamic_counts"][:hw] > 0
        ids.append(p["dynamic_ids"][:hw][used][k])
        counts.append(p["dynamic_counts"][:hw][used][k])
        last.append(p["dynamic_last_seen"][:hw][used][k])
        weights.append(p["weight"][:hw][used][k])
        if "optimizer_state" in p:
            states.append(p["optimizer_state"][:hw][used][k])
    bound = int(me["dynamic_meta"][_META["MaxRows"]])
    n = sum(len(x) for x in ids)
    if n > bound:
        raise CapacityError(f"{where}: table {table!r}: {n} saved IDs belong to rank {rank}, more than "
                            f"its shard's bound of {bound} rows (num_embeddings bounds each "
                            "rank's shard, and a dynamic-ID table loads a checkpoint of its own bound): load onto "
                            "more ranks")
    sketch, adds, indexing, dropped = _merged_sketch(table, parts, where)
    totals = _split_counts(coll, table, parts, owners)
    dim = int(me["dynamic_meta"][_META["Dim"]])
    rows = torch.cat(weights) if weights else torch.zeros(0, dim, dtype=torch.float32)
    state = torch.cat(states) if states else None
    no_ids = torch.zeros(0, dtype=torch.int64)

    def load(check_only: bool = False) -> None:
        dynamic.import_rows(coll, table, torch.cat(ids) if ids else no_ids, rows, state,
                            counts=torch.cat(counts) if counts else no_ids,
                            last_seen=torch.cat(last) if last else no_ids, sketch=sketch, sketch_adds=adds,
                            sketch_indexing=indexing, check_only=check_only, **totals)
        if dropped and not check_only:  # once the load happened (a refused one drops nothing)
            warnings.warn(dropped, RuntimeWarning, stacklevel=2)
    return load


def _merged_sketch(table: str, parts: Sequence[dict[str, torch.Tensor]],
                   where: str) -> tuple[torch.Tensor, torch.Tensor, int, str]:
    """The admission sketch of a re-distributed load, its addition counters, its indexing (how it
    places an ID's counters, ``dynamic_meta``'s) and a warning ("" for none): the parts' sketches merged
    by their largest counters. Sketches of two indexings hold an ID's count on different counters, so
    they do not merge: where the parts with counts differ, those of the current indexing are kept and
    the others' pending sightings dropped, which the warning says (their IDs are counted anew: admitted
    later, never earlier). Such parts come from a checkpoint saved before session 43 whose ranks'
    sketches, some empty, were loaded and trained on. A sketch without counts places nothing: it merges
    under either indexing."""
    sketches = [p["dynamic_sketch"] for p in parts]
    if not sketches[0].numel():  # min_count <= 1: no sketch
        return sketches[0], parts[0]["dynamic_sketch_adds"][:0], dynamic._SKETCH_V2, ""
    counted = {i: _indexing(p) for i, (p, sk) in enumerate(zip(parts, sketches)) if bool(sk.any())}
    # the latest indexing (a forged one, past it, the engine refuses by name)
    indexing = max(counted.values(), default=dynamic._SKETCH_V2)
    dropped = sorted(i for i, x in counted.items() if x != indexing)
    warning = "" if not dropped else (
        f"{where}: table {table!r}: saved parts {dropped} hold admission sketches of indexing "
        f"{sorted({counted[i] for i in dropped})} (before session 43), the others of indexing {indexing}: "
        f"counters of two indexings cannot merge, so the pending sightings of parts {dropped} were dropped "
        "(those IDs are counted anew)")
    keep = [i for i in range(len(parts)) if i not in dropped]
    return (torch.stack([sketches[i] for i in keep]).amax(0),
            torch.stack([parts[i]["dynamic_sketch_adds"] for i in keep]).amax(0), indexing, warning)


def _indexing(part: dict[str, torch.Tensor]) -> int:
    """The indexing of a saved part's sketch: its meta's, or 1 for a meta saved before it held one."""
    m = part["dynamic_meta"]
    return int(m[_META["SketchIndexing"]]) if m.numel() > _META["SketchIndexing"] else dynamic._SKETCH_V1


def _shown(parts: Sequence[dict[str, torch.Tensor]]) -> Any:
    """The parts' layout records, for a message (one where they agree)."""
    recs = [p[LAYOUT].tolist() if LAYOUT in p else None for p in parts]
    return recs[0] if all(r == recs[0] for r in recs) else recs


def _in_use(part: dict[str, torch.Tensor]) -> int:
    """A saved part's rows in use: those handed out less those freed again (its meta tells)."""
    m = part["dynamic_meta"]
    return int(m[_META["HighWater"]]) - int(m[_META["Free"]])


def _owners_of(coll: Any, table: str, parts: Sequence[dict[str, torch.Tensor]]) -> list[torch.Tensor | None]:
    """For each part, the rank now owning each of its rows in use (None for a light part)."""
    out: list[torch.Tensor | None] = []
    for p in parts:
        if "dynamic_ids" not in p:
            out.append(None)
            continue
        hw = int(p["dynamic_meta"][_META["HighWater"]])
        ids = p["dynamic_ids"][:hw][p["dynamic_counts"][:hw] > 0]
        out.append(coll.owners(table, ids))
    return out


def _unmoved(coll: Any, table: str, parts: Sequence[dict[str, torch.Tensor]], own: int | None,
             owners: Sequence[torch.Tensor | None]) -> bool:
    """Whether no ID of table ``table`` changed its rank since the save, so that this rank's own part
    (``own``) is its shard as it is now. The parts' layout records tell where every part has one.
    Without them (a checkpoint written before they were saved) the rows in use tell, as far as they
    can: this rank's own rows all still its own and no other part's rows its own; with no row in use
    anywhere they tell nothing (a table moved to another rank before any ID reached ``min_count``), and
    another part's pending sightings may be of IDs this rank now owns, so the sketches merge."""
    if own is None:
        return False
    if all(LAYOUT in p for p in parts):
        now = layout(coll, table)
        return all(torch.equal(p[LAYOUT].reshape(-1), now) for p in parts)
    rank = coll.groups.rank
    if any(o is None for o in owners):
        return False
    if not all(bool((o == rank).all()) if i == own else not bool((o == rank).any()) for i, o in enumerate(owners)):
        return False
    if any(len(o) for o in owners):  # type: ignore[arg-type]
        return True
    return not any(bool(p["dynamic_sketch"].any()) for i, p in enumerate(parts) if i != own)


def _split_counts(coll: Any, table: str, parts: Sequence[dict[str, torch.Tensor]],
                  owners: Sequence[torch.Tensor | None]) -> dict[str, int]:
    """This rank's step, admitted and evicted counts for a re-distributed load: the step is the
    table's (every shard's is the same), and the saved table's admitted and evicted totals are split
    over the ranks so that the shards' counts add up to them, as one table's stats report them (each
    rank took the parts' sum, and the world reported it once per rank). Each rank's admitted count
    is the rows it now holds plus its share of the admissions whose rows were freed; those and the
    evictions are history no ID tells the rank of, shared by the rows each rank holds (by the ranks
    that own the table's IDs where none holds any)."""
    step = max(int(p["dynamic_meta"][_META["Step"]]) for p in parts)
    admitted = sum(int(p["dynamic_meta"][_META["Admitted"]]) for p in parts)
    evicted = sum(int(p["dynamic_meta"][_META["Evicted"]]) for p in parts)
    world, rank = coll.groups.world_size, coll.groups.rank
    held = torch.zeros(world, dtype=torch.int64)
    for o in owners:
        if o is not None:
            held += torch.bincount(o, minlength=world)
    weights = held.tolist()
    if not any(weights):
        owner = int(layout(coll, table)[1])
        weights = [int(owner in (-1, r)) for r in range(world)]
    freed = max(admitted - sum(held.tolist()), 0)
    return {"step": step, "admitted": int(held[rank]) + _share(freed, weights, rank),
            "evicted": _share(evicted, weights, rank)}


def _share(total: int, weights: Sequence[int], rank: int) -> int:
    """Rank ``rank``'s part of ``total`` split in proportion to ``weights`` (whole numbers that add up
    to ``total`` over the ranks, the same on every rank)."""
    whole, before = sum(weights), sum(weights[:rank])
    return total * (before + weights[rank]) // whole - total * before // whole


def _check_shape(table: str, part: dict[str, torch.Tensor], me: dict[str, torch.Tensor], where: str) -> None:
    """Refuse a saved part of another row bound, width or admission sketch than this rank's shard of
    ``table`` (``me``: its :func:`recgo.dynamic.export_state`), naming both, before the engine sees
    it. The unsharded table refuses such a checkpoint too; a re-distributed load took one of another
    bound (its rows under this shard's), and named a sketch of another width by the table's own."""
    m, mine, sketch = part["dynamic_meta"], me["dynamic_meta"], me["dynamic_sketch"].numel()
    for what, key in (("row bound (num_embeddings)", "MaxRows"), ("width (embedding_dim)", "Dim")):
        saved, own = int(m[_META[key]]), int(mine[_META[key]])
        if saved != own:
            raise InvalidInputError(f"{where}: table {table!r}: the saved table's {what} is {saved}, this "
                                    f"collection's {own}: a dynamic-ID table loads a checkpoint of its own shape")
    got = part["dynamic_sketch"].numel()
    if got != sketch:
        def shown(meta: torch.Tensor, n: int) -> str:
            return f"of width {int(meta[_META['SketchWidth']])} ({n} counters)" if n else "none (min_count <= 1)"
        raise InvalidInputError(
            f"{where}: table {table!r}: the saved admission sketch is {shown(m, got)}, this table's "
            f"{shown(mine, sketch)}: load it into a table of the saving table's sketch_width and min_count")
    adds, want = part["dynamic_sketch_adds"].numel(), me["dynamic_sketch_adds"].numel()
    if adds != want:
        raise InvalidInputError(f"{where}: table {table!r}: dynamic_sketch_adds holds {adds} values, expected "
                                f"{want} (a damaged checkpoint?)")


def load_exact(coll: Any, table: str, entries: dict[str, torch.Tensor], check_only: bool = False) -> None:
    """Load an :func:`export` of ``table``'s shard as it was (bit-exact, its free list and admission
    sketch included): a load onto the layout that saved it, or a refused load's undo (``check_only``:
    raise what the load would, changing nothing)."""
    dynamic.import_state(coll, table, entries, entries["weight"], entries.get("optimizer_state"),
                         check_only=check_only)
