"""Argument checks shared by every module before a tensor crosses into Go.

Python checks dtype, device and shape and makes tensors contiguous; Go checks the values.
"""

from __future__ import annotations

import operator
from typing import Any, Iterable

import torch

from .errors import InvalidInputError


def integer(name: str, value: Any) -> int:
    """``value`` as an int: a Python, NumPy or one-element torch integer (a float such as 2.7, or a
    bool, raises rather than being truncated)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise InvalidInputError(f"{name} must be an integer, got {value!r} ({type(value).__name__})") from None


def int64(name: str, value: Any) -> int:
    """:func:`integer`, also refusing one outside int64, the engine's integers (Go's JSON reader refused
    ``2**63`` in its own wording)."""
    v = integer(name, value)
    if not -(2**63) <= v < 2**63:
        raise InvalidInputError(f"{name} must be an integer within int64 (below 2^63 in magnitude), got {v}")
    return v


def got(value: Any) -> str:
    """The type name an "expected ..., got" error gives; for a ``torch.fx`` Proxy (a batch type built from
    a traced module's inputs, which TorchRec's types take as they trace and recgo's, which check their
    tensors, cannot) also what to do instead."""
    name = type(value).__name__
    if isinstance(value, torch.fx.Proxy):
        return (f"{name} (torch.fx.symbolic_trace: recgo's batch types are built from real tensors; build "
                "the batch outside the traced module and pass it in, or trace with torch.export)")
    return name


def refuse_weight_grads(weights: torch.Tensor | None) -> None:
    """Raise when autograd would want gradients of the per-ID ``weights``, which recgo's lookups do not
    give (silently detaching them would leave the module producing them untrained)."""
    if weights is not None and weights.requires_grad and torch.is_grad_enabled():
        raise InvalidInputError("gradients with respect to per-ID weights are not supported; pass weights.detach()")


def check_tensor(
    t: object,
    name: str,
    dtypes: Iterable[torch.dtype],
    *,
    ndim: int | None = None,
    convert_to: torch.dtype | None = None,
    meta_ok: bool = False,
) -> torch.Tensor:
    """Return ``t`` as a contiguous CPU tensor after checking its type, dtype and rank.

    ``dtypes`` are accepted; with ``convert_to`` the result is cast to it (e.g. int32 lengths to
    int64). A tensor on another device raises (recgo's engine runs on CPU memory), except one on the
    meta device where ``meta_ok`` (a batch's shapes without data, as TorchRec's batch types take; the
    engine refuses it in :func:`ptr`); a non-contiguous tensor is copied.
    """
    if not isinstance(t, torch.Tensor):
        raise InvalidInputError(f"{name}: expected a torch.Tensor, got {got(t)}")
    allowed = tuple(dtypes)
    if t.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise InvalidInputError(f"{name}: dtype {str(t.dtype).replace('torch.', '')} is not supported (expected {names})")
    if t.device.type != "cpu" and not (meta_ok and t.is_meta):
        raise InvalidInputError(
            f"{name}: tensor is on {t.device}, but recgo's engine reads CPU memory; move it with .cpu()"
        )
    if ndim is not None and t.dim() != ndim:
        raise InvalidInputError(f"{name}: expected {ndim} dimension(s), got shape {tuple(t.shape)}")
    if convert_to is not None and t.dtype != convert_to:
        t = t.to(convert_to)
    return t.contiguous()


def ptr(t: torch.Tensor | None) -> int | None:
    """data_ptr of a tensor (None for None or an empty tensor), for c_void_p arguments. A tensor off the
    CPU raises: a batch on the meta device (which recgo's batch types hold, as TorchRec's do) has no
    memory for the engine to read."""
    if t is None or t.numel() == 0:
        return None
    if t.device.type != "cpu":
        raise InvalidInputError(f"a tensor on {t.device} was passed to recgo's engine, which reads CPU memory: "
                                "build the batch on the CPU (a meta-device batch has shapes but no values)")
    return t.data_ptr()


def check_lengths(lengths: torch.Tensor, total: int, what: str = "lengths") -> None:
    """Refuse a jagged tensor's ``lengths`` that do not fit its ``total`` values before they are summed:
    a negative entry, or one above ``total`` (their int64 sums could wrap around: ``[2^63−1, 2^63−1,
    3]`` summed to 1 and passed for one value); where a sum of entries up to ``total`` could still
    wrap, it is taken exactly."""
    if not lengths.numel():
        return
    lo, hi = torch.aminmax(lengths.to(torch.int64))
    if int(lo) < 0:
        raise InvalidInputError(f"{what}: negative entry")
    if int(hi) > total:
        raise InvalidInputError(f"{what}: an entry of {int(hi)} is more than the {total} values there are")
    if lengths.numel() * total >= 1 << 63:
        exact = sum(lengths.tolist())
        if exact != total:
            raise InvalidInputError(f"{what} sum to {exact} but there are {total} values")
