"""``from_torchrec``: a TorchRec model's embedding modules swapped for recgo's, in one process."""

from __future__ import annotations

import dataclasses
import warnings
from collections import OrderedDict
from typing import Any

import torch
from torch import nn

from .. import dynamic
from ..dynamic import DynamicConfig
from ..errors import InvalidInputError
from . import optim
from ._copies import _HOOK_TABLES, _STATE_HOOK_TABLES
from ._walk import outermost, replace, torchrec_class, torchrec_kind
from .config import EmbeddingBagConfig, EmbeddingConfig, _as_sequence_config
from .embedding import EmbeddingBagCollection
from .managed import ManagedCollisionEmbeddingBagCollection, ManagedCollisionEmbeddingCollection
from .optim import FusedOptimizer
from .sequence import EmbeddingCollection


def from_torchrec(model: nn.Module, *, optimizer: FusedOptimizer | None = None, seed: int | None = None) -> nn.Module:
    """Replace every TorchRec ``EmbeddingBagCollection``, ``FusedEmbeddingBagCollection`` and
    ``EmbeddingCollection`` of ``model`` (itself included) by recgo's collection with the same tables,
    so a TorchRec training script runs on recgo by adding one line after the model is built:

    * the tables' weights are carried over (state-dict keys are the same), and so is TorchRec's
      optimizer state, which it keeps outside the state dict, when recgo's fused optimizer runs the
      same update: Adagrad's and row-wise Adagrad's accumulators (from ``apply_optimizer_in_backward``
      or a ``FusedEmbeddingBagCollection``), Adam's and AdamW's moments and step; with another
      optimizer the state starts from zero; a module on the meta device
      gives a recgo collection on the meta device (materialise it with ``to_empty`` or
      ``load_state_dict``, as for TorchRec's), whose ``reset_parameters()`` draws from ``seed``;
    * the fused optimizer is ``optimizer`` if given, else the one a ``FusedEmbeddingBagCollection``
      was built with, else the one ``apply_optimizer_in_backward`` gave the tables; with none, the
      weights get gradients for a torch optimizer (build it after this call: it must hold the new
      parameters);
    * weighted collections stay weighted, and ``need_indices`` carries over;
    * a sequence collection whose tables are a pooled collection's (the same ``weight`` parameters, as
      :func:`to_torchrec` leaves an ``EmbeddingCollection(share=)``) becomes one built with ``share=`` the
      converted pooled collection, so the table stays one;
    * a table frozen with ``weight.requires_grad_(False)`` stays frozen (also on the meta device, once
      materialised): the fused optimizer leaves it out, as TorchRec's in-backward optimizer did;
    * each module's ``training`` flag carries over (a model converted in eval mode stays in eval mode:
      dynamic-ID tables admit no ID), and so do the hooks registered on it (forward, forward-pre,
      backward, state-dict), whose handles still remove them; hooks that cannot carry over warn (on the
      tables' or an MCH module, or a managed-collision collection's state-dict hooks, written for
      TorchRec's keys);
    * a ``ManagedCollisionEmbeddingBagCollection`` / ``ManagedCollisionEmbeddingCollection`` becomes
      recgo's (:mod:`recgo.modules.managed`): a collection of dynamic-ID tables with its MCH modules'
      bounds and eviction policies, holding the IDs they had mapped with their rows (and optimizer
      state), called as TorchRec's module is.

    Returns ``model`` with the modules replaced (or the new collection when ``model`` was one).

    Raises:
        InvalidInputError: ``model`` holds none of TorchRec's embedding modules, a table of one
            collection has another in-backward optimizer than the rest, or one recgo does not have
            (see :func:`recgo.modules.optim.from_torch`).
    """
    if not isinstance(model, nn.Module):
        raise InvalidInputError(f"from_torchrec: expected an nn.Module, got {type(model).__name__}")
    if not outermost(model, _kind):
        sharded = any(type(m).__module__.startswith("torchrec.distributed") for m in model.modules())
        raise InvalidInputError("from_torchrec: the model holds no TorchRec EmbeddingBagCollection, "
                                "FusedEmbeddingBagCollection or EmbeddingCollection"
                                + (" (its TorchRec modules are sharded by DistributedModelParallel: convert the "
                                   "unsharded model, then shard it with recgo.distributed.shard_model, and load the "
                                   "DMP checkpoint through torch.distributed.checkpoint)" if sharded else ""))
    # Unsharded, TorchRec's modules ran apply_optimizer_in_backward's torch optimizer itself: options
    # left out take that class's defaults (shard_model, like DMP, takes FBGEMM's).
    model = convert_managed(model, optimizer, seed, class_defaults=True)  # inner collections convert with them
    # pooled collections first: a sequence collection whose tables are theirs (the same weight
    # parameters) becomes an EmbeddingCollection over the converted one (share=), not a copy
    pooled_weights: dict[int, EmbeddingBagCollection] = {}
    for name, m, kind in sorted(outermost(model, torchrec_kind), key=lambda f: f[2] != "pooled"):
        owner = _shared_owner(m, name, pooled_weights) if kind == "sequence" else None
        if owner is not None:
            cfgs = [dataclasses.replace(_as_sequence_config(c), init_fn=None) for c in m.embedding_configs()]
            new_ec = EmbeddingCollection(cfgs, need_indices=bool(m.need_indices()), share=owner)  # rows: the owner's
            carry_module_state([(m, new_ec)], name)
            model = replace(model, name, new_ec)
            continue
        kwargs: dict[str, Any] = {} if optimizer is None else {"optimizer": optimizer}
        optim.adopt(m, kwargs, class_defaults=True)
        meta = any(t.is_meta for t in (*m.parameters(), *m.buffers()))
        # built on meta either way: loading the weights materialises it without a random draw that
        # they would overwrite (a third of a large model's conversion time)
        common = {"optimizer": kwargs["optimizer"], "seed": seed, "device": "meta"}
        if kind == "pooled":
            new: nn.Module = EmbeddingBagCollection(m.embedding_bag_configs(), is_weighted=m.is_weighted(), **common)
        else:
            new = EmbeddingCollection(m.embedding_configs(), need_indices=bool(m.need_indices()), **common)
        if not meta:
            _carry_weights(m, new, name)
            _carry_optimizer_state(m, new, name, kind)
        _keep_in_backward_mark(m, new)
        _keep_frozen(m, new, _prefix(m))
        carry_module_state([(m, new)], name)
        if kind == "pooled":
            pooled_weights.update((id(w), new) for w in _table_weights(m, "embedding_bags"))  # type: ignore[misc]
        model = replace(model, name, new)
    return model


