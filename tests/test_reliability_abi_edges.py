"""Edges of the C ABI a caller other than recgo's own Python could hit (found by reading the exports
after the race/fuzz pass): an error buffer length past the int range, NULL output pointers of
constructors that start work (a pipeline's goroutines, a planning job), size products that wrap
around int64, and a topology whose node count × ranks per node wraps to a small world. Each gets a
named InvalidInputError, with nothing left running or allocated, instead of a crash, an internal
error or a leak."""

from __future__ import annotations

import ctypes
import time
from typing import Any

import pytest
import torch

import recgo
from recgo import _lib, planner as P
from recgo.data import SyntheticField, SyntheticSource
from recgo.errors import InvalidInputError
from recgo.feature import Feature
from recgo.pipeline import goroutines


def test_an_error_length_past_the_int_range_is_taken() -> None:
    """The message is written into the bytes it needs: a size_t errlen of 2^64−1 (or 2^63) made the
    view of the caller's buffer panic while reporting the error, which ended the process."""
    f = _lib.fn("recgo_free")
    for errlen in (2**64 - 1, 2**63, 2**63 + 5):
        buf = ctypes.create_string_buffer(b"\xff" * 256, 256)
        code = f(0, buf, errlen)
        assert code == 1  # errs.CodeInvalid
        assert buf.value == b"free: handle 0 is not live"


def test_a_short_error_buffer_truncates_the_message() -> None:
    f = _lib.fn("recgo_free")
    buf = ctypes.create_string_buffer(b"\xff" * 8, 8)
    assert f(0, buf, 8) == 1
    assert buf.raw == b"free: h\x00"


def _spy(monkeypatch: pytest.MonkeyPatch, export: str, at: int) -> list[list[Any]]:
    """The arguments of each later recgo._lib.new_handle call of ``export`` (made as usual), with the
    buffer at ``at`` (its length next) copied: the caller's buffer lives for the call only."""
    calls: list[list[Any]] = []
    real = _lib.new_handle

    def spy(name: str, *args: Any) -> Any:
        if name == export:
            calls.append([*args[:at], ctypes.create_string_buffer(ctypes.string_at(args[at], args[at + 1])),
                          *args[at + 1:]])
        return real(name, *args)

    monkeypatch.setattr(_lib, "new_handle", spy)
    return calls


def _settled(want: int) -> int:
    deadline = time.monotonic() + 10
    while goroutines()[1] != want and time.monotonic() < deadline:
        time.sleep(0.01)
    return goroutines()[1]


def test_a_pipeline_with_a_null_out_stops_its_goroutines(monkeypatch: pytest.MonkeyPatch) -> None:
    """recgo_pipeline_new started the pipeline's reader and workers, then wrote through the NULL out:
    an internal error, and goroutines reading the source until the process ended."""
    calls = _spy(monkeypatch, "recgo_pipeline_new", 3)
    source = SyntheticSource(4000, [SyntheticField("u", 300, 1.1)], dense=1, seed=5)
    pipe = recgo.DataPipeline(source, [Feature("u").mod(100)], 50, depth=2, threads=2)
    try:
        before = _settled(3)  # this pipeline's reader and two workers
        assert before == 3
        (feat, remap, sharded, spec, n), = calls
        with pytest.raises(InvalidInputError, match="out: null pointer"):
            _lib.call(_lib.fn("recgo_pipeline_new"), feat, remap, sharded, ctypes.addressof(spec), n, None)
        assert _settled(3) == 3  # the refused pipeline's goroutines stopped
        assert sum(b.dense.shape[0] for b in pipe) == 4000  # the live one is untouched
    finally:
        pipe.close()
    assert _settled(0) == 0


def _profile() -> Any:
    tabs = [recgo.EmbeddingBagConfig(50, 4, "t", ["t"])]
    return P.profile([{"t": torch.arange(40) % 50}], tabs, sample_rate=1.0, min_lookups=0)


_TOPOLOGY = P.Topology(nodes=1, gpus_per_node=1, hbm_bytes=100, host_bytes=10**6)


def test_a_planning_job_with_a_null_out_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy(monkeypatch, "recgo_plan_start", 1)
    plan = P.plan(_profile(), _TOPOLOGY)
    (prof_h, cfg, n), = calls
    with pytest.raises(InvalidInputError, match="out: null pointer"):
        _lib.call(_lib.fn("recgo_plan_start"), prof_h, ctypes.addressof(cfg), n, None)
    assert plan.tables[0]["name"] == "t"


@pytest.mark.parametrize("nkeys, batch", [(2**32, 2**32), (2**33, 2**31 + 1), (3, 2**62), (2, -1)])
def test_remap_lengths_whose_size_wraps_are_refused(nkeys: int, batch: int) -> None:
    """nkeys × batch wrapped around int64 (2^32 × 2^32 is 0): the lengths were viewed at a wrong size."""
    rm = P.plan(_profile(), _TOPOLOGY).remap()
    tables = torch.zeros(1, dtype=torch.int64)
    with pytest.raises(InvalidInputError, match=r"lengths: (size .* overflows int64|negative size)"):
        _lib.call(_lib.fn("recgo_remap_apply_kjt"), rm._h.value, tables.data_ptr(), nkeys, batch,  # noqa: SLF001
                  tables.data_ptr(), None, 0, None)


@pytest.mark.parametrize("nodes, per_node", [(2**32, 2**32), (2**62 + 1, 4), (2**21, 1), (1, 2**21)])
def test_a_simulated_topology_that_wraps_is_refused(nodes: int, per_node: int) -> None:
    """nodes × ranks per node wrapped to 0 or a small world and passed the size check."""
    counts = torch.zeros(4, dtype=torch.int64)
    out = torch.zeros(6, dtype=torch.int64)
    with pytest.raises(InvalidInputError, match=rf"simulate: {nodes} nodes × {per_node} ranks"):
        _lib.call(_lib.fn("recgo_shard_simulate"), nodes, per_node, 1, counts.data_ptr(), None, 0,
                  out.data_ptr())
