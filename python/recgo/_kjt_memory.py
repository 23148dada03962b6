"""The memory side of :class:`recgo.KeyedJaggedTensor` (TorchRec's ``to``, ``pin_memory``,
``record_stream``, ``size_in_bytes``, ``copy_`` and ``clear_storage``), kept apart from the batch's
layout and views in :mod:`recgo.sparse`."""

from __future__ import annotations

from typing import Any

import torch

from .errors import InvalidInputError
from .jagged import clear_storages, copy_fields, record_streams, tensors_bytes


def _as_kjt(features: Any) -> Any:
    from .sparse import as_kjt  # (sparse imports this module)

    return as_kjt(features)


class KJTMemory:
    """Where a batch's tensors live and how they are moved, copied and freed; mixed into
    :class:`recgo.KeyedJaggedTensor`, whose fields (``_keys``, ``_values``, ``_weights``, ``_lengths``,
    ``_offsets``, ``_stride`` and the per-key caches) it reads."""

    _keys: list[str]
    _values: torch.Tensor
    _weights: torch.Tensor | None
    _lengths: torch.Tensor
    _offsets: torch.Tensor | None
    _stride: int
    _length_per_key: list[int] | None
    _offset_per_key: list[int] | None
    _jt_dict: Any

    def to(self, device: Any, non_blocking: bool = False, dtype: torch.dtype | None = None) -> Any:
        """``self`` for the CPU (a copy there of a batch on the meta device has no values: that raises);
        the meta device gives the batch's shapes there (as TorchRec's, for models built on meta); other
        devices raise (recgo's engine reads CPU memory). ``dtype``, as in TorchRec's, casts the weights: a
        copy whose weights are rounded to ``dtype`` (held as float32, as recgo's weights always are;
        float32 or float64 leave them as they are)."""
        kind = torch.device(device).type
        if kind not in ("cpu", "meta") or (kind == "cpu" and self._values.is_meta):
            raise InvalidInputError(f"device {device}: recgo's KeyedJaggedTensor holds CPU tensors"
                                    + (" (this one is on the meta device: it has no values to copy)"
                                       if kind == "cpu" else ""))
        if kind == "meta" and not self._values.is_meta:
            meta = (lambda t: None if t is None else t.to("meta"))
            return type(self)(self._keys, meta(self._values), meta(self._weights), lengths=meta(self._lengths),
                              stride=self._stride, length_per_key=self.length_per_key()).to("meta", dtype=dtype)
        if dtype is None or self._weights is None or dtype in (torch.float32, torch.float64):
            return self
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise InvalidInputError(f"to(dtype={dtype}): weights are cast to a floating dtype")
        return type(self)(self._keys, self._values, self._weights.to(dtype), lengths=self._lengths,
                          stride=self._stride)

    def size_in_bytes(self) -> int:
        """Bytes held by the values, weights, lengths and offsets (TorchRec's ``size_in_bytes``)."""
        return tensors_bytes(self._values, self._weights, self._lengths, self._offsets)

    def record_stream(self, stream: Any) -> None:
        """Mark the tensors used on ``stream`` (TorchRec's, which its pipelines call; a no-op on CPU)."""
        record_streams(stream, self._values, self._weights, self._lengths, self._offsets)

    def pin_memory(self) -> Any:
        """TorchRec's ``pin_memory``: the batch in page-locked host memory when an accelerator is there
        (for asynchronous copies of it); ``self`` without one. recgo's engine reads host memory either way."""
        if not torch.cuda.is_available() or self._values.is_meta:
            return self
        pin = (lambda t: None if t is None else t.pin_memory())
        return type(self)(self._keys, pin(self._values), pin(self._weights), lengths=pin(self._lengths),
                          stride=self._stride)

    def copy_(self, kjt: Any, non_blocking: bool = False) -> Any:
        """TorchRec's ``copy_``: ``kjt``'s values, weights and lengths copied into this batch's tensors in
        place (a buffer of the same keys and shapes, e.g. from :meth:`empty_like`); returns ``self``."""
        kjt = _as_kjt(kjt)
        if kjt._keys != self._keys or kjt._stride != self._stride:
            raise InvalidInputError(f"KeyedJaggedTensor.copy_: the source has keys {kjt._keys} and batch size "
                                    f"{kjt._stride}, this one {self._keys} and {self._stride}")
        offsets = (None, None) if self._offsets is None else (self._offsets, kjt.offsets())
        copy_fields("KeyedJaggedTensor", [
            ("values", self._values, kjt._values), ("weights", self._weights, kjt._weights),
            ("lengths", self._lengths, kjt._lengths), ("offsets", *offsets)], non_blocking)
        self._length_per_key, self._offset_per_key = kjt._length_per_key, kjt._offset_per_key
        self._jt_dict = None
        return self

    def clear_storage(self) -> int:
        """TorchRec's ``clear_storage``: free the values', weights', lengths' and offsets' memory now and
        return its size in bytes. The batch (and every view of it) is empty afterwards: use it no more."""
        return clear_storages(self._values, self._weights, self._lengths, self._offsets)
