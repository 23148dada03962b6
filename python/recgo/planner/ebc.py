"""An EmbeddingBagCollection laid out by a plan: hot rows first in every table, IDs remapped in Go.

Each table keeps one weight matrix whose rows are renumbered by the plan's remap, so rows
``[0, hot_rows)`` are the table's hot region (HBM in a GPU deployment) and ``[hot_rows, rows)`` its
cold region (host memory reached over UVM). Incoming KJTs are remapped in one Go call per batch
before the lookup, so callers keep feeding the original IDs.

A feature several tables read, one of them planned, cannot reach them as one batch key: each planned
table renumbers its rows its own way. The wrapped collection (``.ebc``) therefore reads each planned
table's copy of such a feature under a key of its own (``feature#table``; see :func:`_own_keys`),
which the forward cuts from the batch key (a copy of that key's bags) before the remap renumbers
each copy by its table; outputs keep the plain collection's names (``feature@table``). A collection
without such a feature feeds the batch on as it is (no copy).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from typing import Any, Sequence

import torch
from torch import nn

from ..errors import InvalidInputError
from ..modules._trace import traced_as_leaf
from ..modules import _vbe, optim
from ..modules._walk import torchrec_kind
from ..modules.convert import _keep_frozen, torchrec_optimizer_state
from ..modules.config import _check_configs, _embedding_names, check_keys, key_readers
from ..modules.embedding import EmbeddingBagCollection, EmbeddingBagConfig
from ..sparse import KeyedTensor, _is_torchrec_kjt, as_kjt
from ._plan import Plan
from ._profile import Profile
from ._remap import Remap


class PlannedEmbeddingBagCollection(nn.Module):
    """``recgo.EmbeddingBagCollection`` with the plan's hot-first row order (see the module docstring).

    Args:
        tables: the EmbeddingBagConfigs (recgo's or TorchRec's); tables absent from the plan keep
            their row order, but every planned table must be among them (InvalidInputError naming
            both sets otherwise: a plan made for other tables would do nothing). A feature that
            several tables list is looked up in each, renumbered by each planned table's remap (its
            outputs keyed ``"feature@table"``, as in the plain collection).
        plan: the :class:`Plan`; ``remap`` its :class:`Remap` (default: ``plan.remap(profile)``).
        ebc_kwargs: passed to :class:`recgo.EmbeddingBagCollection` (optimizer, seed, ...).
    """

    def __init__(self, tables: Sequence[Any], plan: Plan, remap: Remap | None = None,
                 profile: Profile | None = None, **ebc_kwargs: Any) -> None:
        super().__init__()
        self.remap = remap if remap is not None else plan.remap(profile)
        _check_remap(plan, self.remap)
        self._configs = _check_configs(tables)
        planned = {t["name"] for t in self.remap.tables}
        names = {c.name for c in self._configs}
        if not planned <= names:
            raise InvalidInputError(
                f"plan and collection disagree on table names: the plan has {sorted(planned)}, the collection "
                f"{sorted(names)} ({sorted(planned - names)} not in the collection); plan the collection's "
                "tables (their EmbeddingBagConfig names)")
        dynamic = sorted(c.name for c in self._configs if c.name in planned and c.dynamic is not None)
        if dynamic:
            raise InvalidInputError(
                f"the plan covers dynamic-ID tables {dynamic}: their IDs are not row numbers, so a hot-rows-first "
                "remap does not apply; profile and plan the fixed tables only (tables the plan leaves out keep "
                "their own layout)")
        for c in self._configs:
            if c.name in planned:
                rm = self.remap.tables[self.remap._position(c.name)]
                if rm["rows"] != c.num_embeddings:
                    raise InvalidInputError(f"table {c.name!r}: {c.num_embeddings} rows but the plan has {rm['rows']}")
        inner, self._sources = _own_keys(self._configs, planned)
        self.ebc = EmbeddingBagCollection(inner, **ebc_kwargs)
        self._f2t = {f: c.name for c in inner for f in c.feature_names}
        self._names = _embedding_names(self._configs)  # the plain collection's output keys
        self._keys = [f for c in self._configs for f in c.feature_names]  # each output's batch key
        self._readers = key_readers(self._keys)
        self._planned = planned
        self.plan = plan
        self._digests: dict[str, str] | None = None  # get_extra_state's, once asked

    @classmethod
    def from_ebc(cls, ebc: nn.Module, plan: Plan, remap: Remap | None = None,
                 profile: Profile | None = None, **ebc_kwargs: Any) -> "PlannedEmbeddingBagCollection":
        """Build from an existing recgo or TorchRec EmbeddingBagCollection, moving its rows hot-first, with
        its fused optimizer (unless ``optimizer=`` is given: recgo's own, a TorchRec fused collection's
        or what ``apply_optimizer_in_backward`` gave it, as ``recgo.from_torchrec`` takes it) and, where
        the update is the same, the optimizer state of each row and the step (both were dropped, so a
        fused collection converted this way stopped training), which tables are frozen
        (``weight.requires_grad_(False)``), and whether it is weighted (unless
        ``is_weighted=`` is given; it was dropped, so the batch's weights were ignored), and a recgo
        source's ``sparse_grad`` and ``dedup`` (unless given)."""
        if isinstance(ebc, PlannedEmbeddingBagCollection):  # its rows are in its own plan's order
            raise InvalidInputError("from_ebc: the collection is already planned (its rows are renumbered by its "
                                    "own plan); plan the collection it was made from, or load its state_dict into "
                                    "a PlannedEmbeddingBagCollection built with the same plan")
        cfgs = [c if isinstance(c, EmbeddingBagConfig) else EmbeddingBagConfig.from_torchrec(c)
                for c in ebc.embedding_bag_configs()]
        dynamic = [c.name for c in cfgs if c.dynamic is not None]
        if dynamic:  # copying rows would leave their ID maps behind
            raise InvalidInputError(f"from_ebc: tables {dynamic} are dynamic-ID tables, whose rows belong to their "
                                    "ID maps; keep them in a collection of their own")
        optim.adopt(ebc, ebc_kwargs)
        ebc_kwargs.setdefault("is_weighted", bool(ebc.is_weighted()))
        if isinstance(ebc, EmbeddingBagCollection):  # how a recgo source was built, unless the caller says
            ebc_kwargs.setdefault("sparse_grad", ebc._sparse_grad)
            ebc_kwargs.setdefault("dedup", ebc._dedup)
        out = cls(cfgs, plan, remap, profile, **ebc_kwargs)
        state = ebc.state_dict()
        if torchrec_kind(ebc):  # the state TorchRec keeps outside its state dict
            state.update(torchrec_optimizer_state(ebc, out.ebc.fused_optimizer, "embedding_bags"))
        with torch.no_grad():
            for c in cfgs:
                head, table = f"embedding_bags.{c.name}.", out.ebc.embedding_bags[c.name]
                new = out._new_ids(c.name, c.num_embeddings)
                table.weight[new] = state[head + "weight"].detach().to(torch.float32)
                st, mine = state.get(head + "optimizer_state"), getattr(table, "optimizer_state", None)
                if st is not None and mine is not None and st.shape == mine.shape:
                    mine[new] = st.to(mine.dtype)
                step, my_step = state.get(head + "optimizer_step"), getattr(table, "optimizer_step", None)
                if step is not None and my_step is not None and step.numel() == my_step.numel() > 0:
                    my_step.copy_(step)
        _keep_frozen(ebc, out.ebc, "embedding_bags")  # a frozen (e.g. pretrained) table was trained
        return out

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        raise InvalidInputError(
            "a PlannedEmbeddingBagCollection cannot be copied (its remap is engine state): build another from "
            "the plan (PlannedEmbeddingBagCollection(tables, plan, remap=Remap.load(...))) and load this one's "
            "state_dict into it")

    def __reduce_ex__(self, protocol: Any) -> Any:
        self.__deepcopy__({})  # the same refusal for pickle and torch.save(module)

    def get_extra_state(self) -> dict[str, Any]:
        """A digest of each planned table's row order, stored beside the rows (which are in that order)
        and checked by :meth:`set_extra_state` on load."""
        if self._digests is None:
            self._digests = {t["name"]: hashlib.sha256(self._new_ids(t["name"], t["rows"]).numpy().tobytes())
                             .hexdigest() for t in self.remap.tables}
        return {"remap": dict(self._digests)}

    def set_extra_state(self, state: Any) -> None:
        """Refuse a state dict whose rows are in another remap's order (saved by a collection built with
        another plan, profile or remap): loaded, every row would land under another ID. Called by
        ``load_state_dict`` before the tables' rows are copied (a module's own state loads before its
        children's)."""
        saved = state.get("remap") if isinstance(state, dict) else None
        if not isinstance(saved, dict):
            raise InvalidInputError(f"this state dict's extra state is {state!r}, not a PlannedEmbeddingBagCollection's")
        mine = self.get_extra_state()["remap"]
        differ = sorted(t for t in set(saved) | set(mine) if saved.get(t) != mine.get(t))
        if differ:
            raise InvalidInputError(
                f"the state dict was saved by a PlannedEmbeddingBagCollection with another row order for tables "
                f"{differ} (another plan, profile or remap): its rows would land under other IDs. Build this one "
                "with the remap it was saved with (Remap.load), or move the rows by original_weight()")

    def _new_ids(self, table: str, rows: int) -> torch.Tensor:
        ids = torch.arange(rows, dtype=torch.int64)
        return self.remap.apply(table, ids) if table in self._planned else ids

    def hot_rows(self, table: str) -> int:
        """Rows of ``table`` in its hot region (all rows for a table the plan does not cover)."""
        if table not in self._planned:
            return next(c.num_embeddings for c in self._configs if c.name == table)
        return self.remap.hot_rows(table)

    def hot_region(self, table: str) -> torch.Tensor:
        """The hot rows of ``table`` (a view of the weight)."""
        return self.ebc.embedding_bags[table].weight[: self.hot_rows(table)]

    def cold_region(self, table: str) -> torch.Tensor:
        """The cold rows of ``table`` (a view of the weight)."""
        return self.ebc.embedding_bags[table].weight[self.hot_rows(table):]

    def original_weight(self, table: str) -> torch.Tensor:
        """The weight in the original row order (a copy)."""
        w = self.ebc.embedding_bags[table].weight.detach()
        return w[self._new_ids(table, w.shape[0])]

    @traced_as_leaf
    def forward(self, features: Any) -> Any:
        """Remap the batch's IDs hot-first (Go) and pool them: a ``torchrec.KeyedTensor`` for a TorchRec
        input (as :class:`recgo.EmbeddingBagCollection` gives), else a :class:`recgo.KeyedTensor`."""
        vb = _vbe.variable_batch(features)
        if vb is not None:  # TorchRec's variable batch, as the plain collection takes it (see _vbe)
            index, batch = _vbe.pooled_index(vb, self._keys)
        kjt = vb.kjt if vb is not None else as_kjt(features)
        if self._sources is not None:  # a planned table's copy of a shared feature, under its own key
            check_keys(self._readers, kjt.keys())
            at = kjt.index_per_key()
            kjt = kjt._take([at[k] for k in self._sources.values()], list(self._sources))
        out: KeyedTensor = self.ebc(self.remap._apply_kjt(kjt, self._f2t))
        if vb is not None:
            widths = out.length_per_key()
            out = KeyedTensor._over(self._names, widths, _vbe.expand_pooled(out.values(), index, widths, batch))
        elif self._sources is not None:
            out = KeyedTensor._over(self._names, out.length_per_key(), out.values())
        return out.to_torchrec() if _is_torchrec_kjt(features) else out

    def is_weighted(self) -> bool:
        """Whether the batch's per-ID weights scale the pooled rows (the wrapped collection's)."""
        return self.ebc.is_weighted()

    def embedding_bag_configs(self) -> list[EmbeddingBagConfig]:
        """The tables as given (their own feature names, the keys of the batches this collection is
        fed; its ``.ebc`` may read a shared feature under keys of its own)."""
        return list(self._configs)

    def feature_names(self) -> list[str]:
        """Output feature order (as a plain EmbeddingBagCollection of the same tables gives)."""
        return list(self._names)

    def _traced_output(self, node: Any) -> KeyedTensor:
        """Under ``torch.fx`` tracing: the output as a KeyedTensor over the node's values (``_trace``)."""
        return KeyedTensor._over(self._names, self.ebc._traced_output(node).length_per_key(), node.values())


def _check_remap(plan: Plan, remap: Remap) -> None:
    """Refuse a remap made for another plan (a stale ``remap.bin`` beside a re-planned ``plan.json``):
    each of its tables must be in the plan with the same rows and hot rows, or the hot region this
    collection shows is not the one the plan placed."""
    placed = {t["name"]: t for t in plan.tables}
    differ = []
    for t in remap.tables:
        p = placed.get(t["name"])
        if p is None or (t["rows"], t["hot"]) != (p["rows"], p["hot_rows"]):
            there = "absent" if p is None else f"{p['rows']} rows, {p['hot_rows']} hot"
            differ.append(f"{t['name']!r} (remap: {t['rows']} rows, {t['hot']} hot; plan: {there})")
    if differ:
        raise InvalidInputError(f"the remap was not made for this plan: tables {', '.join(differ)}; use the remap "
                                "saved with this plan, or plan.remap(profile)")


def _own_keys(cfgs: list[EmbeddingBagConfig], planned: set[str]
              ) -> tuple[list[EmbeddingBagConfig], dict[str, str] | None]:
    """The wrapped collection's configs: each planned table reading a feature that several tables read
    reads it under a key of its own, ``feature#table`` (``#`` repeated while that names another
    feature), so the remap can renumber each table's copy its own way. Also, per batch key of the
    wrapped collection, the key of the user's batch it copies (None when no key was renamed)."""
    n = Counter(f for c in cfgs for f in c.feature_names)
    used = set(n)
    renamed: dict[tuple[str, str], str] = {}
    for c in cfgs:
        for f in c.feature_names:
            if n[f] > 1 and c.name in planned:
                key = f"{f}#{c.name}"
                while key in used:
                    key += "#"
                used.add(key)
                renamed[(f, c.name)] = key
    if not renamed:
        return cfgs, None
    inner = [dataclasses.replace(c, feature_names=[renamed.get((f, c.name), f) for f in c.feature_names])
             for c in cfgs]
    sources = {renamed.get((f, c.name), f): f for c in cfgs for f in c.feature_names}
    return inner, sources
