"""FeatureEngine: raw batch -> KeyedJaggedTensor through the fused Go transforms.

The spec crosses into Go once, as JSON, at construction. Each batch is one ``recgo_feature_run``
call (a descriptor array holding every input's pointers, or a KeyedJaggedTensor's two) plus one
``recgo_feature_output`` that lays the result out in one off-heap buffer, which the returned tensors
wrap without a copy (the buffer returns to the engine's pool when they are collected); no per-field
Python loop runs for KeyedJaggedTensor inputs.
"""

from __future__ import annotations

import copy
import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import torch

from .. import _lib
from .._cache import KeyCache
from .._memory import wrap
from .._lib import H, I64
from ..errors import InvalidInputError
from ..sparse import KeyedJaggedTensor
from ..tensors import check_tensor, ptr, refuse_weight_grads
from .spec import Feature, load_config, spec_json

# Descriptor kinds (engine/feature.Kind) and the words of one descriptor row (capi/feature.go's
# inputDesc: kind, data, count, lengths, string lengths, string count, weights).
KIND_INT64, KIND_FLOAT32, KIND_FLOAT64, KIND_BYTES = (_lib.const(f"FeatureKind{k}") for k in ("Int64", "Float32", "Float64", "Bytes"))
_DESC_WORDS = _lib.const("FeatureDescWords")


@dataclass(frozen=True)
class FusionGroup:
    """One fused call: ``op`` applied to ``features`` at once."""

    op: str
    features: tuple[str, ...]


@dataclass(frozen=True)
class FeaturePlan:
    """The fused plan. ``calls_before`` = Σ d_i (ops over all chains, one call each field by field);
    ``calls_after`` = |G| (fused groups)."""

    groups: tuple[FusionGroup, ...]
    calls_before: int
    calls_after: int

    @property
    def reduction(self) -> float:
        """Fraction of invocations removed by fusion, 1 - after/before."""
        return 1 - self.calls_after / self.calls_before if self.calls_before else 0.0

    def table(self) -> str:
        """A readable summary: one line per group."""
        lines = [f"{self.calls_before} calls field by field -> {self.calls_after} fused ({self.reduction:.1%} fewer)"]
        for i, g in enumerate(self.groups):
            names = ", ".join(g.features[:6]) + (f", ... (+{len(g.features) - 6})" if len(g.features) > 6 else "")
            lines.append(f"{i:4d}  {g.op:<12} {len(g.features):5d} fields: {names}")
        return "\n".join(lines)


_STRING = (str, bytes, bytearray, memoryview)


def encode_strings(bags: Sequence[Sequence[str | bytes]] | Sequence[str | bytes]) -> tuple[torch.Tensor, ...]:
    """Pack Python strings for a ``bytes`` input: returns ``(data uint8, string_lengths int64)`` for
    one string per sample, or ``(data, string_lengths, bag_lengths)`` for bags of strings (``str`` as
    UTF-8; ``bytes``, ``bytearray`` and ``memoryview`` as they are). Either every sample is one string
    or every sample is a bag (a list or tuple of strings); a mix is refused.

    Raises:
        InvalidInputError: a value that is not a string, a mix of strings and bags, or a ``str`` that
            cannot be UTF-8 (a lone surrogate).
    """
    if isinstance(bags, _STRING) or not isinstance(bags, Sequence):
        raise InvalidInputError(f"encode_strings: expected a list of strings or of bags of strings, got "
                                f"{type(bags).__name__}")
    strings = [isinstance(b, _STRING) for b in bags]
    jagged = bool(bags) and not any(strings)
    if any(strings) and not all(strings) and isinstance(bags[strings.index(False)], Sequence):
        i = strings.index(False)
        raise InvalidInputError(f"encode_strings: sample {i} is a {type(bags[i]).__name__} {bags[i]!r} where the "
                                "others are strings: give one string per sample, or a bag (list) of strings per sample")
    if jagged:
        for i, bag in enumerate(bags):
            if not isinstance(bag, Sequence):
                raise InvalidInputError(f"encode_strings: sample {i}: expected a string or a bag (list) of strings, "
                                        f"got {type(bag).__name__} {bag!r}")
    flat = [s for bag in bags for s in bag] if jagged else list(bags)
    enc = []
    for s in flat:
        if not isinstance(s, _STRING):
            raise InvalidInputError(f"encode_strings: expected str or bytes, got {type(s).__name__} {s!r} (leave a "
                                    "missing value out of its bag, or use an empty string)")
        try:
            enc.append(s.encode() if isinstance(s, str) else bytes(s))
        except UnicodeEncodeError as exc:
            raise InvalidInputError(f"encode_strings: {s!r} is not valid UTF-8 text ({exc.reason}); pass bytes "
                                    "to hash its bytes as they are") from None
    data = torch.frombuffer(bytearray(b"".join(enc)), dtype=torch.uint8) if any(enc) else torch.empty(0, dtype=torch.uint8)
    slens = torch.tensor([len(s) for s in enc], dtype=torch.int64)
    if jagged:
        return data, slens, torch.tensor([len(b) for b in bags], dtype=torch.int64)
    return data, slens