def _table_weights(m: nn.Module, prefix: str) -> list[Any]:
    """The ``weight`` of each of TorchRec's module ``m``'s tables (none for a module that keeps them
    otherwise, as a fused one does)."""
    tables = getattr(m, prefix, None)
    return [t.weight for t in tables.values()] if isinstance(tables, nn.ModuleDict) else []


def _shared_owner(m: nn.Module, name: str, pooled_weights: dict[int, EmbeddingBagCollection]
                  ) -> EmbeddingBagCollection | None:
    """The converted pooled collection whose tables TorchRec's sequence collection ``m`` looks up (each
    of its tables' ``weight`` is one of that collection's, as ``to_torchrec`` leaves a ``share=``
    collection), or None when its tables are its own.

    Raises:
        InvalidInputError: only some of its tables are another collection's, or they are several
            collections' (``share=`` takes one collection's tables).
    """
    owners = [pooled_weights.get(id(w)) for w in _table_weights(m, "embeddings")]
    if not any(o is not None for o in owners):
        return None
    if any(o is None for o in owners) or len({id(o) for o in owners}) > 1:
        raise InvalidInputError(f"from_torchrec: {name or 'the model'}: some of its tables' weights are those of "
                                "pooled collections (tied parameters) and some are not, or they are several "
                                "collections': recgo's EmbeddingCollection shares the tables of one collection "
                                "(share=), all of them; tie all its tables to one EmbeddingBagCollection or none")
    return owners[0]


