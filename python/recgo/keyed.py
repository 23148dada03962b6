"""recgo's pooled output, shaped like TorchRec's ``KeyedTensor``: one dense ``[B, ΣD]`` tensor with each
feature's slice in key order, with TorchRec's ``regroup``; it converts to and from
``torchrec.sparse.jagged_tensor.KeyedTensor`` without copying."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from .errors import InvalidInputError, NotFoundError
from .jagged import record_streams, tensors_bytes
from ._strings import keyed_str, readable, short_keys, where


def _sizes(length_per_key: Sequence[Any]) -> list[Any]:
    """The keys' widths as ints; a traced size (``torch.export`` with a dynamic dim) stays symbolic, as
    ``int()`` would fix it to the example's, and a ``torch.fx`` proxy's (whose shape is not known) stays
    a proxy, as in TorchRec's."""
    return [x if isinstance(x, (torch.SymInt, torch.fx.Proxy)) else int(x) for x in length_per_key]


def _block(values: torch.Tensor, key_dim: int, offs: Sequence[int], i: int) -> torch.Tensor:
    """Key ``i``'s block of ``values`` (a view): its slice ``offs[i]:offs[i + 1]`` along ``key_dim``."""
    return values.narrow(key_dim, offs[i], offs[i + 1] - offs[i])