class FeatureEngine:
    """Applies a list of :class:`Feature` specs to raw batches, fused across fields in Go.

    ``features`` may be a list of :class:`Feature`, a path to a JSON/YAML config, or a parsed config.
    Call it with a batch: a :class:`recgo.KeyedJaggedTensor` (or TorchRec's) holding the int64 inputs,
    and/or a dict ``{input: tensor}`` (dense, one value per sample), ``{input: (values, lengths)}``
    (jagged) or ``{input: (values, lengths, weights)}``; ``bytes`` inputs take
    ``(data, string_lengths[, bag_lengths[, weights]])`` from :func:`encode_strings` or a list of
    strings. The result is a KeyedJaggedTensor in output key order. Per-ID weights (a KJT's, or a
    dict entry's) travel with their values through every transform; the result then has float32
    weights (1 for the values of unweighted features).

    ``fuse=False`` runs one engine call per op, field by field (the baseline fusion is measured
    against); outputs are identical. ``max_values`` bounds every buffer a batch needs (the values
    one fused group of transforms produces, and the output): a batch past it raises
    :class:`recgo.CapacityError` naming the feature and the size before anything is allocated. It
    defaults to 2**28 values, or to a config file's top-level ``max_values``.

    One engine may be called from several threads at once (each call is independent; the Go engine
    is immutable). Copies and pickles rebuild an independent engine from the spec.
    """

    def __init__(self, features: Sequence[Feature] | str | Path | Mapping[str, Any], fuse: bool = True,
                 max_values: int | None = None) -> None:
        if isinstance(features, Feature):
            raise InvalidInputError(f"FeatureEngine: expected a list of features, got one: write [{features!r}]")
        if isinstance(features, (str, Path, Mapping)) or (
                isinstance(features, Sequence) and features and all(isinstance(f, Mapping) for f in features)):
            features, options = load_config(features)  # a path, a parsed config, or a list of its entries
            if max_values is None:
                max_values = options.get("max_values")
        if not isinstance(features, Iterable):
            raise InvalidInputError(f"FeatureEngine: expected Feature objects or a config, got {type(features).__name__}")
        features = list(features)  # once: a generator's features were used up by the check below
        for f in features:
            if not isinstance(f, Feature):
                raise InvalidInputError(f"FeatureEngine: expected Feature objects or a config, got {type(f).__name__}")
        # its own copies: a caller chaining more ops onto a Feature later changes neither this engine
        # nor what it shows (features, repr) or what its copies and pickles rebuild
        self.features = copy.deepcopy(features)
        self._fuse = bool(fuse)
        spec = spec_json(self.features, fuse, max_values).encode()
        buf = ctypes.create_string_buffer(spec, len(spec))
        self._h = _lib.new_handle("recgo_feature_new", ctypes.addressof(buf), len(spec))
        info = self._info()
        self.inputs: list[tuple[str, str]] = [(i["name"], i["dtype"]) for i in info["inputs"]]
        self.keys: list[str] = list(info["outputs"])
        self.max_values: int = int(info["max_values"])
        p = info["plan"]
        self._plan = FeaturePlan(
            tuple(FusionGroup(g["op"], tuple(g["features"])) for g in p["groups"] or []),
            int(p["calls_before"]), int(p["calls_after"]),
        )
        self._input_index = {name: i for i, (name, _) in enumerate(self.inputs)}
        self._kjt_maps: dict[tuple[str, ...], ctypes.Array] = KeyCache()
        self._run = _lib.fn("recgo_feature_run")
        self._output = _lib.fn("recgo_feature_output")

    def _info(self) -> dict[str, Any]:
        return _lib.call_json("recgo_feature_info", self._h.value)

    def plan(self) -> FeaturePlan:
        """The fused groups and the call counts before and after fusion."""
        return self._plan

    def _kjt_rows(self, keys: list[str]) -> ctypes.Array:
        """For each KJT key, the engine input row it feeds (-1 if none), cached per key tuple."""
        t = tuple(keys)
        m = self._kjt_maps.get(t)
        if m is None:
            rows = []
            for k in keys:
                i = self._input_index.get(k)
                rows.append(i if i is not None and self.inputs[i][1] == "int64" else -1)
            m = (ctypes.c_int64 * len(keys))(*rows)
            self._kjt_maps[t] = m
        return m

    def __call__(self, batch: Any = None, inputs: Mapping[str, Any] | None = None, *,
                 dense: Mapping[str, Any] | None = None) -> KeyedJaggedTensor:
        """Transform one batch (see the class docstring) into a KeyedJaggedTensor.

        ``inputs`` maps input names to their raw values besides a KJT ``batch``: dense tensors, jagged
        ``(values, lengths)`` pairs and ``bytes`` inputs (strings). ``dense=`` is its former name,
        kept with a DeprecationWarning."""
        if dense is not None:
            import warnings

            warnings.warn("FeatureEngine(..., dense=) is deprecated: pass the named raw inputs (dense, jagged "
                          "or byte strings) as inputs=", DeprecationWarning, stacklevel=2)
            if inputs is not None:
                raise InvalidInputError("pass the raw inputs once: inputs= (dense= is its deprecated name)")
            inputs = dense
        extra: dict[str, Any] = {}
        kjt = None
        if isinstance(batch, Mapping):
            extra.update(batch)
        elif batch is not None:
            kjt = batch if isinstance(batch, KeyedJaggedTensor) else KeyedJaggedTensor.from_torchrec(batch)
        if inputs:
            extra.update(inputs)
        desc = (ctypes.c_int64 * (len(self.inputs) * _DESC_WORDS))()
        keep: list[torch.Tensor] = []  # tensors that must outlive the call
        size: int | None = None
        kjt_args: tuple = (None, 0, None, None, None, 0)
        if kjt is not None:
            size = kjt.stride()
            vals, lens, wts = kjt.values(), kjt.lengths(), kjt.weights_or_none()
            if wts is not None:
                refuse_weight_grads(wts)
                wts = check_tensor(wts, "weights", _FLOATS, ndim=1, convert_to=torch.float32)
                keep.append(wts)
            keys = kjt.keys()
            for k in keys:
                i = self._input_index.get(k)
                if i is not None and self.inputs[i][1] != "int64" and k not in extra:
                    raise InvalidInputError(f"input {k!r}: dtype mismatch, the feature declares {self.inputs[i][1]} "
                                            "values but the KeyedJaggedTensor holds int64 IDs")
            rows = self._kjt_rows(keys)  # held here: another thread's call may evict it from the cache
            kjt_args = (ptr(vals), vals.numel(),
                        None if wts is None else wts.data_ptr() if wts.numel() else ctypes.addressof(_NO_WEIGHTS),
                        ptr(lens), ctypes.addressof(rows), len(keys))
            keep += [vals, lens]
        for name, entry in extra.items():
            i = self._input_index.get(name)
            if i is None:
                continue  # inputs the engine does not read are ignored, as for KJT keys
            row, n, tensors = _describe(name, self.inputs[i][1], entry)
            b = n if row[3] == 0 else tensors[-1].numel()  # tensors[-1]: the bag lengths when jagged
            if size is None:
                size = b
            elif b != size:
                raise InvalidInputError(f"input {name!r}: batch size {b}, but other inputs have {size}")
            desc[i * _DESC_WORDS:(i + 1) * _DESC_WORDS] = row
            keep += tensors
        rh, nv, nl = H(0), I64(0), I64(0)
        vp, lp, wp, weighted, oh = H(0), H(0), H(0), I64(0), H(0)
        # Both calls and the owner's making in one protected block (a Ctrl-C can land at any call in
        # between: the result, or the buffer, was lost then). Output frees the result, also when it
        # fails; an interrupt after it finds the result not live any more.
        with _lib.freed_if_interrupted([rh, oh]):
            _lib.call(self._run, self._h.value, ctypes.addressof(desc), len(self.inputs), size or 0,
                      *kjt_args, ctypes.byref(rh), ctypes.byref(nv), ctypes.byref(nl))
            _lib.call(self._output, rh.value, ctypes.byref(vp), ctypes.byref(lp), ctypes.byref(wp),
                      ctypes.byref(weighted), ctypes.byref(oh))
            owner = _lib.Handle(oh.value)  # frees the off-heap buffer once every tensor is gone
        del keep
        weights = wrap(wp.value, nv.value, torch.float32, owner) if weighted.value else None
        return KeyedJaggedTensor(self.keys, wrap(vp.value, nv.value, torch.int64, owner),
                                 lengths=wrap(lp.value, nl.value, torch.int64, owner), weights=weights)

    def close(self) -> None:
        """Free the Go engine now (otherwise when collected)."""
        self._h.free()

    def __reduce__(self) -> tuple[Any, ...]:
        """Copies and pickles (``copy.deepcopy``, DataLoader workers started with spawn) rebuild an
        independent engine from the spec; the Go engine handle never travels."""
        return (FeatureEngine, (copy.deepcopy(self.features), self._fuse, self.max_values))

    def __repr__(self) -> str:
        p = self._plan
        return f"FeatureEngine({len(self.features)} features, {p.calls_before} -> {p.calls_after} calls)"


