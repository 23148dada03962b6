"""Functions that call the Go library directly (not through a torch custom op), run eagerly under
``torch.compile``."""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def eager_under_compile(fn: F) -> F:
    """``fn`` as ``torch.compiler.disable`` gives it: dynamo calls it eagerly (a graph break) instead of
    tracing it. Traced, the torch ops computed just before its Go call (``unique``, ``scatter_reduce``,
    indexing by data) gave the call wrong values from the second batch shape on, silently.

    The disabled function is made on the first call made while ``torch._dynamo`` is imported (nothing
    compiles before that): disabling at import time imported ``torch._dynamo``, over a second, in
    every process that imports recgo."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if "torch._dynamo" not in sys.modules:
            return fn(*args, **kwargs)
        disabled = getattr(fn, "_recgo_eager", None)
        if disabled is None:
            import torch._dynamo

            disabled = torch._dynamo.disable(fn)
            fn._recgo_eager = disabled  # type: ignore[attr-defined]
        return disabled(*args, **kwargs)

    return call  # type: ignore[return-value]