class KeyedTensor:
    """Pooled embeddings: a ``[B, ΣD]`` tensor with one column slice per key, in key order."""

    def __init__(self, keys: Sequence[str], length_per_key: Sequence[int], values: torch.Tensor,
                 key_dim: int = 1, offset_per_key: Sequence[int] | None = None,
                 index_per_key: Mapping[str, int] | None = None) -> None:
        if key_dim not in (0, 1):
            raise InvalidInputError(f"key_dim {key_dim}: recgo's KeyedTensor keeps keys along dim 1 (pooled "
                                    "embeddings) or dim 0 (TorchRec's from_tensor_list(key_dim=0, cat_dim=0))")
        self._key_dim = int(key_dim)
        self._keys = list(keys)
        self._length_per_key = _sizes(length_per_key)
        if len(self._keys) != len(self._length_per_key):
            raise InvalidInputError(f"{len(self._keys)} keys but {len(self._length_per_key)} lengths")
        if any(n < 0 for n in self._length_per_key):  # negative ones could still sum to the width
            raise InvalidInputError(f"length_per_key {self._length_per_key}: a key's width cannot be negative")
        # pooled rows are [B, ΣD]; blocks along dim 0 (TorchRec's key_dim=0) may have any trailing shape;
        # no keys over no values is TorchRec's empty KeyedTensor (``KeyedTensor([], [], torch.Tensor())``)
        empty = not self._keys and isinstance(values, torch.Tensor) and values.numel() == 0 and values.dim() >= 1
        if not empty and (values.dim() != 2 if self._key_dim == 1 else values.dim() < 1):
            raise InvalidInputError(f"values of shape {tuple(values.shape)}: a KeyedTensor with key_dim="
                                    f"{self._key_dim} needs {'2-D values' if self._key_dim == 1 else 'values of 1 or more dims'}")
        if not empty and values.shape[self._key_dim] != sum(self._length_per_key):
            raise InvalidInputError(f"values of shape {tuple(values.shape)} do not hold the keys' "
                                    f"{sum(self._length_per_key)} {('rows', 'columns')[self._key_dim]}")
        self._values = values
        # TorchRec's precomputed layouts: checked, as a wrong one would misplace every key.
        if offset_per_key is not None and [int(x) for x in offset_per_key] != self.offset_per_key():
            raise InvalidInputError(f"offset_per_key {list(offset_per_key)} disagrees with length_per_key "
                                    f"{self._length_per_key} (offsets {self.offset_per_key()})")
        if index_per_key is not None and dict(index_per_key) != {k: i for i, k in enumerate(self._keys)}:
            raise InvalidInputError(f"index_per_key {dict(index_per_key)} disagrees with the keys {self._keys}")

    @classmethod
    def _over(cls, keys: Sequence[str], length_per_key: Sequence[int], values: Any, key_dim: int = 1) -> "KeyedTensor":
        """A KeyedTensor over ``values`` without checking them: a ``torch.fx`` proxy while tracing, whose
        shape is not known (the collection that made it checked the layout)."""
        kt = cls.__new__(cls)
        kt._keys, kt._length_per_key, kt._values = list(keys), _sizes(length_per_key), values
        kt._key_dim = int(key_dim)
        return kt

    @staticmethod
    def from_tensor_list(keys: Sequence[str], tensors: Sequence[torch.Tensor], key_dim: int = 1,
                         cat_dim: int = 1) -> "KeyedTensor":
        """Concatenate ``[B, D_k]`` tensors along dim 1 (TorchRec's ``from_tensor_list``), or with
        ``key_dim=0, cat_dim=0`` ``[N_k, D]`` tensors along dim 0, each key's rows a block."""
        if key_dim not in (0, 1) or cat_dim != key_dim:
            raise InvalidInputError(f"from_tensor_list(key_dim={key_dim}, cat_dim={cat_dim}): recgo's KeyedTensor "
                                    "takes key_dim=cat_dim=1 (the default) or key_dim=cat_dim=0 (a key's block must "
                                    "lie along the dimension the tensors are concatenated on)")
        widths, values = [t.shape[key_dim] for t in tensors], torch.cat(list(tensors), cat_dim)
        if isinstance(values, torch.fx.Proxy):
            # torch.fx.symbolic_trace: the widths are proxies too, which the checks cannot compare
            if len(keys) != len(widths):
                raise InvalidInputError(f"from_tensor_list: {len(keys)} keys but {len(widths)} tensors")
            return KeyedTensor._over(keys, widths, values, key_dim)
        return KeyedTensor(keys, widths, values, key_dim)

    def keys(self) -> list[str]:
        """Feature names, in column order."""
        return list(self._keys)

    def values(self) -> torch.Tensor:
        """The dense ``[B, ΣD]`` tensor."""
        return self._values

    def key_dim(self) -> int:
        """The dimension the keys are laid along (1, or 0 as built by ``from_tensor_list(key_dim=0)``)."""
        return self._key_dim

    def device(self) -> torch.device:
        """The values' device."""
        return self._values.device

    def to(self, device: Any, non_blocking: bool = False) -> "KeyedTensor":
        """The same keys with the values on ``device`` (TorchRec's ``KeyedTensor.to``; autograd follows
        the copy, as for ``Tensor.to``): e.g. pooled embeddings for a dense part on a GPU."""
        if isinstance(self, torch.fx.Proxy):
            # a collection's output traced by torch.fx: the move is one graph call on it, and its result
            # is traced the same way, so TorchRec's regroup helpers still find a Proxy among their arguments
            from .modules._trace import _TracedKeyedTensor

            moved = self.tracer.create_proxy("call_method", "to", (self, device), {"non_blocking": non_blocking})
            kt = KeyedTensor._over(self._keys, self._length_per_key, moved.values(), self._key_dim)
            return _TracedKeyedTensor(moved.node, moved.tracer, kt)
        values = self._values.to(device, non_blocking=non_blocking)
        if isinstance(values, torch.fx.Proxy):  # torch.fx.symbolic_trace: nothing to check (see _over)
            return KeyedTensor._over(self._keys, self._length_per_key, values, self._key_dim)
        return KeyedTensor(self._keys, self._length_per_key, values, self._key_dim)

    def wait(self) -> "KeyedTensor":
        """This KeyedTensor itself. TorchRec's sharded collections (``DistributedModelParallel``) return
        a ``LazyAwaitable`` that scripts finish with ``.wait()`` (``model(kjt).wait()``); recgo's
        outputs are ready when returned, so the call is kept for those scripts."""
        return self

    def size_in_bytes(self) -> int:
        """Bytes held by the values (TorchRec's ``size_in_bytes``)."""
        return tensors_bytes(self._values)

    def record_stream(self, stream: Any) -> None:
        """Mark the values used on ``stream`` (TorchRec's; a no-op for CPU tensors)."""
        record_streams(stream, self._values)

    def length_per_key(self) -> list[int]:
        """Embedding width of each key."""
        return list(self._length_per_key)

    def offset_per_key(self) -> list[int]:
        """Column offsets, len(keys)+1 entries."""
        out = [0]
        for n in self._length_per_key:
            out.append(out[-1] + n)
        return out

    def _key_indices(self) -> dict[str, int]:
        """Each key's position (TorchRec's private accessor, which its ``KeyedTensor.regroup`` reads when
        a group repeats or leaves out a key); a repeated key maps to its last position, as in TorchRec."""
        return {k: i for i, k in enumerate(self._keys)}

    def to_dict(self) -> dict[str, torch.Tensor]:
        """``{key: [B, D_key]}`` column views."""
        offs = self.offset_per_key()  # (once: a repeated key keeps its last block, as __getitem__)
        return {k: _block(self._values, self._key_dim, offs, i) for i, k in enumerate(self._keys)}

    def __getitem__(self, key: str) -> torch.Tensor:
        # A repeated key resolves to its last block, as TorchRec's ``__getitem__`` (via ``_key_indices``),
        # ``to_dict`` and ``regroup`` resolve it.
        i = self._key_indices().get(key)
        if i is None:
            raise NotFoundError(f"key {key!r} is not in this KeyedTensor (keys: {self._keys})")
        offs = self.offset_per_key()
        return _block(self._values, self._key_dim, offs, i)

    @staticmethod
    def regroup(keyed_tensors: Sequence[Any], groups: Sequence[Sequence[str]]) -> list[torch.Tensor]:
        """One ``[B, Σ D]`` tensor per group, the groups' keys' columns in group order, taken from the
        last of ``keyed_tensors`` (recgo's or TorchRec's) that has the key, as TorchRec's ``regroup``
        takes it. Differentiable with respect to every input's values. Under ``torch.fx.symbolic_trace`` it
        is one call in the graph (as TorchRec's), so a module regrouping its KeyedTensor inputs traces."""
        return _regroup(keyed_tensors, groups)

    @staticmethod
    def regroup_as_dict(keyed_tensors: Sequence[Any], groups: Sequence[Sequence[str]],
                        keys: Sequence[str]) -> dict[str, torch.Tensor]:
        """:meth:`regroup` with each group's tensor under the matching name of ``keys``."""
        if len(groups) != len(keys):
            raise InvalidInputError(f"regroup_as_dict: {len(groups)} groups but {len(keys)} keys")
        out = _regroup(keyed_tensors, groups)
        return {k: out[i] for i, k in enumerate(keys)}  # indexed: a traced call's result is one Proxy

    def to_torchrec(self) -> Any:
        """The same result as a ``torchrec.sparse.jagged_tensor.KeyedTensor`` (the same values tensor)."""
        from torchrec.sparse.jagged_tensor import KeyedTensor as TorchrecKT

        return TorchrecKT(keys=self._keys, length_per_key=self._length_per_key, values=self._values,
                          key_dim=self._key_dim)

    def __str__(self) -> str:
        """TorchRec's text of the output: every key's block, row by row."""
        if not readable(self._values):
            return repr(self)
        return keyed_str(self._keys, [self[k] for k in self._keys])

    def __repr__(self) -> str:
        return f"KeyedTensor(keys={short_keys(self._keys)}, shape={tuple(self._values.shape)}{where(self._values)})"