def to_torchrec(model: nn.Module) -> nn.Module:
    """The way back from :func:`from_torchrec`: replace every recgo ``EmbeddingBagCollection`` and
    ``EmbeddingCollection`` of ``model`` (itself included) by TorchRec's module with the same tables and
    weights, for what only TorchRec's modules feed: its inference stack (``quantize_dynamic`` to
    ``QuantEmbeddingBagCollection``, ``torch.jit.script``, ``fuse_embedding_optimizer``), or a TorchRec
    script that goes on from a recgo-trained model.

    The weights are copied (TorchRec's module is built with torch's random state left as it was, so the
    caller's next draws are unchanged; a collection on the meta device gives TorchRec's on the meta
    device, to materialise as TorchRec's modules are); ``is_weighted``, ``need_indices``, each table's
    ``requires_grad``, the ``training`` flag and user hooks carry over. The fused optimizer and its state do not: TorchRec's
    unsharded modules hold none (give the new tables ``apply_optimizer_in_backward`` to train on).

    Returns ``model`` with the modules replaced (or the new module when ``model`` was a collection).

    Raises:
        InvalidInputError: ``model`` holds no recgo collection, a sequence collection has tables of
            several widths (TorchRec's requires one), a collection has dynamic-ID tables (TorchRec's
            counterpart is a managed-collision module), or is sharded or planned
            (``recgo.distributed.gather_state_dict`` gives the unsharded weights).
    """
    import torchrec

    if not isinstance(model, nn.Module):
        raise InvalidInputError(f"to_torchrec: expected an nn.Module, got {type(model).__name__}")
    found = outermost(model, _recgo_kind)
    if not found:
        raise InvalidInputError("to_torchrec: the model holds no recgo EmbeddingBagCollection or EmbeddingCollection")
    converted: dict[int, nn.Module] = {}  # id of each recgo collection → its TorchRec module
    for name, m, kind in found:
        where = name or "the model"
        if kind == "dynamic":
            raise InvalidInputError(f"to_torchrec: {where} has dynamic-ID tables, which TorchRec's collections do "
                                    "not have (its managed-collision modules map IDs differently)")
        if kind == "other":
            raise InvalidInputError(f"to_torchrec: {where} is a recgo {type(m).__name__}, which has no TorchRec "
                                    "module to become (gather a sharded model's weights into the unsharded model "
                                    "with recgo.distributed.gather_state_dict and convert that)")
        dims = sorted({c.embedding_dim for c in m.embedding_configs()}) if kind == "sequence" else []
        if len(dims) > 1:
            raise InvalidInputError(f"to_torchrec: {where} is an EmbeddingCollection of tables {dims} wide: "
                                    "TorchRec's EmbeddingCollection requires one embedding_dim for all its tables "
                                    "(recgo's takes several); split it into one collection per width")
        meta = m.device.type == "meta"  # then TorchRec's module on meta too: shapes only, as from_torchrec's
        dev = torch.device("meta" if meta else "cpu")
        with torch.random.fork_rng(devices=[]):  # TorchRec's constructor draws an init the weights replace
            if kind == "pooled":
                new: nn.Module = torchrec.EmbeddingBagCollection(
                    tables=[c.to_torchrec() for c in m.embedding_bag_configs()], is_weighted=m.is_weighted(),
                    device=dev)
            else:
                new = torchrec.EmbeddingCollection(tables=[c.to_torchrec() for c in m.embedding_configs()],
                                                   need_indices=m.need_indices(), device=dev)
        prefix = "embedding_bags" if kind == "pooled" else "embeddings"
        if not meta:
            weights = {k: v for k, v in m.state_dict().items()
                       if k.startswith(f"{prefix}.") and k.endswith(".weight")}
            new.load_state_dict(weights)
        _keep_frozen(m, new, prefix)
        carry_module_state([(m, new)], name, what="to_torchrec")
        converted[id(m)] = new
        model = replace(model, name, new)
    _tie_shared(found, converted)
    return model


