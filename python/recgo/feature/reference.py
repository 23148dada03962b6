"""The per-field reference: each documented transform written with torch ops, one field at a time.

This is what "correct" means for :class:`recgo.feature.FeatureEngine`: the tests compare the Go
engine with it value for value, and the benchmark times it as the plain-PyTorch way of doing the same
work (vectorised torch ops per field, no per-element Python loops). It never calls the Go library.

XXH64 is computed with int64 tensor ops (multiplication wraps modulo 2^64; logical shifts are
emulated with masks); byte strings are hashed with :func:`xxh64_bytes`, an independent pure-Python
XXH64.
"""

from __future__ import annotations

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


def truncate(values: torch.Tensor, lengths: torch.Tensor, n: int, keep: str = "first") -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the first or last ``n`` values of each bag."""
    pos = _pos_in_bag(lengths, values.numel())
    if keep == "last":
        mask = pos >= torch.repeat_interleave(lengths - n, lengths, output_size=values.numel())
    else:
        mask = pos < n
    return values[mask], lengths.clamp(max=n)


def filter_values(values: torch.Tensor, lengths: torch.Tensor, op: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop or keep the IDs in a set or in ``[lo, hi)``."""
    if op.get("range") is not None:
        lo, hi = op["range"]
        inside = (values >= lo) & (values < hi)
    else:
        inside = torch.isin(values, torch.tensor(op["values"], dtype=torch.int64))
    mask = inside if op.get("mode", "drop") == "keep" else ~inside
    bag = torch.repeat_interleave(torch.arange(lengths.numel()), lengths, output_size=values.numel())
    return values[mask], torch.bincount(bag[mask], minlength=lengths.numel())


def fill_missing(values: torch.Tensor, lengths: torch.Tensor, default: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Replace each empty bag by ``[default]``."""
    empty = lengths == 0
    new_lengths = torch.where(empty, torch.ones_like(lengths), lengths)
    out = torch.full((int(new_lengths.sum()),), default, dtype=torch.int64)
    new_starts = _starts(new_lengths)
    dest = torch.repeat_interleave(new_starts, lengths, output_size=values.numel()) + _pos_in_bag(lengths, values.numel())
    out[dest] = values
    return out, new_lengths


def cross(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sample, the a-major Cartesian product of two bags, each pair hashed with XXH64."""
    (av, al), (bv, bl) = a, b
    out_len = al * bl
    total = int(out_len.sum())
    sample = torch.repeat_interleave(torch.arange(al.numel()), out_len, output_size=total)
    k = torch.arange(total, dtype=torch.int64) - _starts(out_len)[sample]
    lb = bl[sample]
    i, j = torch.div(k, lb, rounding_mode="floor"), torch.remainder(k, lb)
    x = av[_starts(al)[sample] + i]
    y = bv[_starts(bl)[sample] + j]
    return xxh64_pair(x, y, seed), out_len


def bucketize(values: torch.Tensor, boundaries: Sequence[float]) -> torch.Tensor:
    """Number of boundaries ``<= x``; int64 values compare in int64, floats in float64."""
    if values.dtype == torch.int64:
        return torch.bucketize(values, torch.tensor([int(b) for b in boundaries], dtype=torch.int64), right=True)
    v = values.double()
    if bool(torch.isnan(v).any()):
        raise InvalidInputError("bucketize: NaN input")
    return torch.bucketize(v, torch.tensor(boundaries, dtype=torch.float64), right=True)


def _as_jagged(entry: Any) -> tuple[Any, torch.Tensor | None]:
    if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], torch.Tensor):
        return entry[0], entry[1].to(torch.int64)
    return entry, None


def apply_feature(op_chain: Sequence[Mapping[str, Any]], values: Any, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Run one feature's chain on its input (values: a tensor, or a list of byte strings)."""
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
            values, lengths = truncate(values, lengths, op["n"], op.get("keep", "first"))
        elif kind in ("filter", "mask"):
            values, lengths = filter_values(values, lengths, op)
        elif kind == "fill_missing":
            values, lengths = fill_missing(values, lengths, op.get("default", 0))
        else:
            raise InvalidInputError(f"reference: unsupported op {kind!r} here")
    return values, lengths


def reference(features: Sequence[Feature], batch: Mapping[str, Any], batch_size: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Apply every feature field by field. ``batch`` maps input names to a dense tensor, a
    ``(values, lengths)`` pair, or (bytes inputs) a list of bags of byte strings. Returns
    ``{feature: (values, lengths)}`` for the output features, in spec order."""
    done: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    by_name = {f.name: f for f in features}

    def run(f: Feature) -> tuple[torch.Tensor, torch.Tensor]:
        if f.name in done:
            return done[f.name]
        ops = f.ops
        if ops and ops[0]["op"] == "cross":
            a, b = ops[0]["fields"]
            vals, lens = cross(run(by_name[a]), run(by_name[b]), ops[0].get("seed", 0))
            vals, lens = apply_feature(ops[1:], vals, lens)
        else:
            raw = batch[f.input or f.name]
            if f.dtype == "bytes":
                bags = raw if raw and isinstance(raw[0], (list, tuple)) else [[s] for s in raw]
                flat = [s.encode() if isinstance(s, str) else bytes(s) for bag in bags for s in bag]
                vals, lens = apply_feature(ops, flat, torch.tensor([len(bag) for bag in bags], dtype=torch.int64))
            else:
                v, lens = _as_jagged(raw)
                if lens is None:
                    lens = torch.ones(batch_size, dtype=torch.int64)
                vals, lens = apply_feature(ops, v, lens)
        done[f.name] = (vals, lens)
        return vals, lens

    return {f.name: run(f) for f in features if f.output}
