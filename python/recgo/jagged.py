"""JaggedTensor: one feature's batch of variable-length rows, shaped like TorchRec's.

``values`` holds the rows of all samples back to back (``[N]`` IDs or weights, or ``[N, D]`` embeddings);
``lengths`` (``[B]``) says how many rows each sample has, ``offsets`` (``[B+1]``) where each starts. Either
may be given; the other is computed on first use. ``to_padded(L)`` gives the ``[B, L, D]`` view with a
``key_padding_mask`` that ``nn.MultiheadAttention`` and ``nn.TransformerEncoder`` take directly.
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

import torch

from ._memory import physical_memory
from .errors import CapacityError, InvalidInputError
from .tensors import integer, check_lengths, got
from ._strings import jagged_str, readable, where

_INTS = (torch.int64, torch.int32)


def _int_tensor(t: Any, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise InvalidInputError(f"{what}: expected a torch.Tensor, got {got(t)}")
    if t.dtype not in _INTS or t.dim() != 1:
        raise InvalidInputError(f"{what}: expected a 1-D int64/int32 tensor, got {t.dtype} with shape {tuple(t.shape)}")
    return t.to(torch.int64)


def traced() -> bool:
    """Whether ``torch.export`` or ``torch.compile`` is tracing the caller (its tensors then have no
    values to read; the checks on them are asserted by the traced program at run time)."""
    return torch.compiler.is_compiling()


def require(cond: Any, message: str) -> None:
    """Traced: ``cond``, a comparison of counts read from data, asserted by the program at run time. Such
    a count is an unbacked int, which Python cannot branch on but ``torch._check`` declares (no message:
    a message callable breaks strict ``torch.export``). Where ``torch.compile`` broke the graph to read
    the count, it is known: then ``message`` is raised as eagerly."""
    from torch.fx.experimental.symbolic_shapes import guard_or_true  # imported only when tracing

    if not guard_or_true(cond):  # (an unknown one is taken as true here, and checked by the program)
        raise InvalidInputError(message)
    torch._check(cond)


def ensure(ok: torch.Tensor, message: str) -> None:
    """Traced: the 0-dim bool tensor ``ok`` holds, asserted by the program at run time twice: read as a
    count for :func:`require` (where ``torch.compile`` broke the graph to read it, ``message`` is raised
    as eagerly), and as a tensor assert in the graph (``torch._assert_async``, with ``message``), since
    strict ``torch.export`` drops a ``torch._check`` that pins a count to a constant (``u0 == 0``
    becomes a substitution, and the program checked nothing). On CUDA the latter is a device assert."""
    require(ok.to(torch.int64).item() == 1, message)
    torch._assert_async(ok, message)


def assert_none(bad: torch.Tensor, message: str) -> None:
    """Traced: no entry of ``bad`` is set (see :func:`ensure`)."""
    ensure(bad.logical_not().all(), message)


def assert_lengths(lengths: torch.Tensor, n: Any) -> None:
    """Traced :func:`recgo.tensors.check_lengths` and sum check: entries within ``0..n`` adding up to
    ``n`` rows (see :func:`ensure`; the sum is also declared to the shape system by :func:`require`)."""
    assert_none((lengths < 0) | (lengths > n), f"lengths: an entry is negative or more than the {n} rows of values")
    total = f"lengths do not sum to the {n} rows of values"
    require(lengths.sum().item() == n, total)
    torch._assert_async(lengths.sum() == n, total)


def check_offsets(o: torch.Tensor, n: Any, message: str) -> None:
    """Non-empty offsets (not on the meta device) rise from 0 to ``n``, never falling: checked eagerly,
    asserted by the program when traced (see :func:`ensure`); ``message`` if not."""
    if traced():
        ensure((o[0] == 0) & (o[-1] == n) & (o[1:] >= o[:-1]).all(), message)
    elif int(o[0]) != 0 or int(o[-1]) != n or bool((o[1:] < o[:-1]).any()):
        raise InvalidInputError(message)


def check_same(a: torch.Tensor, b: torch.Tensor, message: str) -> None:
    """Tensors of one shape hold the same values: checked eagerly, asserted by the program when traced."""
    if traced():
        assert_none(a != b, message)
    elif not torch.equal(a, b):
        raise InvalidInputError(message)


def tensors_bytes(*tensors: torch.Tensor | None) -> int:
    """The bytes of the given tensors' elements (None counts nothing)."""
    return sum(t.element_size() * t.numel() for t in tensors if t is not None)