class ReadyDict(dict):
    """A sharded ``EmbeddingCollection``'s output: ``{feature: JaggedTensor}``, a plain ``dict`` that
    also has :meth:`wait`, since TorchRec's sharded collection returns a ``LazyAwaitable`` of that dict
    which scripts finish with ``.wait()``."""

    def wait(self) -> "ReadyDict":
        """This dict itself (the lookups are done when the collection returns)."""
        return self


def _regroup(keyed_tensors: Sequence[Any], groups: Sequence[Sequence[str]]) -> list[torch.Tensor]:
    """:meth:`KeyedTensor.regroup` (a module-level function, which ``torch.fx.wrap`` can make a graph call)."""
    blocks: dict[str, torch.Tensor] = {}
    if not keyed_tensors:
        raise InvalidInputError("regroup: no KeyedTensors given")
    dims = {kt.key_dim() for kt in keyed_tensors}
    if len(dims) != 1:
        raise InvalidInputError(f"regroup: the KeyedTensors lay their keys along different dims {sorted(dims)}")
    dim = dims.pop()
    for kt in keyed_tensors:
        offs = kt.offset_per_key()
        offs = offs.tolist() if isinstance(offs, torch.Tensor) else offs
        for i, k in enumerate(kt.keys()):
            blocks[k] = _block(kt.values(), dim, offs, i)
    out = []
    for g in groups:
        missing = [k for k in g if k not in blocks]
        if missing:
            raise NotFoundError(f"regroup: keys {missing} are in none of the KeyedTensors")
        first = keyed_tensors[0].values()
        empty = (first.shape[0], 0) if dim == 1 else (0, *first.shape[1:])
        out.append(torch.cat([blocks[k] for k in g], dim) if g else first.new_zeros(empty))
    return out


torch.fx.wrap("_regroup")
