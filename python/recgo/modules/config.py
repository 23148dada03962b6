"""Embedding table configs shaped like TorchRec's, and the checks every collection applies to them.

:class:`EmbeddingBagConfig` mirrors ``torchrec.EmbeddingBagConfig`` and :class:`EmbeddingConfig`
``torchrec.EmbeddingConfig``; :func:`_check_configs` accepts
recgo's or TorchRec's configs and refuses what recgo cannot honour (with the reason);
:func:`_check_optimizer` names the recgo optimizer matching a torch/FBGEMM one passed by mistake.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
from torch import nn

from .. import _lib
from ..errors import InvalidInputError
from ..feature.spec import check_name
from . import optim as _optim
from .optim import FusedOptimizer

# Pooling names → the engine's codes (declared once in capi/abi.go).
_POOLINGS = {"sum": _lib.const("PoolSum"), "mean": _lib.const("PoolMean")}


# int64 bounds what crosses the C ABI; memory bounds the rest (the engine raises CapacityError).
_INT64_MAX = 2**63 - 1

_FP32_NAMES = ("fp32", "float32", "float")


def _check_init_bounds(t: Any) -> None:
    """Refuse init bounds that are not finite numbers with min ≤ max (torch's ``uniform_`` raised its own
    error at materialisation for min > max, and NaN filled the table with NaN)."""
    for what in ("weight_init_min", "weight_init_max"):
        v = getattr(t, what)
        if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v)):
            raise InvalidInputError(f"table {t.name!r}: {what} must be a finite number or None, got {v!r}")
    lo, hi = t.init_bounds()
    if lo > hi:
        raise InvalidInputError(f"table {t.name!r}: weight_init_min {lo} is above weight_init_max {hi}")


class TableAccessors:
    """TorchRec's ``BaseEmbeddingConfig`` accessors, shared by both table configs (they read
    ``num_embeddings``, ``weight_init_min``/``weight_init_max`` and ``feature_names``)."""

    num_embeddings: int
    weight_init_min: float | None
    weight_init_max: float | None
    feature_names: list[str]

    def init_bounds(self) -> tuple[float, float]:
        """``(weight_init_min, weight_init_max)`` with TorchRec's ±√(1/num_embeddings) defaults."""
        bound = math.sqrt(1.0 / self.num_embeddings) if self.num_embeddings else 0.0
        lo = -bound if self.weight_init_min is None else float(self.weight_init_min)
        hi = bound if self.weight_init_max is None else float(self.weight_init_max)
        return lo, hi

    def get_weight_init_min(self) -> float:
        """TorchRec's accessor: the lower init bound."""
        return self.init_bounds()[0]

    def get_weight_init_max(self) -> float:
        """TorchRec's accessor: the upper init bound."""
        return self.init_bounds()[1]

    def num_features(self) -> int:
        """TorchRec's accessor: how many features read the table."""
        return len(self.feature_names)

    def to_torchrec(self) -> Any:
        """The same table as TorchRec's config (``torchrec.EmbeddingBagConfig`` for an
        :class:`EmbeddingBagConfig`, ``torchrec.EmbeddingConfig`` for an :class:`EmbeddingConfig`), so
        ``torchrec.EmbeddingBagCollection(tables=[c.to_torchrec() for c in ebc.embedding_bag_configs()])``
        builds TorchRec's module of the same tables (its ``init_fn`` TorchRec's default unless one is set).

        Raises:
            MissingExtraError: TorchRec is not installed.
            InvalidInputError: a dynamic-ID table (TorchRec's configs have no counterpart).
        """
        from ..errors import require_extra

        tr = require_extra("torchrec", "compare", "TorchRec's table configs")
        if getattr(self, "dynamic", None) is not None:
            raise InvalidInputError(f"table {getattr(self, 'name', '')!r}: a dynamic-ID table has no TorchRec config "
                                    "(TorchRec's managed-collision modules are its counterpart)")
        common: dict[str, Any] = {
            "num_embeddings": self.num_embeddings, "embedding_dim": getattr(self, "embedding_dim"),
            "name": getattr(self, "name"), "feature_names": list(self.feature_names),
            "weight_init_max": self.weight_init_max, "weight_init_min": self.weight_init_min,
            "init_fn": getattr(self, "init_fn", None)}
        if isinstance(self, EmbeddingBagConfig):
            names = {_POOLINGS["sum"]: "SUM", _POOLINGS["mean"]: "MEAN"}
            return tr.EmbeddingBagConfig(**common, pooling=tr.PoolingType[names[self.pooling_code()]])
        return tr.EmbeddingConfig(**common)


