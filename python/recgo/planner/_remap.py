"""The hot-rows-first renumbering of a plan's tables, applied to IDs in Go."""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import torch

from .. import _lib
from .._compile import eager_under_compile
from ..errors import InvalidInputError, NotFoundError
from ..sparse import KeyedJaggedTensor, as_kjt
from ..tensors import ptr


class Remap:
    """Per-table renumbering with the hot rows first; apply it to incoming IDs in the data loader."""

    def __init__(self, handle: _lib.Handle) -> None:
        self._h = handle
        self._tables: list[dict[str, Any]] = _lib.call_json("recgo_remap_tables", handle.value)
        self._index = {t["name"]: i for i, t in enumerate(self._tables)}

    @staticmethod
    def load(path: str | os.PathLike[str], memory_limit: int | None = None) -> "Remap":
        """Read and verify a remap.bin written with a plan: a corrupted or truncated file raises
        RecgoIOError naming the file and the part, as does a path that is not a regular file (a
        directory, FIFO or device, refused before it is opened, as :meth:`Plan.load` does); one whose
        rows would take more than ``memory_limit`` bytes (default 8 GiB) raises CapacityError before
        they are read."""
        return Remap(_lib.new_handle("recgo_remap_load", _lib.c_path(path),
                                     int(memory_limit or 0)))

    @property
    def tables(self) -> list[dict[str, Any]]:
        """Per table: name, rows, hot (rows in HBM, new IDs below it), ranked (profiled rows)."""
        return self._tables

    def hot_rows(self, table: str) -> int:
        """Rows of ``table`` in HBM: new IDs below this are hot."""
        return int(self._tables[self._position(table)]["hot"])

    def _position(self, table: str) -> int:
        try:
            return self._index[table]
        except KeyError:
            raise NotFoundError(f"remap: no table {table!r} in the plan") from None

    @eager_under_compile
    def apply(self, table: str, ids: torch.Tensor) -> torch.Tensor:
        """New IDs of ``ids`` (int64) in ``table``; out-of-range IDs raise InvalidInputError."""
        from ..tensors import check_tensor

        ids = check_tensor(ids, "ids", (torch.int64, torch.int32), convert_to=torch.int64)
        flat = ids.reshape(-1)
        out = torch.empty_like(flat)
        f = _lib.fn("recgo_remap_apply")
        _lib.call(f, self._h.value, self._position(table), flat.data_ptr() if flat.numel() else None, flat.numel(),
                  out.data_ptr() if out.numel() else None)
        return out.reshape(ids.shape)

    def apply_kjt(self, features: Any, feature_to_table: Mapping[str, str | Sequence[str]] | None = None
                  ) -> KeyedJaggedTensor:
        """Remap a whole KJT in one Go call. A key reaches the planned table ``feature_to_table`` maps it
        to, else the table of its own name; keys of no planned table pass through unchanged. A batch
        with keys none of which reaches a planned table raises InvalidInputError (renumbering nothing
        would feed the original IDs to a hot-first table): pass ``feature_to_table={key: table}`` when
        the keys are not the table names (a config's ``feature_names`` give it).

        A key may map to a list of tables (every table that reads it). One key carries one set of IDs,
        so a key that several tables read, one of them planned, raises InvalidInputError naming it:
        feed such a batch raw to :class:`PlannedEmbeddingBagCollection`, which renumbers a copy of the
        key for each table, or renumber each table's IDs with :meth:`apply`."""
        kjt = as_kjt(features)
        f2t: dict[str, str] = {}
        for k, t in (feature_to_table or {}).items():
            ts = [t] if isinstance(t, str) else list(dict.fromkeys(t))
            if len(ts) > 1 and any(x in self._index for x in ts):
                raise InvalidInputError(
                    f"remap.apply_kjt: key {k!r} is read by tables {ts}, of which "
                    f"{[x for x in ts if x in self._index]} the plan renumbers, each its own way: one key cannot "
                    "carry each table's renumbering; feed the raw batch to PlannedEmbeddingBagCollection (it "
                    "renumbers a copy of the key per table) or renumber per table with apply(table, ids)")
            f2t[k] = ts[0] if ts else ""  # no table: "" names none, so the key passes unchanged
        keys = kjt.keys()
        if keys and not any(f2t.get(k, k) in self._index for k in keys):
            shown = ", ".join(keys[:8]) + (", ..." if len(keys) > 8 else "")
            names = list(self._index)
            tables = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
            how = "map them with" if not f2t else "check"
            raise InvalidInputError(
                f"remap.apply_kjt: no key of the batch ({shown}) reaches a planned table ({tables}), so no ID would "
                f"be renumbered: {how} feature_to_table={{key: table}} (the tables' feature_names)")
        return self._apply_kjt(kjt, f2t)

    @eager_under_compile
    def _apply_kjt(self, kjt: KeyedJaggedTensor, f2t: Mapping[str, str]) -> KeyedJaggedTensor:
        """:meth:`apply_kjt` without its check (a collection whose batch feeds only unplanned tables
        passes it through as it is)."""
        tables = torch.tensor([self._index.get(f2t.get(k, k), -1) for k in kjt.keys()], dtype=torch.int64)
        values, lengths = kjt.values(), kjt.lengths()
        out = torch.empty_like(values)
        f = _lib.fn("recgo_remap_apply_kjt")
        _lib.call(f, self._h.value, tables.data_ptr() if tables.numel() else None, len(kjt.keys()), kjt.stride(),
                  ptr(lengths), ptr(values), values.numel(), out.data_ptr() if out.numel() else None)
        return KeyedJaggedTensor(kjt.keys(), out, kjt.weights_or_none(), lengths=lengths)
