"""Fixtures shared by the test modules."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture
def compile_failures() -> Iterator[list[str]]:
    """The messages torch.compile logs when a backend fails and it falls back to eager for a frame
    (which a test of a compiled model asserts never happens); collected while the test runs."""
    got: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if "Backend compiler" in msg or "failed while compiling" in msg:
                got.append(msg.splitlines()[0])

    handler = Catch(level=logging.WARNING)
    logger = logging.getLogger("torch._dynamo")
    logger.addHandler(handler)
    try:
        yield got
    finally:
        logger.removeHandler(handler)