def _tie_shared(found: list[tuple[str, nn.Module, str]], converted: dict[int, nn.Module]) -> None:
    """A sequence collection built with ``share=`` a pooled collection that was converted too looks up
    that collection's rows in recgo: its TorchRec tables take the pooled module's ``weight`` parameters,
    so the two stay one table (copies would train apart in a TorchRec script going on from here)."""
    for _, m, kind in found:
        owner = converted.get(id(m.ebc)) if kind == "sequence" else None
        if owner is None:
            continue
        new = converted[id(m)]
        for c in m.embedding_configs():
            new.embeddings[c.name].weight = owner.embedding_bags[c.name].weight


def _recgo_kind(m: nn.Module) -> str | None:
    """``"pooled"`` or ``"sequence"`` for recgo's unsharded collections (``"dynamic"`` with dynamic-ID
    tables), ``"other"`` for recgo's other embedding modules (sharded, planned, managed-collision), None
    for any other module."""
    if isinstance(m, (EmbeddingBagCollection, EmbeddingCollection)):
        pooled = isinstance(m, EmbeddingBagCollection)
        cfgs = m.embedding_bag_configs() if pooled else m.embedding_configs()
        return "dynamic" if any(c.dynamic is not None for c in cfgs) else "pooled" if pooled else "sequence"
    if type(m).__module__.startswith("recgo.") and "Embedding" in type(m).__name__:
        return "other"
    return None


def _keep_in_backward_mark(old: nn.Module, new: nn.Module) -> None:
    """Mark ``new``'s tables as updated in backward where ``old``'s weights were
    (``apply_optimizer_in_backward``), so the TorchRec script's ``in_backward_optimizer_filter`` leaves
    them out of its dense optimizer as before (it took them in: a table-sized dense state, and a
    dense-optimizer checkpoint the unconverted script's could not load)."""
    if getattr(new, "fused_optimizer", None) is not None and any(
            hasattr(p, "_in_backward_optimizers") for p in old.parameters()):
        optim.mark_updated_in_backward(new.parameters())


def _prefix(m: nn.Module) -> str:
    """The attribute under which TorchRec's collection ``m`` holds its tables."""
    return "embedding_bags" if torchrec_kind(m) == "pooled" else "embeddings"


def table_flags(old: nn.Module, prefix: str) -> dict[str, bool]:
    """Whether each table's weight of the collection ``old`` requires grad, by table name (a table frozen
    with ``weight.requires_grad_(False)``, e.g. a pretrained one, is False)."""
    return {k[len(prefix) + 1:-len(".weight")]: p.requires_grad
            for k, p in old.named_parameters(remove_duplicate=False)
            if k.startswith(f"{prefix}.") and k.endswith(".weight")}


def _keep_frozen(old: nn.Module, new: nn.Module, prefix: str) -> None:
    """Freeze the tables of ``new`` whose weights in ``old`` do not require grad (recgo's collections are
    built with every table trainable; a table on the meta device stays frozen when materialised)."""
    tables = getattr(new, prefix)
    for table, trains in table_flags(old, prefix).items():
        if not trains and table in tables:
            tables[table].weight.requires_grad_(False)


def _internal(hook: Any) -> bool:
    """Whether ``hook`` is one TorchRec's or recgo's module registered itself (its function is theirs):
    it belongs to the module's internals, not to the user, and is neither carried over nor warned about."""
    fn = getattr(hook, "hook", hook)  # torch wraps load-state-dict pre hooks in _WrappedHook
    fn = getattr(fn, "__func__", fn)
    return str(getattr(fn, "__module__", None) or "").startswith(("torchrec.", "recgo."))


