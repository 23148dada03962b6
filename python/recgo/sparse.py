"""recgo's sparse batch types, shaped like TorchRec's.

:class:`KeyedJaggedTensor` holds feature names ``keys`` (F), int64 ``values`` (all IDs, feature-major),
``lengths`` (F·B; entry f·B+b is sample b of feature f) and optional float32 per-ID ``weights``.
:class:`KeyedTensor` is the pooled output: one dense ``[B, ΣD]`` tensor with each feature's slice in
key order. Both convert to and from ``torchrec.sparse.jagged_tensor`` types.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from .errors import InvalidInputError
from .tensors import check_tensor

_INTS = (torch.int64, torch.int32)


class KeyedJaggedTensor:
    """A batch of jagged sparse features: keys, values, lengths (F·B) and optional weights."""

    def __init__(
        self,
        keys: Sequence[str],
        values: torch.Tensor,
        lengths: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
        offsets: torch.Tensor | None = None,
    ) -> None:
        self._keys = [str(k) for k in keys]
        if len(set(self._keys)) != len(self._keys):
            raise InvalidInputError(f"keys: duplicate feature names in {self._keys}")
        self._values = check_tensor(values, "values", _INTS, ndim=1, convert_to=torch.int64)
        if lengths is None:
            if offsets is None:
                raise InvalidInputError("KeyedJaggedTensor needs lengths or offsets")
            offsets = check_tensor(offsets, "offsets", _INTS, ndim=1, convert_to=torch.int64)
            lengths = offsets[1:] - offsets[:-1]
        self._lengths = check_tensor(lengths, "lengths", _INTS, ndim=1, convert_to=torch.int64)
        self._weights = None
        if weights is not None:
            self._weights = check_tensor(
                weights, "weights", (torch.float32, torch.float64, torch.float16, torch.bfloat16),
                ndim=1, convert_to=torch.float32,
            )
            if self._weights.numel() != self._values.numel():
                raise InvalidInputError(
                    f"weights: {self._weights.numel()} weights for {self._values.numel()} values"
                )
        nkeys = len(self._keys)
        if nkeys == 0:
            if self._lengths.numel() != 0:
                raise InvalidInputError("lengths: non-empty but there are no keys")
        elif self._lengths.numel() % nkeys != 0:
            raise InvalidInputError(
                f"lengths: {self._lengths.numel()} entries is not a multiple of the {nkeys} keys (need F·B)"
            )

    @staticmethod
    def from_lengths_sync(
        keys: Sequence[str], values: torch.Tensor, lengths: torch.Tensor, weights: torch.Tensor | None = None
    ) -> "KeyedJaggedTensor":
        """TorchRec-style constructor alias."""
        return KeyedJaggedTensor(keys, values, lengths, weights)

    @staticmethod
    def from_jagged_dict(
        features: dict[str, tuple[torch.Tensor, torch.Tensor]]
        | dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    ) -> "KeyedJaggedTensor":
        """Build from ``{name: (values, lengths[, weights])}``; every feature must have the same batch."""
        keys = list(features)
        vals, lens, wts = [], [], []
        for k in keys:
            entry = features[k]
            vals.append(entry[0])
            lens.append(entry[1])
            if len(entry) > 2:
                wts.append(entry[2])  # type: ignore[misc]
        batches = {int(x.numel()) for x in lens}
        if len(batches) > 1:
            raise InvalidInputError(f"features have different batch sizes: {sorted(batches)}")
        if wts and len(wts) != len(keys):
            raise InvalidInputError("weights given for some features but not all")
        return KeyedJaggedTensor(
            keys, torch.cat(vals) if vals else torch.empty(0, dtype=torch.int64),
            torch.cat(lens) if lens else torch.empty(0, dtype=torch.int64),
            torch.cat(wts) if wts else None,
        )

    @staticmethod
    def from_torchrec(kjt: Any) -> "KeyedJaggedTensor":
        """Convert a ``torchrec.sparse.jagged_tensor.KeyedJaggedTensor`` (no copy of the IDs)."""
        if getattr(kjt, "variable_stride_per_key", lambda: False)():
            raise InvalidInputError("variable batch size per key is not supported")
        return KeyedJaggedTensor(kjt.keys(), kjt.values(), kjt.lengths(), kjt.weights_or_none())

    def to_torchrec(self) -> Any:
        """Return the same batch as a ``torchrec`` KeyedJaggedTensor."""
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TorchrecKJT

        return TorchrecKJT(keys=self._keys, values=self._values, lengths=self._lengths, weights=self._weights)

    def keys(self) -> list[str]:
        """Feature names, in order."""
        return list(self._keys)

    def values(self) -> torch.Tensor:
        """All IDs, feature-major (int64)."""
        return self._values

    def lengths(self) -> torch.Tensor:
        """Bag lengths, F·B entries (int64)."""
        return self._lengths

    def offsets(self) -> torch.Tensor:
        """Exclusive prefix sums of lengths, F·B+1 entries."""
        out = torch.zeros(self._lengths.numel() + 1, dtype=torch.int64)
        torch.cumsum(self._lengths, 0, out=out[1:])
        return out

    def weights(self) -> torch.Tensor:
        """Per-ID weights; raises if the batch has none."""
        if self._weights is None:
            raise InvalidInputError("this KeyedJaggedTensor has no weights")
        return self._weights

    def weights_or_none(self) -> torch.Tensor | None:
        """Per-ID weights or None."""
        return self._weights

    def stride(self) -> int:
        """Batch size B."""
        return self._lengths.numel() // len(self._keys) if self._keys else 0

    def length_per_key(self) -> list[int]:
        """Number of IDs of each feature."""
        b = self.stride()
        return self._lengths.view(len(self._keys), b).sum(1).tolist() if self._keys else []

    def to_dict(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """``{name: (values, lengths)}`` views per feature."""
        b = self.stride()
        out, start = {}, 0
        for i, (k, n) in enumerate(zip(self._keys, self.length_per_key())):
            out[k] = (self._values[start:start + n], self._lengths[i * b:(i + 1) * b])
            start += n
        return out

    def __repr__(self) -> str:
        return f"KeyedJaggedTensor(keys={self._keys}, batch={self.stride()}, values={self._values.numel()})"


def as_kjt(features: Any) -> KeyedJaggedTensor:
    """Accept recgo's or TorchRec's KeyedJaggedTensor and return recgo's."""
    if isinstance(features, KeyedJaggedTensor):
        return features
    if type(features).__name__ == "KeyedJaggedTensor" and hasattr(features, "weights_or_none"):
        return KeyedJaggedTensor.from_torchrec(features)
    raise InvalidInputError(
        f"features: expected a recgo or torchrec KeyedJaggedTensor, got {type(features).__name__}"
    )