@dataclass
class EmbeddingBagConfig(TableAccessors):
    """One table, shaped like ``torchrec.EmbeddingBagConfig``.

    ``pooling`` is ``"sum"`` or ``"mean"`` (TorchRec's ``PoolingType`` is accepted too). An empty
    ``feature_names`` means one feature named like the table (as in TorchRec); a feature listed by
    several tables is looked up in each, its outputs keyed ``"feature@table"``. Weights start uniform
    in ``[weight_init_min, weight_init_max]``, by default ±√(1/num_embeddings) as in TorchRec, or as
    ``init_fn(weight)`` sets them in place (TorchRec's ``init_fn``). ``data_type`` must be FP32 (the
    engine stores float32; TorchRec's ``DataType.FP32`` is accepted, others raise). ``dynamic`` is for
    dynamic-ID tables: a :class:`recgo.DynamicConfig` (an object whose ``builder(config)`` makes the
    engine handle of an ``embedding.TableBuilder``); ``num_embeddings`` is then its default row bound.
    """

    num_embeddings: int
    embedding_dim: int
    name: str = ""
    feature_names: list[str] = field(default_factory=list)
    pooling: Any = "sum"
    weight_init_max: float | None = None
    weight_init_min: float | None = None
    dynamic: Any = None
    data_type: Any = "fp32"
    init_fn: Callable[[torch.Tensor], Any] | None = None

    @staticmethod
    def from_torchrec(cfg: Any) -> "EmbeddingBagConfig":
        """Convert a ``torchrec.EmbeddingBagConfig``: ``init_fn`` is kept unless it is TorchRec's default
        (uniform over the same bounds, which recgo draws itself, honouring ``seed``); a virtual table
        (``use_virtual_table``) raises — recgo's dynamic-ID tables (:class:`recgo.DynamicConfig`) are the
        equivalent."""
        _refuse_virtual_table(cfg, "EmbeddingBagConfig")
        init_fn = _torchrec_init_fn(cfg)
        return EmbeddingBagConfig(
            num_embeddings=cfg.num_embeddings, embedding_dim=cfg.embedding_dim, name=cfg.name,
            feature_names=listed_features(cfg), pooling=cfg.pooling,
            weight_init_max=cfg.weight_init_max, weight_init_min=cfg.weight_init_min,
            data_type=getattr(cfg, "data_type", "fp32"), init_fn=init_fn,
        )

    def pooling_code(self) -> int:
        """0 for sum, 1 for mean; raises for anything else."""
        p = self.pooling
        name = getattr(p, "name", p)
        code = _POOLINGS.get(str(name).lower())
        if code is None:
            raise InvalidInputError(f"table {self.name!r}: pooling {p!r} is not supported (use 'sum' or 'mean')")
        return code


@dataclass
class EmbeddingConfig(TableAccessors):
    """One table of unpooled lookups, shaped like ``torchrec.EmbeddingConfig``.

    Weights start uniform in ``[weight_init_min, weight_init_max]``, by default ±√(1/num_embeddings)
    as in TorchRec, or as ``init_fn(weight)`` sets them in place (TorchRec's ``init_fn``). An empty
    ``feature_names`` means one feature named like the table (as in TorchRec). ``data_type`` must be
    FP32 (the engine stores float32; others raise). ``dynamic`` makes it a dynamic-ID table (a
    :class:`recgo.DynamicConfig`; see :class:`recgo.EmbeddingBagConfig`).
    """

    num_embeddings: int
    embedding_dim: int
    name: str = ""
    feature_names: list[str] = field(default_factory=list)
    weight_init_max: float | None = None
    weight_init_min: float | None = None
    dynamic: Any = None
    data_type: Any = "fp32"
    init_fn: Callable[[torch.Tensor], Any] | None = None

    @staticmethod
    def from_torchrec(cfg: Any) -> "EmbeddingConfig":
        """Convert a ``torchrec.EmbeddingConfig``: ``init_fn`` is kept unless it is TorchRec's default
        (uniform over the same bounds, which recgo draws itself, honouring ``seed``); ``need_pos`` and a
        virtual table (``use_virtual_table``) raise."""
        if getattr(cfg, "need_pos", False):
            raise InvalidInputError(f"table {getattr(cfg, 'name', '')!r}: need_pos is not supported")
        _refuse_virtual_table(cfg, "EmbeddingConfig")
        return EmbeddingConfig(
            num_embeddings=cfg.num_embeddings, embedding_dim=cfg.embedding_dim, name=cfg.name,
            feature_names=listed_features(cfg), weight_init_max=cfg.weight_init_max,
            weight_init_min=cfg.weight_init_min, data_type=getattr(cfg, "data_type", "fp32"),
            init_fn=_torchrec_init_fn(cfg),
        )

    def bag_config(self) -> EmbeddingBagConfig:
        """The same table as an EmbeddingBagConfig (sum pooling) for the collection that owns the rows."""
        return EmbeddingBagConfig(
            num_embeddings=self.num_embeddings, embedding_dim=self.embedding_dim, name=self.name,
            feature_names=list(self.feature_names), pooling="sum", weight_init_max=self.weight_init_max,
            weight_init_min=self.weight_init_min, dynamic=self.dynamic, data_type=self.data_type,
            init_fn=self.init_fn,
        )


