"""Initial weights drawn chunk by chunk.

A table's uniform initial weights are drawn a fixed number of rows at a time, in row order, from one
generator. The unsharded collections draw straight into their tables (:func:`draw_uniform`); a
sharded collection draws the same chunks into a small buffer and keeps the rows it holds
(:func:`draw_uniform_rows`). Both consume the generator identically, so a shard's rows equal the
unsharded table's rows with the same seed, and no rank ever allocates a whole table to get them.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import torch

#: Values drawn per chunk (16 MiB of float32): the most a sharded rank allocates to initialise a table.
CHUNK_VALUES = 1 << 22


def row_chunks(rows: int, dim: int) -> Iterator[tuple[int, int]]:
    """The ``[lo, hi)`` row ranges of a ``rows × dim`` table's draw, in order."""
    step = max(1, CHUNK_VALUES // max(1, dim))
    for lo in range(0, rows, step):
        yield lo, min(rows, lo + step)


def draw_uniform(weight: torch.Tensor, low: float, high: float, gen: torch.Generator | None) -> None:
    """Fill ``weight`` ([rows, dim], rows may be strided) uniformly in ``[low, high)``, chunk by chunk."""
    rows, dim = weight.shape
    with torch.no_grad():
        for lo, hi in row_chunks(rows, dim):
            weight[lo:hi].uniform_(low, high, generator=gen)


def draw_uniform_rows(weight: torch.Tensor, ids: torch.Tensor, rows: int, low: float, high: float,
                      gen: torch.Generator | None) -> None:
    """``weight[i]`` ← row ``ids[i]`` of what :func:`draw_uniform` draws for a ``rows × dim`` table
    with the same generator state. Every chunk is drawn (the generator must advance past the rows
    other ranks hold); only one chunk is in memory at a time."""
    dim = weight.shape[1]
    order = torch.argsort(ids)
    sorted_ids = ids[order]
    buf = torch.empty(0, dim, dtype=torch.float32)
    with torch.no_grad():
        for lo, hi in row_chunks(rows, dim):
            if buf.shape[0] < hi - lo:
                buf = torch.empty(hi - lo, dim, dtype=torch.float32)
            chunk = buf[: hi - lo]
            chunk.uniform_(low, high, generator=gen)
            a, b = torch.searchsorted(sorted_ids, torch.tensor([lo, hi])).tolist()
            if b > a:
                weight[order[a:b]] = chunk[sorted_ids[a:b] - lo]


def init_table(cfg: Any, weight: torch.Tensor, gen: torch.Generator | None) -> None:
    """A fixed table's initial weights (``cfg``: its ``EmbeddingBagConfig``): ``init_fn(weight)`` where the
    config has one, else uniform in its init bounds drawn from ``gen`` (None: torch's global generator)."""
    with torch.no_grad():
        if cfg.init_fn is not None:
            cfg.init_fn(weight)
        else:
            draw_uniform(weight, *cfg.init_bounds(), gen)


def init_as_torchrec(configs: Sequence[Any], weights: Sequence[torch.Tensor], table_by_table: bool) -> None:
    """Draw from torch's global generator as TorchRec's constructor does: each table's ``nn.EmbeddingBag``
    (an ``EmbeddingCollection``'s ``nn.Embedding``) first fills itself with ``normal_``, which the
    config's init then overwrites. Drawn here too, in the same order, ``torch.manual_seed(s)`` builds
    TorchRec's very tables and leaves the generator where TorchRec's constructor leaves it, so the dense
    layers built next match too. ``table_by_table`` (TorchRec's ``EmbeddingCollection``) initialises
    each table right after its ``normal_``; otherwise (its ``EmbeddingBagCollection``, which creates
    every table first) only the ``normal_`` draws are made here and the caller initialises the tables
    next. Dynamic-ID tables are skipped (TorchRec has none)."""
    with torch.no_grad():
        for cfg, weight in zip(configs, weights):
            if cfg.dynamic is None:
                weight.normal_()
                if table_by_table:
                    init_table(cfg, weight, None)
