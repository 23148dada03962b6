"""How a sharded table's state_dict entries say whose they are: ``<table>.rank<r>_of_<world>.<entry>``,
with the IDs of the shard's rows under ``.shard_ids``. Declared once here for the writer
(``recgo.distributed``) and the readers (its state-dict hooks and ``recgo._dcp``'s load planner), in a
module that imports nothing, since the planner is loaded without ``recgo.distributed``."""

from __future__ import annotations

import re

SHARD_IDS = "shard_ids"
# ``rank<r>_of_<world>``; its groups are the rank and the world size.
RANK_TAG = re.compile(r"rank(?P<rank>\d+)_of_(?P<world>\d+)")


def rank_tag(rank: int, world_size: int) -> str:
    """The tag of rank ``rank``'s entries in a world of ``world_size``."""
    return f"rank{rank}_of_{world_size}"