def _as_sequence_config(t: Any) -> EmbeddingConfig:
    """``t`` (recgo's or TorchRec's config) as a recgo EmbeddingConfig whose empty ``feature_names`` is
    ``[name]`` (TorchRec's rule) and whose ``data_type`` is FP32 (others raise)."""
    if not isinstance(t, EmbeddingConfig):
        if not (hasattr(t, "num_embeddings") and hasattr(t, "feature_names") and hasattr(t, "embedding_dim")):
            raise InvalidInputError(f"tables: expected EmbeddingConfig, got {type(t).__name__}")
        t = EmbeddingConfig.from_torchrec(t)
    _check_data_type(t)
    feats = listed_features(t) or [t.name]
    _check_names(t.name, feats)  # also when the collection shares another's tables and builds none
    return dataclasses.replace(t, feature_names=feats)


def _check_device(device: Any) -> torch.device:
    """A collection's device (``None``: torch's default device): CPU or meta, else InvalidInputError."""
    if device is None and hasattr(torch, "get_default_device"):
        device = torch.get_default_device()
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type not in ("cpu", "meta"):
        raise InvalidInputError(f"device {device}: recgo's embedding engine runs on CPU memory")
    return dev


def _refuse_virtual_table(cfg: Any, kind: str) -> None:
    """A TorchRec config asking for a virtual table raises: recgo's dynamic-ID tables are the equivalent.
    Settings only TorchRec's sharded or inference modules read (``need_pos``,
    ``num_embeddings_post_pruning``) are not kept, and say so: ``to_torchrec`` gives them back unset."""
    if getattr(cfg, "use_virtual_table", False):
        raise InvalidInputError(
            f"table {cfg.name!r}: use_virtual_table is not supported; use recgo's dynamic-ID tables "
            f"({kind}(dynamic=recgo.DynamicConfig(...)))")
    dropped = [k for k in ("need_pos", "num_embeddings_post_pruning") if getattr(cfg, k, None) not in (None, False)]
    if dropped:
        warnings.warn(f"table {cfg.name!r}: {dropped} not kept (TorchRec's sharded and inference modules read "
                      "them; recgo's collections have no such settings, and to_torchrec gives them back unset)",
                      stacklevel=4)


def _torchrec_init_fn(cfg: Any) -> Callable[[torch.Tensor], Any] | None:
    """A TorchRec config's ``init_fn``, or None when it is TorchRec's default (recgo draws that itself)."""
    init_fn = getattr(cfg, "init_fn", None)
    return None if _is_default_uniform(init_fn, cfg) else init_fn


def _is_default_uniform(fn: Any, cfg: Any) -> bool:
    """Whether ``fn`` is TorchRec's default ``init_fn``: ``partial(uniform_, a=min, b=max)`` of the config."""
    if not isinstance(fn, functools.partial) or fn.func is not torch.nn.init.uniform_ or fn.args:
        return False
    try:
        want = {"a": cfg.get_weight_init_min(), "b": cfg.get_weight_init_max()}
    except (AttributeError, ZeroDivisionError):
        return False
    return dict(fn.keywords) == want


def _check_data_type(t: EmbeddingBagConfig | EmbeddingConfig) -> None:
    d = t.data_type
    name = getattr(d, "name", None) or (str(d).replace("torch.", "") if d is not None else "fp32")
    if d is not None and d is not torch.float32 and name.lower() not in _FP32_NAMES:
        raise InvalidInputError(
            f"table {t.name!r}: data_type {name} is not supported: recgo's tables store float32 "
            "(use DataType.FP32; the pooled output is float32 either way)")