# A non-null address for "weighted, but no values" (Go reads nothing from it).
_NO_WEIGHTS = ctypes.c_float(0)

_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _weights(name: str, w: Any, count: int, what: str, tensors: list[torch.Tensor]) -> tuple[int, int]:
    """Check one input's weights (one per value: ``count`` of the input's ``what``), keep them alive,
    and return their address and count (the descriptor's last two words)."""
    if isinstance(w, torch.Tensor):
        refuse_weight_grads(w)  # the engine's outputs carry no gradient back to them
    w = check_tensor(w, f"{name}.weights", _FLOATS, ndim=1, convert_to=torch.float32)
    if w.numel() != count:
        raise InvalidInputError(f"input {name!r}: {w.numel()} weights for {count} {what} (one weight per value)")
    tensors.append(w)
    return (w.data_ptr() if w.numel() else ctypes.addressof(_NO_WEIGHTS)), w.numel()


def _describe(name: str, dtype: str, entry: Any) -> tuple[list[int], int, list[torch.Tensor]]:
    """One descriptor row for a dict input: (row, value count, tensors to keep alive; the bag
    lengths last when the input is jagged)."""
    if dtype == "bytes":
        if isinstance(entry, list) or (isinstance(entry, tuple) and entry and isinstance(entry[0], (str, bytes, list, tuple))):
            entry = encode_strings(entry)  # a list of strings (an empty list: an empty batch)
        if not isinstance(entry, tuple) or len(entry) not in (2, 3, 4):
            raise InvalidInputError(f"input {name!r}: a bytes input takes (data, string_lengths[, bag_lengths[, weights]]) "
                                    "or a list of strings")
        data = check_tensor(entry[0], f"{name}.data", (torch.uint8, torch.int8), ndim=1)
        slens = check_tensor(entry[1], f"{name}.string_lengths", _INTS, ndim=1, convert_to=torch.int64)
        tensors = [data, slens]
        wptr, nw = _weights(name, entry[3], slens.numel(), "strings", tensors) if len(entry) == 4 else (0, 0)
        lens_ptr = 0
        if len(entry) >= 3 and entry[2] is not None:
            lens = check_tensor(entry[2], f"{name}.lengths", _INTS, ndim=1, convert_to=torch.int64)
            tensors.append(lens)
            lens_ptr = lens.data_ptr()
        return ([KIND_BYTES, data.data_ptr(), data.numel(), lens_ptr, slens.data_ptr(), slens.numel(), wptr, nw],
                slens.numel(), tensors)
    if isinstance(entry, list):
        if entry and all(isinstance(x, (str, bytes)) for x in entry[:8]):
            raise InvalidInputError(f"input {name!r}: got a list of strings for an {dtype} field; declare the "
                                    f"feature with dtype=\"bytes\" (Feature({name!r}, dtype=\"bytes\").hash()...) to hash strings")
        raise InvalidInputError(f"input {name!r}: got a Python list for an {dtype} field; pass a tensor "
                                "(torch.tensor(values)) or (values, lengths), or declare dtype=\"bytes\" for strings")
    lens = None
    tensors: list[torch.Tensor] = []
    weights = None
    if isinstance(entry, tuple):
        if len(entry) not in (2, 3):
            raise InvalidInputError(f"input {name!r}: expected a tensor, (values, lengths) or (values, lengths, weights)")
        if len(entry) == 3:
            weights = entry[2]
        entry, lens = entry[0], entry[1]
        lens = check_tensor(lens, f"{name}.lengths", _INTS, ndim=1, convert_to=torch.int64)
    if dtype == "float":
        vals = check_tensor(entry, f"{name}.values", _FLOATS, ndim=1)
        if vals.dtype not in (torch.float32, torch.float64):
            vals = vals.float()
        kind = KIND_FLOAT32 if vals.dtype == torch.float32 else KIND_FLOAT64
    else:
        if isinstance(entry, torch.Tensor) and entry.dtype in _FLOATS:
            raise InvalidInputError(f"input {name!r}: dtype mismatch, the feature declares int64 IDs but got {entry.dtype}")
        vals = check_tensor(entry, f"{name}.values", _INTS, ndim=1, convert_to=torch.int64)
        kind = KIND_INT64
    wptr, nw = _weights(name, weights, vals.numel(), "values", tensors) if weights is not None else (0, 0)
    tensors = [vals] + tensors + ([lens] if lens is not None else [])
    return ([kind, vals.data_ptr(), vals.numel(), lens.data_ptr() if lens is not None else 0, 0, vals.numel(), wptr,
             nw], vals.numel(), tensors)
