"""What :class:`recgo.DataPipeline` checks when its pass over the data ends: that it trained on
something, and on about what the user thinks.

A pass from the start of the data that handed out no batch raises, naming why: the files hold no
rows (empty, or a header only), every row of this rank was malformed and skipped (``skip_bad``),
the rank got no rows (more ranks than rows), or ``drop_last`` dropped the only, short batch. A
pass that skipped more than half of this rank's rows under ``skip_bad`` warns once, with the
counts and the first skipped row's reason.
"""

from __future__ import annotations

import warnings
from typing import Any

from .errors import InvalidInputError

SKIP_WARN_FRACTION = 0.5
"""A pass that skipped more than this fraction of its rank's rows under ``skip_bad`` warns."""


def rank_rows(global_rows: int, rank: int, world_size: int) -> int:
    """How many of the first ``global_rows`` rows of the data go to ``rank`` (row g is rank g mod
    ``world_size``'s)."""
    return global_rows // world_size + (1 if global_rows % world_size > rank else 0)


def _what(source: Any) -> str:
    """The source's files, for messages (its repr when it has none)."""
    paths = getattr(source, "paths", None)
    if not paths:
        return repr(source)
    return paths[0] if len(paths) == 1 else f"{len(paths)} files ({paths[0]}, ...)"


def check_pass_end(info: dict[str, Any], *, source: Any, fresh: bool, rank: int, world_size: int,
                   batch_size: int, drop_last: bool) -> None:
    """Check a finished pass, from the pipeline's ``info`` (position, step and stats at its end).
    ``fresh``: the pass started at the start of the data (not resumed inside it).

    Raises:
        InvalidInputError: a pass from the start handed out no batch (see the module doc)."""
    pos, stats = info["position"], info["stats"]
    g, skipped = int(pos["global"]), int(pos["skipped"])
    mine = rank_rows(g, rank, world_size)
    first = stats.get("first_skip") or ""
    reason = f" The first skipped row: {first}" if first else ""
    what = _what(source)
    if fresh and int(info["step"]) == 0:
        if g == 0:
            raise InvalidInputError(f"{what}: the data holds no rows (the files are empty, or hold only a header): "
                                    "there is nothing to train on; check the paths")
        if skipped >= mine > 0:
            raise InvalidInputError(f"{what}: all {mine} rows of rank {rank} were malformed and skipped (skip_bad), "
                                    f"so there is nothing to train on; is it the right data, read with the right "
                                    f"settings (labels=, columns, delimiter, header)?{reason}")
        if mine == 0:
            raise InvalidInputError(f"{what}: rank {rank} of a world of {world_size} gets no rows: the data holds "
                                    f"{g} rows and row g goes to rank g mod {world_size}; run fewer ranks or give "
                                    "more data")
        if drop_last:
            raise InvalidInputError(f"{what}: drop_last=True dropped the only batch: rank {rank}'s share holds "
                                    f"{mine - skipped} samples, fewer than batch_size={batch_size}; lower "
                                    "batch_size, or leave drop_last off")
    if skipped and skipped > SKIP_WARN_FRACTION * mine:
        warnings.warn(f"{what}: skip_bad skipped {skipped} of rank {rank}'s {mine} rows "
                      f"({100 * skipped / mine:.0f}%), training on {mine - skipped}; is it the right data, read "
                      f"with the right settings?{reason}", stacklevel=4)
