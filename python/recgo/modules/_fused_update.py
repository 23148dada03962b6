"""What an unsharded collection's fused update reads from the training loop at the moment it runs, in
the backward: the hyper-parameters its :class:`~recgo.modules.optim.CollectionOptimizer`'s param groups
hold then, and the ``torch.amp.GradScaler`` whose scale the gradient carries (:func:`set_grad_scaler`).

A torch optimizer reads its param groups and unscales its gradients in ``step()``, after the backward;
a fused update runs inside the backward, before the loop's ``step()``. Without this, a scheduler's rate
reached the tables one step late (at the next ``zero_grad()`` or ``step()``: the first backward of a
warm-up ran at the full rate), and a loss scaled by a ``GradScaler`` updated the rows with the scaled
gradient (``init_scale`` = 65536 times too large a step with SGD).

Both registries are weak (keyed by the collection that owns the tables): nothing here keeps a
collection or an optimizer alive, and copies of a collection start with neither.
"""

from __future__ import annotations

import sys
import warnings
import weakref
from typing import Any

import torch

from ..errors import InvalidInputError

#: table owner → the CollectionOptimizer driving it (whose ``_pull`` hands over pending changes)
_RATES: "weakref.WeakKeyDictionary[Any, weakref.ref[Any]]" = weakref.WeakKeyDictionary()
#: table owner → the GradScaler whose scale its fused gradients carry
_SCALERS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def follow(owner: Any, optimizer: Any) -> None:
    """Let ``optimizer`` (a CollectionOptimizer: the one built, or handing values over, last) hand its
    pending changes to ``owner`` at each of its fused backwards. One per owner: an optimizer the
    script replaced (a new one loaded from a checkpoint) must not hand over its stale schedule."""
    _RATES[owner] = weakref.ref(optimizer)


def set_grad_scaler(model: Any, scaler: Any) -> None:
    """Make the fused updates of ``model``'s recgo collections (a collection, or a model holding some)
    undo ``scaler``'s loss scaling: each fused backward divides its gradient by the scale
    ``scaler.scale(loss)`` applied, as ``scaler.step`` unscales a torch optimizer's gradients, and skips
    the update (rows, optimizer state and step unchanged) when the unscaled gradient is not finite,
    reporting the overflow to the scaler, so that its ``update()`` lowers the scale as for a skipped
    ``step``. Call it once, before training; ``scaler=None`` removes it.

    Without it a fused table steps on the scaled gradient, since its update runs inside
    ``scaler.scale(loss).backward()``, before ``scaler.step`` could unscale anything. The scale is read
    when the backward runs; a backward of a loss that was not scaled by ``scaler`` in that iteration
    would be divided all the same, so scale every loss that reaches the collections.

    Raises:
        InvalidInputError: ``model`` has no recgo collection with a fused optimizer, one of them is
            sharded (``recgo.distributed``; not supported: its ranks would have to agree on a skip), or
            ``scaler`` is not a ``torch.amp.GradScaler``.
    """
    from ._collection_optimizer import fused_collections
    from .embedding import EmbeddingBagCollection

    if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
        raise InvalidInputError(f"set_grad_scaler: expected a torch.amp.GradScaler or None, got {type(scaler).__name__}")
    found = fused_collections(model)
    if not found:
        raise InvalidInputError("set_grad_scaler: the model has no recgo collection with a fused optimizer (a "
                                "collection with optimizer=None gets .grad, which scaler.step unscales itself)")
    owners = [getattr(m, "_owner", m) for _, m in found]
    sharded = [name or type(m).__name__ for (name, m), o in zip(found, owners) if not isinstance(o, EmbeddingBagCollection)]
    if sharded:
        raise InvalidInputError(f"set_grad_scaler: {sharded} are sharded collections, whose fused updates cannot "
                                "unscale a GradScaler's gradients yet; train them without loss scaling (bfloat16 "
                                "autocast needs none)")
    for owner in owners:
        if scaler is None:
            _SCALERS.pop(owner, None)
        else:
            _SCALERS[owner] = scaler


#: owners warned by :func:`warn_unscaled` (once each)
_WARNED: "weakref.WeakSet[Any]" = weakref.WeakSet()


def warn_unscaled(owner: Any) -> None:
    """Warn once per collection when a fused forward kept for backward runs under float16 autocast
    without :func:`set_grad_scaler`: float16 training goes with a ``GradScaler``, whose scaled loss the
    fused update would otherwise apply as it is (bfloat16 needs no scaler: no warning)."""
    if owner in _SCALERS or owner in _WARNED or torch.compiler.is_compiling():
        return
    if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.float16:
        _WARNED.add(owner)
        warnings.warn("a recgo collection with a fused optimizer trains under float16 autocast: if the loss is "
                      "scaled by a torch.amp.GradScaler, call recgo.modules.optim.set_grad_scaler(model, scaler) "
                      "once, or the fused update steps on the scaled gradient (the scale times too far)",
                      UserWarning, stacklevel=_callers_level())


def _callers_level() -> int:
    """``warnings.warn``'s stacklevel, called from the function calling this, of the first frame outside
    recgo and torch (the model's call in the training script, however deep the forward went)."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] in ("recgo", "torch"):
        frame, level = frame.f_back, level + 1
    return level


def fused_gradient(owner: Any, grad: torch.Tensor) -> torch.Tensor | None:
    """The gradient ``owner``'s fused update is to apply, and its hyper-parameters made current: the
    pending changes of the CollectionOptimizers driving it are handed over, and ``grad`` is unscaled
    by its GradScaler, if it has one (None: not finite, skip the update)."""
    driver = _RATES.get(owner)
    optimizer = driver() if driver is not None else None
    if optimizer is not None:
        optimizer._pull(owner)
    scaler = _SCALERS.get(owner)
    scale = None if scaler is None or not scaler.is_enabled() else getattr(scaler, "_scale", None)
    if scale is None:  # none, disabled, or it has scaled nothing yet
        return grad
    inv = scale.double().reciprocal().float().to(grad.device)  # as GradScaler.unscale_ computes it
    grad = grad * inv
    finite = bool(torch.isfinite(grad).all())
    _report(scaler, owner, scale.device, finite)
    return grad if finite else None


def _report(scaler: Any, owner: Any, device: torch.device, finite: bool) -> None:
    """Count this backward's overflow check in ``scaler``'s next ``update()``, as the checks of the
    optimizers it stepped are (without an overflow entry it would keep raising the scale while the
    tables skipped their updates, and with fused tables alone ``update()`` found no check and raised)."""
    states = getattr(scaler, "_per_optimizer_states", None)
    if states is None:  # another torch's GradScaler: the skip stays, the scale is the dense part's
        return
    per_device = states[id(owner)]["found_inf_per_device"]
    found = torch.full((), 0.0 if finite else 1.0, dtype=torch.float32, device=device)
    per_device[device] = per_device[device] + found if device in per_device else found