def _check_names(table: Any, features: Sequence[Any]) -> None:
    """Refuse a table name or feature name that cannot cross the C ABI (newline-joined C strings) or
    key a batch: not a non-empty string, not printable (:func:`recgo.feature.spec.check_name`, the
    feature engine's rule), or a feature name holding ``@`` (output names use ``feature@table``)."""
    if not isinstance(table, str) or not table:
        raise InvalidInputError(f"table name {table!r} must be non-empty, a str")
    check_name("table name", table)
    for f in features:
        if not isinstance(f, str) or not f or "@" in f:
            raise InvalidInputError(f"table {table!r}: bad feature name {f!r} (a non-empty str, no '@')")
        check_name(f"table {table!r}: feature name", f)


def listed_features(cfg: Any) -> list[str]:
    """A config's ``feature_names`` as a list; a bare string is refused, as ``list("user_id")`` would be
    seven one-letter features (and the batch's ``user_id`` key would then be "lacking" them)."""
    feats = cfg.feature_names
    name = getattr(cfg, "name", "")
    if isinstance(feats, (str, bytes)):
        raise InvalidInputError(f"table {name!r}: feature_names must be a list of feature names, got the string "
                                f"{feats!r} (write feature_names=[{feats!r}])")
    if not isinstance(feats, Iterable):
        raise InvalidInputError(f"table {name!r}: feature_names must be a list of feature names, got "
                                f"{type(feats).__name__}")
    return list(feats)


def table_list(tables: Any, collection: str, config: str) -> list[Any]:
    """``tables`` as a non-empty list, or InvalidInputError naming the collection and the ``config``
    type its list holds: one config not in a list, a string or a non-iterable, or an empty list."""
    if hasattr(tables, "num_embeddings"):
        raise InvalidInputError(f"{collection}: tables must be a list of {config}, got a single "
                                f"{type(tables).__name__} {getattr(tables, 'name', '')!r} (pass [config])")
    if isinstance(tables, (str, bytes)) or not isinstance(tables, Iterable):
        raise InvalidInputError(f"{collection}: tables must be a list of {config}, got {type(tables).__name__}")
    tables = list(tables)
    if not tables:
        raise InvalidInputError(f"{collection} needs at least one table (a list of {config})")
    return tables