def carry_module_state(pairs: list[tuple[nn.Module, nn.Module]], name: str, state_hooks: bool = True,
                       stacklevel: int = 3, what: str = "from_torchrec") -> None:
    """Give each new module of ``pairs`` (TorchRec's module, recgo's that replaces it; the outer pair
    first) the old one's ``training`` flag (an eval model converts to eval collections, whose dynamic-ID
    tables admit no ID) and the hooks users registered on it: forward, forward-pre and backward hooks
    and, with ``state_hooks``, state-dict hooks, with their flags (``with_kwargs``, ``always_call``). The
    hook tables themselves move (the old module keeps none), so the handles users hold still remove the
    hooks. Hooks that do not carry over warn, naming where they were: state-dict hooks without
    ``state_hooks`` (a managed-collision collection's: they were written for TorchRec's keys, which
    recgo's differ from), and hooks on submodules of the first old module that no pair maps (its tables'
    modules, an MCH module: recgo's engine looks rows up without calling such modules). Hooks TorchRec
    registered itself (and recgo's) stay behind silently; ``what`` names the caller in the warning."""
    for old, new in pairs:  # outer first: train() sets the submodules, an inner pair then its own flag
        new.train(old.training)
    dropped = []
    for old, new in pairs:
        # TorchRec's own hooks, by id (a flag table's entries share their hook's id)
        internal = {k for attr in _HOOK_TABLES for k, h in old.__dict__.get(attr, {}).items() if _internal(h)}
        for attr in _HOOK_TABLES:
            table = old.__dict__.get(attr)
            if not table or all(k in internal for k in table):
                continue
            if attr in _STATE_HOOK_TABLES and not state_hooks:
                dropped.append(f"{attr} of {type(old).__name__}")
                continue
            own = list(new.__dict__[attr].items())  # recgo's (load_state_dict hooks) run first, as built
            theirs = list(table.items())
            table.clear()
            table.update(own)
            table.update((k, h) for k, h in theirs if k not in internal)
            new.__dict__[attr] = table  # the dict the users' handles refer to: remove() still works
            old.__dict__[attr] = OrderedDict((k, h) for k, h in theirs if k in internal)
            if attr == "_backward_hooks":
                new._is_full_backward_hook = old._is_full_backward_hook
    mapped = {id(old) for old, _ in pairs}
    for sub, m in pairs[0][0].named_modules():
        if id(m) not in mapped and any(not _internal(h) for attr in _HOOK_TABLES
                                       for h in getattr(m, attr, {}).values()):
            dropped.append(f"hooks of submodule {sub!r}")
    if dropped:
        warnings.warn(f"{what}: {name or 'the model'}: not carried over to recgo's module: {', '.join(dropped)} "
                      "(state-dict hooks of a managed-collision collection expect TorchRec's keys; recgo's engine "
                      "calls no per-table or MCH module)", stacklevel=stacklevel)


def convert_managed(model: nn.Module, optimizer: FusedOptimizer | None = None, seed: int | None = None,
                    class_defaults: bool = False, sharding: bool = False) -> nn.Module:
    """Replace TorchRec's managed-collision collections in ``model`` (itself included) by recgo's
    dynamic-ID tables, as :func:`from_torchrec` does, leaving every other module; returns ``model``
    (or the new collection when ``model`` was one). ``shard_model`` starts with it (``sharding``).
    ``class_defaults``: see :func:`recgo.modules.optim.adopt`. One built around a recgo collection
    stays as it is, or with ``sharding`` raises ``InvalidInputError``."""
    for name, m, _ in outermost(model, lambda m: "managed" if _kind(m) == "managed" else None):
        if torchrec_kind(m._embedding_module) is None:  # TorchRec's MCH modules in front of recgo's collection
            if sharding:  # each rank's MCH modules would map the same ID to different rows
                raise InvalidInputError(
                    f"shard_model: {name or 'the model'}: TorchRec's {type(m).__name__} around recgo's "
                    f"{type(m._embedding_module).__name__} cannot be sharded (its MCH modules would remap IDs "
                    "on each rank apart); build it around TorchRec's collection (shard_model turns it into "
                    "dynamic-ID tables) or declare recgo's dynamic-ID tables (EmbeddingBagConfig(dynamic=...))")
            continue  # in one process it runs as it is: recgo's tables behind TorchRec's remapping
        new = _from_managed(m, optimizer, seed, class_defaults)
        carry_module_state([(m, new), (m._embedding_module, getattr(new, new._attr))], name, state_hooks=False,
                            stacklevel=4)  # the caller of from_torchrec or shard_model
        model = replace(model, name, new)
    return model