class KeyedTensor:
    """Pooled embeddings: a ``[B, ΣD]`` tensor with one column slice per key, in key order."""

    def __init__(self, keys: Sequence[str], length_per_key: Sequence[int], values: torch.Tensor) -> None:
        self._keys = list(keys)
        self._length_per_key = [int(x) for x in length_per_key]
        self._values = values

    def keys(self) -> list[str]:
        """Feature names, in column order."""
        return list(self._keys)

    def values(self) -> torch.Tensor:
        """The dense ``[B, ΣD]`` tensor."""
        return self._values

    def length_per_key(self) -> list[int]:
        """Embedding width of each key."""
        return list(self._length_per_key)

    def offset_per_key(self) -> list[int]:
        """Column offsets, len(keys)+1 entries."""
        out = [0]
        for n in self._length_per_key:
            out.append(out[-1] + n)
        return out

    def to_dict(self) -> dict[str, torch.Tensor]:
        """``{key: [B, D_key]}`` column views."""
        offs = self.offset_per_key()
        return {k: self._values[:, offs[i]:offs[i + 1]] for i, k in enumerate(self._keys)}

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.to_dict()[key]

    def to_torchrec(self) -> Any:
        """The same result as a ``torchrec.sparse.jagged_tensor.KeyedTensor``."""
        from torchrec.sparse.jagged_tensor import KeyedTensor as TorchrecKT

        return TorchrecKT(keys=self._keys, length_per_key=self._length_per_key, values=self._values)

    def __repr__(self) -> str:
        return f"KeyedTensor(keys={self._keys}, shape={tuple(self._values.shape)})"