def _check_configs(tables: Sequence[Any], collection: str = "EmbeddingBagCollection") -> list[EmbeddingBagConfig]:
    """Validated copies of ``tables`` (recgo's or TorchRec's configs), empty feature_names filled in."""
    out, names = [], set()
    for t in table_list(tables, collection, "EmbeddingBagConfig"):
        if not isinstance(t, EmbeddingBagConfig):
            if isinstance(t, EmbeddingConfig) or (hasattr(t, "num_embeddings") and not hasattr(t, "pooling")):
                raise InvalidInputError(
                    f"tables: {type(t).__name__} {getattr(t, 'name', '')!r} is a sequence (unpooled) table's "
                    "config; a pooled collection takes EmbeddingBagConfig (EmbeddingCollection takes this one)")
            if hasattr(t, "num_embeddings") and hasattr(t, "feature_names"):
                t = EmbeddingBagConfig.from_torchrec(t)
            else:
                raise InvalidInputError(f"tables: expected EmbeddingBagConfig, got {type(t).__name__}")
        feats = listed_features(t) or [t.name]  # TorchRec: a table without features has one, its name
        _check_names(t.name, feats)
        if hasattr(nn.ModuleDict, t.name) or "." in t.name:
            raise InvalidInputError(f"table name {t.name!r} is reserved by nn.ModuleDict or contains '.'; rename the table")
        if t.name in names:
            raise InvalidInputError(f"duplicate table name {t.name!r}")
        names.add(t.name)
        for what, v in (("num_embeddings", t.num_embeddings), ("embedding_dim", t.embedding_dim)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                if not (what == "num_embeddings" and t.dynamic is not None):
                    raise InvalidInputError(f"table {t.name!r}: {what} must be a positive int, got {v!r}")
            elif v > _INT64_MAX:
                raise InvalidInputError(
                    f"table {t.name!r}: {what}={v} does not fit in int64 (at most 2**63-1; memory limits it far sooner)")
        _check_data_type(t)
        _check_init_bounds(t)
        if t.init_fn is not None and not callable(t.init_fn):
            raise InvalidInputError(f"table {t.name!r}: init_fn must be callable, got {type(t.init_fn).__name__}")
        if len(set(feats)) != len(feats):
            raise InvalidInputError(f"table {t.name!r}: feature_names {feats} lists a feature twice")
        t = dataclasses.replace(t, feature_names=feats)
        t.pooling_code()
        out.append(t)
    return out


def _embedding_names(cfgs: Sequence[EmbeddingBagConfig]) -> list[str]:
    """Output keys in table order: a feature's name, or ``feature@table`` for a feature several tables
    look up (TorchRec's ``get_embedding_names_by_table``)."""
    uses: dict[str, int] = {}
    for c in cfgs:
        for f in c.feature_names:
            uses[f] = uses.get(f, 0) + 1
    return [f if uses[f] == 1 else f"{f}@{c.name}" for c in cfgs for f in c.feature_names]


def key_readers(feature_keys: Sequence[str]) -> dict[str, list[int]]:
    """Batch key → the indices of the features that read it, in feature order (a key several tables
    list has several), keys in the order they first appear."""
    out: dict[str, list[int]] = {}
    for i, k in enumerate(feature_keys):
        out.setdefault(k, []).append(i)
    return out


def check_keys(readers: Mapping[str, Sequence[int]], keys: Sequence[str]) -> None:
    """Raise :class:`InvalidInputError` naming the features a batch with ``keys`` lacks (``readers``:
    :func:`key_readers` of the collection's features)."""
    have = set(keys)
    missing = [k for k in readers if k not in have]
    if missing:
        raise InvalidInputError(f"the batch lacks features {missing} (its keys: {list(keys)})")


_TORCH_TO_RECGO = {"SGD": "SGD", "Adagrad": "Adagrad", "Adam": "Adam", "AdamW": "AdamW", "SparseAdam": "Adam",
                   "RowWiseAdagrad": "RowWiseAdagrad"}
_FBGEMM_TO_RECGO = {"SGD": "SGD", "EXACT_SGD": "SGD", "EXACT_ADAGRAD": "Adagrad", "ADAGRAD": "Adagrad",
                    "EXACT_ROWWISE_ADAGRAD": "RowWiseAdagrad", "ROWWISE_ADAGRAD": "RowWiseAdagrad", "ADAM": "Adam"}


def _check_optimizer(optimizer: Any, sparse_grad: bool = False) -> FusedOptimizer | None:
    """``optimizer`` if it is a recgo fused optimizer (or None); otherwise an error naming the recgo
    optimizer that corresponds to what was passed (a torch optimizer class or instance, FBGEMM's
    ``EmbOptimType``, or a recgo optimizer class instead of an instance). ``sparse_grad`` with a fused
    optimizer is refused, not silently ignored: a fused collection leaves no gradient."""
    if optimizer is None or (isinstance(optimizer, FusedOptimizer) and optimizer.kind != 0):
        if optimizer is not None and sparse_grad:
            raise InvalidInputError("sparse_grad=True applies to optimizer=None (gradients for a torch optimizer); "
                                    "a fused optimizer updates the rows in backward and leaves no gradient")
        return optimizer
    cls = optimizer if isinstance(optimizer, type) else type(optimizer)
    if isinstance(optimizer, type) and issubclass(optimizer, FusedOptimizer) and optimizer.kind != 0:
        raise InvalidInputError(
            f"optimizer: pass an instance, e.g. recgo.modules.optim.{optimizer.__name__}(lr=0.01), not the class")
    is_fbgemm = type(optimizer).__name__ == "EmbOptimType"
    name = getattr(optimizer, "name", "") if is_fbgemm else cls.__name__
    ours = (_FBGEMM_TO_RECGO if is_fbgemm else _TORCH_TO_RECGO).get(name)
    module = "torch.optim" if cls.__module__.startswith("torch.optim.") else cls.__module__
    what = f"{module}.{cls.__name__}" if not is_fbgemm else f"EmbOptimType.{name}"
    if ours is not None and hasattr(_optim, ours):
        raise InvalidInputError(
            f"optimizer: {what} is not a recgo fused optimizer; for rows updated inside backward pass "
            f"recgo.modules.optim.{ours}(lr=...), or leave optimizer=None and give the collection's "
            "parameters to a torch optimizer")
    raise InvalidInputError(
        f"optimizer: expected a recgo fused optimizer (recgo.modules.optim.SGD, Adagrad, RowWiseAdagrad, Adam, "
        f"AdamW), got {what}")