def _kind(m: nn.Module) -> str | None:
    """torchrec_kind, plus ``"managed"`` for TorchRec's managed-collision collections (found before the
    collection inside them)."""
    managed = ("ManagedCollisionEmbeddingBagCollection", "ManagedCollisionEmbeddingCollection")
    return "managed" if torchrec_class(m) in managed else torchrec_kind(m)


def _from_managed(m: nn.Module, optimizer: FusedOptimizer | None, seed: int | None, class_defaults: bool) -> nn.Module:
    """recgo's stand-in for TorchRec's managed-collision collection ``m`` (pooled or sequence): each table
    a dynamic-ID table with the MCH module's bound (``zch_size``) and eviction policy (LRU, else LFU),
    holding the IDs the MCH module had mapped with their rows, last access and (where the update is the
    same) optimizer state, and the inner collection's fused optimizer."""
    inner, mcc = m._embedding_module, m._managed_collision_collection
    pooled = torchrec_kind(inner) == "pooled"
    kwargs: dict[str, Any] = {} if optimizer is None else {"optimizer": optimizer}
    optim.adopt(inner, kwargs, class_defaults)
    cfgs, hashes, modules = [], {}, {}
    for c in (inner.embedding_bag_configs() if pooled else inner.embedding_configs()):
        mch = mcc._managed_collision_modules[c.name]
        if getattr(getattr(mch, "_eviction_policy", None), "_threshold_filtering_func", None) is not None:
            warnings.warn(f"from_torchrec: table {c.name!r}: the MCH eviction policy's threshold_filtering_func "
                          "(TorchRec's per-batch count filter) has no recgo counterpart; the dynamic-ID table admits "
                          "every ID at its first sighting (DynamicConfig.min_count admits by count across batches)",
                          UserWarning, stacklevel=5)
        dyn = DynamicConfig(eviction="lru" if "LRU" in type(mch._eviction_policy).__name__ else "lfu",
                            num_embeddings=int(mch._zch_size))
        common = {"num_embeddings": int(mch._zch_size), "embedding_dim": c.embedding_dim, "name": c.name,
                  "feature_names": list(c.feature_names), "dynamic": dyn}
        cfgs.append(EmbeddingBagConfig(pooling=c.pooling, **common) if pooled else EmbeddingConfig(**common))
        if getattr(mch, "_input_hash_func", None) is not None:
            hashes.update({f: (mch._input_hash_func, int(mch._input_hash_size)) for f in c.feature_names})
        modules[c.name] = mch
    prefix = "embedding_bags" if pooled else "embeddings"
    if pooled:
        new: nn.Module = EmbeddingBagCollection(cfgs, is_weighted=inner.is_weighted(), optimizer=kwargs["optimizer"],
                                                seed=seed)
    else:
        new = EmbeddingCollection(cfgs, need_indices=bool(inner.need_indices()), optimizer=kwargs["optimizer"], seed=seed)
    states = torchrec_optimizer_state(inner, new.fused_optimizer, prefix)
    tables = getattr(new, prefix)
    for c in cfgs:
        mch = modules[c.name]
        raw = mch._mch_sorted_raw_ids
        used = raw != torch.iinfo(torch.int64).max  # empty slots hold the largest int64
        slots = mch._mch_remapped_ids_mapping[used]
        st = states.get(f"{prefix}.{c.name}.optimizer_state")
        meta = getattr(mch, "_mch_metadata", {})  # per policy: LRU last_access_iter, LFU counts, DistanceLFU both
        last, counts = meta.get("last_access_iter"), meta.get("counts")
        with torch.no_grad():
            dynamic.import_rows(new, c.name, raw[used], getattr(inner, prefix)[c.name].weight.detach()[slots],
                                None if st is None else st[slots],
                                counts=None if counts is None else counts[used].clamp(min=1),
                                last_seen=None if last is None else last[used], step=int(mch._current_iter_tensor))
        step = states.get(f"{prefix}.{c.name}.optimizer_step")
        if step is not None:
            tables[c.name].optimizer_step.copy_(step)
    _keep_in_backward_mark(inner, new)
    _keep_frozen(inner, new, prefix)
    managed = ManagedCollisionEmbeddingBagCollection if pooled else ManagedCollisionEmbeddingCollection
    return managed(new, hashes, m._return_remapped_features)


