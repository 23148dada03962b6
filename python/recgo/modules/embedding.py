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
"""

from __future__ import annotations

import ctypes
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
from torch import nn

from .. import _lib
from .._lib import D, H, I32, I64, P, S
from ..data import _prepared
from ..errors import InvalidInputError, NotFoundError
from ..sparse import KeyedJaggedTensor, KeyedTensor, as_kjt
from ..tensors import check_tensor, ptr
from . import _ops
from .optim import FusedOptimizer

def _no_use_count(t: torch.Tensor) -> int:
    return -1  # unknown: never reuse


_storage_use_count = (
    (lambda t: torch._C._storage_Use_Count(t.untyped_storage()._cdata))
    if hasattr(torch._C, "_storage_Use_Count") else _no_use_count
)

# Forward contexts a collection keeps for backwards that have not run yet (older ones are freed).
_MAX_CONTEXTS = 8

_POOLINGS = {"sum": 0, "mean": 1}


@dataclass
class EmbeddingBagConfig:
    """One table, shaped like ``torchrec.EmbeddingBagConfig``.

    ``pooling`` is ``"sum"`` or ``"mean"`` (TorchRec's ``PoolingType`` is accepted too). Weights
    start uniform in ``[weight_init_min, weight_init_max]``, by default ±√(1/num_embeddings) as in
    TorchRec. ``dynamic`` is for dynamic-ID tables: an object with a ``handle(config)`` method returning
    the engine handle (an int) of an ``embedding.TableBuilder``; ``num_embeddings`` is then ignored.
    """

    num_embeddings: int
    embedding_dim: int
    name: str = ""
    feature_names: list[str] = field(default_factory=list)
    pooling: Any = "sum"
    weight_init_max: float | None = None
    weight_init_min: float | None = None
    dynamic: Any = None

    @staticmethod
    def from_torchrec(cfg: Any) -> "EmbeddingBagConfig":
        """Convert a ``torchrec.EmbeddingBagConfig``."""
        return EmbeddingBagConfig(
            num_embeddings=cfg.num_embeddings, embedding_dim=cfg.embedding_dim, name=cfg.name,
            feature_names=list(cfg.feature_names), pooling=cfg.pooling,
            weight_init_max=cfg.weight_init_max, weight_init_min=cfg.weight_init_min,
        )

    def pooling_code(self) -> int:
        """0 for sum, 1 for mean; raises for anything else."""
        p = self.pooling
        name = getattr(p, "name", p)
        code = _POOLINGS.get(str(name).lower())
        if code is None:
            raise InvalidInputError(f"table {self.name!r}: pooling {p!r} is not supported (use 'sum' or 'mean')")
        return code


def _check_configs(tables: Sequence[Any]) -> list[EmbeddingBagConfig]:
    if not tables:
        raise InvalidInputError("EmbeddingBagCollection needs at least one table")
    out, names, feats = [], set(), set()
    for t in tables:
        if not isinstance(t, EmbeddingBagConfig):
            if hasattr(t, "num_embeddings") and hasattr(t, "feature_names"):
                t = EmbeddingBagConfig.from_torchrec(t)
            else:
                raise InvalidInputError(f"tables: expected EmbeddingBagConfig, got {type(t).__name__}")
        if not t.name or "\n" in t.name:
            raise InvalidInputError(f"table name {t.name!r} must be non-empty and on one line")
        if hasattr(nn.ModuleDict, t.name) or "." in t.name:
            raise InvalidInputError(f"table name {t.name!r} is reserved by nn.ModuleDict or contains '.'; rename the table")
        if t.name in names:
            raise InvalidInputError(f"duplicate table name {t.name!r}")
        names.add(t.name)
        for what, v in (("num_embeddings", t.num_embeddings), ("embedding_dim", t.embedding_dim)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                if not (what == "num_embeddings" and t.dynamic is not None):
                    raise InvalidInputError(f"table {t.name!r}: {what} must be a positive int, got {v!r}")
        if not t.feature_names:
            raise InvalidInputError(f"table {t.name!r}: feature_names is empty")
        for f in t.feature_names:
            if not f or "\n" in f:
                raise InvalidInputError(f"table {t.name!r}: bad feature name {f!r}")
            if f in feats:
                raise InvalidInputError(f"feature {f!r} appears in more than one table")
            feats.add(f)
        t.pooling_code()
        out.append(t)
    return out


class _OwnedFloats:
    """Factory of ctypes arrays over engine memory that keep the engine object alive."""

    @staticmethod
    def wrap(address: int, count: int, ctype: Any, owner: _lib.Handle, dtype: torch.dtype) -> torch.Tensor:
        if count == 0:
            return torch.empty(0, dtype=dtype)
        arr_type = type("EngineMemory", (ctype * count,), {})
        arr = arr_type.from_address(address)
        arr.owner = owner  # the tensor → buffer → owner chain keeps the memory mapped
        return torch.frombuffer(arr, dtype=dtype, count=count)


class _Table(nn.Module):
    """Holds one table's parameter and buffers, so state_dict keys read ``embedding_bags.<name>.weight``."""

    def __init__(self, weight: torch.Tensor, requires_grad: bool, state: torch.Tensor, step: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=requires_grad)
        if state.numel():
            self.register_buffer("optimizer_state", state)
        if step.numel():
            self.register_buffer("optimizer_step", step)


class EmbeddingBagCollection(nn.Module):
    """Pooled embedding tables in recgo's engine, with TorchRec's interface.

    Args:
        tables: ``EmbeddingBagConfig`` (recgo's or TorchRec's) list; several features may share a table.
        is_weighted: pool ``Σ w·row`` with the batch's per-ID weights (required in every batch).
        device: only ``None``/``"cpu"`` (the engine reads CPU memory).
        optimizer: a :class:`recgo.modules.optim.FusedOptimizer` to update rows inside backward; with
            ``None`` the weights get gradients for a torch optimizer instead.
        sparse_grad: with ``optimizer=None``, give sparse COO gradients (for ``torch.optim.SGD``,
            ``Adagrad``, ``SparseAdam``) instead of dense ones.
        seed: seed of the initial weights (default: torch's global generator).

    ``forward(features)`` takes a recgo or TorchRec ``KeyedJaggedTensor`` and returns a
    :class:`recgo.KeyedTensor` with one column block per feature in table order.
    """

    def __init__(self, tables: Sequence[Any], is_weighted: bool = False, device: Any = None,
                 optimizer: FusedOptimizer | None = None, sparse_grad: bool = False,
                 seed: int | None = None) -> None:
        super().__init__()
        if device is not None and torch.device(device).type != "cpu":
            raise InvalidInputError(f"device {device}: recgo's embedding engine runs on CPU memory")
        if optimizer is not None and (not isinstance(optimizer, FusedOptimizer) or optimizer.kind == 0):
            raise InvalidInputError(f"optimizer: expected a recgo fused optimizer, got {type(optimizer).__name__}")
        self._configs = _check_configs(tables)
        self._is_weighted = bool(is_weighted)
        self._optimizer = optimizer
        self._sparse_grad = bool(sparse_grad)
        self._features: list[str] = [f for t in self._configs for f in t.feature_names]
        self._feature_index = {f: i for i, f in enumerate(self._features)}
        self._dims = [t.embedding_dim for t in self._configs for _ in t.feature_names]
        self._width = sum(self._dims)
        self._key_cache: dict[tuple[str, ...], torch.Tensor] = {}
        self._handle = self._create()
        self.embedding_bags = nn.ModuleDict()
        self._storage: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        for i, cfg in enumerate(self._configs):
            weight, state, step = self._memory(i, cfg.embedding_dim)
            self._storage.append((weight, state, step))
            if cfg.dynamic is None:
                bound = math.sqrt(1.0 / cfg.num_embeddings)
                lo = -bound if cfg.weight_init_min is None else cfg.weight_init_min
                hi = bound if cfg.weight_init_max is None else cfg.weight_init_max
                with torch.no_grad():
                    weight.uniform_(lo, hi, generator=gen)
            if optimizer is None:  # no fused step: keep the state_dict TorchRec-compatible
                step = torch.empty(0, dtype=torch.int64)
            self.embedding_bags[cfg.name] = _Table(weight, optimizer is None, state, step)
        for i, cfg in enumerate(self._configs):
            # Dynamic tables hook state_dict/load_state_dict so checkpoints carry their ID maps.
            if cfg.dynamic is not None and hasattr(cfg.dynamic, "attach"):
                cfg.dynamic.attach(self, i)
        self._engine_views = self._engine_tensors()
        self._anchor = torch.zeros((), requires_grad=True)
        self._contexts: dict[int, _lib.Handle] = {}
        self._out_cache: list[torch.Tensor] = []
        self._next_ctx = 0
        _ops.register(self, self._handle.value)

    # -- engine plumbing -------------------------------------------------------------------------

    def _create(self) -> _lib.Handle:
        cfgs = self._configs
        n = len(cfgs)
        rows = torch.tensor([t.num_embeddings if t.dynamic is None else 0 for t in cfgs], dtype=torch.int64)
        dims = torch.tensor([t.embedding_dim for t in cfgs], dtype=torch.int64)
        builders = None
        if any(t.dynamic is not None for t in cfgs):
            builders = torch.tensor([int(t.dynamic.handle(t)) if t.dynamic is not None else 0 for t in cfgs],
                                    dtype=torch.int64)
        feat_table = torch.tensor([i for i, t in enumerate(cfgs) for _ in t.feature_names], dtype=torch.int64)
        feat_pool = torch.tensor([t.pooling_code() for t in cfgs for _ in t.feature_names], dtype=torch.int64)
        opt = self._optimizer.params() if self._optimizer is not None else (0, 0.0, 0.0, 0.0, 0.0, 0.0)
        return _lib.new_handle(
            "recgo_ebc_new", [I64, S, P, P, P, I32, D, D, D, D, D, I64, S, P, P],
            n, "\n".join(t.name for t in cfgs).encode(), ptr(rows), ptr(dims), ptr(builders), *opt,
            len(self._features), "\n".join(self._features).encode(), ptr(feat_table), ptr(feat_pool),
        )

    def _memory(self, t: int, dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        f = _lib.fn("recgo_ebc_table_memory", [H, I64, I32, ctypes.POINTER(H), ctypes.POINTER(I64), ctypes.POINTER(I64)])
        out = []
        for which, ctype, dtype in ((0, ctypes.c_float, torch.float32), (1, ctypes.c_float, torch.float32),
                                    (2, ctypes.c_int64, torch.int64)):
            addr, n, stride = H(0), I64(0), I64(0)
            _lib.call(f, self._handle.value, t, which, ctypes.byref(addr), ctypes.byref(n), ctypes.byref(stride))
            flat = _OwnedFloats.wrap(addr.value, n.value, ctype, self._handle, dtype)
            if which == 0:
                flat = flat.view(-1, stride.value)[:, :dim]
            elif which == 1 and stride.value:
                flat = flat.view(-1, stride.value)
            out.append(flat)
        return out[0], out[1], out[2]

    def _engine_tensors(self) -> list[tuple[str, nn.Module, str, torch.Tensor, int]]:
        """(table, holder module, attribute, engine tensor, its address) of every parameter and buffer
        that must stay in engine memory."""
        out = []
        for cfg, (weight, state, step) in zip(self._configs, self._storage):
            holder = self.embedding_bags[cfg.name]
            for name, mine in (("weight", weight), ("optimizer_state", state), ("optimizer_step", step)):
                if mine.numel() and getattr(holder, name, None) is not None:
                    out.append((cfg.name, holder, name, mine, mine.data_ptr()))
        return out

    def _sync_storage(self) -> None:
        """Undo replacement of a parameter or buffer (e.g. ``load_state_dict(assign=True)``) by copying
        its values back into engine memory and re-pointing it there. Runs before every forward, so the
        common case (nothing replaced) is one address comparison per tensor."""
        for table, holder, name, mine, addr in self._engine_views:
            cur = getattr(holder, name, None)
            if cur is None:
                continue
            if cur.data_ptr() != addr or cur.shape != mine.shape or cur.dtype != mine.dtype:
                if cur.shape != mine.shape:
                    raise InvalidInputError(
                        f"table {table!r}: {name} was replaced by a tensor of shape {tuple(cur.shape)}, "
                        f"expected {tuple(mine.shape)}")
                with torch.no_grad():
                    mine.copy_(cur.detach())
                cur.data = mine

    def _keys(self, keys: list[str]) -> torch.Tensor:
        tk = tuple(keys)
        cached = self._key_cache.get(tk)
        if cached is not None:
            return cached
        idx = []
        for k in keys:
            if k not in self._feature_index:
                raise NotFoundError(f"feature {k!r} is not in this EmbeddingBagCollection (features: {self._features})")
            idx.append(self._feature_index[k])
        missing = [f for f in self._features if f not in set(keys)]
        if missing:
            raise InvalidInputError(f"the batch lacks features {missing}")
        t = torch.tensor(idx, dtype=torch.int64)
        self._key_cache[tk] = t
        return t

    def _forward(self, key_feature: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor,
                 weights: torch.Tensor | None, out: torch.Tensor, keep: bool) -> _lib.Handle | None:
        ctx = H(0)
        prepared = _prepared.prepared_handle(values, lengths) if weights is None else None
        if prepared is not None:  # a pipeline batch: use the dedup its FORMAT stage computed
            f = _lib.fn("recgo_ebc_forward_prepared", [H, H, P, I64, P, I64, P, I64, P, I64, I32, I32, ctypes.POINTER(H)])
            _lib.call(f, self._handle.value, prepared, ptr(key_feature), key_feature.numel(), ptr(values), values.numel(),
                      ptr(lengths), lengths.numel(), ptr(out), out.numel(), int(self.training), int(keep), ctypes.byref(ctx))
            return _lib.Handle(ctx.value) if keep else None
        f = _lib.fn("recgo_ebc_forward", [H, P, I64, P, I64, P, I64, P, I64, P, I64, I32, I32, ctypes.POINTER(H)])
        _lib.call(f, self._handle.value, ptr(key_feature), key_feature.numel(), ptr(values), values.numel(),
                  ptr(lengths), lengths.numel(), None if weights is None else (weights.data_ptr() or None),
                  0 if weights is None else weights.numel(), ptr(out), out.numel(), int(self.training), int(keep),
                  ctypes.byref(ctx))
        return _lib.Handle(ctx.value) if keep else None

    def _counts(self, handle: _lib.Handle) -> torch.Tensor:
        n = len(self._configs)
        counts = torch.empty(2 * n, dtype=torch.int64)
        _lib.call(_lib.fn("recgo_ebc_context_counts", [H, P, I64]), handle.value, ptr(counts), 2 * n)
        return counts

    def _output(self, batch: int) -> torch.Tensor:
        """A ``[batch, width]`` output tensor. Fresh memory costs a page fault per 4 KiB on first write
        (~15 ms for a 27 MB output here), so the memory of an earlier output is reused once nothing
        references it any more: the caller only ever gets views of the cached base tensors, so the
        base's storage use count (2: the base and the probe's temporary) proves every view is gone."""
        for base in self._out_cache:
            if base.shape[0] == batch and _storage_use_count(base) == 2:
                return base.view(base.shape)
        base = torch.empty(batch, self._width, dtype=torch.float32)
        if _storage_use_count is not _no_use_count:
            self._out_cache = [base] + self._out_cache[:1]
        return base.view(base.shape)

    def _run_forward(self, key_feature: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor,
                     weights: torch.Tensor | None, out: torch.Tensor, keep: bool) -> int:
        """Forward into ``out``; with ``keep``, stash the context for backward and return its id."""
        handle = self._forward(key_feature, values, lengths, weights, out, keep)
        if handle is None:
            return 0
        self._next_ctx += 1
        self._contexts[self._next_ctx] = handle
        while len(self._contexts) > _MAX_CONTEXTS:  # forwards whose backward never ran
            self._contexts.pop(next(iter(self._contexts))).free()
        return self._next_ctx

    def _run_backward(self, ctx_id: int, grad: torch.Tensor) -> list[torch.Tensor]:
        """Backward of a stashed context (freed afterwards): see ``recgo::ebc_backward``."""
        handle = self._contexts.pop(ctx_id, None)
        if handle is None:
            raise InvalidInputError(
                "recgo backward: no saved forward for this graph (backward ran twice, the forward ran without "
                f"grad tracking, or more than {_MAX_CONTEXTS} forwards ran since without a backward)")
        try:
            return self._backward_raw(handle, grad)
        finally:
            handle.free()

    def _backward_raw(self, handle: _lib.Handle, grad: torch.Tensor) -> list[torch.Tensor]:
        grad = check_tensor(grad, "grad_output", (torch.float32, torch.float64, torch.float16, torch.bfloat16),
                            ndim=2, convert_to=torch.float32)
        f = _lib.fn("recgo_ebc_backward", [H, I32, P, I64, P, P, I64])
        if self._optimizer is not None:
            _lib.call(f, handle.value, 1, ptr(grad), grad.numel(), None, None, 0)
            return [torch.zeros(())]
        n = len(self._configs)
        uniq = self._counts(handle)[:n].tolist()
        out: list[torch.Tensor] = []
        for u, cfg in zip(uniq, self._configs):
            out += [torch.empty(u, dtype=torch.int64), torch.empty(u, cfg.embedding_dim, dtype=torch.float32)]
        rows = (ctypes.c_void_p * n)(*[ptr(t) for t in out[0::2]])
        vals = (ctypes.c_void_p * n)(*[ptr(t) for t in out[1::2]])
        _lib.call(f, handle.value, 0, ptr(grad), grad.numel(), ctypes.addressof(rows), ctypes.addressof(vals), n)
        return out

    def _grads_from(self, raw: list[torch.Tensor]) -> list[torch.Tensor | None]:
        """Per-parameter gradients from ``recgo::ebc_backward``'s result (the anchor's when fused)."""
        if self._optimizer is not None:
            return [raw[0]]
        out: list[torch.Tensor | None] = []
        for i, (cfg, (weight, _, _)) in enumerate(zip(self._configs, self._storage)):
            idx, g = raw[2 * i], raw[2 * i + 1]
            if cfg.dynamic is not None:
                valid = idx >= 0
                idx, g = idx[valid], g[valid]
            if self._sparse_grad:
                out.append(torch.sparse_coo_tensor(idx.unsqueeze(0), g, tuple(weight.shape),
                                                   is_coalesced=True, check_invariants=False))
            else:
                out.append(torch.zeros(tuple(weight.shape), dtype=torch.float32).index_copy_(0, idx, g))
        return out

    # -- public API ------------------------------------------------------------------------------

    def forward(self, features: Any) -> KeyedTensor:
        """Pool ``features`` (recgo or TorchRec KeyedJaggedTensor) into a ``[B, ΣD]`` KeyedTensor."""
        kjt = as_kjt(features)
        if not torch.compiler.is_compiling():
            self._sync_storage()
        key_feature = self._keys(kjt.keys())
        weights = kjt.weights_or_none() if self._is_weighted else None
        if self._is_weighted and weights is None:
            raise InvalidInputError("this collection is weighted (is_weighted=True) but the batch has no weights")
        if weights is not None and weights.requires_grad and torch.is_grad_enabled():
            raise InvalidInputError("gradients with respect to per-ID weights are not supported; pass weights.detach()")
        if self._optimizer is not None:
            params = [self._anchor]
        else:
            params = [self.embedding_bags[c.name].weight for c in self._configs]
        keep = torch.is_grad_enabled() and any(p.requires_grad for p in params)
        out, _ = _ops.ebc_forward(self._handle.value, keep, key_feature, kjt.values(), kjt.lengths(), weights,
                                  params)
        return KeyedTensor(self._features, self._dims, out)

    def feature_names(self) -> list[str]:
        """Output feature order (tables in order, each table's features in order)."""
        return list(self._features)

    def embedding_bag_configs(self) -> list[EmbeddingBagConfig]:
        """The tables' configs."""
        return list(self._configs)

    def is_weighted(self) -> bool:
        """Whether bags pool with per-ID weights."""
        return self._is_weighted

    @property
    def fused_optimizer(self) -> FusedOptimizer | None:
        """The fused optimizer, or None when gradients go to a torch optimizer."""
        return self._optimizer

    def set_fused_optimizer(self, optimizer: FusedOptimizer) -> None:
        """Change the fused optimizer's hyper-parameters (learning-rate schedules); the kind must stay."""
        if self._optimizer is None or type(optimizer).kind != type(self._optimizer).kind:
            raise InvalidInputError("set_fused_optimizer: the optimizer kind cannot change after construction")
        _lib.call(_lib.fn("recgo_ebc_set_optimizer", [H, I32, D, D, D, D, D]), self._handle.value,
                  *optimizer.params())
        self._optimizer = optimizer

    def lookup_stats(self, features: Any) -> dict[str, tuple[int, int]]:
        """Per table, (distinct IDs, lookups) of a batch: its dedup hit rate is 1 − distinct/lookups."""
        kjt = as_kjt(features)
        b = kjt.lengths().numel() // max(1, len(self._features))
        out = torch.empty(b, self._width, dtype=torch.float32)
        weights = kjt.weights_or_none() if self._is_weighted else None
        h = self._forward(self._keys(kjt.keys()), kjt.values(), kjt.lengths(), weights, out, True)
        assert h is not None
        counts = self._counts(h).tolist()
        h.free()
        n = len(self._configs)
        return {c.name: (counts[i], counts[n + i]) for i, c in enumerate(self._configs)}

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """``nn.Module.load_state_dict`` with shape checks that raise ``InvalidInputError``, copying into
        engine memory (``assign=True`` is honoured by copying back on the next forward)."""
        own = self.state_dict(keep_vars=True)
        for k, v in state_dict.items():
            if k in own and isinstance(v, torch.Tensor) and tuple(v.shape) != tuple(own[k].shape):
                raise InvalidInputError(
                    f"checkpoint entry {k!r} has shape {tuple(v.shape)}, this collection's is {tuple(own[k].shape)}"
                    " (a checkpoint of another configuration?)")
        res = super().load_state_dict(state_dict, strict=strict, assign=assign)
        self._sync_storage()
        return res

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``state_dict()`` to ``path`` with ``torch.save``, atomically (see :func:`save_checkpoint`)."""
        save_checkpoint(self.state_dict(), path)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Load a checkpoint written by :meth:`save` (weights and optimizer state, bit-exact)."""
        self.load_state_dict(torch.load(path, weights_only=True))

    def extra_repr(self) -> str:
        opt = type(self._optimizer).__name__ if self._optimizer is not None else "none (torch optimizer)"
        return f"tables={[c.name for c in self._configs]}, width={self._width}, fused_optimizer={opt}"


STAGES = ("dedup", "pool", "group", "update")


def stage_times() -> dict[str, float]:
    """Seconds the engine has spent in each embedding stage since the library loaded (all collections):
    dedup (deduplicate and resolve IDs), pool (forward segments), group (forward kept for
    backward: contributions grouped by row), update (backward: per-row reduction and optimizer). Take differences around a
    region to see how its time splits."""
    out = torch.zeros(len(STAGES), dtype=torch.int64)
    _lib.call(_lib.fn("recgo_ebc_stage_times", [P, I64]), out.data_ptr(), len(STAGES))
    return {name: ns / 1e9 for name, ns in zip(STAGES, out.tolist())}


def save_checkpoint(obj: Any, path: str | os.PathLike[str]) -> None:
    """``torch.save(obj, path)`` that never leaves a half-written file: it writes a temporary file in
    the same folder, fsyncs it and renames it over ``path``; on failure ``path`` is untouched."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