def record_streams(stream: Any, *tensors: torch.Tensor | None) -> None:
    """``Tensor.record_stream(stream)`` for each of the tensors on a device that has streams (TorchRec's
    ``record_stream`` of its batch types, which its pipelines call); CPU tensors have none to record."""
    for t in tensors:
        if t is not None and t.device.type not in ("cpu", "meta"):
            t.record_stream(stream)


def copy_fields(what: str, fields: Sequence[tuple[str, torch.Tensor | None, torch.Tensor | None]],
                non_blocking: bool) -> None:
    """The in-place ``copy_`` of TorchRec's batch types: every ``(name, mine, source)`` pair is copied
    into ``mine``. Unlike TorchRec's (which skips a field either side lacks and leaves broadcasting to
    ``Tensor.copy_``), a field one side has and the other lacks, or a shape that differs, raises first,
    before anything is copied: a buffer half overwritten, or keeping the last batch's weights, would be
    silently wrong."""
    for name, mine, source in fields:
        if (mine is None) != (source is None):
            has = "this one" if source is None else "the source"
            raise InvalidInputError(f"{what}.copy_: only {has} has {name}; both need the same fields")
        if mine is not None and source is not None and mine.shape != source.shape:
            raise InvalidInputError(f"{what}.copy_: {name} has shape {tuple(mine.shape)} here but "
                                    f"{tuple(source.shape)} in the source (copy_ fills a buffer of the same shape)")
    for _, mine, source in fields:
        if mine is not None and source is not None:
            mine.copy_(source, non_blocking=non_blocking)


def clear_storages(*tensors: torch.Tensor | None) -> int:
    """TorchRec's ``clear_storage``: free the tensors' memory now (their storage resized to 0 bytes)
    and return the bytes of their elements. The tensors, and everything viewing their storage, are
    empty afterwards."""
    size = tensors_bytes(*tensors)
    if not all(t is None or t.untyped_storage().resizable() for t in tensors):
        raise InvalidInputError("clear_storage: this batch's memory belongs to recgo's pipeline (or another owner), "
                                "not to torch: it is freed when the batch is dropped")
    for t in tensors:
        if t is not None:
            t.untyped_storage().resize_(0)
    return size


