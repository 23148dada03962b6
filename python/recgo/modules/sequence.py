"""EmbeddingCollection: unpooled (sequence) embedding lookups, one row per ID, in recgo's engine.

The sequence counterpart of :class:`recgo.EmbeddingBagCollection`, shaped like TorchRec's
``EmbeddingCollection``: ``forward(kjt)`` returns ``{feature: JaggedTensor}`` whose values are
``[n, D]`` (one embedding per ID) with the KJT's lengths, and ``JaggedTensor.to_padded(L)`` gives
the ``[B, L, D]`` view and ``key_padding_mask`` a Transformer layer takes.

Engine path: the tables are those of an :class:`EmbeddingBagCollection`, either a private one
built from the configs or, with ``share=``, an existing one whose tables then serve pooled and
sequence features at once (item_id pooled for the candidate, hist_item_ids as a sequence): one
set of rows, one optimizer state. Per table the batch's IDs are deduplicated and each distinct ID
resolved once; backward merges each distinct row's gradient and applies the fused optimizer once
per row, or hands the merged gradients to a torch optimizer. Both directions are ``torch.library``
custom ops (``_sequence_ops.py``), so ``torch.compile`` traces them.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
from typing import Any, Callable, Sequence

import torch
from torch import nn

from .. import _lib
from .._cache import KeyCache
from .._lib import H
from ..errors import InternalError, InvalidInputError, NotFoundError
from ..sparse import KeyedJaggedTensor, as_kjt
from ..tensors import check_tensor, ptr
from . import _eager, _ops, _recompute, _sequence_ops, _vbe
from ._contexts import ContextStore, owning
from ._fused_update import fused_gradient
from ._grads import table_gradient
from ._copies import apply_portable_state, extra_attributes, user_hooks
from ._outputs import OutputPool
from ._merged import merged_update
from ._sequence_batch import (KeyPlan, as_torchrec, either, key_counts, meta_results, results, torchrec_dtypes,
                              unused_tables, with_indices)
from ._load_whole import collection_load
from ._storage import check_cast, materialised_before_load, synced_after_load
from ._tables import _SequenceTable
from ._trace import refuse_script, traced_as_leaf
from .config import (EmbeddingConfig, _as_sequence_config, _check_device, _embedding_names, check_keys,
                     key_readers, table_list)
from .embedding import EmbeddingBagCollection
from .optim import FusedOptimizer

__all__ = ["EmbeddingCollection", "EmbeddingConfig"]  # EmbeddingConfig lives in config.py; earlier pickles name it here


class _SequenceOwner(EmbeddingBagCollection):
    """The pooled collection that holds a sequence collection's own tables (no ``share=``): its
    tables are ``nn.Embedding`` modules, as a TorchRec ``EmbeddingCollection``'s are."""

    _table_type = _SequenceTable
    _init_table_by_table = True  # as TorchRec's EmbeddingCollection initialises its tables