def _carry_weights(old: nn.Module, new: nn.Module, name: str) -> None:
    """Load ``old``'s table weights into ``new`` (the same keys); recgo's optimizer entries stay as built."""
    res = new.load_state_dict(old.state_dict(), strict=False)
    missing = [k for k in res.missing_keys if not k.rsplit(".", 1)[-1].startswith("optimizer_")]
    if missing or res.unexpected_keys:
        raise InvalidInputError(f"from_torchrec: {name or 'the model'}: the weights did not map onto recgo's "
                                f"collection (missing {missing}, unexpected {res.unexpected_keys})")


def torchrec_optimizer_state(old: nn.Module, fused: FusedOptimizer | None, prefix: str) -> dict[str, torch.Tensor]:
    """TorchRec's per-row optimizer state of ``old``'s tables (and the step) under recgo's state-dict
    keys (``<prefix>.<table>.optimizer_state`` / ``.optimizer_step``), when ``fused`` runs the same
    update as TorchRec's optimizer: a FusedEmbeddingBagCollection's FBGEMM ``momentum_1``, or the state
    of the torch optimizer ``apply_optimizer_in_backward`` attached to each table's weight (Adagrad's
    ``sum``, Adam's ``exp_avg`` and ``exp_avg_sq`` side by side, ``step``). Empty otherwise."""
    source = optim.of_torchrec_fused(old)
    if fused is None or type(source or optim.in_backward(old) or fused).kind != type(fused).kind:
        return {}  # another update (or none): recgo's state starts from zero, as built
    entries: dict[str, torch.Tensor] = {}
    if source is not None:  # FBGEMM keeps Adagrad's accumulators as momentum_1 ([rows, dim] or [rows])
        for key, st in old.fused_optimizer().state_dict()["state"].items():
            m1 = st.get(f"{key}.momentum_1")
            if m1 is not None:
                entries[f"{prefix}.{key.rsplit('.', 1)[0]}.optimizer_state"] = m1.reshape(m1.shape[0], -1)
        return entries
    for table, module in getattr(old, prefix).items():
        opts = getattr(module.weight, "_in_backward_optimizers", None) or []
        # torchrec.optim's Adagrad/Adam/SGD are placeholders (only DMP's FBGEMM kernels run them): they
        # have no ``state``, and could not have stepped, so recgo's state starting from zero is theirs.
        state = getattr(opts[0], "state", None) if opts else None
        st = state.get(module.weight, {}) if state is not None else {}
        parts = [st[k].reshape(st[k].shape[0], -1) for k in ("sum", "exp_avg", "exp_avg_sq") if k in st]
        if parts:  # one part is loaded as it is (cat would copy a table-sized state once more)
            entries[f"{prefix}.{table}.optimizer_state"] = parts[0] if len(parts) == 1 else torch.cat(parts, 1)
        if "step" in st:
            entries[f"{prefix}.{table}.optimizer_step"] = torch.as_tensor(st["step"]).reshape(1).to(torch.int64)
    return entries


def _carry_optimizer_state(old: nn.Module, new: nn.Module, name: str, kind: str) -> None:
    """Load TorchRec's optimizer state (:func:`torchrec_optimizer_state`) into ``new``; one that does
    not map onto recgo's warns and leaves recgo's state at zero."""
    entries = torchrec_optimizer_state(old, new.fused_optimizer, "embedding_bags" if kind == "pooled" else "embeddings")
    own = new.state_dict()
    wrong = {k: (tuple(v.shape), tuple(own[k].shape)) for k, v in entries.items() if k in own and v.shape != own[k].shape}
    if wrong or any(k not in own for k in entries):
        warnings.warn(f"from_torchrec: {name or 'the model'}: TorchRec's optimizer state does not map onto recgo's "
                      f"({wrong or sorted(set(entries) - set(own))}); the accumulators start from zero", stacklevel=3)
        return
    with torch.no_grad():
        new.load_state_dict(entries, strict=False)
