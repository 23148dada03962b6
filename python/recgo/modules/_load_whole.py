"""``load_state_dict`` of recgo's collections, all or nothing.

A call loads the tables one after another: a later table refused would leave the earlier ones loaded,
the collection half old and half new. An unsharded collection checks every entry of every table
before it changes the first (``_storage.check_checkpoint``, in its load pre-hook: shapes, steps,
optimizer state, and the dynamic-ID tables' ID maps, which the engine checks without loading), so a
load of it alone keeps no copy. A sharded collection's tables re-distribute their rows table by table
over collectives that may fail on a peer, so for it (and for a model holding several collections,
whose later collection's refusal comes after an earlier one loaded) :func:`whole_load` takes a copy
of every table the state dict names before the call (its rows, optimizer state and step; a dynamic-ID
table's rows in use with its ID map, not the whole reserved bound) and puts every one back, the very
tensors the engine holds included, if the call raises.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ._load_keys import checked_keys


@dataclass
class _Saved:
    """One table as it was: its module's parameter and buffer objects (``assign=True`` replaces
    them), copies of their values, and a dynamic-ID table's export (None for a fixed table)."""

    module: nn.Module
    params: dict[str, Any]
    buffers: dict[str, Any]
    values: dict[str, torch.Tensor]
    dynamic: dict[str, torch.Tensor] | None
    changes: int = 0  # a dynamic-ID table's (recgo.dynamic.changes) when saved


def _tables(coll: nn.Module) -> tuple[str, nn.ModuleDict, dict[str, bool]]:
    """The collection's state-dict name of its tables, their modules, and which are dynamic-ID tables."""
    mods = coll.embeddings if isinstance(getattr(coll, "embeddings", None), nn.ModuleDict) else coll.embedding_bags
    attr = next(n for n, m in coll._modules.items() if m is mods)
    owner = getattr(coll, "_owner", coll)  # a sequence collection's tables are its owner's
    dyn = {c.name: getattr(c, "dynamic", None) is not None for c in owner._configs}
    return attr, mods, dyn


def save_tables(coll: nn.Module, state_dict: Mapping[str, Any], prefix: str,
                names: Collection[str] | None = None) -> list[_Saved]:
    """Copies of the collection's tables that ``state_dict`` has entries for (keys under ``prefix``), or
    of the tables ``names`` names."""
    from .. import dynamic

    attr, mods, dyn = _tables(coll)
    out = []
    for name, m in mods.items():
        head = f"{prefix}{attr}.{name}."
        if names is not None and name not in names or names is None and not any(
                isinstance(k, str) and k.startswith(head) for k in state_dict):
            continue  # the call leaves this table as it is
        is_dyn = dyn.get(name, False) and getattr(getattr(coll, "_owner", coll), "_handle", 0) is not None
        # a dynamic-ID table's weight is its whole reserved bound: its export holds the rows in use
        values = {k: v.detach().clone() for k, v in [*m._parameters.items(), *m._buffers.items()]
                  if v is not None and not (is_dyn and k in ("weight", "optimizer_state"))}
        out.append(_Saved(m, dict(m._parameters), dict(m._buffers), values,
                          dynamic._export(coll, name, rows=True) if is_dyn else None,
                          dynamic.changes(coll, name) if is_dyn else 0))
    return out


def put_back(coll: nn.Module, saved: list[_Saved]) -> None:
    """Every saved table as it was."""
    from .. import dynamic

    _, mods, _ = _tables(coll)
    names = {id(m): n for n, m in mods.items()}
    with torch.no_grad():
        for s in saved:
            s.module._parameters.update(s.params)
            s.module._buffers.update(s.buffers)
            for k, v in s.values.items():
                (s.params.get(k) if k in s.params else s.buffers[k]).copy_(v)
            # a dynamic-ID table no import reached is as it was: importing it again would replace the rows
            # a pending backward's forward looked up, and that backward would drop their gradients
            if s.dynamic is not None and dynamic.changes(coll, names[id(s.module)]) != s.changes:
                e = s.dynamic
                dynamic.import_state(coll, names[id(s.module)], e, e["weight"], e.get("optimizer_state"))


def collections(module: nn.Module) -> list[tuple[str, nn.Module]]:
    """recgo's collections in ``module`` (itself included), with their state-dict key prefixes."""
    from ..distributed._collection import ShardedEmbeddingBagCollection
    from .embedding import EmbeddingBagCollection
    from .sequence import EmbeddingCollection

    kinds = (EmbeddingBagCollection, EmbeddingCollection, ShardedEmbeddingBagCollection)
    return [(f"{n}." if n else "", m) for n, m in module.named_modules() if isinstance(m, kinds)]


@contextmanager
def whole_load(module: nn.Module, state_dict: Mapping[str, Any]) -> Iterator[None]:
    """Run a ``load_state_dict`` of ``module`` (a collection, or a model holding some) from
    ``state_dict``: if it raises, every table of every collection in ``module`` that the state dict
    names is put back as it was (weights, optimizer state and step, a dynamic-ID table's ID map and
    admission state), and the exception propagates. A lone unsharded collection refuses before its
    first table changes (see the module's docstring): nothing is copied for it."""
    from ..distributed._collection import ShardedEmbeddingBagCollection

    found = collections(module)
    if len(found) == 1 and not isinstance(found[0][1], ShardedEmbeddingBagCollection):
        yield
        return
    saved = [(c, save_tables(c, state_dict, p)) for p, c in found]
    for _, c in found:  # (their load pre-hooks keep no copy of their own then)
        c.__dict__["_whole_load"] = True
    try:
        yield
    except BaseException:
        for c, s in saved:
            put_back(c, s)
        raise
    finally:
        for _, c in found:
            c.__dict__.pop("_whole_load", None)


@contextmanager
def collection_load(coll: nn.Module, state_dict: Mapping[str, Any], strict: bool, fused: bool) -> Iterator[None]:
    """A collection's own ``load_state_dict``: a strict one's keys checked before any entry is copied
    (:func:`._load_keys.checked_keys`; ``fused``: the collection has a fused optimizer), then all or
    nothing across its tables (:func:`whole_load`)."""
    with checked_keys(coll, strict, _tables(coll)[0], fused), whole_load(coll, state_dict):
        yield
