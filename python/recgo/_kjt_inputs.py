"""Checks and conversions of a :class:`recgo.KeyedJaggedTensor`'s constructor inputs (in
:mod:`recgo.sparse`): ID and length tensors, TorchRec's ``[F, B]`` lengths and per-rank batch sizes,
and the stride, each refused by name when it cannot be a batch of one batch size per key.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from .errors import InvalidInputError
from .tensors import check_tensor

INTS = (torch.int64, torch.int32)  # the ID and length dtypes taken (stored as int64)
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)  # the weight dtypes (stored as float32)
# where a refusal of TorchRec's variable batch points to
VBE_HINT = "; recgo's embedding collections take TorchRec's variable-batch KeyedJaggedTensor itself"


def is_empty(t: Any) -> bool:
    """Whether ``t`` is an empty CPU (or meta) tensor; False where its size is an unbacked int (a traced
    slice of data-dependent length), which is then taken as not known to be empty."""
    if not isinstance(t, torch.Tensor) or t.device.type not in ("cpu", "meta"):
        return False
    if not torch.compiler.is_compiling():
        return t.numel() == 0
    from torch.fx.experimental.symbolic_shapes import guard_or_false  # imported only when tracing

    return guard_or_false(t.numel() == 0)


def int64_tensor(t: Any, name: str) -> torch.Tensor:
    """A 1-D int64 CPU (or meta) tensor; an empty tensor of any dtype is accepted (TorchRec's
    ``torch.tensor([])``)."""
    if is_empty(t):
        return torch.empty(0, dtype=torch.int64, device=t.device)
    return check_tensor(t, name, INTS, ndim=1, convert_to=torch.int64, meta_ok=True)


def lengths_of(t: Any, nkeys: int) -> torch.Tensor:
    """The lengths as :func:`int64_tensor` gives them; a tensor of two or more dimensions laid out
    ``[F, B, ...]`` (one row per key, as TorchRec's inference batches carry them and its
    ``flatten_lengths`` and ``permute`` read them) is flattened, row-major, into the F·B entries.
    Another leading size (``[B, F]`` would read samples as features) is refused."""
    if isinstance(t, torch.Tensor) and t.dim() >= 2:
        if t.shape[0] != nkeys and t.numel():  # an empty one of any shape: no lengths, as int64_tensor takes it
            raise InvalidInputError(
                f"lengths: shape {tuple(t.shape)} is not [F, B] for the {nkeys} keys (give one row of lengths "
                "per key, or 1-D lengths of F·B entries, entry f·B+b sample b of feature f)")
        t = t.reshape(-1)
    return int64_tensor(t, "lengths")


def uniform_stride(per_key: Sequence[int], what: str) -> int:
    """The common batch size of ``per_key`` or an error naming the variable batch sizes."""
    if len(set(per_key)) > 1:
        raise InvalidInputError(
            f"{what}: variable batch size per feature ({list(per_key)}) is not supported; every feature "
            "of a recgo KeyedJaggedTensor has the same batch size (give the shorter features empty bags)")
    return int(per_key[0]) if per_key else 0


def stride_of_ranks(per_key_per_rank: Any, nkeys: int) -> int:
    """The batch size TorchRec's ``stride_per_key_per_rank`` describes when every key's per-rank sizes
    add up to the same (the rows then pair up as TorchRec's unsharded collections pair them), or an
    error naming the problem."""
    try:
        table = torch.as_tensor(per_key_per_rank, dtype=torch.int64)
    except (TypeError, ValueError, RuntimeError) as e:
        raise InvalidInputError(f"stride_per_key_per_rank: expected one list of per-rank batch sizes per key "
                                f"(all of one length), got {per_key_per_rank!r}") from e
    if table.dim() != 2 or table.shape[0] != nkeys:
        raise InvalidInputError(f"stride_per_key_per_rank: expected {nkeys} rows (one per key) of per-rank batch "
                                f"sizes, got shape {list(table.shape)}")
    return uniform_stride(table.sum(1).tolist(), "stride_per_key_per_rank")


def check_stride(given: int | None, actual: int) -> int:
    """``actual`` (the batch size the lengths give), after refusing a ``stride`` given that disagrees."""
    # a traced batch size (torch.export with a dynamic batch) is compared as it is: int() would fix it
    if given is not None and (given if isinstance(given, torch.SymInt) else int(given)) != actual:
        raise InvalidInputError(f"stride {given} disagrees with the lengths (batch size {actual})")
    return actual
