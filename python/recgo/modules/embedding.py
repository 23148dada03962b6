"""EmbeddingBagCollection: pooled embedding lookups whose tables live in recgo's Go engine.

Each table's rows sit in memory the engine allocated outside both the Go and the Python heaps
(mmap), exposed zero-copy as the module's ``nn.Parameter`` and optimizer-state buffers. So
``state_dict()``, ``load_state_dict()``, ``torch.save`` and plain torch optimizers all work on the
real storage, and a tensor taken from the module keeps that memory alive however long it lives.

Forward: per table, the batch's IDs are deduplicated, each distinct ID resolved once, and every
(feature, sample) bag pooled by one writer; a forward kept for backward also groups the lookups by
destination row (RecIS Algorithm 1). Backward: contributions are summed once per distinct row, and then either handed to a torch optimizer as a
(sparse or dense) gradient or, with ``optimizer=``, applied by a fused optimizer in the same pass.
Both directions are ``torch.library`` custom ops (see ``_ops.py``), so ``torch.compile`` traces them.

Concurrency contract (enforced by the engine's per-collection lock and tested in
``tests/test_reliability_threads.py``):

* Separate collections share nothing: any operations on them may run concurrently, and each gives
  exactly what it gives alone.
* On one collection, forwards (training or eval, with or without grad) may run concurrently from any
  number of threads, and backwards that hand gradients to a torch optimizer too (they only read the
  forward's saved context); each returns exactly what it would alone.
* A fused optimizer step (the backward of a collection with ``optimizer=``) is atomic: steps on one
  collection run one at a time and no forward runs during one, so a forward sees the weights before
  or after each step, never half of one. Concurrent training on one collection therefore equals
  some serial order of its steps (exactly a serial run when the threads' batches touch disjoint rows
  and the optimizer keeps no per-table state: SGD, Adagrad, RowWiseAdagrad; Adam's bias correction
  counts steps per table). Training forwards of a collection with dynamic-ID tables are exclusive too
  (they admit and evict IDs). ``set_fused_optimizer`` waits for running passes.
* Forward contexts belong to their autograd graph (freed with it): any number of forwards may await
  their backward (threads, gradient accumulation). With ``optimizer=None`` a graph kept by
  ``backward(retain_graph=True)`` may run backward again (the gradients accumulate, as in torch); with
  a fused optimizer a graph's backward runs once (it updates the rows), and a second one raises.
* Not synchronized by recgo, so not to be run concurrently with passes on the same collection:
  writes to its parameters and buffers from Python (a torch optimizer's ``step()``,
  ``load_state_dict``, ``load``, in-place edits), and reads of ``state_dict()``'s live views. Run
  them between steps. :meth:`EmbeddingBagCollection.save` may run concurrently: it copies every table
  under the engine's lock, then writes a CRC-32 of every tensor and of the metadata, which
  :meth:`EmbeddingBagCollection.load` verifies (``RecgoIOError`` names the file and the damaged part).

Copies: ``copy.deepcopy`` (``AveragedModel``, EMA helpers), pickling and ``torch.save(module)`` build
an independent collection with its own engine storage holding the same weights, optimizer state and
step, and dynamic-ID maps; unpickling (in any process) rebuilds the engine state from those tensors.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import os
from typing import Any, Callable, Sequence

import torch
from torch import nn

from .. import _lib
from .._cache import KeyCache
from .._memory import wrap
from .._lib import H, I64
from ..data import _prepared
from ..errors import InvalidInputError
from ..sparse import KeyedJaggedTensor, KeyedTensor, _is_torchrec_kjt, as_kjt
from ..tensors import check_tensor, ptr
from . import _eager, _ops, _recompute, _vbe, _weight_grads, optim
from ._weight_grads import batch_weights
from ._copies import PortableCopies, rebuild
from ._untrained import UntrainedCheck
from ._checkpoint import load_checkpoint, save_checkpoint, snapshot, state_copy
from ._contexts import ContextStore, owning
from ._fused_update import fused_gradient, warn_unscaled
from ._grads import table_gradient
from ._outputs import OutputPool
from ._init import init_as_torchrec, init_table
from ._merged import merged_update
from ._replicated import refuse_in_ddp
from ._trace import refuse_script, traced_as_leaf
from ._tables import _MODES, _Table  # _Table: also the name earlier pickles of collections hold
from ._load_whole import collection_load
from ._storage import (check_cast, check_cast_dtype, check_storage, fused_keep, materialised_before_load,
                       meta_tensors, sync_storage, synced_after_load)
from .config import (EmbeddingBagConfig, _check_configs, _check_device, _check_optimizer, _embedding_names,
                     check_keys, key_readers)
from .optim import FusedOptimizer


class EmbeddingBagCollection(PortableCopies, nn.Module):
    """Pooled embedding tables in recgo's engine, with TorchRec's interface.

    Args:
        tables: ``EmbeddingBagConfig`` (recgo's or TorchRec's) list; several features may share a
            table, and a feature may be looked up in several tables (its outputs are then keyed
            ``"feature@table"``, as in TorchRec).
        is_weighted: pool ``Σ w·row`` with the batch's per-ID weights (required in every batch).
        device: ``None``/``"cpu"`` (the engine reads CPU memory), or ``"meta"``: shapes only, no memory,
            until ``to_empty(device="cpu")`` (or ``load_state_dict``) materialises the tables and
            ``reset_parameters()`` initialises them, as for TorchRec modules. ``None`` under
            ``with torch.device("meta")`` means meta.
        optimizer: a :class:`recgo.modules.optim.FusedOptimizer` to update rows inside backward; with
            ``None`` the weights get gradients for a torch optimizer instead, which the caller must
            step: a collection whose weights no optimizer updates never trains (it warns once when
            several backward passes in a row left every table untouched).
        sparse_grad: with ``optimizer=None``, give sparse COO gradients (for ``torch.optim.SGD``,
            ``Adagrad``, ``SparseAdam``) instead of dense ones.
        seed: seed of the initial weights (default: torch's global generator, consumed as TorchRec's
            constructor consumes it, so after the same ``torch.manual_seed`` the tables equal TorchRec's);
            ``reset_parameters()`` draws the same weights again. A table's ``init_fn`` (TorchRec's) replaces the uniform draw.
        dedup: deduplicate each table's IDs per batch (default). ``False`` resolves every occurrence on
            its own and merges the lookups by storage row for backward instead, so a fixed table's
            results equal ``dedup=True``'s (see ``EmbeddingCollection``). A dynamic table counts each
            occurrence as a sighting, so its admission (``min_count``) and LFU counts can differ.

    The weights are the engine's float32 CPU memory: casts and moves of a built collection
    (``.half()``, ``.to("meta")``, ...) raise, and so does a forward with a swapped weight
    (``torch.func.functional_call``). Every weight has ``requires_grad=True``, fused or not;
    ``requires_grad_(False)`` freezes the collection (a fused one then keeps no context, updates no row
    and does not advance ``optimizer_step``; ``requires_grad_(False)`` on one table leaves it out of the
    fused update).

    ``forward(features)`` takes a recgo or TorchRec ``KeyedJaggedTensor`` (keys no table uses are
    ignored) and returns the pooled ``[B, ΣD]`` embeddings, one column block per feature in table
    order: a ``torchrec.KeyedTensor`` when the input was TorchRec's (wrapping the same values
    tensor, so ``KeyedTensor.regroup`` and autograd work as with TorchRec's module), else a
    :class:`recgo.KeyedTensor`.
    """

    _table_type: type[nn.Module] = _Table  # the per-table module (a sequence collection's own owner: _SequenceTable)
    __prepare_scriptable__ = refuse_script

    def __init__(self, tables: Sequence[Any], is_weighted: bool = False, device: Any = None,
                 optimizer: FusedOptimizer | None = None, sparse_grad: bool = False,
                 seed: int | None = None, dedup: bool = True) -> None:
        super().__init__()
        self._dedup = bool(dedup)
        dev = _check_device(device)
        self._optimizer = _check_optimizer(optimizer, sparse_grad)
        self._configs = _check_configs(tables)
        self._is_weighted = bool(is_weighted)
        self._sparse_grad = bool(sparse_grad)
        self._seed = seed
        # Engine features, in output order: the KJT key each reads and its output key.
        self._feature_keys: list[str] = [f for t in self._configs for f in t.feature_names]
        self._readers = key_readers(self._feature_keys)  # batch key -> the features reading it
        self._features: list[str] = _embedding_names(self._configs)
        self._dims = [t.embedding_dim for t in self._configs for _ in t.feature_names]
        self._width = sum(self._dims)
        self._key_cache: dict[tuple[str, ...], tuple[torch.Tensor, list[tuple[int, int]]]] = KeyCache()
        self._untrained = UntrainedCheck()  # the warning for tables nothing updates
        self.embedding_bags = nn.ModuleDict()
        self._handle: _lib.Handle | None = None
        # also when nested in a model's load_state_dict (assign=True): engine memory takes the values
        self.register_load_state_dict_pre_hook(materialised_before_load)
        self.register_load_state_dict_post_hook(synced_after_load)
        if dev.type == "meta":
            for cfg in self._configs:
                self.embedding_bags[cfg.name] = self._table_type(*meta_tensors(cfg, self._optimizer),
                                                                  mode=_MODES[cfg.pooling_code()])
            self._init_keys = frozenset(self.__dict__) | {"_init_keys"}
        else:
            self._materialise()
            if self._seed is None:  # TorchRec's draws from torch's generator (_init.init_as_torchrec)
                init_as_torchrec(self._configs, [w for w, _, _ in self._storage], self._init_table_by_table)
            if self._seed is not None or not self._init_table_by_table:
                self.reset_parameters()

    #: TorchRec's ``EmbeddingCollection`` initialises each table as soon as it has created it; its
    #: ``EmbeddingBagCollection`` creates every table first (the sequence collection's owner sets True).
    _init_table_by_table = False

    def _materialise(self) -> None:
        """Create the engine collection and point every parameter and buffer at its memory (zeros)."""
        before = frozenset(self.__dict__)
        self._handle = self._create()
        self._storage: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for i, cfg in enumerate(self._configs):
            weight, state, step = self._memory(i, cfg.embedding_dim)
            self._storage.append((weight, state, step))
            if self._optimizer is None:  # no fused step: keep the state_dict TorchRec-compatible
                step = torch.empty(0, dtype=torch.int64)
            # requires_grad=True also when fused (as TorchRec's fused tables): requires_grad_(False) freezes;
            # a meta stand-in's flag carries over (frozen before to_empty / load_state_dict stays frozen)
            stand_in = self.embedding_bags[cfg.name] if cfg.name in self.embedding_bags else None
            trains = True if stand_in is None else stand_in.weight.requires_grad
            table = self._table_type(weight, trains, state, step, mode=_MODES[cfg.pooling_code()])
            if cfg.name in self.embedding_bags:  # the meta stand-in's marks (e.g. _in_backward_optimizers) carry over
                table.weight.__dict__.update(self.embedding_bags[cfg.name].weight.__dict__)
            self.embedding_bags[cfg.name] = table
        for i, cfg in enumerate(self._configs):
            # Dynamic tables hook state_dict/load_state_dict so checkpoints carry their ID maps.
            if cfg.dynamic is not None and hasattr(cfg.dynamic, "attach"):
                cfg.dynamic.attach(self, i)
        self._engine_views = self._engine_tensors()
        self._anchor = torch.zeros((), dtype=torch.float32, requires_grad=True)
        self._contexts = ContextStore()
        self._outputs = OutputPool()
        _ops.register(self, self._handle.value)
        # what construction set (materialised later, off the meta device: what this added); the rest are
        # user attributes, which copies carry along
        self._init_keys = getattr(self, "_init_keys", before) | (frozenset(self.__dict__) - before) | {"_init_keys"}

    @property
    def device(self) -> torch.device:
        """``meta`` until materialised, then ``cpu``."""
        return torch.device("meta" if self._handle is None else "cpu")

    def reset_parameters(self) -> None:
        """(Re-)initialise every fixed table's weights: ``init_fn(weight)`` where the config has one,
        else uniform in its init bounds, drawn from ``seed`` when one was given (so the initial weights
        come back). Optimizer state is left as it is (like TorchRec's ``reset_parameters``); dynamic-ID
        tables initialise their rows as IDs arrive. A no-op on the meta device."""
        if self._handle is None:
            return
        self._sync_storage()  # parameters replaced (e.g. by to_empty) point at engine memory again
        gen = torch.Generator().manual_seed(self._seed) if self._seed is not None else None
        for cfg, (weight, _, _) in zip(self._configs, self._storage):
            if cfg.dynamic is None:
                init_table(cfg, weight, gen)

    def _apply(self, fn: Any, recurse: bool = True) -> "EmbeddingBagCollection":
        """Materialise on the move off the meta device (``to_empty(device="cpu")``); the tables' memory
        stays the engine's (float32, CPU): on a built collection a cast or a move (``.half()``,
        ``.bfloat16()``, ``.double()``, ``.to("meta")``, ``.cuda()``) raises ``InvalidInputError``, and
        what a conversion replaced (``to_empty``) is copied back into engine memory."""
        if self._handle is not None:
            check_cast(fn)
            super()._apply(fn, recurse)
            self._sync_storage()
            return self
        try:
            probe = fn(torch.empty(0, device="meta", dtype=torch.float32))
        except (RuntimeError, AssertionError) as e:  # e.g. to_empty(device="cuda") without CUDA
            raise InvalidInputError(f"recgo's embedding engine runs on CPU memory; the move failed: {e}") from e
        check_cast_dtype(probe)
        target = probe.device
        if target.type == "meta":
            return self
        if target.type != "cpu":
            raise InvalidInputError(f"device {target}: recgo's embedding engine runs on CPU memory")
        self._materialise()
        return self

    # -- engine plumbing -------------------------------------------------------------------------

    def _create(self) -> _lib.Handle:
        cfgs = self._configs
        n = len(cfgs)
        rows = torch.tensor([t.num_embeddings if t.dynamic is None else 0 for t in cfgs], dtype=torch.int64)
        dims = torch.tensor([t.embedding_dim for t in cfgs], dtype=torch.int64)
        builders = None
        made = [t.dynamic.builder(t) if t.dynamic is not None else None for t in cfgs]  # alive until built
        if any(b is not None for b in made):
            builders = torch.tensor([b.value if b is not None else 0 for b in made], dtype=torch.int64)
        feat_table = torch.tensor([i for i, t in enumerate(cfgs) for _ in t.feature_names], dtype=torch.int64)
        feat_pool = torch.tensor([t.pooling_code() for t in cfgs for _ in t.feature_names], dtype=torch.int64)
        opt = self._optimizer.params() if self._optimizer is not None else (0, 0.0, 0.0, 0.0, 0.0, 0.0)
        handle = _lib.new_handle(
            "recgo_ebc_new",
            n, "\n".join(t.name for t in cfgs).encode(), ptr(rows), ptr(dims), ptr(builders), *opt,
            len(self._features), "\n".join(self._features).encode(), ptr(feat_table), ptr(feat_pool),
        )
        if not self._dedup:
            _lib.call(_lib.fn("recgo_ebc_set_dedup"), handle.value, 0)
        return handle

    def _memory(self, t: int, dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        f = _lib.fn("recgo_ebc_table_memory")
        out = []
        weights, state = _lib.const("TableMemWeights"), _lib.const("TableMemState")
        for which, dtype in ((weights, torch.float32), (state, torch.float32), (_lib.const("TableMemStep"), torch.int64)):
            addr, n, stride = H(0), I64(0), I64(0)
            _lib.call(f, self._handle.value, t, which, ctypes.byref(addr), ctypes.byref(n), ctypes.byref(stride))
            flat = wrap(addr.value, n.value, dtype, self._handle)
            if which == weights:
                flat = flat.view(-1, stride.value)[:, :dim]
            elif which == state and stride.value:
                flat = flat.view(-1, stride.value)
            out.append(flat)
        return out[0], out[1], out[2]

    def _engine_tensors(self) -> list[tuple[str, nn.Module, str, torch.Tensor, int, torch.Tensor]]:
        """(table, holder module, attribute, engine tensor, its address, the parameter or buffer object)
        of every parameter and buffer that must stay in engine memory (``_storage.View``)."""
        out = []
        for cfg, (weight, state, step) in zip(self._configs, self._storage):
            holder = self.embedding_bags[cfg.name]
            for name, mine in (("weight", weight), ("optimizer_state", state), ("optimizer_step", step)):
                own = getattr(holder, name, None)
                if mine.numel() and own is not None:
                    out.append((cfg.name, holder, name, mine, mine.data_ptr(), own))
        return out

    def _sync_storage(self) -> None:
        """Undo replacement of a parameter or buffer by a load (``load_state_dict(assign=True)``,
        ``to_empty``): copy its values back into engine memory and re-point it there (``_storage``)."""
        sync_storage(self._engine_views)

    def _params(self) -> list[torch.Tensor]:
        """What the ops take as the forward's parameters (autograd's inputs): the anchor of a fused
        collection, else each table's weight."""
        if self._optimizer is not None:
            return [self._anchor]
        return [self.embedding_bags[c.name].weight for c in self._configs]

    def _check_storage(self) -> None:
        """Before a forward: refuse a parameter that is not engine memory (``torch.func.functional_call``);
        one address comparison per tensor in the common case."""
        check_storage(self._engine_views)

    def _fused_keep(self, tables: Sequence[int]) -> tuple[bool, list[bool] | None]:
        """Whether a fused forward over ``tables`` (indices) keeps a context, and which of them its
        update leaves out (``_storage.fused_keep``)."""
        keep, frozen = fused_keep([self.embedding_bags[self._configs[i].name].weight for i in tables])
        if keep:  # a backward would update them
            refuse_in_ddp(self, tables)
            warn_unscaled(self)
        return keep, frozen

    def _keys(self, keys: list[str]) -> tuple[torch.Tensor, list[tuple[int, int]]]:
        """(per KJT key: the engine feature it feeds or -1 when no table reads it; and for each further
        feature reading an already-used key, (key index, feature)) — such a key's bags are appended
        to the batch once more per extra feature (see :meth:`_engine_batch`)."""
        tk = tuple(keys)
        cached = self._key_cache.get(tk)
        if cached is not None:
            return cached
        check_keys(self._readers, keys)
        idx, extra = [], []
        for i, k in enumerate(keys):
            fs = self._readers.get(k, [])
            idx.append(fs[0] if fs else -1)
            extra += [(i, f) for f in fs[1:]]
        out = (torch.tensor(idx + [f for _, f in extra], dtype=torch.int64), extra)
        if type(out[0]) is torch.Tensor:  # not a tracer's (torch.export's fake tensors must not outlive it)
            self._key_cache[tk] = out
        return out

    def _engine_batch(self, kjt: KeyedJaggedTensor, weights: torch.Tensor | None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(key→feature map, values, lengths, weights) for the engine: the batch itself, plus copies of
        the bags of a key that several tables look up (one per extra table)."""
        key_feature, extra = self._keys(kjt.keys())
        values, lengths = kjt.values(), kjt.lengths()
        if extra:
            offs, b = kjt.offset_per_key(), kjt.stride()
            values = torch.cat([values] + [values[offs[k]:offs[k + 1]] for k, _ in extra])
            lengths = torch.cat([lengths] + [lengths[k * b:(k + 1) * b] for k, _ in extra])
            if weights is not None:
                weights = torch.cat([weights] + [weights[offs[k]:offs[k + 1]] for k, _ in extra])
        return key_feature, values, lengths, weights

    def _forward(self, key_feature: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor,
                 weights: torch.Tensor | None, out: torch.Tensor, keep: bool, train: bool | None = None,
                 owner: Callable[[int], Any] = _lib.Handle) -> Any:
        """Forward into ``out``; with ``keep``, the owner of the context kept for backward, made by
        ``owner`` from its raw handle before anything can interrupt (see ``_lib.call_making``; None
        without ``keep``). ``train`` (default: the module's mode) admits new IDs to dynamic tables and
        advances their clocks."""
        ctx = H(0)
        mode = _eager.forward_mode(self.training, train)
        kept = owning(ctx, keep, owner, _recompute.check(self, mode, values, lengths))
        prepared = _prepared.prepared_handle(values, lengths) if weights is None else None
        if prepared is not None:  # a pipeline batch: use the dedup its FORMAT stage computed
            f = _lib.fn("recgo_ebc_forward_prepared")
            return _lib.call_making(f, [ctx], self._handle.value, prepared, ptr(key_feature), key_feature.numel(),
                                    ptr(values), values.numel(), ptr(lengths), lengths.numel(), ptr(out), out.numel(),
                                    mode, int(keep), ctypes.byref(ctx), then=kept)
        f = _lib.fn("recgo_ebc_forward")
        return _lib.call_making(f, [ctx], self._handle.value, ptr(key_feature), key_feature.numel(), ptr(values),
                                values.numel(), ptr(lengths), lengths.numel(),
                                None if weights is None else (weights.data_ptr() or None),
                                0 if weights is None else weights.numel(), ptr(out), out.numel(), mode, int(keep),
                                ctypes.byref(ctx), then=kept)

    def _counts(self, handle: _lib.Handle) -> torch.Tensor:
        n = len(self._configs)
        counts = torch.empty(2 * n, dtype=torch.int64)
        _lib.call(_lib.fn("recgo_ebc_context_counts"), handle.value, ptr(counts), 2 * n)
        return counts

    def _run_backward(self, ctx_id: int, grad: torch.Tensor, frozen: list[bool] | None = None) -> list[torch.Tensor]:
        """Backward of the context behind ticket ``ctx_id`` (see ``recgo::ebc_backward``)."""
        return self._backward(self._contexts.take(ctx_id, once=self._optimizer is not None), grad, frozen)

    def _backward(self, handle: _lib.Handle, grad: torch.Tensor, frozen: list[bool] | None = None) -> list[torch.Tensor]:
        """Backward of a kept context: nothing when fused (the context is freed: its update ran, leaving
        out the tables ``frozen`` marks), else per table its distinct rows and their gradients (the
        context stays with its graph, which may run backward again under ``retain_graph=True``; it only
        reads the context)."""
        try:
            return self._backward_raw(handle, grad, frozen)
        finally:
            if self._optimizer is not None:
                handle.free()

    def _backward_raw(self, handle: _lib.Handle, grad: torch.Tensor, frozen: list[bool] | None) -> list[torch.Tensor]:
        grad = check_tensor(grad, "grad_output", (torch.float32, torch.float64, torch.float16, torch.bfloat16),
                            ndim=2, convert_to=torch.float32)
        f = _lib.fn("recgo_ebc_backward")
        if self._optimizer is not None:
            grad = fused_gradient(self, grad)  # the rates set meanwhile; a GradScaler's scale undone
            if grad is None:  # not finite once unscaled: skipped, as GradScaler.step skips
                return []
            skip = _lib.ByteFlags(frozen)
            _lib.call(f, handle.value, 1, ptr(grad), grad.numel(), None, None, 0, *skip.args)
            return []
        n = len(self._configs)
        uniq = self._counts(handle)[:n].tolist()
        out: list[torch.Tensor] = []
        for u, cfg in zip(uniq, self._configs):
            out += [torch.empty(u, dtype=torch.int64), torch.empty(u, cfg.embedding_dim, dtype=torch.float32)]
        rows = (ctypes.c_void_p * n)(*[ptr(t) for t in out[0::2]])
        vals = (ctypes.c_void_p * n)(*[ptr(t) for t in out[1::2]])
        _lib.call(f, handle.value, 0, ptr(grad), grad.numel(), ctypes.addressof(rows), ctypes.addressof(vals), n,
                  None, 0)
        self._untrained.backward((weight, rows) for (weight, _, _), rows in zip(self._storage, out[0::2]))
        return out

    @property
    def _dense_grads(self) -> bool:
        """Gradients for a torch optimizer, dense ones (see ``_ops.dense_in_op``)."""
        return self._optimizer is None and not self._sparse_grad

    def _grad_shapes(self) -> list[tuple[int, ...]]:
        """Each table's weight shape, in table order (the dense gradients')."""
        return [tuple(w.shape) for w, _, _ in self._storage]

    def _grads_from(self, raw: list[torch.Tensor]) -> list[torch.Tensor | None]:
        """Per-parameter gradients from ``recgo::ebc_backward``'s result (when fused, the anchor's: the op's
        zero, or None in eager mode, which skips accumulating it)."""
        if self._optimizer is not None:
            return [raw[0] if raw else None]
        out: list[torch.Tensor | None] = []
        for i, (cfg, (weight, _, _)) in enumerate(zip(self._configs, self._storage)):
            out.append(table_gradient(raw[2 * i], raw[2 * i + 1], tuple(weight.shape), cfg.dynamic is not None,
                                      self._sparse_grad))
        return out

    # -- public API ------------------------------------------------------------------------------

    @traced_as_leaf
    def forward(self, features: Any) -> Any:
        """Pool ``features`` (recgo or TorchRec KeyedJaggedTensor) into ``[B, ΣD]`` embeddings: a
        ``torchrec.KeyedTensor`` for a TorchRec input, else a :class:`recgo.KeyedTensor`. A TorchRec
        variable batch (``stride_per_key_per_rank``, ``inverse_indices``) pools each feature over its own
        batch and expands its rows by its inverse indices to B rows, as TorchRec's (see ``_vbe``)."""
        torchrec_in = _is_torchrec_kjt(features)
        vb = _vbe.variable_batch(features)
        if vb is not None:  # TorchRec's variable batch: pooled on a padded batch, then expanded
            index, batch = _vbe.pooled_index(vb, self._feature_keys)
            out = self._meta_forward(vb.kjt) if self._handle is None else self._engine_forward(vb.kjt)
            out = _vbe.expand_pooled(out, index, self._dims, batch)
        elif self._handle is None:
            out = self._meta_forward(features)
        else:
            out = self._engine_forward(as_kjt(features))
        if torchrec_in:
            from torchrec.sparse.jagged_tensor import KeyedTensor as TorchrecKT

            return TorchrecKT(keys=list(self._features), length_per_key=list(self._dims), values=out)
        return KeyedTensor(self._features, self._dims, out)

    def _meta_forward(self, features: Any) -> torch.Tensor:
        """The output's shape on the meta device (no lookups): ``[stride, width]``."""
        if isinstance(features, dict) or not hasattr(features, "stride") or not features.values().is_meta:
            features = as_kjt(features)  # the built collection's checks (what is not a KJT raises here)
            batch_weights(features, self._is_weighted, self._configs)
            features.length_per_key()  # lengths ≥ 0 that add up to the values
        check_keys(self._readers, list(features.keys()))
        return torch.empty(features.stride(), self._width, device="meta", dtype=torch.float32)

    def _engine_forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        """The pooled ``[B, ΣD]`` output of ``kjt``; per-ID weights that require grad get their gradient
        (``_weight_grads``) while the engine pools with them detached."""
        weights = batch_weights(kjt, self._is_weighted, self._configs)
        if weights is None or not weights.requires_grad or not torch.is_grad_enabled():
            return self._engine_pool(kjt, weights)
        out = self._engine_pool(kjt, weights.detach())
        features = _weight_grads.pooled_features(self._configs, [w for w, _, _ in self._storage])
        return _weight_grads.with_weight_grads(out, kjt, weights, features)

    def _engine_pool(self, kjt: KeyedJaggedTensor, weights: torch.Tensor | None) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            self._check_storage()
        params = self._params()
        frozen: list[bool] | None = None  # a fused update's frozen tables, when some are
        if self._optimizer is not None:
            keep, frozen = self._fused_keep(range(len(self._configs)))
        else:
            keep = torch.is_grad_enabled() and any(p.requires_grad for p in params)
        if keep and self._optimizer is None and not torch.compiler.is_compiling():
            self._untrained.check(params)
        _eager.warn_fused_export(keep, self._optimizer is not None)
        key_feature, values, lengths, weights = self._engine_batch(kjt, weights)
        if not _eager.allowed(key_feature, values, lengths, weights, *params):
            # Nothing to keep (frozen, or no grad): the op's output must not require grad through the
            # anchor, or autograd would run a backward that has no saved forward.
            params = params if keep else [p.detach() for p in params]
            out, _ = _ops.ebc_forward(self._handle.value, keep, key_feature, values, lengths, weights, params,
                                      frozen or [False] * len(self._configs), self.training)
            return out
        if not keep:
            return self._lookup(key_feature, values, lengths, weights, False)[0]

        def forward() -> tuple[list[torch.Tensor], _lib.Handle]:
            out, ctx = self._lookup(key_feature, values, lengths, weights, True, owner=self._contexts.own)
            return [out], ctx

        return _eager.lookup(forward, lambda h, g: self._eager_backward(h, g, frozen), params,
                             once=self._optimizer is not None)[0]

    def _lookup(self, key_feature: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor,
                weights: torch.Tensor | None, keep: bool, train: bool | None = None,
                owner: Callable[[int], Any] = _lib.Handle) -> tuple[torch.Tensor, Any]:
        """The pooled output and its kept context's owner (``recgo::ebc_forward``'s body and the eager
        path's); ``train`` and ``owner`` as ``_forward``'s."""
        out = self._outputs.take([(lengths.numel() // max(1, key_feature.numel()), self._width)])[0]
        return out, self._forward(key_feature, values, lengths, weights, out, keep, train, owner)

    def _eager_backward(self, handle: _lib.Handle, grads: list[torch.Tensor],
                        frozen: list[bool] | None = None) -> list[torch.Tensor | None]:
        """The eager path's backward (``_eager``): ``recgo::ebc_backward`` and its autograd formula in one."""
        return self._grads_from(self._backward(handle, grads[0], frozen))

    def feature_names(self) -> list[str]:
        """Output feature order (tables in order, each table's features in order)."""
        return list(self._features)

    def _traced_output(self, node: Any) -> KeyedTensor:
        """Under ``torch.fx`` tracing: the output as a KeyedTensor over the node's values (``_trace``)."""
        return KeyedTensor._over(self._features, self._dims, node.values())

    def embedding_bag_configs(self) -> list[EmbeddingBagConfig]:
        """The tables' configs (also ``embedding_configs()``: TorchRec's managed-collision wrapper asks
        a collection that is not its own EmbeddingBagCollection by that name)."""
        return list(self._configs)

    embedding_configs = embedding_bag_configs

    def is_weighted(self) -> bool:
        """Whether bags pool with per-ID weights."""
        return self._is_weighted

    @property
    def fused_optimizer(self) -> FusedOptimizer | None:
        """The fused optimizer, or None when gradients go to a torch optimizer."""
        return self._optimizer

    def merged_update(self) -> contextlib.AbstractContextManager[None]:
        """One fused step per table for the backwards in the scope (:func:`._merged.merged_update`): two
        calls before one backward (two towers) step once on the summed gradient, as TorchRec's unfused one."""
        return merged_update(self)

    def set_fused_optimizer(self, optimizer: FusedOptimizer) -> None:
        """Change the fused optimizer's hyper-parameters (learning-rate schedules); the kind must stay."""
        if self._handle is None:
            raise InvalidInputError("set_fused_optimizer: the collection is on the meta device; materialise it first")
        optim.check_replacement(self._optimizer, optimizer)
        _lib.call(_lib.fn("recgo_ebc_set_optimizer"), self._handle.value,
                  *optimizer.params())
        self._optimizer = optimizer

    def lookup_stats(self, features: Any) -> dict[str, tuple[int, int]]:
        """Per table, (distinct IDs, lookups) of a batch: its dedup hit rate is 1 − distinct/lookups. It
        only looks: a dynamic table admits no ID and its clock stays (an evaluation-mode lookup)."""
        if self._handle is None:
            raise InvalidInputError("lookup_stats: the collection is on the meta device; materialise it first")
        vb = _vbe.variable_batch(features, pooled=False)
        kjt = as_kjt(features) if vb is None else vb.kjt  # a variable batch: its padding's bags are empty
        out = torch.empty(kjt.stride(), self._width, dtype=torch.float32)
        weights = kjt.weights_or_none() if self._is_weighted else None
        h = self._forward(*self._engine_batch(kjt, weights), out, True, train=False)
        try:
            counts = self._counts(h).tolist()
        finally:
            h.free()
        n = len(self._configs)
        return {c.name: (counts[i], counts[n + i]) for i, c in enumerate(self._configs)}

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """``nn.Module.load_state_dict`` with shape checks that raise ``InvalidInputError``, copying into
        engine memory (``assign=True`` is honoured by copying the assigned tensors back into it). On the meta
        device it materialises the tables once the entries pass the checks (a refused load leaves the
        collection on meta). Optimizer step counters outside ``[0, 2^53)`` are refused. Dynamic-ID
        tables' entries (their rows in use and ID map) are checked by the engine, which leaves the table
        unchanged on error. All or nothing across the tables, with no copy of them: every table's entries
        are checked before the first changes (:mod:`._load_whole`). A backward whose forward ran before
        the load gives the fixed tables' gradients to the loaded rows and drops the dynamic tables' (their
        rows now hold the loaded IDs)."""
        with collection_load(self, state_dict, strict, fused=self._optimizer is not None):
            return super().load_state_dict(state_dict, strict=strict, assign=assign)  # synced by _synced_after_load

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``state_dict()`` to ``path`` atomically, with a CRC-32 of every tensor and of the
        metadata (see :func:`save_checkpoint`): one consistent step of every table, also while other
        threads train the collection (copied under the engine's lock first)."""
        save_checkpoint(self.state_dict() if self._handle is None else snapshot(self), path)

    def _state_copy(self, owned: bool) -> dict[str, Any]:
        """The state copies and pickles load (``_copies``): one step of every table (:func:`state_copy`)."""
        return super()._state_copy(owned) if self._handle is None else state_copy(self, owned)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Load a checkpoint written by :meth:`save` (weights and optimizer state, bit-exact) after
        verifying its checksums; a damaged, truncated or foreign file raises ``RecgoIOError``."""
        self.load_state_dict(load_checkpoint(path))

    # -- copies ----------------------------------------------------------------------------------

    def _spec(self) -> dict[str, Any]:
        """Constructor arguments of an equivalent empty collection (configs without engine handles)."""
        return {"tables": [copy.deepcopy(c) for c in self._configs], "is_weighted": self._is_weighted,
                "optimizer": self._optimizer, "sparse_grad": self._sparse_grad, "dedup": self._dedup,
                "device": "meta" if self._handle is None else "cpu"}

    def extra_repr(self) -> str:
        opt = type(self._optimizer).__name__ if self._optimizer is not None else "none (torch optimizer)"
        return f"tables={[c.name for c in self._configs]}, width={self._width}, fused_optimizer={opt}"


def _rebuild_collection(spec: dict[str, Any], state: dict[str, Any]) -> EmbeddingBagCollection:
    """Unpickling target of collections pickled before ``_copies`` existed (kept so they still load)."""
    return rebuild(EmbeddingBagCollection, spec, state)