class JaggedTensor:
    """Rows of variable length per sample: ``values`` (``[N, ...]``), ``lengths`` (``[B]``) or ``offsets``
    (``[B+1]``), optional per-row ``weights`` (``[N]``). Argument order matches TorchRec's."""

    def __init__(self, values: torch.Tensor, weights: torch.Tensor | None = None,
                 lengths: torch.Tensor | None = None, offsets: torch.Tensor | None = None) -> None:
        if not isinstance(values, torch.Tensor) or values.dim() == 0:
            raise InvalidInputError("values: expected a tensor with at least one dimension, got "
                                    + ("a 0-d tensor" if isinstance(values, torch.Tensor) else got(values)))
        if lengths is None and offsets is None:
            raise InvalidInputError("JaggedTensor needs lengths or offsets")
        self._values = values
        self._lengths = None if lengths is None else _int_tensor(lengths, "lengths")
        self._offsets = None if offsets is None else _int_tensor(offsets, "offsets")
        n = values.shape[0]
        # a tensor on the meta device (TorchRec's JaggedTensor takes them) has a shape but no values to
        # check; traced (torch.export, torch.compile) the checks that read values become run-time asserts,
        # as TorchRec's traced JaggedTensor builds (Python cannot branch on the values there)
        if self._lengths is not None and not self._lengths.is_meta:
            if traced():
                assert_lengths(self._lengths, n)
            else:
                check_lengths(self._lengths, n)
                if int(self._lengths.sum()) != n:
                    raise InvalidInputError(f"lengths sum to {int(self._lengths.sum())} but values has {n} rows")
        if self._offsets is not None and not self._offsets.is_meta:
            rise = f"offsets must rise monotonically from 0 to the {n} rows of values"
            if self._offsets.numel() == 0:
                raise InvalidInputError(rise)
            check_offsets(self._offsets, n, rise)
        if self._lengths is not None and self._offsets is not None:
            o, lens = self._offsets, self._lengths
            if o.numel() != lens.numel() + 1:
                raise InvalidInputError("lengths and offsets disagree")
            if not (o.is_meta or lens.is_meta):
                check_same(o[1:] - o[:-1], lens, "lengths and offsets disagree")
        if weights is not None and (not isinstance(weights, torch.Tensor) or weights.shape[:1] != values.shape[:1]):
            raise InvalidInputError("weights: need one weight per row of values")
        self._weights = weights

    # -- construction ----------------------------------------------------------------------------

    @staticmethod
    def empty(is_weighted: bool = False, device: Any = None, values_dtype: torch.dtype | None = None,
              weights_dtype: torch.dtype | None = None, lengths_dtype: torch.dtype = torch.int64) -> "JaggedTensor":
        """A JaggedTensor with no samples (TorchRec's signature and dtypes: values and weights of torch's
        default dtype unless given; lengths are int64, as always here)."""
        return JaggedTensor._unchecked(  # nothing to check (and on meta nothing could be read)
            torch.empty(0, dtype=values_dtype, device=device),
            torch.empty(0, dtype=weights_dtype, device=device) if is_weighted else None,
            torch.empty(0, dtype=torch.int64, device=device))

    @staticmethod
    def empty_like(jt: "JaggedTensor", device: Any = None) -> "JaggedTensor":
        """TorchRec's ``empty_like``: with no ``device``, a JaggedTensor with no samples and ``jt``'s dtypes
        and device; with one, a buffer of ``jt``'s shapes on ``device`` (values and weights uninitialised,
        lengths and offsets copied so that it is a valid batch) for a later :meth:`copy_`."""
        if device is None:
            return JaggedTensor.empty(jt.weights_or_none() is not None, jt.device(), jt.values().dtype,
                                      None if jt.weights_or_none() is None else jt.weights().dtype)
        out = JaggedTensor.__new__(JaggedTensor)
        blank = (lambda t: None if t is None else torch.empty_like(t, device=device))
        same = (lambda t: None if t is None else t.to(device, copy=True))
        out._values, out._weights = blank(jt._values), blank(jt._weights)
        out._lengths, out._offsets = same(jt._lengths), same(jt._offsets)
        return out

    def copy_(self, jt: "JaggedTensor", non_blocking: bool = False) -> "JaggedTensor":
        """TorchRec's ``copy_``: ``jt``'s values, weights, lengths and offsets copied into this one's
        tensors in place (a buffer of the same shapes, e.g. from :meth:`empty_like`); returns ``self``."""
        if not isinstance(jt, JaggedTensor):
            jt = JaggedTensor.from_torchrec(jt)
        # lengths and offsets are computed from each other on demand: both sides get this one's.
        offsets = (None, None) if self._offsets is None else (self._offsets, jt.offsets())
        copy_fields("JaggedTensor", [("values", self._values, jt._values), ("weights", self._weights, jt._weights),
                                     ("lengths", self.lengths(), jt.lengths()), ("offsets", *offsets)],
                    non_blocking)
        return self

    @classmethod
    def _unchecked(cls, values: torch.Tensor, weights: torch.Tensor | None, lengths: torch.Tensor) -> "JaggedTensor":
        """Views of a KeyedJaggedTensor's feature, whose lengths were validated already (no checks)."""
        jt = cls.__new__(cls)
        jt._values, jt._weights, jt._lengths, jt._offsets = values, weights, lengths, None
        return jt

    @staticmethod
    def from_dense(values: list[torch.Tensor], weights: list[torch.Tensor] | None = None) -> "JaggedTensor":
        """One tensor per sample (rows along dim 0) → JaggedTensor."""
        lengths = torch.tensor([v.shape[0] for v in values], dtype=torch.int64)
        vals = torch.cat(values) if values else torch.empty(0)
        return JaggedTensor(vals, torch.cat(weights) if weights is not None else None, lengths=lengths)

    @staticmethod
    def from_dense_lengths(values: torch.Tensor, lengths: torch.Tensor,
                           weights: torch.Tensor | None = None) -> "JaggedTensor":
        """The first ``lengths[b]`` entries of each row ``values[b]`` of a ``[B, L, ...]`` tensor."""
        lengths = _int_tensor(lengths, "lengths")
        mask = torch.arange(values.shape[1], device=values.device).expand(values.shape[0], -1) < \
            lengths.to(values.device).unsqueeze(1)
        return JaggedTensor(values[mask], None if weights is None else weights[mask], lengths=lengths)

    @staticmethod
    def from_torchrec(jt: Any) -> "JaggedTensor":
        """Convert a ``torchrec.JaggedTensor`` (no copy)."""
        return JaggedTensor(jt.values(), jt.weights_or_none(), lengths=jt.lengths())

    def to_torchrec(self) -> Any:
        """The same rows as a ``torchrec.JaggedTensor``."""
        from torchrec.sparse.jagged_tensor import JaggedTensor as TorchrecJT

        return TorchrecJT(values=self._values, weights=self._weights, lengths=self.lengths(), offsets=self.offsets())

    # -- accessors -------------------------------------------------------------------------------

    def values(self) -> torch.Tensor:
        """All rows, sample after sample."""
        return self._values

    def weights(self) -> torch.Tensor:
        """Per-row weights; raises if there are none."""
        if self._weights is None:
            raise InvalidInputError("this JaggedTensor has no weights")
        return self._weights

    def weights_or_none(self) -> torch.Tensor | None:
        """Per-row weights or None."""
        return self._weights

    def lengths(self) -> torch.Tensor:
        """Rows per sample (``[B]`` int64)."""
        if self._lengths is None:
            assert self._offsets is not None
            self._lengths = self._offsets[1:] - self._offsets[:-1]
        return self._lengths

    def lengths_or_none(self) -> torch.Tensor | None:
        """Lengths if they were given or computed, else None (TorchRec's accessor)."""
        return self._lengths

    def offsets(self) -> torch.Tensor:
        """Start of each sample's rows (``[B+1]`` int64, first 0, last N)."""
        if self._offsets is None:
            lengths = self.lengths()
            out = torch.zeros(lengths.numel() + 1, dtype=torch.int64, device=lengths.device)
            torch.cumsum(lengths, 0, out=out[1:])
            self._offsets = out
        return self._offsets

    def offsets_or_none(self) -> torch.Tensor | None:
        """Offsets if they were given or computed, else None (TorchRec's accessor)."""
        return self._offsets

    def stride(self) -> int:
        """Batch size B."""
        return int(self.lengths().numel())

    def device(self) -> torch.device:
        """The values' device (TorchRec's accessor)."""
        return self._values.device

    def to(self, device: Any, non_blocking: bool = False) -> "JaggedTensor":
        """A copy on ``device`` (values, weights, lengths and offsets), as TorchRec's ``to``."""
        jt = JaggedTensor.__new__(JaggedTensor)
        move = (lambda t: None if t is None else t.to(device, non_blocking=non_blocking))
        jt._values, jt._weights, jt._lengths, jt._offsets = (move(self._values), move(self._weights),
                                                             move(self._lengths), move(self._offsets))
        return jt

    def size_in_bytes(self) -> int:
        """Bytes held by the values, weights, lengths and offsets (TorchRec's ``size_in_bytes``)."""
        return tensors_bytes(self._values, self._weights, self._lengths, self._offsets)

    def record_stream(self, stream: Any) -> None:
        """Mark the tensors used on ``stream`` (TorchRec's; see :func:`record_streams`)."""
        record_streams(stream, self._values, self._weights, self._lengths, self._offsets)

    def to_dense(self) -> list[torch.Tensor]:
        """One tensor (view) per sample."""
        return list(torch.split(self._values, self.lengths().tolist()))

    def to_dense_weights(self) -> list[torch.Tensor] | None:
        """One weight tensor per sample, or None."""
        return None if self._weights is None else list(torch.split(self._weights, self.lengths().tolist()))

    # -- padded views ----------------------------------------------------------------------------

    def _slots(self, length: int, keep: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(slot of each row of values in the flat ``[B·L]`` padded view, or ``B·L`` for a row that is
        cut off; whether each row is cut off; mask ``[B, L]`` True where a slot is padding)."""
        if keep not in ("first", "last"):
            raise InvalidInputError(f"keep must be 'first' or 'last', got {keep!r}")
        length = integer("length", length)
        if length < 0:
            raise InvalidInputError(f"length must be a non-negative int, got {length!r}")
        b, row = self.lengths().numel(), self._values[:1].numel() or 1
        need = (b * length + 1) * row * self._values.element_size() + b * length  # the values' slots and the mask
        have = physical_memory() if self._values.device.type == "cpu" else None
        # (int64 overflow, torch's allocator; traced, the sizes may be symbolic and the program allocates)
        if not traced() and (b * length >= 2**62 or (have is not None and need > have)):
            room = f"this machine's {have:,}" if have is not None else "int64 indices hold"
            raise CapacityError(f"to_padded: {b} samples × length {length} take {need:,} bytes, more than {room}; "
                                "pad to a shorter length")
        # Built where the values are (lengths may be elsewhere: a meta collection's output keeps the
        # batch's CPU lengths), so the scatter's indices and the mask live beside what they index.
        dev = self._values.device
        lengths = self.lengths().to(dev)
        starts = self.offsets()[:-1].to(dev)
        b = lengths.numel()
        kept = lengths.clamp(max=length)  # [B]
        pad = torch.arange(length, dtype=torch.int64, device=dev).unsqueeze(0) >= kept.unsqueeze(1)  # [B, L]
        sample = torch.repeat_interleave(torch.arange(b, dtype=torch.int64, device=dev), lengths,
                                         output_size=self._values.shape[0])  # [N]
        # keep="last": row j of a sample goes to slot j − (len − kept), so the newest events come last.
        pos = torch.arange(self._values.shape[0], dtype=torch.int64, device=dev) - starts[sample]
        if keep == "last":
            pos = pos - (lengths - kept)[sample]
        cut = (pos < 0) | (pos >= length)
        slot = torch.where(cut, torch.full((), b * length, dtype=torch.int64, device=dev), sample * length + pos)
        return slot, cut, pad

    def to_padded(self, length: int | None = None, keep: Literal["first", "last"] = "last",
                  padding_value: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        """``([B, L, ...] values, [B, L] bool key_padding_mask)``: each sample's first or last ``L`` rows
        (``L`` defaults to the longest sample), left-aligned, padding filled with ``padding_value`` and
        marked ``True`` in the mask (the convention of ``nn.MultiheadAttention``'s ``key_padding_mask``).
        Differentiable with respect to ``values``: every row lands in at most one slot, so the forward
        is one scatter of the rows into their slots and the backward one gather of the slots' gradients
        (no accumulation)."""
        if length is None:
            length = int(self.lengths().max()) if self.stride() else 0
        slot, cut, pad = self._slots(length, keep)
        out = _Pad.apply(self._values, slot, cut, pad.shape[0] * length, float(padding_value))
        return out.reshape(*pad.shape, *self._values.shape[1:]), pad

    def to_padded_dense(self, desired_length: int | None = None, padding_value: float = 0.0) -> torch.Tensor:
        """TorchRec's ``to_padded_dense``: the first ``desired_length`` rows of each sample, padded."""
        return self.to_padded(desired_length, keep="first", padding_value=padding_value)[0]

    def to_padded_dense_weights(self, desired_length: int | None = None,
                                padding_value: float = 0.0) -> torch.Tensor | None:
        """The weights padded like :meth:`to_padded_dense`, or None."""
        if self._weights is None:
            return None
        return JaggedTensor(self._weights, lengths=self.lengths()).to_padded_dense(desired_length, padding_value)

    def __str__(self) -> str:
        """TorchRec's text of the rows: every sample's values (and weights), as a list."""
        if not readable(self._values, self._weights, self.lengths()):
            return repr(self)
        return jagged_str(self._values, self._weights, self.offsets())

    def __repr__(self) -> str:
        weighted = ", weighted" if self._weights is not None else ""
        return (f"JaggedTensor(batch={self.stride()}, values={tuple(self._values.shape)}{weighted}"
                f"{where(self._values)})")


class _Pad(torch.autograd.Function):
    """Rows of ``values`` scattered to their slots of a ``[slots, ...]`` tensor filled with a padding
    value (``slot[n] == slots`` drops row ``n``); the backward gathers each row's slot gradient."""

    @staticmethod
    def forward(ctx: Any, values: torch.Tensor, slot: torch.Tensor, cut: torch.Tensor, slots: int,
                padding_value: float) -> torch.Tensor:
        out = values.new_full((slots + 1, *values.shape[1:]), padding_value)  # the last row takes cut rows
        out.index_copy_(0, slot, values)
        ctx.save_for_backward(slot, cut)
        ctx.slots = slots
        return out[:slots]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        slot, cut = ctx.saved_tensors
        g = grad.index_select(0, slot.clamp(max=max(ctx.slots - 1, 0))) if ctx.slots else grad.new_zeros(
            (slot.numel(), *grad.shape[1:]))
        g = g.masked_fill(cut.reshape(-1, *([1] * (g.dim() - 1))), 0)
        return g, None, None, None, None
