"""recgo's sparse batch types, shaped like TorchRec's.

:class:`KeyedJaggedTensor` holds feature names ``keys`` (F), int64 ``values`` (all IDs, feature-major),
``lengths`` (F·B; entry f·B+b is sample b of feature f) and optional float32 per-ID ``weights``. Its
constructor takes TorchRec's argument order ``(keys, values, weights, lengths, offsets, stride, ...)``
and it has TorchRec's accessors (``to_dict``/``__getitem__`` give :class:`recgo.JaggedTensor`\\ s,
``permute``, ``split``, ``concat``, ``length_per_key``, ``offset_per_key``, ...). Every feature has
the same batch size B: TorchRec's variable batch per feature (``stride_per_key_per_rank`` with
different strides, ``inverse_indices``) is refused (the collections take TorchRec's such KJT itself).
Keys are unique (TorchRec allows repeats, e.g. from ``permute`` with repeated indices; recgo refuses them).
Its tensors are on the CPU, or all shapes and no data on the meta device (as TorchRec's, for models built
there; nothing is read from them and recgo's engine refuses them).

:class:`KeyedTensor` (in :mod:`recgo.keyed`, re-exported here) is the pooled output. Both convert to
and from ``torchrec.sparse.jagged_tensor`` types without copying.
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping, Sequence

import torch

from .errors import InvalidInputError, NotFoundError
from ._tensordict import is_tensordict, tensordict_parts
from .jagged import JaggedTensor, assert_none, check_offsets, check_same
from ._kjt_memory import KJTMemory
from .tensors import check_tensor, check_lengths, got
from ._strings import keyed_jagged_str, readable, short_keys, where
from ._kjt_inputs import (FLOATS, INTS, VBE_HINT, check_stride, int64_tensor, is_empty, lengths_of,
                          stride_of_ranks, uniform_stride)

class KeyedJaggedTensor(KJTMemory):
    """A batch of jagged sparse features, TorchRec's ``KeyedJaggedTensor``.

    Args:
        keys: feature names (F, unique).
        values: all IDs, feature-major (int64 or int32; stored as int64).
        weights: optional per-ID weights (float; stored as float32).
        lengths: bag lengths, F·B entries (entry f·B+b is sample b of feature f); or ``[F, B]``
            (TorchRec's inference batches), flattened to those F·B.
        offsets: or their exclusive prefix sums, F·B+1 entries (both may be given; they must agree).
        stride: the batch size B (needed only when there are no keys; otherwise checked).
        stride_per_key_per_rank: TorchRec's variable-batch description; accepted only when every key
            has the same total batch size (then it is that B), refused otherwise.
        stride_per_key: the same, per key.
        length_per_key: IDs per key, if known (checked against ``lengths``).
        lengths_offset_per_key, offset_per_key, index_per_key: TorchRec's precomputed layouts, if
            known (checked against the keys and lengths, as ``length_per_key``).
        jt_dict: TorchRec's precomputed ``to_dict()`` cache: recomputed here on first use (ignored).
        inverse_indices: TorchRec's deduplicated variable-batch input: refused.

    recgo's first releases took ``lengths`` as the third positional argument; an integer tensor there
    (with neither ``lengths`` nor ``offsets``) is still read as lengths, with a ``FutureWarning``. Pass
    ``lengths=`` by keyword. With no keys and no values, lengths and offsets may be left out (TorchRec's
    ``KeyedJaggedTensor([], torch.Tensor())``).
    """

    def __init__(
        self,
        keys: Sequence[str],
        values: torch.Tensor,
        weights: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
        offsets: torch.Tensor | None = None,
        stride: int | None = None,
        stride_per_key_per_rank: Any = None,
        stride_per_key: Sequence[int] | None = None,
        length_per_key: Sequence[int] | None = None,
        lengths_offset_per_key: Sequence[int] | None = None,
        offset_per_key: Sequence[int] | None = None,
        index_per_key: Mapping[str, int] | None = None,
        jt_dict: Mapping[str, Any] | None = None,
        inverse_indices: Any = None,
    ) -> None:
        if (isinstance(weights, torch.Tensor) and not weights.is_floating_point() and offsets is None
                and (lengths is None or (isinstance(lengths, torch.Tensor) and lengths.is_floating_point()))):
            warnings.warn(
                "KeyedJaggedTensor(keys, values, lengths, weights) is recgo's old argument order; TorchRec's "
                "(and now recgo's) is (keys, values, weights, lengths, offsets): pass lengths= by keyword",
                FutureWarning, stacklevel=2)
            weights, lengths = lengths, weights
        if isinstance(keys, str) or not isinstance(keys, Sequence):
            raise InvalidInputError(f"keys: expected a list of feature names, got {got(keys)}")
        self._keys = [str(k) for k in keys]
        if len(set(self._keys)) != len(self._keys):
            dup = sorted({k for k in self._keys if self._keys.count(k) > 1})
            raise InvalidInputError(f"keys: duplicate feature names {dup} in {self._keys}")
        if inverse_indices is not None:
            raise InvalidInputError(
                "inverse_indices: TorchRec's deduplicated variable-batch input is not supported by recgo's "
                f"KeyedJaggedTensor; expand it to one bag per sample{VBE_HINT}")
        if is_empty(values):
            values = values.reshape(0).to(torch.int64)
        # meta tensors (shapes without data, as TorchRec's KJT takes them for models built on the meta
        # device) are held; nothing is read from them, and the engine refuses them (tensors.ptr)
        self._values = check_tensor(values, "values", INTS, ndim=1, convert_to=torch.int64, meta_ok=True)
        self._offsets: torch.Tensor | None = None
        if offsets is not None:
            self._offsets = int64_tensor(offsets, "offsets")
            o, n = self._offsets, self._values.numel()
            if o.numel() == 0 and n == 0 and lengths is None:
                self._offsets = torch.zeros(1, dtype=torch.int64, device=o.device)
                o = self._offsets
            # traced (torch.export, torch.compile) the offsets' values cannot be read: the checks become
            # run-time asserts of the traced program, as length_per_key's are
            rise = f"offsets must rise monotonically from 0 to the {n} values"
            if o.numel() == 0:
                raise InvalidInputError(rise)
            if not o.is_meta:
                check_offsets(o, n, rise)
            from_offsets = o[1:] - o[:-1]
            given = None if lengths is None else lengths_of(lengths, len(self._keys))
            if given is not None:
                if given.shape != from_offsets.shape:
                    raise InvalidInputError("lengths and offsets disagree")
                if not (o.is_meta or given.is_meta):
                    check_same(given, from_offsets, "lengths and offsets disagree")
            lengths = from_offsets
        elif lengths is None:
            if self._keys or self._values.numel():
                raise InvalidInputError("KeyedJaggedTensor needs lengths or offsets")
            lengths = torch.zeros(0, dtype=torch.int64)  # no keys, no values: TorchRec's empty batch
        self._lengths = lengths_of(lengths, len(self._keys))
        self._weights = None
        if weights is not None:
            if is_empty(weights):
                weights = weights.reshape(0).to(torch.float32)
            self._weights = check_tensor(weights, "weights", FLOATS, ndim=1, convert_to=torch.float32, meta_ok=True)
            if self._weights.numel() != self._values.numel():
                raise InvalidInputError(
                    f"weights: {self._weights.numel()} weights for {self._values.numel()} values"
                )
        nkeys = len(self._keys)
        if stride_per_key_per_rank is not None and nkeys:
            stride = check_stride(stride, stride_of_ranks(stride_per_key_per_rank, nkeys))
        if stride_per_key is not None:
            if len(stride_per_key) != nkeys:
                raise InvalidInputError(f"stride_per_key: {len(stride_per_key)} entries for {nkeys} keys")
            stride = check_stride(stride, uniform_stride(list(stride_per_key), "stride_per_key"))
        if nkeys == 0:
            if self._lengths.numel() != 0:
                raise InvalidInputError("lengths: non-empty but there are no keys")
            self._stride = int(stride or 0)
        else:
            if self._lengths.numel() % nkeys != 0:
                raise InvalidInputError(
                    f"lengths: {self._lengths.numel()} entries is not a multiple of the {nkeys} keys (need F·B)"
                )
            self._stride = check_stride(stride, self._lengths.numel() // nkeys)
        self._length_per_key: list[int] | None = None
        self._offset_per_key: list[int] | None = None
        self._jt_dict: dict[str, JaggedTensor] | None = None
        if self._lengths.is_meta and length_per_key is not None:
            # lengths without values to check against: the counts given (e.g. by to("meta") of a real
            # batch, as TorchRec's carries them) are the per-key sizes, if they fit the keys and values
            per = [int(x) for x in length_per_key]
            if len(per) != nkeys or any(n < 0 for n in per) or sum(per) != self._values.numel():
                raise InvalidInputError(f"length_per_key {per}: expected {nkeys} counts ≥ 0 adding up to the "
                                        f"{self._values.numel()} values")
            self._length_per_key = per
        for name, given, mine in (("length_per_key", length_per_key, self.length_per_key),
                                  ("offset_per_key", offset_per_key, self.offset_per_key),
                                  ("lengths_offset_per_key", lengths_offset_per_key, self.lengths_offset_per_key)):
            if given is not None and [int(x) for x in given] != mine():
                raise InvalidInputError(f"{name} {list(given)} disagrees with the keys and lengths ({mine()})")
        if index_per_key is not None and dict(index_per_key) != self.index_per_key():
            raise InvalidInputError(f"index_per_key {dict(index_per_key)} disagrees with the keys {self._keys}")

    # -- construction ----------------------------------------------------------------------------

    @staticmethod
    def from_offsets_sync(keys: Sequence[str], values: torch.Tensor, offsets: torch.Tensor,
                          weights: torch.Tensor | None = None, stride: int | None = None,
                          stride_per_key_per_rank: Any = None, inverse_indices: Any = None) -> "KeyedJaggedTensor":
        """Build from offsets (F·B+1 entries), as TorchRec's ``from_offsets_sync``."""
        return KeyedJaggedTensor(keys, values, weights, offsets=offsets, stride=stride,
                                 stride_per_key_per_rank=stride_per_key_per_rank,
                                 inverse_indices=inverse_indices).sync()

    @staticmethod
    def from_lengths_sync(keys: Sequence[str], values: torch.Tensor, lengths: torch.Tensor,
                          weights: torch.Tensor | None = None, stride: int | None = None,
                          stride_per_key_per_rank: Any = None, inverse_indices: Any = None) -> "KeyedJaggedTensor":
        """Build from lengths (F·B entries), as TorchRec's ``from_lengths_sync``."""
        return KeyedJaggedTensor(keys, values, weights, lengths=lengths, stride=stride,
                                 stride_per_key_per_rank=stride_per_key_per_rank,
                                 inverse_indices=inverse_indices).sync()

    @staticmethod
    def from_jt_dict(jt_dict: Mapping[str, Any], force_variable_stride: bool = False) -> "KeyedJaggedTensor":
        """Build from ``{name: JaggedTensor}`` (recgo's or TorchRec's), keys in dict order. Every feature
        must have the same batch size (TorchRec would build a variable-batch KJT; recgo refuses) and
        either all or none of them weights."""
        if force_variable_stride:
            raise InvalidInputError("from_jt_dict: force_variable_stride=True (variable batch size) is not supported")
        keys = list(jt_dict)
        jts = [jt_dict[k] for k in keys]
        for k, jt in zip(keys, jts):
            if not all(hasattr(jt, a) for a in ("values", "lengths", "weights_or_none")):
                raise InvalidInputError(f"from_jt_dict: {k!r} is a {type(jt).__name__}, expected a JaggedTensor")
        stride = uniform_stride([int(jt.lengths().numel()) for jt in jts], "from_jt_dict")
        weights = [jt.weights_or_none() for jt in jts]
        if any(w is None for w in weights) and not all(w is None for w in weights):
            missing = [k for k, w in zip(keys, weights) if w is None]
            raise InvalidInputError(f"from_jt_dict: features {missing} have no weights but others do")
        return KeyedJaggedTensor(
            keys, torch.cat([jt.values() for jt in jts]) if jts else torch.empty(0, dtype=torch.int64),
            torch.cat(weights) if jts and weights[0] is not None else None,  # type: ignore[arg-type]
            lengths=torch.cat([jt.lengths() for jt in jts]) if jts else torch.empty(0, dtype=torch.int64),
            stride=stride).sync()

    @staticmethod
    def from_jagged_dict(
        features: Mapping[str, tuple[torch.Tensor, torch.Tensor]]
        | Mapping[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    ) -> "KeyedJaggedTensor":
        """Build from ``{name: (values, lengths[, weights])}``; every feature must have the same batch."""
        keys = list(features)
        vals, lens, wts = [], [], []
        for k in keys:
            entry = features[k]
            if isinstance(entry, torch.Tensor) or not isinstance(entry, (tuple, list)) or len(entry) not in (2, 3):
                raise InvalidInputError(
                    f"from_jagged_dict: {k!r} must be a (values, lengths) or (values, lengths, weights) tuple")
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
            keys, torch.cat(vals) if vals else torch.empty(0, dtype=torch.int64), torch.cat(wts) if wts else None,
            lengths=torch.cat(lens) if lens else torch.empty(0, dtype=torch.int64),
            stride=batches.pop() if batches else 0,
        )

    @staticmethod
    def concat(kjt_list: Sequence["KeyedJaggedTensor"]) -> "KeyedJaggedTensor":
        """Concatenate along the keys (TorchRec's ``concat``): same batch size, all weighted or none."""
        if len(kjt_list) == 0:
            raise InvalidInputError("concat: can't concat an empty list of KeyedJaggedTensors")
        kjts = [as_kjt(k) for k in kjt_list]
        weighted = kjts[0].weights_or_none() is not None
        if any((k.weights_or_none() is not None) != weighted for k in kjts):
            raise InvalidInputError("concat: can't merge weighted and unweighted KeyedJaggedTensors")
        strides = [k.stride() for k in kjts if k.keys()]
        stride = uniform_stride(strides, "concat") if strides else kjts[0].stride()
        return KeyedJaggedTensor(
            [key for k in kjts for key in k.keys()], torch.cat([k.values() for k in kjts]),
            torch.cat([k.weights() for k in kjts]) if weighted else None,
            lengths=torch.cat([k.lengths() for k in kjts]), stride=stride)

    @staticmethod
    def empty(is_weighted: bool = False, device: Any = None, values_dtype: torch.dtype | None = None,
              weights_dtype: torch.dtype | None = None, lengths_dtype: torch.dtype = torch.int64) -> "KeyedJaggedTensor":
        """A KeyedJaggedTensor with no keys (stride 0)."""
        if device is not None and torch.device(device).type not in ("cpu", "meta"):
            raise InvalidInputError(f"device {device}: recgo's KeyedJaggedTensor holds CPU (or meta) tensors")
        return KeyedJaggedTensor([], torch.empty(0, dtype=torch.int64, device=device),
                                 torch.empty(0, device=device) if is_weighted else None,
                                 lengths=torch.empty(0, dtype=torch.int64, device=device), stride=0)

    @staticmethod
    def empty_like(kjt: "KeyedJaggedTensor", device: Any = None) -> "KeyedJaggedTensor":
        """TorchRec's ``empty_like``: with no ``device``, no keys, the same batch size and weightedness as
        ``kjt``; with ``device`` (the CPU: recgo's batches live there), a buffer of ``kjt``'s keys and
        shapes (values and weights uninitialised, lengths copied) for a later :meth:`copy_`; the meta
        device gives those shapes there (the per-key counts kept), as TorchRec's does."""
        kjt = as_kjt(kjt)
        if device is not None:
            if torch.device(device).type == "meta":
                return kjt.to("meta")
            if torch.device(device).type != "cpu":
                raise InvalidInputError(f"device {device}: recgo's KeyedJaggedTensor holds CPU (or meta) tensors")
            return KeyedJaggedTensor(kjt._keys, torch.empty_like(kjt._values),
                                     None if kjt._weights is None else torch.empty_like(kjt._weights),
                                     lengths=kjt._lengths.clone(), stride=kjt._stride)
        return KeyedJaggedTensor([], torch.empty(0, dtype=torch.int64),
                                 torch.empty(0) if kjt.weights_or_none() is not None else None,
                                 lengths=torch.empty(0, dtype=torch.int64), stride=kjt.stride())

    @staticmethod
    def from_torchrec(kjt: Any) -> "KeyedJaggedTensor":
        """Convert a ``torchrec.sparse.jagged_tensor.KeyedJaggedTensor`` (no copy of int64 IDs)."""
        if kjt.inverse_indices_or_none() is not None:
            raise InvalidInputError("this TorchRec KeyedJaggedTensor has inverse_indices (deduplicated variable batch): "
                                    f"recgo's KeyedJaggedTensor has one batch size{VBE_HINT}")
        stride = None
        if getattr(kjt, "variable_stride_per_key", lambda: False)():
            stride = stride_of_ranks(kjt.stride_per_key_per_rank(), len(kjt.keys()))
        return KeyedJaggedTensor(kjt.keys(), kjt.values(), kjt.weights_or_none(), lengths=kjt.lengths(),
                                 stride=stride if stride is not None else kjt.stride())

    def to_torchrec(self) -> Any:
        """Return the same batch as a ``torchrec`` KeyedJaggedTensor (no copy)."""
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TorchrecKJT

        return TorchrecKJT(keys=self._keys, values=self._values, weights=self._weights, lengths=self._lengths,
                           stride=self._stride)

    def sync(self) -> "KeyedJaggedTensor":
        """Compute ``length_per_key`` and ``offset_per_key`` now (TorchRec's ``sync``); returns self."""
        self.offset_per_key()
        return self

    def unsync(self) -> "KeyedJaggedTensor":
        """Drop the cached per-key lengths and offsets; returns self."""
        self._length_per_key = self._offset_per_key = None
        return self

    # -- accessors -------------------------------------------------------------------------------

    def keys(self) -> list[str]:
        """Feature names, in order."""
        return list(self._keys)

    def values(self) -> torch.Tensor:
        """All IDs, feature-major (int64)."""
        return self._values

    def lengths(self) -> torch.Tensor:
        """Bag lengths, F·B entries (int64)."""
        return self._lengths

    def lengths_or_none(self) -> torch.Tensor:
        """The lengths (always present in recgo's KeyedJaggedTensor)."""
        return self._lengths

    def offsets(self) -> torch.Tensor:
        """Exclusive prefix sums of lengths, F·B+1 entries."""
        if self._offsets is None:
            out = torch.zeros(self._lengths.numel() + 1, dtype=torch.int64, device=self._lengths.device)
            torch.cumsum(self._lengths, 0, out=out[1:])
            self._offsets = out
        return self._offsets

    def offsets_or_none(self) -> torch.Tensor | None:
        """Offsets if given or computed already, else None."""
        return self._offsets

    def weights(self) -> torch.Tensor:
        """Per-ID weights; raises if the batch has none."""
        if self._weights is None:
            raise InvalidInputError("this KeyedJaggedTensor has no weights")
        return self._weights

    def weights_or_none(self) -> torch.Tensor | None:
        """Per-ID weights or None."""
        return self._weights

    def device(self) -> torch.device:
        """The values' device: the CPU (where recgo's engine reads them), or meta for a batch of shapes."""
        return self._values.device

    def flatten_lengths(self) -> "KeyedJaggedTensor":
        """TorchRec's ``flatten_lengths``: the same batch with 1-D lengths, which recgo's always are
        (``self``)."""
        return self

    def stride(self) -> int:
        """Batch size B."""
        return self._stride

    def stride_per_key(self) -> list[int]:
        """B for every key (the batch size is the same for all)."""
        return [self._stride] * len(self._keys)

    def stride_per_key_per_rank(self) -> list[list[int]]:
        """``[]``, as TorchRec's gives for a batch without variable strides per key and rank."""
        return []

    def variable_stride_per_key(self) -> bool:
        """Always False: every feature has the same batch size."""
        return False

    def inverse_indices_or_none(self) -> None:
        """Always None (no deduplicated variable-batch input)."""
        return None

    def inverse_indices(self) -> Any:
        """Raises: recgo's batches are never deduplicated variable-batch inputs (TorchRec raises too when
        a KJT has none)."""
        raise InvalidInputError("this KeyedJaggedTensor has no inverse_indices (every feature has the same "
                                "batch size; see inverse_indices_or_none)")

    def index_per_key(self) -> dict[str, int]:
        """``{key: position}``."""
        return {k: i for i, k in enumerate(self._keys)}

    # TorchRec's private fields that its own modules read off a batch they are given (its
    # FeatureProcessedEmbeddingBagCollection, PositionWeightedProcessor and ManagedCollisionCollection
    # rebuild their output KJT from them), so those modules take recgo's batch too
    _index_per_key: dict[str, int] | None = None
    _stride_per_key_per_rank = None  # every feature has the same batch size

    def _key_indices(self) -> dict[str, int]:
        """``{key: position}`` under TorchRec's private name (computed once)."""
        if self._index_per_key is None:
            self._index_per_key = self.index_per_key()
        return self._index_per_key

    def length_per_key(self) -> list[int]:
        """Number of IDs of each feature (computed once; checks that lengths are ≥ 0 and sum to the values)."""
        if self._length_per_key is None:
            if not self._keys:
                self._length_per_key = []
            elif self._lengths.is_meta:
                # no lengths to read: TorchRec's stand-in counts on the meta device (the values split
                # evenly over the keys, the remainder to the first), so per-key views have shapes
                n, f = self._values.numel(), len(self._keys)
                self._length_per_key = [n // f + (n % f if i == 0 else 0) for i in range(f)]
            elif torch.compiler.is_compiling():
                # torch.export / torch.compile: the per-key counts are unbacked ints (read from the
                # lengths' data), which cannot be compared in Python; they are declared sizes and
                # checked at run time by the traced program (TorchRec's pt2_checks_all_is_size).
                # (no message callables: strict torch.export lifts one as a graph input and fails)
                # Each length is asserted, not only each key's sum: [2, -1] sums to a valid 1 and
                # read the key's values wrongly (the eager check_lengths refuses it).
                assert_none(self._lengths < 0, "lengths: negative entry")
                per = self._lengths.view(len(self._keys), self._stride).sum(1).tolist()
                for n in per:
                    torch._check(n >= 0)
                torch._check(sum(per) == self._values.numel())
                self._length_per_key = per
            else:
                check_lengths(self._lengths, self._values.numel())
                per = self._lengths.view(len(self._keys), self._stride).sum(1).tolist()
                if sum(per) != self._values.numel():
                    raise InvalidInputError(f"lengths sum to {sum(per)} but there are {self._values.numel()} values")
                self._length_per_key = per
        return list(self._length_per_key)

    def length_per_key_or_none(self) -> list[int] | None:
        """``length_per_key`` if computed already, else None."""
        return None if self._length_per_key is None else list(self._length_per_key)

    def offset_per_key(self) -> list[int]:
        """Start of each key's values and the end: F+1 entries, first 0, last len(values)."""
        if self._offset_per_key is None:
            out = [0]
            for n in self.length_per_key():
                out.append(out[-1] + n)
            self._offset_per_key = out
        return list(self._offset_per_key)

    def offset_per_key_or_none(self) -> list[int] | None:
        """``offset_per_key`` if computed already, else None."""
        return None if self._offset_per_key is None else list(self._offset_per_key)

    def lengths_offset_per_key(self) -> list[int]:
        """Start of each key's lengths: F+1 entries, multiples of B."""
        return [i * self._stride for i in range(len(self._keys) + 1)]

    # -- per-key views ---------------------------------------------------------------------------

    def _groups(self, bounds: Sequence[int]) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """The values (and weights) of the consecutive key groups ``bounds[j]:bounds[j+1]`` (key positions,
        rising). Eagerly slices by ``offset_per_key``; traced (``torch.export``/``torch.compile``), where the
        per-key counts are unbacked ints that slicing would guard on, ``torch.split`` by them
        (as TorchRec's ``to_dict`` does)."""
        if not torch.compiler.is_compiling():
            offs = self.offset_per_key()
            cuts = [(offs[bounds[j]], offs[bounds[j + 1]]) for j in range(len(bounds) - 1)]
            vals = [self._values[v0:v1] for v0, v1 in cuts]
            return vals, None if self._weights is None else [self._weights[v0:v1] for v0, v1 in cuts]
        per = self.length_per_key()
        sizes = [per[:bounds[0]]] + [per[bounds[j]:bounds[j + 1]] for j in range(len(bounds) - 1)] + [per[bounds[-1]:]]
        splits = [sum(group) if group else 0 for group in sizes]

        def part(t: torch.Tensor) -> list[torch.Tensor]:
            return list(torch.split(t, splits))[1:-1]

        return part(self._values), None if self._weights is None else part(self._weights)

    def _jagged(self, i: int) -> JaggedTensor:
        b = self._stride
        vals, wts = self._groups([i, i + 1])
        return JaggedTensor._unchecked(vals[0], None if wts is None else wts[0], self._lengths[i * b:(i + 1) * b])

    def __getitem__(self, key: str) -> JaggedTensor:
        """The :class:`recgo.JaggedTensor` of feature ``key`` (views, no copy)."""
        try:
            i = self._keys.index(key)
        except ValueError:
            raise NotFoundError(f"feature {key!r} is not in this KeyedJaggedTensor (keys: {self._keys})") from None
        return self._jagged(i)

    def to_dict(self, compute_offsets: bool = True) -> dict[str, JaggedTensor]:
        """``{name: JaggedTensor}`` views per feature, in key order (cached, like TorchRec's). With
        ``compute_offsets`` (TorchRec's argument and default) each one's offsets are computed now
        (``offsets_or_none()`` gives them); without, on first use of ``offsets()``."""
        if self._jt_dict is None:
            self._jt_dict = {k: self._jagged(i) for i, k in enumerate(self._keys)}
        if compute_offsets:
            for jt in self._jt_dict.values():
                jt.offsets()
        return dict(self._jt_dict)

    def split(self, segments: Sequence[int]) -> list["KeyedJaggedTensor"]:
        """Consecutive groups of ``segments[i]`` keys each, as KeyedJaggedTensors sharing memory with
        this one (TorchRec's ``split``; a 0 segment gives a KJT with no keys and the same stride)."""
        segs = [int(s) for s in segments]
        if any(s < 0 for s in segs) or sum(segs) > len(self._keys):
            raise InvalidInputError(f"split: segments {segs} do not fit the {len(self._keys)} keys")
        b = self._stride
        bounds = [0]
        for s in segs:
            bounds.append(bounds[-1] + s)
        vals, wts = self._groups(bounds)
        out = []
        for j, (start, end) in enumerate(zip(bounds, bounds[1:])):
            out.append(KeyedJaggedTensor(
                self._keys[start:end], vals[j], None if wts is None else wts[j],
                lengths=self._lengths[start * b:end * b], stride=b))
        return out

    def permute(self, indices: Sequence[int], indices_tensor: torch.Tensor | None = None) -> "KeyedJaggedTensor":
        """The keys in the order ``indices`` (a key may be left out; repeats are refused since recgo's
        keys are unique), values, weights and lengths moved with them (TorchRec's ``permute``)."""
        idx = [int(i) for i in (indices_tensor.tolist() if indices_tensor is not None else indices)]
        f = len(self._keys)
        if any(i < -f or i >= f for i in idx):
            raise InvalidInputError(f"permute: indices {idx} out of range for {f} keys")
        idx = [i % f for i in idx] if f else idx
        return self._take(idx, [self._keys[i] for i in idx])

    def _take(self, idx: Sequence[int], keys: Sequence[str]) -> "KeyedJaggedTensor":
        """The batch of keys ``idx`` (valid positions, in that order, a position possibly repeated)
        under the names ``keys`` (unique): values, weights and lengths moved with them."""
        b = self._stride
        vals: Any
        wts: Any
        if torch.compiler.is_compiling():
            vals, wts = self._groups(list(range(len(self._keys) + 1)))
        else:  # eager: only the keys taken are sliced (a collection takes a few of many)
            offs = self.offset_per_key()
            vals = {i: self._values[offs[i]:offs[i + 1]] for i in set(idx)}
            wts = None if self._weights is None else {i: self._weights[offs[i]:offs[i + 1]] for i in set(idx)}

        def cat(parts: Any, t: torch.Tensor) -> torch.Tensor:
            return torch.cat([parts[i] for i in idx]) if idx else t[:0]

        lengths = torch.cat([self._lengths[i * b:(i + 1) * b] for i in idx]) if idx else self._lengths[:0]
        return KeyedJaggedTensor(list(keys), cat(vals, self._values),
                                 None if wts is None else cat(wts, self._weights), lengths=lengths, stride=b)

    def __str__(self) -> str:
        """TorchRec's text of the batch: every key's samples, value by value (see :mod:`recgo._strings`)."""
        if not readable(self._values, self._weights, self._lengths):
            return repr(self)
        offsets = self.offsets()
        if offsets.numel() and int(offsets[-1]) != self._values.numel():  # (its bags were cut short in silence)
            return f"{repr(self)[:-1]}; its lengths add up to {int(offsets[-1])}: not a batch of these values)"
        return keyed_jagged_str(self._keys, self._values, self._weights, offsets, self._stride)

    def __repr__(self) -> str:
        weighted = ", weighted" if self._weights is not None else ""
        return (f"KeyedJaggedTensor(keys={short_keys(self._keys)}, batch={self._stride}, "
                f"values={self._values.numel()}{weighted}{where(self._values)})")


def _is_torchrec_kjt(x: Any) -> bool:
    return type(x).__name__ == "KeyedJaggedTensor" and type(x).__module__.startswith("torchrec")


def as_kjt(features: Any) -> KeyedJaggedTensor:
    """Accept recgo's or TorchRec's KeyedJaggedTensor, or a TensorDict of nested jagged ID tensors (as
    TorchRec's collections do), and return recgo's."""
    if isinstance(features, KeyedJaggedTensor):
        return features
    if _is_torchrec_kjt(features) or (type(features).__name__ == "KeyedJaggedTensor"
                                      and hasattr(features, "weights_or_none")):
        return KeyedJaggedTensor.from_torchrec(features)
    if is_tensordict(features):
        keys, values, lengths, stride = tensordict_parts(features)
        return KeyedJaggedTensor(keys, values, lengths=lengths, stride=stride)
    hint = ""
    if isinstance(features, Mapping):
        hint = (" (for a dict of per-feature inputs use KeyedJaggedTensor.from_jagged_dict({name: (values, "
                "lengths)}) or KeyedJaggedTensor.from_jt_dict({name: JaggedTensor}))")
    raise InvalidInputError(
        f"features: expected a recgo or torchrec KeyedJaggedTensor or a TensorDict, got "
        f"{type(features).__name__}{hint}"
    )


from .keyed import KeyedTensor  # noqa: E402  (the pooled output; re-exported here)
