"""The per-field reference: each documented transform written with torch ops, one field at a time.

This is what "correct" means for :class:`recgo.feature.FeatureEngine`: the tests compare the Go
engine with it value for value, and the benchmark times it as the plain-PyTorch way of doing the same
work (vectorised torch ops per field, no per-element Python loops). It never calls the Go library.

XXH64 is computed with int64 tensor ops (multiplication wraps modulo 2^64; logical shifts are
emulated with masks); byte strings are hashed with :func:`xxh64_bytes`, an independent pure-Python
XXH64.
"""

from __future__ import annotations

import operator
from typing import Any, Mapping, Sequence

import torch

from ..errors import InvalidInputError
from .spec import Feature

_M64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)


def _s64(x: int) -> int:
    """An unsigned 64-bit constant as the int64 with the same bits."""
    x &= _M64
    return x - (1 << 64) if x >= 1 << 63 else x


_SP1, _SP2, _SP3, _SP4 = _s64(P1), _s64(P2), _s64(P3), _s64(P4)


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bits."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def _rotl(x: torch.Tensor, r: int) -> torch.Tensor:
    return (x << r) | _shr(x, 64 - r)


def _round(lane: torch.Tensor) -> torch.Tensor:
    return _rotl(lane * _SP2, 31) * _SP1


def _avalanche(h: torch.Tensor) -> torch.Tensor:
    h = (h ^ _shr(h, 33)) * _SP2
    h = (h ^ _shr(h, 29)) * _SP3
    return h ^ _shr(h, 32)


def xxh64_int(x: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """XXH64(le64(x), seed) of each int64 element, as int64 bits."""
    h = torch.full_like(x, _s64(seed + P5 + 8))
    h = _rotl(h ^ _round(x), 27) * _SP1 + _SP4
    return _avalanche(h)


def xxh64_pair(a: torch.Tensor, b: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """XXH64(le64(a) || le64(b), seed) elementwise, as int64 bits."""
    h = torch.full_like(a, _s64(seed + P5 + 16))
    h = _rotl(h ^ _round(a), 27) * _SP1 + _SP4
    h = _rotl(h ^ _round(b), 27) * _SP1 + _SP4
    return _avalanche(h)


def xxh64_lanes(lanes: Sequence[torch.Tensor], seed: int = 0) -> torch.Tensor:
    """XXH64(le64(lanes[0]) || le64(lanes[1]) || ..., seed) elementwise, as int64 bits: the hash of
    a crossed tuple (the xxHash specification's stripe loop for four or more lanes)."""
    k = len(lanes)
    i = 0
    if k >= 4:
        v = [torch.full_like(lanes[0], _s64(seed + P1 + P2)), torch.full_like(lanes[0], _s64(seed + P2)),
             torch.full_like(lanes[0], _s64(seed)), torch.full_like(lanes[0], _s64(seed - P1))]
        while i + 4 <= k:
            v = [_rotl(v[j] + lanes[i + j] * _SP2, 31) * _SP1 for j in range(4)]
            i += 4
        h = _rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)
        for j in range(4):
            h = (h ^ _round(v[j])) * _SP1 + _SP4
    else:
        h = torch.full_like(lanes[0], _s64(seed + P5))
    h = h + 8 * k
    for lane in lanes[i:]:
        h = _rotl(h ^ _round(lane), 27) * _SP1 + _SP4
    return _avalanche(h)


def _rotl_int(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _round_int(acc: int, lane: int) -> int:
    return (_rotl_int((acc + lane * P2) & _M64, 31) * P1) & _M64


def xxh64_bytes(data: bytes, seed: int = 0) -> int:
    """XXH64 of a byte string (pure Python, following the xxHash specification), unsigned."""
    n = len(data)
    i = 0
    if n >= 32:
        v = [(seed + P1 + P2) & _M64, (seed + P2) & _M64, seed & _M64, (seed - P1) & _M64]
        while i + 32 <= n:
            for k in range(4):
                v[k] = _round_int(v[k], int.from_bytes(data[i + 8 * k:i + 8 * k + 8], "little"))
            i += 32
        h = (_rotl_int(v[0], 1) + _rotl_int(v[1], 7) + _rotl_int(v[2], 12) + _rotl_int(v[3], 18)) & _M64
        for k in range(4):
            h = ((h ^ _round_int(0, v[k])) * P1 + P4) & _M64
    else:
        h = (seed + P5) & _M64
    h = (h + n) & _M64
    while i + 8 <= n:
        h ^= _round_int(0, int.from_bytes(data[i:i + 8], "little"))
        h = (_rotl_int(h, 27) * P1 + P4) & _M64
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i:i + 4], "little") * P1) & _M64
        h = (_rotl_int(h, 23) * P2 + P3) & _M64
        i += 4
    while i < n:
        h ^= (data[i] * P5) & _M64
        h = (_rotl_int(h, 11) * P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * P2) & _M64
    h ^= h >> 29
    h = (h * P3) & _M64
    return h ^ (h >> 32)