class EmbeddingCollection(nn.Module):
    """Unpooled embedding tables in recgo's engine, with TorchRec's ``EmbeddingCollection`` interface.

    Args:
        tables: ``EmbeddingConfig`` list (recgo's or TorchRec's); several features may share a table.
            With ``share``, each names a table of that collection (same ``embedding_dim``) and its
            ``feature_names`` are this collection's sequence features.
        device: ``None``/``"cpu"``, or ``"meta"`` (also ``None`` under ``with torch.device("meta")``, or
            ``share=`` a collection on meta): shapes only, no memory, as for
            :class:`EmbeddingBagCollection` — ``to_empty(device="cpu")`` (or ``load_state_dict``)
            materialises the tables (and a shared collection's), ``reset_parameters()`` initialises
            them, and :meth:`recgo.distributed.ShardedEmbeddingCollection.from_ec` shards it without
            ever holding the whole tables. On meta, ``forward`` returns meta values of the right
            shapes (the batch's lengths must be on CPU).
        need_indices: each output JaggedTensor carries its feature's IDs as its ``weights()``, as
            TorchRec's ``EmbeddingCollection(need_indices=True)`` does. The third positional
            parameter, as in TorchRec's ``EmbeddingCollection(tables, device, need_indices)``; recgo's
            own parameters follow it (pass them by name).
        optimizer: a :class:`recgo.modules.optim.FusedOptimizer` applied inside backward; ``None``
            gives the weights gradients for a torch optimizer. Taken from ``share`` when sharing.
        sparse_grad: with ``optimizer=None``, sparse COO gradients instead of dense ones.
        seed: seed of the initial weights.
        share: an :class:`EmbeddingBagCollection` whose tables this collection looks up (see the
            module docstring), or a :class:`recgo.planner.PlannedEmbeddingBagCollection`: its tables,
            with each batch's IDs remapped hot-first by the plan's remap as its pooled lookups are. It keeps the rows, the optimizer state, the step counters and the
            hyper-parameters; this collection's ``embeddings.<table>`` are the same modules as its
            ``embedding_bags.<table>``.
        dedup: deduplicate each table's IDs per batch (default). ``False`` resolves and gathers every
            occurrence on its own and merges the lookups by storage row for backward instead (a
            radix sort of the rows), so each row's gradients are still summed and it is updated once:
            a fixed table's results equal ``dedup=True``'s (a dynamic table counts each occurrence
            as a sighting, so its admission and LFU counts can differ). For ablations;
            it applies to this collection's lookups only, not to ``share``'s pooled ones.

    Concurrency: as :class:`EmbeddingBagCollection`, also together with the ``share`` collection's
    passes (its lock orders both: fused steps of either are atomic, on shared rows too).

    ``forward(features)`` takes a recgo or TorchRec ``KeyedJaggedTensor`` (per-ID weights are
    ignored, as TorchRec does, and so are keys no table uses) and returns ``{feature: JaggedTensor}``
    for the collection's features in config order (tables in order, each table's features in order, as
    TorchRec), recgo's :class:`recgo.JaggedTensor` or, for a TorchRec input, TorchRec's.

    As for :class:`EmbeddingBagCollection`: ``copy.deepcopy``, pickle and ``torch.save(module)`` give
    an independent collection (over a copy of the owning collection, copied once when a model holds it
    too); casts and moves (``.half()``, ``.to("meta")``) and a forward with swapped weights
    (``torch.func.functional_call``) raise; ``requires_grad_(False)`` on a table freezes it (a fused
    update leaves it out: no row, state or step moves), on every table the collection (a fused one then
    keeps no context). With ``optimizer=None`` a graph kept by
    ``backward(retain_graph=True)`` may run backward again; with a fused optimizer it runs once.

    With ``share`` and a fused optimizer, a step that uses a table both pooled and as a sequence
    updates it twice, once per collection's backward (each update merges that collection's duplicate
    rows first), and steps its counter twice; for SGD without weight decay that equals one merged
    update (decay would apply twice). Inside :meth:`merged_update` the two backwards' gradients are
    summed per row instead and the table takes one optimizer step when the scope ends. With ``optimizer=None`` both collections' gradients
    accumulate into the one ``weight`` parameter, so a torch optimizer takes one merged step.
    """

    __prepare_scriptable__ = refuse_script

    def __init__(self, tables: Sequence[Any], device: Any = None, need_indices: bool = False,
                 optimizer: FusedOptimizer | None = None, sparse_grad: bool = False, seed: int | None = None,
                 share: Any = None, dedup: bool = True) -> None:
        super().__init__()
        if isinstance(need_indices, FusedOptimizer):  # code written when optimizer was third (sessions < 34)
            raise InvalidInputError(f"EmbeddingCollection: {need_indices!r} was passed as need_indices, the third "
                                    "positional parameter as in TorchRec; pass the fused optimizer as optimizer=")
        tables = table_list(tables, "EmbeddingCollection", "EmbeddingConfig")
        _check_device(device)
        cfgs = [_as_sequence_config(t) for t in tables]
        self._remap = None
        if share is not None and not isinstance(share, EmbeddingBagCollection) and hasattr(share, "remap") \
                and isinstance(getattr(share, "ebc", None), EmbeddingBagCollection):
            self._remap, share = share.remap, share.ebc  # a PlannedEmbeddingBagCollection
        if share is None:
            owner = _SequenceOwner([c.bag_config() for c in cfgs], device=device, optimizer=optimizer,
                                   sparse_grad=sparse_grad, seed=seed)
        else:
            if not isinstance(share, EmbeddingBagCollection):
                raise InvalidInputError(f"share: expected a recgo EmbeddingBagCollection, got {type(share).__name__}")
            if optimizer is not None or sparse_grad or seed is not None:
                raise InvalidInputError("share: optimizer, sparse_grad and seed come from the shared collection")
            owner = share
            self._check_shared(cfgs, owner)
        self._configs = cfgs
        self._dedup = bool(dedup)
        if not isinstance(need_indices, bool):
            raise InvalidInputError(f"need_indices must be a bool, got {need_indices!r}")
        self._need_indices = need_indices
        self.__dict__["_owner"] = owner  # not a submodule: state_dict keys are embeddings.<table>.*
        names = [c.name for c in owner.embedding_bag_configs()]
        # A feature several tables look up is looked up in each, its outputs named feature@table (TorchRec's
        # embedding names); _features are those names, _feature_keys the batch key each one reads.
        self._feature_keys = [f for c in cfgs for f in c.feature_names]
        self._features = _embedding_names(cfgs)
        self._readers = key_readers(self._feature_keys)
        self._f2t = dict(zip(self._features, (c.name for c in cfgs for _ in c.feature_names)))
        self._feature_dims = [c.embedding_dim for c in cfgs for _ in c.feature_names]
        self._feature_tables = [names.index(c.name) for c in cfgs for _ in c.feature_names]
        self._fused = owner.fused_optimizer is not None
        self._key_cache: dict[tuple[str, ...], KeyPlan] = KeyCache()
        self._handle: _lib.Handle | None = None
        self.embeddings = nn.ModuleDict({c.name: owner.embedding_bags[c.name] for c in cfgs})
        if owner._handle is not None:
            self._attach()
        self.register_load_state_dict_pre_hook(materialised_before_load)  # nested loads materialise too
        self.register_load_state_dict_post_hook(synced_after_load)  # assign=True: back into engine memory
        self._init_keys = frozenset(self.__dict__) | {"_init_keys"}

    def _attach(self) -> None:
        """Create the engine collection over the (materialised) owner's tables."""
        owner = self._owner
        before = frozenset(self.__dict__)
        feat_table = torch.tensor(self._feature_tables, dtype=torch.int64)
        self._handle = _lib.new_handle("recgo_ec_new", owner._handle.value, len(self._features),
                                       "\n".join(self._features).encode(), ptr(feat_table), int(self._dedup))
        used = sorted(set(feat_table.tolist()))
        got = torch.empty(len(used), dtype=torch.int64)
        _lib.call(_lib.fn("recgo_ec_tables"), self._handle.value, ptr(got), len(used))
        if got.tolist() != used:
            raise InternalError(f"EmbeddingCollection: engine tables {got.tolist()}, expected {used}")
        self._tables = used  # owner table index of each engine table, in engine order
        owner_cfgs = owner.embedding_bag_configs()
        self._table_dims = [owner_cfgs[i].embedding_dim for i in used]
        # the owner's tables (new modules if it was just materialised off the meta device)
        self.embeddings = nn.ModuleDict({c.name: owner.embedding_bags[c.name] for c in self._configs})
        self._anchor = torch.zeros((), dtype=torch.float32, requires_grad=True)
        self._contexts = ContextStore()  # forward contexts, owned by their autograd graphs
        self._outputs = OutputPool()  # forward outputs and backward gradient buffers
        _ops.register(self, self._handle.value)  # type: ignore[arg-type]
        if "_init_keys" in self.__dict__:  # materialised after construction: these are not user attributes
            self._init_keys = self._init_keys | (frozenset(self.__dict__) - before)

    @staticmethod
    def _check_shared(cfgs: list[EmbeddingConfig], owner: EmbeddingBagCollection) -> None:
        by_name = {c.name: c for c in owner.embedding_bag_configs()}
        seen = set()
        for c in cfgs:
            o = by_name.get(c.name)
            if o is None:
                raise NotFoundError(f"table {c.name!r} is not in the shared collection (tables: {list(by_name)})")
            if c.name in seen:
                raise InvalidInputError(f"duplicate table name {c.name!r}")
            seen.add(c.name)
            if c.embedding_dim != o.embedding_dim:
                raise InvalidInputError(f"table {c.name!r}: embedding_dim {c.embedding_dim} but the shared table's is "
                                        f"{o.embedding_dim}")
            if o.dynamic is None and c.num_embeddings != o.num_embeddings:
                raise InvalidInputError(f"table {c.name!r}: num_embeddings {c.num_embeddings} but the shared table "
                                        f"has {o.num_embeddings}")
            if c.init_fn is not None:
                raise InvalidInputError(f"table {c.name!r}: init_fn with share=: the rows are the shared "
                                        "collection's; give init_fn to its EmbeddingBagConfig")

    # -- engine plumbing -------------------------------------------------------------------------

    def _keys(self, keys: list[str]) -> KeyPlan:
        """How the KJT keys ``keys`` reach the engine: keys no table uses are left out (as TorchRec's
        collection ignores them), the others mapped to their features; a key several tables read is
        taken once per table, under each feature's output name."""
        tk = tuple(keys)
        cached = self._key_cache.get(tk)
        if cached is not None:
            return cached
        check_keys(self._readers, keys)
        select = [i for i, k in enumerate(keys) for _ in self._readers.get(k, ())]
        idx = [f for k in keys for f in self._readers.get(k, ())]
        names = [self._features[f] for f in idx]
        out = KeyPlan(torch.tensor(idx, dtype=torch.int64, device="cpu"), [self._feature_dims[i] for i in idx],
                      None if select == list(range(len(keys))) else select, names,
                      [names.index(f) for f in self._features])
        if type(out[0]) is torch.Tensor:  # not a tracer's (torch.export's fake tensors must not outlive it)
            self._key_cache[tk] = out
        return out

    def _batch(self, features: Any) -> tuple[KeyedJaggedTensor, KeyPlan]:
        """The batch as the engine takes it (unused keys dropped, shared keys repeated under their output
        names, IDs remapped by the plan of a shared planned collection) and its key plan."""
        kjt = as_kjt(features)
        plan = self._keys(kjt.keys())
        if plan.select is not None:
            kjt = kjt._take(plan.select, plan.keys)
        if self._remap is not None:
            kjt = self._remap._apply_kjt(kjt, self._f2t)  # a batch of unplanned tables only passes as it is
        return kjt, plan

    def _run_forward(self, key_feature: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor,
                     dims: list[int], keep: bool, train: bool | None = None,
                     owner: Callable[[int], Any] = _lib.Handle) -> tuple[list[torch.Tensor], Any]:
        """Gather into per-key ``[n_k, D_k]`` outputs; with ``keep``, also the owner of the context kept
        for backward, made by ``owner`` from its raw handle before anything can interrupt (see
        ``_lib.call_making``; None without ``keep``). ``train`` (default: the module's mode) admits new
        IDs to dynamic tables and advances their clocks."""
        F = key_feature.numel()
        # one key: its rows are the batch's values (the engine checks the lengths add up to them)
        counts = [values.numel()] if F == 1 else key_counts(lengths, F, values.numel())
        outs = self._outputs.take(list(zip(counts, dims)))
        f = _lib.fn("recgo_ec_forward")
        ptrs = (ctypes.c_void_p * F)(*[ptr(t) for t in outs])
        lens = (ctypes.c_int64 * F)(*[n * d for n, d in zip(counts, dims)])
        ctx = H(0)
        mode = _eager.forward_mode(self.training, train)
        kept = owning(ctx, keep, owner, _recompute.check(self._owner, mode, values, lengths))
        return outs, _lib.call_making(f, [ctx], self._handle.value, ptr(key_feature), F, ptr(values), values.numel(),
                                      ptr(lengths), lengths.numel(), ctypes.addressof(ptrs),
                                      ctypes.addressof(lens) if F else None, F, mode, int(keep), ctypes.byref(ctx),
                                      then=kept)

    def _counts(self, handle: _lib.Handle) -> list[int]:
        n = len(self._tables)
        counts = torch.empty(2 * n, dtype=torch.int64)
        _lib.call(_lib.fn("recgo_ec_context_counts"), handle.value, ptr(counts), 2 * n)
        return counts.tolist()

    def _run_backward(self, ctx_id: int, grads: list[torch.Tensor], skip: list[bool] | None = None) -> list[torch.Tensor]:
        """Backward of the context behind ticket ``ctx_id`` (see ``recgo::ec_backward``)."""
        return self._backward(self._contexts.take(ctx_id, once=self._fused), grads, skip)

    def _skipped(self, key_feature: Sequence[int], missing: Sequence[bool]) -> list[bool] | None:
        """Per used table (``_tables`` order), whether the loss used none of its outputs: ``missing``
        marks the outputs (one per batch key, ``key_feature`` its feature) whose gradient autograd left
        out. None when every table has one (torch's optimizers skip a parameter without a gradient,
        and TorchRec's in-backward ones do: a fused update with zeros would still move Adam's rows,
        decay them and count a step)."""
        return unused_tables(key_feature, missing, self._feature_tables, self._tables)

    def _backward(self, handle: _lib.Handle, grads: list[torch.Tensor], skip: list[bool] | None = None) -> list[torch.Tensor]:
        """Backward of a kept context: nothing when fused (the context is freed: its update ran), else
        per used table its distinct rows and their gradients (the context stays with its graph, which
        may run backward again under ``retain_graph=True``)."""
        base: torch.Tensor | None = None
        try:
            parts = [check_tensor(g, "grad_output", (torch.float32, torch.float64, torch.float16, torch.bfloat16),
                                  ndim=2, convert_to=torch.float32) for g in grads]
            width = sum(self._feature_dims)
            total = sum(p.numel() for p in parts)
            pad = -(-total // width) * width - total
            if len(parts) == 1 and not pad:  # contiguous [n, D]: the engine reads it as is
                grad = parts[0]
            else:  # one flat buffer, reused across steps (fresh memory costs a page fault per 4 KiB)
                base = self._outputs.take_flat(total + pad)
                grad = base[:total + pad]
                if parts:
                    torch.cat([p.reshape(-1) for p in parts], out=grad[:total])
                if pad:
                    grad[total:].zero_()
            f = _lib.fn("recgo_ec_backward")
            if self._fused:
                grad = fused_gradient(self._owner, grad)  # as the pooled collection's (_fused_update)
                if grad is None:
                    return []
                flags = _lib.ByteFlags(skip)
                _lib.call(f, handle.value, 1, ptr(grad), grad.numel(), None, None, 0, *flags.args)
                return []
            n = len(self._tables)
            uniq = self._counts(handle)[:n]
            out: list[torch.Tensor] = []
            for u, d in zip(uniq, self._table_dims):
                out += [torch.empty(u, dtype=torch.int64), torch.empty(u, d, dtype=torch.float32)]
            rows = (ctypes.c_void_p * n)(*[ptr(t) for t in out[0::2]])
            vals = (ctypes.c_void_p * n)(*[ptr(t) for t in out[1::2]])
            _lib.call(f, handle.value, 0, ptr(grad), grad.numel(), ctypes.addressof(rows), ctypes.addressof(vals), n,
                      None, 0)
            return out
        finally:
            if self._fused:
                handle.free()
            if base is not None:  # the engine keeps no pointer into it after the call
                self._outputs.give_back(base)

    def _params(self) -> list[torch.Tensor]:
        if self._fused:
            return [self._anchor]
        cfgs = self._owner.embedding_bag_configs()
        return [self._owner.embedding_bags[cfgs[i].name].weight for i in self._tables]

    def _eager_backward(self, handle: _lib.Handle, grads: list[torch.Tensor],
                        skip: list[bool] | None = None) -> list[torch.Tensor | None]:
        """The eager path's backward (``_eager``): ``recgo::ec_backward`` and its autograd formula in one."""
        return self._without(self._grads_from(self._backward(handle, grads, skip)), skip)

    def _without(self, grads: list[Any], skip: list[bool] | None) -> list[Any]:
        """Per-parameter gradients with None for the tables ``skip`` marks (unfused: one per used table)."""
        if skip is None or self._fused:
            return grads
        return [None if s else g for g, s in zip(grads, skip)]

    def _eager_forward(self, key_feature: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor,
                       dims: list[int]) -> tuple[list[torch.Tensor], _lib.Handle]:
        """The eager path's forward (``_eager``): the outputs and the kept context's handle."""
        return self._run_forward(key_feature, values, lengths, dims, True, owner=self._contexts.own)

    @property
    def _dense_grads(self) -> bool:
        """Gradients for a torch optimizer, dense ones (see ``_ops.dense_in_op``)."""
        return not self._fused and not self._owner._sparse_grad

    def _grad_shapes(self) -> list[tuple[int, ...]]:
        """Each used table's weight shape, in ``_tables`` order (the dense gradients')."""
        cfgs = self._owner.embedding_bag_configs()
        return [tuple(self._owner.embedding_bags[cfgs[i].name].weight.shape) for i in self._tables]

    def _grads_from(self, raw: list[torch.Tensor]) -> list[torch.Tensor | None]:
        """Per-parameter gradients from ``recgo::ec_backward``'s result (when fused, the anchor's: the op's
        zero, or None in eager mode, which skips accumulating it)."""
        if self._fused:
            return [raw[0] if raw else None]
        cfgs = self._owner.embedding_bag_configs()
        out: list[torch.Tensor | None] = []
        for j, i in enumerate(self._tables):
            weight = self._owner.embedding_bags[cfgs[i].name].weight
            out.append(table_gradient(raw[2 * j], raw[2 * j + 1], tuple(weight.shape), cfgs[i].dynamic is not None,
                                      self._owner._sparse_grad))
        return out

    # -- public API ------------------------------------------------------------------------------

    @traced_as_leaf
    def forward(self, features: Any) -> dict[str, Any]:
        """Look up every ID of ``features`` (recgo or TorchRec KJT): ``{feature: JaggedTensor}`` with
        ``[n, D]`` values, TorchRec JaggedTensors when the input was a TorchRec KJT. A TorchRec variable
        batch gives each feature's output over its own batch (its ``inverse_indices`` unused, as TorchRec's)."""
        torchrec_in = torchrec_dtypes(features)  # a TorchRec batch's dtypes, which the outputs keep
        vb = _vbe.variable_batch(features, pooled=False)
        if vb is not None:  # TorchRec's variable batch: looked up padded, each output cut to its own batch
            features = vb.kjt
        key_of = dict(zip(self._features, self._feature_keys))  # each output's batch key
        kjt, plan = self._batch(features)
        if self._handle is None and self._owner._handle is not None:
            self._attach()  # the shared collection was materialised on its own
        if self._handle is None:
            res = meta_results(kjt, plan)
            if vb is not None:
                res = _vbe.trim_sequence(res, vb, key_of)
            return as_torchrec(res, torchrec_in) if torchrec_in else res
        if not torch.compiler.is_compiling():
            self._owner._check_storage()
        key_feature, dims = plan.key_feature, plan.dims
        params = self._params()
        frozen: list[bool] | None = None  # a fused update's frozen tables, when some are
        if self._fused:
            keep, frozen = self._owner._fused_keep(self._tables)
        else:
            keep = torch.is_grad_enabled() and any(p.requires_grad for p in params)
        _eager.warn_fused_export(keep, self._fused)
        lengths = kjt.lengths()
        values = kjt.values()
        if not _eager.allowed(key_feature, values, lengths, *params):
            params = params if keep else [p.detach() for p in params]  # as the pooled collection's
            outs, _ = _sequence_ops.ec_forward(self._handle.value, keep, key_feature, values, lengths, dims, params,
                                               frozen or [False] * len(self._tables), self.training)
        elif keep:
            keys = key_feature.tolist()
            outs = _eager.lookup(lambda: self._eager_forward(key_feature, values, lengths, dims),
                                 lambda h, g, missing=None: self._eager_backward(
                                     h, g, either(frozen, None if missing is None else self._skipped(keys, missing))),
                                 params, once=self._fused)
        else:
            outs, _ = self._run_forward(key_feature, values, lengths, dims, False)
        res = results(outs, lengths, plan)
        if self._need_indices:
            res = with_indices(res, features, key_of)
        if vb is not None:
            res = _vbe.trim_sequence(res, vb, key_of)
        return as_torchrec(res, torchrec_in) if torchrec_in else res

    def need_indices(self) -> bool:
        """Whether each output carries its feature's IDs as its weights (TorchRec's accessor)."""
        return self._need_indices

    def _materialised(self, what: str) -> None:
        if self._handle is None:
            raise InvalidInputError(f"{what}: the collection is on the meta device; materialise it first "
                                    "(to_empty(device='cpu') or load_state_dict)")

    @property
    def device(self) -> torch.device:
        """``meta`` until materialised, then ``cpu``."""
        return torch.device("meta" if self._handle is None else "cpu")

    def reset_parameters(self) -> None:
        """(Re-)initialise the tables' weights as the owning collection's ``reset_parameters`` does (with
        ``share=``, that collection's tables are the ones reset). A no-op on the meta device."""
        self._owner.reset_parameters()

    def embedding_configs(self) -> list[EmbeddingConfig]:
        """The tables' configs (TorchRec's accessor name)."""
        return list(self._configs)

    def feature_names(self) -> list[str]:
        """The sequence features, tables in order, each table's features in order (a feature several
        tables look up once per table)."""
        return list(self._feature_keys)

    def embedding_names(self) -> list[str]:
        """The output keys, config order: each feature's name, or ``feature@table`` for a feature several
        tables look up (TorchRec's naming)."""
        return list(self._features)

    def embedding_names_by_table(self) -> list[list[str]]:
        """The output keys of each table, config order (TorchRec's accessor)."""
        out, i = [], 0
        for c in self._configs:
            out.append(self._features[i:i + len(c.feature_names)])
            i += len(c.feature_names)
        return out

    def _traced_output(self, node: Any) -> dict[str, Any]:
        """Under ``torch.fx`` tracing: the output dict of the node's entries (``_trace``)."""
        return {k: node[k] for k in self._features}

    def embedding_dim(self) -> int:
        """The tables' common embedding dim (TorchRec's accessor; raises when dims differ)."""
        dims = set(self._feature_dims)
        if len(dims) != 1:
            raise InvalidInputError(f"the tables have different embedding dims {sorted(dims)}")
        return dims.pop()

    @property
    def ebc(self) -> EmbeddingBagCollection:
        """The EmbeddingBagCollection that owns the rows (the shared one, or a private one);
        ``recgo.dynamic.stats`` and friends take it or this collection alike."""
        return self._owner

    @property
    def fused_optimizer(self) -> FusedOptimizer | None:
        """The fused optimizer (the owning collection's), or None for a torch optimizer."""
        return self._owner.fused_optimizer

    def set_fused_optimizer(self, optimizer: FusedOptimizer) -> None:
        """Change the fused optimizer's hyper-parameters (those of the owning collection's tables)."""
        self._owner.set_fused_optimizer(optimizer)

    def merged_update(self) -> contextlib.AbstractContextManager[None]:
        """A scope in which the fused backwards over the owning collection's tables — pooled (its
        ``EmbeddingBagCollection``) and sequence alike — sum their gradients per row instead of updating;
        leaving it applies one optimizer step per used table over the sums (its step counter advances
        once). Wrap one training step in it when a table serves pooled and sequence features, so
        Adagrad/Adam take one merged step, as a torch optimizer does with both gradients accumulated
        into one parameter::

            with ec.merged_update():
                loss = model(batch)          # ebc(...) and ec(...) over the shared table
                loss.backward()
            # one update per table here

        The step is applied on exit even when the block raises (gradients that reached the engine are
        not lost). Forwards inside the scope see the weights as they were when it opened (a dynamic
        table still admits and evicts IDs: a row evicted inside the scope takes only its new ID's
        gradient). One scope at a time per owning collection (a second raises); close it before
        saving a checkpoint.
        """
        self._materialised("merged_update")
        return merged_update(self._owner)

    def lookup_stats(self, features: Any) -> dict[str, tuple[int, int]]:
        """Per used table, (distinct IDs, lookups) of a batch. It only looks: a dynamic table admits no
        ID and its clock stays (an evaluation-mode lookup)."""
        self._materialised("lookup_stats")
        kjt, plan = self._batch(features)
        _, handle = self._run_forward(plan.key_feature, kjt.values(), kjt.lengths(), plan.dims, True, train=False)
        try:
            counts = self._counts(handle)
        finally:
            handle.free()
        n = len(self._tables)
        cfgs = self._owner.embedding_bag_configs()
        return {cfgs[t].name: (counts[j], counts[n + j]) for j, t in enumerate(self._tables)}

    def extra_repr(self) -> str:
        opt = type(self.fused_optimizer).__name__ if self._fused else "none (torch optimizer)"
        return f"tables={[c.name for c in self._configs]}, features={self._features}, fused_optimizer={opt}"

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """``nn.Module.load_state_dict`` into the owning collection's engine memory, with its checks
        (shapes, optimizer step counters; see :meth:`EmbeddingBagCollection.load_state_dict`). On the meta
        device it materialises the tables once the entries pass the checks. All or nothing: every entry is
        checked before the first table changes, so if it raises every table is as it was (:mod:`._load_whole`)."""
        with collection_load(self, state_dict, strict, fused=self._owner.fused_optimizer is not None):
            return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def _apply(self, fn: Any, recurse: bool = True) -> "EmbeddingCollection":
        """As the owning collection's ``_apply``: the tables stay the engine's float32 CPU memory (a cast
        or a move raises), and what a conversion replaced (``to_empty``) is copied back into it. On the
        meta device, a move to the CPU (``to_empty(device="cpu")``) materialises the owning collection
        (unless it already is) and this one over it."""
        if self._handle is None:
            if self._owner._handle is None:
                self._owner._apply(fn, recurse)  # materialises on a move to the CPU; raises on others
            else:
                check_cast(fn)
            if self._owner._handle is not None:
                self._attach()
            return self
        check_cast(fn)
        super()._apply(fn, recurse)
        self._owner._sync_storage()
        return self

    def _materialise(self) -> None:
        """Materialise the owning collection (unless it already is) and this one over it (zeros)."""
        if self._owner._handle is None:
            self._owner._materialise()
        self._attach()

    # -- copies ----------------------------------------------------------------------------------

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        """Copies (``copy.deepcopy``, pickle, ``torch.save(module)``) rebuild the collection over a copy
        of the owning collection, made through the same memo, so an owner shared with a model's
        ``EmbeddingBagCollection`` is copied once and the copies share it as the originals do."""
        if self._remap is not None:
            raise InvalidInputError(
                "an EmbeddingCollection built with share=PlannedEmbeddingBagCollection cannot be copied or "
                "pickled (the plan's remap holds engine state); build the copy from the plan, or copy its "
                "weights with state_dict()/load_state_dict()")
        flags = {"training": {n: m.training for n, m in self.named_modules()}, "extra": extra_attributes(self),
                 "hooks": user_hooks(self)}
        # the flags go as the state (third item): the copy exists before a hook referring to it is copied
        return (_rebuild_sequence, (self._owner, {"tables": list(self._configs), "dedup": self._dedup,
                                                  "need_indices": self._need_indices, "cls": type(self)}), flags)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Copies and unpickling: the training flags, user attributes and hooks :meth:`__reduce_ex__` recorded."""
        apply_portable_state(self, state)


def _rebuild_sequence(owner: EmbeddingBagCollection, spec: dict[str, Any],
                      state: dict[str, Any] | None = None) -> EmbeddingCollection:
    """Copy and unpickling target of :meth:`EmbeddingCollection.__reduce_ex__`: the collection over
    ``owner`` (the copied owning collection); with ``state`` (files written before session 27) its
    training flags and user attributes."""
    tables = [dataclasses.replace(c, init_fn=None) for c in spec["tables"]]  # the owner's rows are already set
    cls = spec.get("cls", EmbeddingCollection)  # a user's subclass copies as itself
    new = cls(tables, share=owner, dedup=spec["dedup"], need_indices=spec.get("need_indices", False))
    new._configs = list(spec["tables"])
    if state is not None:
        apply_portable_state(new, state)
    return new
