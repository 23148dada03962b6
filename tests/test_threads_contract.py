"""Concurrency promises that had no test of their own (docs/threads.md, the README's table and the
docstrings): each runs the work from several threads and compares with the same work run alone."""

from __future__ import annotations

import time
import weakref

import pytest
import torch

import recgo
from recgo.data import SyntheticField, SyntheticSource, _prepared
from recgo.feature import Feature, FeatureEngine
from threaded import run_threads


class _Owner:
    """Stands in for a batch's owner handle."""

    def __init__(self, h: int) -> None:
        self._h = h

    @property
    def value(self) -> int:
        return self._h


class _SlowRef:
    """A live weak reference whose dereference lets other threads run (as a switch of the GIL
    between two steps of the registry's sweep does, only every time)."""

    def __init__(self, owner: _Owner) -> None:
        self.owner = owner

    def __call__(self) -> _Owner:
        time.sleep(0)
        return self.owner


def test_prepared_batch_registry_takes_registrations_from_several_threads(monkeypatch) -> None:
    """Pipelines in two threads register their batches at once while the registry is past its cap,
    so every registration sweeps it: the sweep iterated the dict while the other thread inserted and
    raised "dictionary changed size during iteration" from that pipeline's next()."""
    monkeypatch.setattr(_prepared, "_BATCHES", {})
    held = [_Owner(i + 1) for i in range(_prepared._MAX + 8)]
    for i, o in enumerate(held):
        _prepared._BATCHES[1 << 40 | i] = (_SlowRef(o), 1, 0, o.value)
    mine: list[list[_Owner]] = [[], []]

    def body(t: int) -> None:
        for s in range(12):
            o = _Owner(1000 * (t + 1) + s)
            mine[t].append(o)
            _prepared.register((t + 1) << 32 | s * 64, 4, 8, o)

    run_threads(2, body)
    for t, owners in enumerate(mine):
        for s, o in enumerate(owners):
            ref, numel, lengths_ptr, h = _prepared._BATCHES[(t + 1) << 32 | s * 64]
            assert (ref(), numel, lengths_ptr, h) == (o, 4, 8, o.value)
