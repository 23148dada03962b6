"""A synthetic Taobao UserBehavior file for the sequence model when no ``--data`` is given.

The events follow a planted model, so the next-interaction task has something to learn: items belong
to categories, each category's items have Zipf popularity, and each user draws most of their events
from a few preferred categories (the rest from the whole catalog by category popularity). A positive
target (the user's next item) then tends to share categories with the history and to be popular,
while :class:`~recgo.train.taobao.TaobaoSequences` draws its negatives uniformly: a model that learns
either signal gets an AUC well above 0.5, one that learns nothing stays at 0.5.

The rows are written once per (users, seed) under the temporary folder (``recgo-synthetic/``, beside
the main job's other derived files) in the UserBehavior format (``user,item,category,behavior,timestamp``),
each user's events in time order, and read back by the same code that reads the real file; concurrent
writers (the ranks of ``--nproc``) are safe (``_files.write_once``).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import InvalidInputError
from ._files import derived_path, write_once

#: Bumped when the generator changes, so an old cached file is not reused.
VERSION = 1
ITEMS, CATEGORIES = 20_000, 200
PREFERRED, FOCUS = 3, 0.8  # categories per user; the share of a user's events drawn from them


def _zipf(n: int, alpha: float) -> torch.Tensor:
    w = torch.arange(1, n + 1, dtype=torch.float64).pow(-alpha)
    return w / w.sum()


def events(users: int, seed: int) -> torch.Tensor:
    """The planted model's events as an ``[n, 3]`` tensor of (user, item, category), users in order and
    each user's events in time order."""
    if isinstance(users, bool) or not isinstance(users, int) or users <= 0:
        raise InvalidInputError(f"users must be a positive integer, got {users!r}")
    g = torch.Generator().manual_seed(seed)
    cat_pop = _zipf(CATEGORIES, 1.0)[torch.randperm(CATEGORIES, generator=g)]
    item_cat = torch.multinomial(cat_pop, ITEMS, replacement=True, generator=g)
    # Items grouped by category, each category's popularity Zipf(1.1) over its items in a random order,
    # laid out so that category c covers [c, c + 1) of one cumulative axis: an item of category c by
    # popularity is the one whose interval holds c + U(0, 1).
    perm = torch.randperm(ITEMS, generator=g)  # a random order within each category
    by_cat = perm[torch.argsort(item_cat[perm], stable=True)]
    seg = item_cat[by_cat]  # per position its category (ascending)
    counts = torch.bincount(item_cat, minlength=CATEGORIES)
    rank = torch.arange(ITEMS) - (torch.cumsum(counts, 0) - counts)[seg]
    mass = (rank + 1).double().pow(-1.1)
    mass /= torch.bincount(seg, weights=mass, minlength=CATEGORIES)[seg]
    edges = torch.cumsum(mass, 0)
    lengths = torch.exp(torch.randn(users, generator=g, dtype=torch.float64) * 0.7 + 4.0).round().clamp(5, 300)
    lengths = lengths.to(torch.int64)
    n = int(lengths.sum())
    user = torch.repeat_interleave(torch.arange(users), lengths)
    preferred = torch.multinomial(cat_pop.expand(users, -1), PREFERRED, replacement=False, generator=g)
    focused = torch.rand(n, generator=g) < FOCUS
    cats = torch.where(focused, preferred[user, torch.randint(0, PREFERRED, (n,), generator=g)],
                       torch.multinomial(cat_pop, n, replacement=True, generator=g))
    cats = torch.where(counts[cats] > 0, cats, item_cat[0])  # a category no item drew: the first item's
    at = torch.searchsorted(edges, cats.double() + torch.rand(n, generator=g, dtype=torch.float64))
    items = by_cat[at.clamp(max=ITEMS - 1)]
    return torch.stack([user, items, item_cat[items]], 1)


def userbehavior_file(users: int = 2000, seed: int = 0) -> Path:
    """The path of the synthetic UserBehavior CSV for ``users`` and ``seed``, written first if absent."""

    def write(path: Path) -> None:
        ev = events(users, seed)
        ts = 1_511_500_000 + torch.arange(ev.shape[0])  # increasing: each user's events in time order
        with path.open("w") as fh:
            fh.writelines(f"{u + 1},{i + 1},{c + 1},pv,{t}\n" for (u, i, c), t in zip(ev.tolist(), ts.tolist()))

    return write_once(derived_path("recgo-synthetic", f"userbehavior-v{VERSION}-{users}u-seed{seed}.csv"), write)