def _starts(lengths: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(lengths, 0) - lengths


def _pos_in_bag(lengths: torch.Tensor, n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.int64) - torch.repeat_interleave(_starts(lengths), lengths, output_size=n)


Jagged = tuple[torch.Tensor, torch.Tensor, "torch.Tensor | None"]  # values, lengths, weights or None


def _bag_of(lengths: torch.Tensor, n: int) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(lengths.numel()), lengths, output_size=n)


def _masked(values: torch.Tensor, lengths: torch.Tensor, weights: torch.Tensor | None, mask: torch.Tensor) -> Jagged:
    kept = torch.bincount(_bag_of(lengths, values.numel())[mask], minlength=lengths.numel())
    return values[mask], kept, None if weights is None else weights[mask]


def truncate(values: torch.Tensor, lengths: torch.Tensor, n: int, keep: str = "first",
             weights: torch.Tensor | None = None) -> Jagged:
    """Keep the first or last ``n`` values (and their weights) of each bag."""
    pos = _pos_in_bag(lengths, values.numel())
    if keep == "last":
        mask = pos >= torch.repeat_interleave(lengths - n, lengths, output_size=values.numel())
    else:
        mask = pos < n
    return _masked(values, lengths, weights, mask)


def filter_values(values: torch.Tensor, lengths: torch.Tensor, op: Mapping[str, Any],
                  weights: torch.Tensor | None = None) -> Jagged:
    """Drop or keep the values in a set or in ``[lo, hi)``: IDs compare in int64, float values in
    float64 (a NaN is in no set and no range)."""
    dt = torch.int64 if values.dtype == torch.int64 else torch.float64
    v = values.to(dt)
    if op.get("range") is not None:
        lo, hi = op["range"]
        inside = (v >= lo) & (v < hi)
    else:
        inside = torch.isin(v, torch.tensor(op["values"], dtype=dt))
    mask = inside if op.get("mode", "drop") == "keep" else ~inside
    return _masked(values, lengths, weights, mask)


def fill_missing(values: torch.Tensor, lengths: torch.Tensor, default: int,
                 weights: torch.Tensor | None = None) -> Jagged:
    """Replace each empty bag by ``[default]`` (weight 1)."""
    empty = lengths == 0
    new_lengths = torch.where(empty, torch.ones_like(lengths), lengths)
    total = int(new_lengths.sum())
    dest = torch.repeat_interleave(_starts(new_lengths), lengths, output_size=values.numel()) + _pos_in_bag(lengths, values.numel())
    out = torch.full((total,), default, dtype=torch.int64)
    out[dest] = values
    new_w = None
    if weights is not None:
        new_w = torch.ones(total, dtype=torch.float32)
        new_w[dest] = weights
    return out, new_lengths, new_w


def position(lengths: torch.Tensor, n: int, start: str = "first") -> torch.Tensor:
    """Each value's index in its bag, counted from the first or from the last."""
    pos = _pos_in_bag(lengths, n)
    if start == "last":
        return torch.repeat_interleave(lengths, lengths, output_size=n) - 1 - pos
    return pos


