"""How a sharded collection's arguments become the engine's per-table choices: each table's sharding
kind and rank, a row-wise table's row split, and what its owners return."""

from __future__ import annotations

import operator
from typing import Any, Mapping, Sequence

from ..errors import InvalidInputError, NotFoundError

# The engine's codes (capi/shard.go); "plan" places a table whole, as table-wise, on the plan's rank.
SHARDING_TYPES = {"hash": 0, "table_wise": 1, "row_wise": 2, "data_parallel": 3, "plan": 1}
MODES = {"flat": 0, "hierarchical": 1}
RETURNS = {"auto": 0, "rows": 1, "pooled": 2}


def _per_table(what: str, value: Any, names: Sequence[str]) -> dict[str, Any]:
    """``value`` for every table, or the tables a mapping names (each of which must exist)."""
    per = dict(value) if isinstance(value, Mapping) else {n: value for n in names}
    for n in per:
        if n not in names:
            raise NotFoundError(f"{what} names table {n!r}, which is not among {list(names)}")
    return per


def resolve_sharding(names: Sequence[str], shapes: Sequence[tuple[int, int]], sharding: Any, plan: Any,
                     table_ranks: Mapping[str, int] | None, world: int, nodes: int | None = None,
                     ranks_per_node: int | None = None) -> tuple[list[str], list[tuple[int, int]]]:
    """Each table's sharding name (``"hash"`` where ``sharding`` leaves it out) and its engine
    ``(kind, rank)``: table-wise tables go to ``table_ranks``' rank or round robin, planned ones to the
    plan's rank, when the plan was made for their ``shapes`` (rows, dim; a plan for other sizes placed
    them by another table's memory and cost)."""
    per = _per_table("sharding", sharding, names)
    for n in _per_table("table_ranks", table_ranks or {}, names):
        if per.get(n, "hash") != "table_wise":
            raise InvalidInputError(f"table_ranks places table {n!r}, whose sharding is {per.get(n, 'hash')!r}: "
                                    "only table_wise tables take a rank")
    if plan is not None and "plan" not in {per.get(n, "hash") for n in names}:
        raise InvalidInputError(f"plan= is given, but no table's sharding is 'plan' (sharding={sharding!r}): pass "
                                "sharding='plan' to place the tables as the plan says, or leave plan= out")
    if plan is not None and not callable(getattr(plan, "table", None)):
        raise InvalidInputError(f"plan: expected a recgo.planner.Plan, got {type(plan).__name__} (shard_model "
                                "also takes TorchRec's ShardingPlan)")
    if plan is not None:
        _check_plan_topology(plan, world, nodes, ranks_per_node)
    out = []
    for i, n in enumerate(names):
        kind = per.get(n, "hash")
        if kind not in SHARDING_TYPES:
            raise InvalidInputError(f"table {n!r}: sharding {kind!r} is not one of {sorted(SHARDING_TYPES)}")
        rank = i % world
        if kind == "plan":
            if plan is None:
                raise InvalidInputError(f"table {n!r}: sharding 'plan' needs plan=")
            placed = plan.table(n)
            if (int(placed["rows"]), int(placed["dim"])) != tuple(shapes[i]):
                raise InvalidInputError(f"table {n!r} has {shapes[i][0]} rows of dim {shapes[i][1]}, but the plan was "
                                        f"made for {placed['rows']} rows of dim {placed['dim']}: plan these tables")
            rank = int(placed["rank"])
            if not 0 <= rank < world:
                raise InvalidInputError(f"table {n!r}: the plan puts it on rank {rank}, the world has {world} ranks")
        elif table_ranks and n in table_ranks:
            rank = int(table_ranks[n])
        out.append((SHARDING_TYPES[kind], rank))
    return [per.get(n, "hash") for n in names], out


def resolve_row_splits(names: Sequence[str], rows: Sequence[int], sharding_names: Sequence[str], row_splits: Any,
                       world: int) -> list[tuple[int, ...] | None]:
    """Each table's rows per rank, in rank order, where ``row_splits`` (table → counts) gives them: row-wise
    tables only, one count per rank, summing to the table's ``rows``; None where it does not (the even
    split). The engine checks the counts again (none negative) and names the table if not. The sum is
    checked here too: the engine takes a split of zeros for "none given", so one of all zeros would
    pass as the even split."""
    if row_splits is None:
        return [None] * len(names)
    if not isinstance(row_splits, Mapping):
        raise InvalidInputError(f"row_splits: expected a mapping table → rows per rank, got {type(row_splits).__name__}")
    per = _per_table("row_splits", row_splits, names)
    out: list[tuple[int, ...] | None] = []
    for n, kind in zip(names, sharding_names):
        if n not in per:
            out.append(None)
            continue
        if kind != "row_wise":
            raise InvalidInputError(f"row_splits splits table {n!r}, whose sharding is {kind!r}: only row_wise "
                                    "tables take a row split")
        try:
            split = tuple(operator.index(x) for x in per[n])
        except TypeError:
            raise InvalidInputError(f"table {n!r}: row_splits gives {per[n]!r}; expected the number of rows of each "
                                    "rank, in rank order (a sequence of ints)") from None
        if len(split) != world:
            raise InvalidInputError(f"table {n!r}: row_splits gives {len(split)} ranks' rows {list(split)}, the world "
                                    f"has {world} ranks: give one count per rank, in rank order (0 for a rank "
                                    "that holds none)")
        if sum(split) != rows[names.index(n)]:
            raise InvalidInputError(f"table {n!r}: the row split {list(split)} covers {sum(split)} rows, the table "
                                    f"has {rows[names.index(n)]}")
        out.append(split)
    return out


def resolve_returns(names: Sequence[str], owner_pooling: str | Mapping[str, str]) -> list[int]:
    """Each table's engine code for what its owners return (``RETURNS``; ``"auto"`` where left out)."""
    per = _per_table("owner_pooling", owner_pooling, names)
    for n, r in per.items():
        if r not in RETURNS:
            raise InvalidInputError(f"table {n!r}: owner_pooling {r!r} is not one of {sorted(RETURNS)}")
    return [RETURNS[per.get(n, "auto")] for n in names]


def _check_plan_topology(plan: Any, world: int, nodes: int | None, ranks_per_node: int | None) -> None:
    """Refuse a planner Plan made for another cluster than this world: its ranks and memory budgets
    would be another cluster's (a plan for 1 GPU puts every table on rank 0 of 2)."""
    topo = getattr(plan, "topology", None)
    if topo is None:
        return
    made = f"the plan was made for {topo.nodes} node(s) × {topo.gpus_per_node} GPU(s)"
    if topo.num_gpus != world:
        raise InvalidInputError(f"plan: {made} = {topo.num_gpus} GPUs, but the world has {world} ranks: plan for "
                                f"this world (Topology(nodes=..., gpus_per_node=...) with {world} GPUs in all)")
    for what, mine, theirs in (("nodes", nodes, topo.nodes), ("ranks_per_node", ranks_per_node, topo.gpus_per_node)):
        if mine is not None and mine != theirs:
            raise InvalidInputError(f"plan: {made}, but the collection is given {what}={mine}: plan for this "
                                    "topology, or give the plan's")
