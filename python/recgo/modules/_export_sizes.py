"""Batch sizes of one (and zero) in ``torch.export`` programs of recgo's collections.

``torch.export`` with a dynamic batch traces the example batch's sizes as symbols that torch assumes
are at least two, and each check of the form "is this size one" (the contiguity checks on the custom
ops' outputs and on the per-key slices of the lengths) then records a guard that the batch is not
one. The program refused a batch of one at run time (``Guard failed: ... >= 4``), which is what a
server scoring one request sends, though nothing in a collection depends on it. Size-oblivious
reasoning answers those checks for every size without a guard. It applies only while a non-strict
export runs a collection's own Python: ``torch.compile`` recompiles for a new size instead, and Dynamo
cannot trace a config change. Checks in the caller's code on sizes derived from the lengths (a pooled
output's batch, a sequence output's offsets) still guard: docs/embedding.md says how to export those.
"""

from __future__ import annotations

from typing import Any, Callable

import torch


def exporting() -> bool:
    """Whether a non-strict ``torch.export`` is running the caller's Python (not Dynamo)."""
    return torch.compiler.is_exporting() and not torch.compiler.is_dynamo_compiling()


def call_size_oblivious(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with torch's size-oblivious shape checks (when this torch has them)."""
    from torch.fx.experimental import _config

    if not hasattr(_config, "backed_size_oblivious"):
        return fn(*args, **kwargs)
    with _config.patch(backed_size_oblivious=True):
        return fn(*args, **kwargs)