def recency(values: torch.Tensor, lengths: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``reference[sample] - value`` for each value (int64, wrapping like torch's subtraction)."""
    return reference.to(torch.int64)[_bag_of(lengths, values.numel())] - values


def cross(fields: Sequence[Jagged] | Jagged, b: Jagged | None = None, seed: int = 0) -> Jagged:
    """Per sample, the Cartesian product of two or more bags (first field most significant), each
    tuple hashed with XXH64 of its little-endian bytes. Weights multiply (an unweighted field's
    weight is 1); the result is weighted when any field is. ``cross(a, b, seed)`` is the two-field
    form."""
    if b is not None:
        fields = [fields, b]  # type: ignore[list-item]
    fields = [f if len(f) == 3 else (f[0], f[1], None) for f in fields]  # type: ignore[misc]
    lens = [f[1] for f in fields]
    out_len = torch.ones_like(lens[0])
    for l in lens:
        out_len = out_len * l
    total = int(out_len.sum())
    sample = torch.repeat_interleave(torch.arange(out_len.numel()), out_len, output_size=total)
    k = torch.arange(total, dtype=torch.int64) - _starts(out_len)[sample]
    lanes: list[torch.Tensor] = []
    ws: list[torch.Tensor] = []
    for v, l, w in reversed(fields):  # mixed radix, the last field fastest
        lf = l[sample]
        j = torch.remainder(k, lf)
        k = torch.div(k, lf, rounding_mode="floor")
        idx = _starts(l)[sample] + j
        lanes.insert(0, v[idx])
        if w is not None:
            ws.insert(0, w[idx])
    weights = None
    if ws:
        weights = torch.ones(total, dtype=torch.float32)
        for w in ws:
            weights = weights * w
    return xxh64_lanes(lanes, seed), out_len, weights


def _int64_boundary(b: int | float) -> int:
    """A boundary of an int64 field as the exact integer it is (never rounded through float64)."""
    if isinstance(b, float):
        if not b.is_integer():
            raise InvalidInputError(f"bucketize: boundary {b!r} is not an int64, but the field holds int64 IDs")
        b = int(b)
    n = operator.index(b)
    if not -(1 << 63) <= n < 1 << 63:
        raise InvalidInputError(f"bucketize: boundary {n} is not an int64, but the field holds int64 IDs")
    return n


def bucketize(values: torch.Tensor, boundaries: Sequence[int | float]) -> torch.Tensor:
    """Number of boundaries ``<= x``: int64 values compare exactly with the boundaries as int64
    integers (each boundary must be one), floats in float64."""
    if values.dtype == torch.int64:
        exact = [_int64_boundary(b) for b in boundaries]
        return torch.bucketize(values, torch.tensor(exact, dtype=torch.int64), right=True)
    v = values.double()
    if bool(torch.isnan(v).any()):
        raise InvalidInputError("bucketize: NaN input")
    return torch.bucketize(v, torch.tensor([float(b) for b in boundaries], dtype=torch.float64), right=True)


def _as_jagged(entry: Any) -> tuple[Any, torch.Tensor | None, torch.Tensor | None]:
    if isinstance(entry, tuple) and len(entry) in (2, 3) and isinstance(entry[0], torch.Tensor):
        w = entry[2].to(torch.float32) if len(entry) == 3 else None
        return entry[0], entry[1].to(torch.int64), w
    return entry, None, None


def apply_feature(op_chain: Sequence[Mapping[str, Any]], values: Any, lengths: torch.Tensor,
                  weights: torch.Tensor | None = None,
                  batch: Mapping[str, Any] | None = None) -> Jagged:
    """Run one feature's chain on its input (values: a tensor, or a list of byte strings); returns
    ``(values, lengths, weights or None)``. ``batch`` supplies recency references."""
    for op in op_chain:
        kind = op["op"]
        if kind == "hash":
            if isinstance(values, list):
                values = torch.tensor([_s64(xxh64_bytes(s, op.get("seed", 0))) for s in values], dtype=torch.int64)
            else:
                values = xxh64_int(values, op.get("seed", 0))
        elif kind == "mod":
            values = torch.remainder(values, op["n"])
        elif kind == "bucketize":
            values = bucketize(values, op["boundaries"])
        elif kind == "truncate":
            values, lengths, weights = truncate(values, lengths, op["n"], op.get("keep", "first"), weights)
        elif kind in ("filter", "mask"):
            values, lengths, weights = filter_values(values, lengths, op, weights)
        elif kind == "fill_missing":
            values, lengths, weights = fill_missing(values, lengths, op.get("default", 0), weights)
        elif kind == "position":
            values = position(lengths, values.numel() if isinstance(values, torch.Tensor) else len(values), op.get("from", "first"))
        elif kind == "recency":
            ref, _, _ = _as_jagged((batch or {})[op["reference"]])
            values = recency(values, lengths, ref)
        else:
            raise InvalidInputError(f"reference: unsupported op {kind!r} here")
    return values, lengths, weights


def reference(features: Sequence[Feature], batch: Mapping[str, Any], batch_size: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Apply every feature field by field. ``batch`` maps input names to a dense tensor, a
    ``(values, lengths)`` pair, or (bytes inputs) a list of bags of byte strings. Returns
    ``{feature: (values, lengths)}`` for the output features, in spec order."""
    return {k: (v, l) for k, (v, l, _) in reference_weighted(features, batch, batch_size).items()}


def reference_weighted(features: Sequence[Feature], batch: Mapping[str, Any], batch_size: int) -> dict[str, Jagged]:
    """:func:`reference` with per-value weights: an input may be ``(values, lengths, weights)``
    (bytes: ``(bags, weights)``); returns ``{feature: (values, lengths, weights or None)}``."""
    done: dict[str, Jagged] = {}
    by_name = {f.name: f for f in features}

    def run(f: Feature) -> Jagged:
        if f.name in done:
            return done[f.name]
        ops = f.ops
        if ops and ops[0]["op"] == "cross":
            vals, lens, w = cross([run(by_name[a]) for a in ops[0]["fields"]], seed=ops[0].get("seed", 0))
            out = apply_feature(ops[1:], vals, lens, w, batch)
        else:
            raw = batch[f.input or f.name]
            if f.dtype == "bytes":
                w = None
                if isinstance(raw, tuple):
                    raw, w = raw
                    w = w.to(torch.float32)
                bags = raw if raw and isinstance(raw[0], (list, tuple)) else [[s] for s in raw]
                flat = [s.encode() if isinstance(s, str) else bytes(s) for bag in bags for s in bag]
                out = apply_feature(ops, flat, torch.tensor([len(bag) for bag in bags], dtype=torch.int64), w, batch)
            else:
                v, lens, w = _as_jagged(raw)
                if lens is None:
                    lens = torch.ones(batch_size, dtype=torch.int64)
                out = apply_feature(ops, v, lens, w, batch)
        done[f.name] = out
        return out

    return {f.name: run(f) for f in features if f.output}
