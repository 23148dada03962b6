"""Fused optimizers for recgo's embedding tables, applied row by row inside the backward pass.

Pass one to :class:`recgo.EmbeddingBagCollection` as ``optimizer=``; the engine then merges each
batch's gradient per distinct row and updates that row (and its optimizer state, kept beside the
table outside the Python heap) in the same pass, like TorchRec's fused EmbeddingBagCollection.
Hyper-parameters are checked by the engine: out-of-range values, and parameters an optimizer does not
take (``eps`` for SGD, ``beta1``/``beta2`` outside Adam/AdamW: they would be ignored), raise
``InvalidInputError``. ``weight_decay`` is torch.optim's L2 term on every optimizer but AdamW: the
gradient becomes g + wd·w before the update (applied, like the update, to the rows a batch touches).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import numbers
import warnings
from dataclasses import InitVar, dataclass, replace
from typing import Any, Sequence

import torch

from .. import _lib
from ..errors import InvalidInputError
from ._walk import torchrec_class

# The hyper-parameters of a fused optimizer (its dataclass fields).
_HYPER = ("lr", "eps", "beta1", "beta2", "weight_decay")
# torch.optim options recgo's updates do not have, at the value that leaves the update as recgo's.
_NEUTRAL = {"momentum": 0.0, "dampening": None, "nesterov": False, "lr_decay": 0.0, "initial_accumulator_value": 0.0,
            "amsgrad": False, "maximize": False, "foreach": None, "fused": None, "capturable": False,
            "differentiable": False}


def _torch_spellings(name: str, cls: type, args: dict[str, Any], lr_given: bool = False) -> None:
    """Turn torch's and FBGEMM's spellings in ``args`` (optimizer ``name``'s keyword arguments, for
    ``cls``) into recgo's, in place: ``learning_rate`` becomes ``lr`` (refused beside an ``lr``, or a
    positional one: ``lr_given``), and the torch-only options (``momentum``, ``amsgrad``, ``lr_decay``,
    ...) at their neutral value are removed; one at another value raises InvalidInputError naming it
    (recgo's update for ``cls`` has no such term)."""
    if "learning_rate" in args:
        if "lr" in args or lr_given:
            raise InvalidInputError(f"optimizer {name}: give lr or learning_rate, not both")
        args["lr"] = args.pop("learning_rate")
    for k in sorted(set(args) & set(_NEUTRAL)):
        v = args.pop(k)
        neutral = not v if _NEUTRAL[k] in (None, False) else v == _NEUTRAL[k]  # foreach=False is foreach=None
        if not neutral and k != "dampening":  # dampening only acts with momentum
            raise InvalidInputError(f"optimizer {name}: {k}={v!r} is not supported by recgo's fused {cls.__name__} "
                                    f"(only {k}={_NEUTRAL[k]!r})")


def _fused(cls: type) -> type:
    """``@dataclass(frozen=True)`` for a fused optimizer, whose constructor also takes torch.optim's
    spellings, as a torch user writes them: ``learning_rate`` for ``lr`` (FBGEMM's), and the torch-only
    options at their neutral value (``SGD(lr=0.1, momentum=0)``); another value of one, or an argument
    the optimizer does not take, raises ``InvalidInputError`` naming it (and the nearest argument it
    takes: ``Adam(bet=...)`` suggests ``betas``)."""
    cls = dataclass(frozen=True)(cls)
    init = cls.__init__
    takes = [n for n in inspect.signature(init).parameters if n != "self"]

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # (the fields' check below misses a beta1/beta2 given at its default; dataclasses.replace passes
        # betas=None beside every field)
        if kwargs.get("betas") is not None and {"beta1", "beta2"} & set(kwargs):
            raise InvalidInputError(f"optimizer {cls.__name__}: give betas or beta1/beta2, not both")
        _torch_spellings(cls.__name__, cls, kwargs, lr_given=bool(args))
        unknown = [k for k in kwargs if k not in takes]
        if unknown:  # Python's bare "unexpected keyword argument" named neither the options nor a fix
            close = {k: m[0] for k in unknown if (m := difflib.get_close_matches(k, takes, n=1))}
            hint = "".join(f"; did you mean {m!r} for {k!r}?" for k, m in close.items())
            raise InvalidInputError(f"optimizer {cls.__name__}: unknown argument{'s' * (len(unknown) > 1)} "
                                    f"{', '.join(map(repr, unknown))} (it takes {', '.join(takes)}, and "
                                    f"torch.optim's learning_rate and its options at their neutral value){hint}")
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


@_fused
class FusedOptimizer:
    """Base of the fused optimizers: the engine's kind code and hyper-parameters."""

    lr: float
    eps: float = 0.0
    beta1: float = 0.0
    beta2: float = 0.0
    weight_decay: float = 0.0

    kind = _lib.const("OptNone")

    def __post_init__(self) -> None:
        _check_numbers(f"optimizer {type(self).__name__}", {k: getattr(self, k) for k in _HYPER})
        if self.kind:  # the engine's ranges, when made (a CollectionOptimizer's change to several
            _lib.call(_lib.fn("recgo_optimizer_check"), *self.params())  # collections took some, then raised)

    def state_width(self, dim: int) -> int:
        """Number of float32 state values each row keeps."""
        return 0

    def squares(self, dim: int) -> slice:
        """The state columns (of :meth:`state_width`) holding running sums of squared gradients, which
        are never negative (none here)."""
        return slice(0, 0)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # TorchRec's FusedEmbeddingBagCollection.fused_optimizer is a method returning a KeyedOptimizer;
        # recgo's collection.fused_optimizer is this (a property): a script's fused_optimizer() got
        # "'SGD' object is not callable"
        raise InvalidInputError(
            f"a recgo collection's fused_optimizer is its optimizer's settings ({self!r}), not a method: "
            "for the optimizer object TorchRec's fused_optimizer() returns (a KeyedOptimizer to combine, "
            "schedule or checkpoint), use recgo.modules.optim.CollectionOptimizer(collection_or_model)")

    def params(self) -> tuple[int, float, float, float, float, float]:
        """(kind, lr, eps, beta1, beta2, weight_decay) as the C ABI takes them."""
        return (self.kind, float(self.lr), float(self.eps), float(self.beta1), float(self.beta2),
                float(self.weight_decay))


@_fused
class SGD(FusedOptimizer):
    """Plain SGD (torch.optim.SGD without momentum): w ← w − lr·(g + wd·w)."""

    kind = _lib.const("OptSGD")


@_fused
class Adagrad(FusedOptimizer):
    """Adagrad (torch.optim.Adagrad, FBGEMM EXACT_ADAGRAD): g ← g + wd·w, s ← s + g²,
    w ← w − lr·g/(√s + eps)."""

    eps: float = 1e-10
    kind = _lib.const("OptAdagrad")

    def state_width(self, dim: int) -> int:
        return dim

    def squares(self, dim: int) -> slice:
        return slice(0, dim)


@_fused
class RowWiseAdagrad(FusedOptimizer):
    """Row-wise Adagrad (FBGEMM EXACT_ROWWISE_ADAGRAD): one accumulator per row, g ← g + wd·w,
    s ← s + mean(g²), w ← w − lr·g/(√s + eps)."""

    eps: float = 1e-8
    kind = _lib.const("OptRowwiseAdagrad")

    def state_width(self, dim: int) -> int:
        return 1

    def squares(self, dim: int) -> slice:
        return slice(0, 1)


@_fused
class Adam(FusedOptimizer):
    """Adam with L2 weight decay, applied lazily to the rows a batch touches (like SparseAdam).

    State per row: the first moment (dim values) then the second moment (dim values); the step
    counter is per table and counts backward passes.
    """

    lr: float = 1e-3
    eps: float = 1e-8
    beta1: float = 0.9
    beta2: float = 0.999
    # torch.optim.Adam's spelling, ``betas=(beta1, beta2)``, as a torch user writes it (not a field:
    # the pair lands in beta1/beta2, so equality, repr and checkpoints see one form)
    betas: InitVar[Sequence[float] | None] = None
    kind = _lib.const("OptAdam")

    def __post_init__(self, betas: Sequence[float] | None = None) -> None:
        if betas is not None:
            if (self.beta1, self.beta2) != (0.9, 0.999):
                raise InvalidInputError(f"optimizer {type(self).__name__}: give betas or beta1/beta2, not both")
            b1, b2 = _betas(type(self).__name__, betas)
            object.__setattr__(self, "beta1", b1)
            object.__setattr__(self, "beta2", b2)
        super().__post_init__()

    def state_width(self, dim: int) -> int:
        return 2 * dim

    def squares(self, dim: int) -> slice:
        return slice(dim, 2 * dim)  # the second moment


@_fused
class AdamW(Adam):
    """AdamW: Adam with decoupled weight decay (w ← w·(1 − lr·wd)) on the touched rows."""

    weight_decay: float = 1e-2
    kind = _lib.const("OptAdamW")


class UpdatedInBackward:
    """What a fused table's weight carries as ``_in_backward_optimizers`` where TorchRec's carries one:
    after ``apply_optimizer_in_backward`` (``from_torchrec``), and on sharded tables (as DMP marks its
    sharded tables with TorchRec's ``EmptyFusedOptimizer``). So ``torchrec.optim.in_backward_optimizer_filter``
    leaves the tables out of a dense optimizer, as in the TorchRec script: their collection's fused
    optimizer updates them in backward. Its ``step`` and ``zero_grad`` do nothing, and it has no param
    groups for a scheduler to move: the collection's rate is set through
    :class:`CollectionOptimizer` (or ``set_fused_optimizer``)."""

    def __init__(self) -> None:
        self.param_groups: list[dict[str, Any]] = []  # each its own: a caller's edit stays on this one
        self.state: dict[Any, Any] = {}

    def step(self, closure: Any = None) -> Any:
        """Nothing to do (the collection updated the rows in backward); returns ``closure()`` if given."""
        return closure() if closure is not None else None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing to clear: fused tables get no gradient."""

    def state_dict(self) -> dict[str, Any]:
        """No state (the collection keeps its optimizer state in its own state dict)."""
        return {"state": {}, "param_groups": []}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing to load."""


def mark_updated_in_backward(weights: Any) -> None:
    """Give each of ``weights`` (fused tables' parameters) the ``_in_backward_optimizers`` mark."""
    for w in weights:
        w._in_backward_optimizers = [UpdatedInBackward()]


def check_replacement(current: FusedOptimizer | None, new: Any) -> None:
    """Refuse ``new`` as the replacement of a collection's fused optimizer ``current`` unless both are
    fused optimizers of one kind (the rows' state layout depends on it; hyper-parameters may change)."""
    if not isinstance(new, FusedOptimizer) or new.kind == 0:
        raise InvalidInputError(f"set_fused_optimizer: expected a recgo fused optimizer, got {type(new).__name__}")
    if current is None or type(new).kind != type(current).kind:
        raise InvalidInputError("set_fused_optimizer: the optimizer kind cannot change after construction "
                                f"(it is {type(current).__name__ if current else 'none: dense gradients'})")


# -- optimizers named the torch way ---------------------------------------------------------------------

# FBGEMM's defaults, which TorchRec's DistributedModelParallel gives a table whose optimizer kwargs
# leave a value out (it passes them to FBGEMM as they are): the same model then trains the same.
_FBGEMM_DEFAULTS = {"lr": 0.01, "eps": 1e-8, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.0}
# torch / torchrec optimizer class name → the fused optimizer that computes the same update.
_TORCH_NAMES: dict[str, type[FusedOptimizer]] = {"SGD": SGD, "Adagrad": Adagrad, "RowWiseAdagrad": RowWiseAdagrad,
                                                 "Adam": Adam, "AdamW": AdamW}


def _betas(name: str, betas: Any) -> tuple[Any, Any]:
    """torch's ``betas`` pair as (beta1, beta2), or InvalidInputError naming optimizer ``name``."""
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise InvalidInputError(f"optimizer {name}: betas must be a pair (beta1, beta2), got {betas!r}")
    return betas[0], betas[1]


def from_torch(optimizer_class: type, kwargs: dict[str, Any] | None = None,
               class_defaults: bool = False) -> FusedOptimizer:
    """The fused optimizer for a torch optimizer class and its keyword arguments, as
    ``apply_optimizer_in_backward`` names them: ``torch.optim`` / ``torchrec.optim``'s ``SGD``,
    ``Adagrad``, ``Adam``, ``AdamW`` and TorchRec's ``RowWiseAdagrad``. ``lr`` (or ``learning_rate``),
    ``eps``, ``weight_decay`` and ``betas`` (or ``beta1``/``beta2``) carry over; a value left out is
    FBGEMM's default, as under TorchRec's DistributedModelParallel (``eps`` 1e-8, ``lr`` 0.01), or with
    ``class_defaults`` the optimizer class's own (what an unsharded TorchRec module runs: torch's
    ``SGD`` has ``lr`` 1e-3, ``Adagrad`` ``eps`` 1e-10).

    Raises:
        InvalidInputError: another optimizer class, an option recgo's update does not have (momentum,
            amsgrad, lr_decay, ...) at a value other than its neutral one, or an unknown option.
    """
    name = getattr(optimizer_class, "__name__", repr(optimizer_class))
    module = getattr(optimizer_class, "__module__", "")
    cls = _TORCH_NAMES.get(name) if module.startswith(("torch.optim", "torchrec.optim")) else None
    if cls is None:
        raise InvalidInputError(f"optimizer {module}.{name} has no fused counterpart in recgo; use one of "
                                f"{sorted(_TORCH_NAMES)} from torch.optim or torchrec.optim")
    args = dict(kwargs or {})
    if "betas" in args:
        args["beta1"], args["beta2"] = _betas(name, args.pop("betas"))
    if "decoupled_weight_decay" in args and issubclass(cls, Adam):  # torch's Adam(decoupled_weight_decay=True) is AdamW
        decoupled = args.pop("decoupled_weight_decay")
        if decoupled not in (True, False):
            raise InvalidInputError(f"optimizer {name}: decoupled_weight_decay must be True or False, got {decoupled!r}")
        if cls is AdamW and not decoupled:
            raise InvalidInputError(f"optimizer {name}: AdamW with decoupled_weight_decay=False is Adam: use Adam")
        cls = AdamW if decoupled else cls
    _torch_spellings(name, cls, args)
    takes = {"lr", "weight_decay"} | ({"eps"} if cls is not SGD else set()) | (
        {"beta1", "beta2"} if issubclass(cls, Adam) else set())
    unknown = sorted(set(args) - takes)
    if unknown:
        raise InvalidInputError(f"optimizer {name}: options {unknown} are not taken by recgo's fused {cls.__name__} "
                                f"(it takes {sorted(takes)})")
    args = {k: _number(v) for k, v in args.items()}  # torch.optim takes a tensor lr
    _check_numbers(f"optimizer {name}", args)
    defaults = dict(_FBGEMM_DEFAULTS)
    if cls is AdamW:
        defaults["weight_decay"] = AdamW.weight_decay  # torch's AdamW default, as FBGEMM has no AdamW
    if class_defaults:
        defaults.update(_class_defaults(optimizer_class))
    values = {k: float(args.get(k, defaults[k])) for k in takes}
    return cls(**values)


def _class_defaults(optimizer_class: type) -> dict[str, float]:
    """The numeric defaults of ``lr``, ``eps``, ``weight_decay`` and ``betas`` in the optimizer class's
    signature (those it leaves required, or gives no number, are left out)."""
    try:
        params = inspect.signature(optimizer_class.__init__).parameters  # type: ignore[misc]
    except (TypeError, ValueError):
        return {}
    out: dict[str, float] = {}
    for k in ("lr", "eps", "weight_decay", "betas"):
        d = params[k].default if k in params else None
        if k == "betas" and isinstance(d, (tuple, list)) and len(d) == 2:
            out["beta1"], out["beta2"] = float(d[0]), float(d[1])
        elif isinstance(d, (int, float, torch.Tensor)) and not isinstance(d, bool) and k != "betas":
            out[k] = float(d)
    return out


def in_backward(module: Any, class_defaults: bool = False, warn: bool = False) -> FusedOptimizer | None:
    """The fused optimizer that ``apply_optimizer_in_backward`` (torch's or TorchRec's) gave the
    parameters of ``module``, e.g. a TorchRec collection's table weights; None when none was given.
    ``class_defaults``: see :func:`from_torch`; without it (DMP's reading), SGD's, Adagrad's and
    row-wise Adagrad's ``weight_decay`` is 0, as FBGEMM's CPU kernels apply none. ``warn``: say when
    a weight decay is dropped, or (``class_defaults``) differs from torch's dense one, as Adam's
    update of the rows a batch leaves out does.

    A frozen parameter (``requires_grad=False``) without one is left out: torch cannot give a frozen
    parameter an in-backward optimizer, so a table frozen first has none, and the fused optimizer
    leaves it out anyway.

    Raises:
        InvalidInputError: some trainable parameters have one and others none, they have different
            ones, or one has several (recgo's collection updates every table with one optimizer).
    """
    found: dict[str, FusedOptimizer | None] = {}
    torch_adam = ""  # torch's Adam or AdamW ran on TorchRec's unsharded tables (torchrec.optim's stand-ins never did)
    for n, p in module.named_parameters():
        classes, params = getattr(p, "_optimizer_classes", None), getattr(p, "_optimizer_kwargs", None)
        if not classes:
            if not p.requires_grad:  # frozen before apply_optimizer_in_backward, which cannot take it
                continue
            found[n] = None
            continue
        if len(classes) != 1:
            raise InvalidInputError(f"{n}: apply_optimizer_in_backward gave it {len(classes)} optimizers; recgo "
                                    "updates a table with one")
        kwargs = (params or [{}])[0]
        if class_defaults:  # the module ran torch's optimizer itself: its scheduler may have moved it
            kwargs = _live_kwargs(kwargs, getattr(p, "_in_backward_optimizers", None))
        found[n] = from_torch(classes[0], kwargs, class_defaults)
        if classes[0] in (torch.optim.Adam, torch.optim.AdamW):
            torch_adam = classes[0].__name__
    decays = sorted({o.weight_decay for o in found.values() if o is not None and o.weight_decay})
    if not class_defaults and decays and all(type(o) in _FBGEMM_CPU for o in found.values()):
        # DMP runs these with FBGEMM's CPU kernels, which apply no weight decay (weight_decay_mode NONE)
        if warn:
            warn_fbgemm_decay("shard_model: the in-backward optimizer", "DistributedModelParallel", decays[0], 5)
        found = {n: replace(o, weight_decay=0.0) for n, o in found.items()}  # type: ignore[type-var]
    distinct = set(found.values())
    if class_defaults and decays and warn:
        warnings.warn(f"from_torchrec: the in-backward optimizer has weight_decay={decays[0]}. torch's optimizer "
                      "on TorchRec's unsharded tables (dense gradients) decays every row at every step; recgo's fused "
                      "one decays only the rows a batch touches, so rows absent from a batch keep their value and the "
                      "two drift apart", UserWarning, stacklevel=3)
    if class_defaults and torch_adam and warn:
        warnings.warn(f"from_torchrec: the in-backward optimizer is {torch_adam}. torch's on TorchRec's "
                      "unsharded tables (dense gradients) also steps the rows a batch leaves out (their moments go "
                      "on moving them); recgo's fused one updates only the rows a batch touches, as SparseAdam and "
                      "DMP's kernels do, so the two drift apart unless every row is in every batch",
                      UserWarning, stacklevel=3)
    if len(distinct) > 1:
        by = {repr(o): sorted(n for n, x in found.items() if x == o) for o in distinct}
        raise InvalidInputError("the tables of one collection have different in-backward optimizers "
                                f"({by}); recgo updates a collection's tables with one: put the tables with another "
                                "optimizer in a collection of their own")
    return distinct.pop() if distinct else None


def _live_kwargs(kwargs: dict[str, Any], optimizers: Any) -> dict[str, Any]:
    """``kwargs`` (``apply_optimizer_in_backward``'s) with the values the parameter's in-backward torch
    optimizer holds now (``param_groups[0]``: where a learning-rate scheduler moves them), so a model
    converted in the middle of training goes on at the rate it reached, not the one it started with."""
    if not optimizers:
        return kwargs
    group = getattr(optimizers[0], "param_groups", [{}])[0]
    out = dict(kwargs)
    for k in ("lr", "eps", "betas", "weight_decay"):
        if k in group:
            v = group[k]
            out[k] = tuple(_number(b) for b in v) if k == "betas" else _number(v)
    if "lr" in out:
        out.pop("learning_rate", None)
    return out


def _number(v: Any) -> Any:
    """A one-element real (not bool or complex) tensor hyper-parameter (torch's optimizers take a
    tensor ``lr``) as a float; anything else as it is."""
    if (isinstance(v, torch.Tensor) and v.numel() == 1 and v.dtype != torch.bool
            and not v.is_complex()):
        return float(v)
    return v


def _check_numbers(what: str, values: dict[str, Any]) -> None:
    """Refuse hyper-parameters that are not real numbers (ints are; bools, which ``float()`` would make
    1.0 or 0.0, strings and tensors are not), naming them.

    Raises:
        InvalidInputError: some of ``values`` are not real numbers.
    """
    bad = sorted(k for k, v in values.items() if isinstance(v, bool) or not isinstance(v, numbers.Real))
    if bad:
        raise InvalidInputError(f"{what}: hyper-parameters must be numbers, got {({k: values[k] for k in bad})}")


# The fused optimizers FBGEMM runs on CPU (the ones TorchRec's fused tables and DMP use there).
_FBGEMM_CPU = (SGD, Adagrad, RowWiseAdagrad)


def warn_fbgemm_decay(what: str, runner: str, decay: float, stacklevel: int) -> None:
    """Say that ``what``'s ``weight_decay`` is dropped: FBGEMM's CPU kernels apply none, whatever
    ``weight_decay`` and ``weight_decay_mode`` say, so TorchRec's ``runner`` trained the tables without
    it and recgo's go on the same way (else the models part from their first step)."""
    warnings.warn(f"{what} has weight_decay={decay}, which TorchRec's {runner} ignores on CPU (FBGEMM's kernels "
                  "apply none); the tables train as TorchRec's do, without it. For recgo's L2 decay on the rows "
                  "each batch touches, give a recgo optimizer with weight_decay", UserWarning, stacklevel=stacklevel)


def of_torchrec_fused(module: Any, warn: bool = False) -> FusedOptimizer | None:
    """The fused optimizer a TorchRec ``FusedEmbeddingBagCollection`` was built with
    (``optimizer_type``, ``optimizer_kwargs``) at the learning rate its ``fused_optimizer()`` holds now,
    or None for any other module. Its ``weight_decay`` is 0,
    as FBGEMM's CPU kernels apply none (``warn``: say so when the module was given one)."""
    if torchrec_class(module) not in ("FusedEmbeddingBagCollection", "FusedEmbeddingCollection"):
        return None
    kwargs = dict(module._optimizer_kwargs or {})
    kwargs.pop("weight_decay_mode", None)  # no effect on CPU either (see warn_fbgemm_decay)
    lr, built = _fused_lr(module), kwargs.get("lr", kwargs.get("learning_rate"))
    if lr is not None and not (isinstance(built, (int, float)) and _f32(built) == _f32(lr)):
        kwargs.pop("learning_rate", None)  # moved since it was built (FBGEMM holds it in float32)
        kwargs["lr"] = lr
    decay = kwargs.get("weight_decay", 0.0)
    kwargs["weight_decay"] = 0.0
    if decay and warn:
        warn_fbgemm_decay("from_torchrec: this FusedEmbeddingBagCollection", "FusedEmbeddingBagCollection", decay, 4)
    return from_torch(module._optimizer_type, kwargs)


def _f32(x: float) -> float:
    return float(torch.tensor(float(x), dtype=torch.float32))


def _fused_lr(module: Any) -> float | None:
    """The learning rate a TorchRec ``FusedEmbeddingBagCollection``'s ``fused_optimizer()`` holds now
    (a scheduler moves it there; TorchRec hands it to FBGEMM at the next ``zero_grad``/``step``), or
    None when it has none to read."""
    try:
        groups = module.fused_optimizer().param_groups
    except Exception:  # noqa: BLE001 - an older or partly built module: its constructor's rate stands
        return None
    lrs = {float(_number(g["lr"])) for g in groups if "lr" in g}
    if len(lrs) > 1:
        raise InvalidInputError(f"this FusedEmbeddingBagCollection's fused optimizer holds several learning rates "
                                f"{sorted(lrs)}; recgo updates a collection's tables at one: set one rate first")
    return lrs.pop() if lrs else None


def adopt(module: Any, kwargs: dict[str, Any], class_defaults: bool = False) -> None:
    """Set ``kwargs["optimizer"]`` for a collection built from ``module`` (sharded, or converted from
    TorchRec) unless the caller gave one: a recgo collection's own fused optimizer, a TorchRec
    ``FusedEmbeddingBagCollection``'s, or else what ``apply_optimizer_in_backward`` gave its tables
    (:func:`in_backward`; None: dense gradients for a torch optimizer). ``class_defaults`` (an
    unsharded TorchRec module converted in place, which ran the torch optimizer itself): options
    left out of ``apply_optimizer_in_backward`` take the optimizer class's defaults, not FBGEMM's.

    Raises:
        InvalidInputError: a given optimizer differs from the one the module's tables were given.
    """
    own = getattr(module, "fused_optimizer", None)
    if isinstance(own, FusedOptimizer):  # a recgo collection's own
        kwargs.setdefault("optimizer", own)
        return
    # TorchRec's collections, or a recgo one without a fused optimizer
    given = kwargs.get("optimizer")
    say = given is None  # the caller's optimizer is used: no word on the decay the source drops
    own = of_torchrec_fused(module, warn=say) or in_backward(module, class_defaults, warn=say)
    if "optimizer" not in kwargs:
        kwargs["optimizer"] = own
    elif own is not None and (not isinstance(given, FusedOptimizer)
                              or replace(given, weight_decay=own.weight_decay) != own):
        raise InvalidInputError(f"optimizer={kwargs['optimizer']!r} differs from {own!r}, which the tables were "
                                "given (apply_optimizer_in_backward or the fused collection's own); give one of them")


# -- the torch.optim face, for learning-rate schedulers -------------------------------------------------


from ._collection_optimizer import CollectionOptimizer, fused_collections  # noqa: E402  (re-exported here)
from ._fused_update import set_grad_scaler  # noqa: E402,F401  (the GradScaler of the fused updates)
