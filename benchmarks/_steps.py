"""Interleaved training steps of several backends on the same few batches (end_to_end*.py)."""

from __future__ import annotations

from typing import Any, Callable


def first_batches(source: Any, n: int = 4) -> list[Any]:
    """The first n prepared batches of ``source`` (serial schedule), reused for every backend's steps."""
    stream = source.stream(depth=0)
    try:
        return [next(stream) for _ in range(n)]
    finally:
        stream.close()


def steppers(trainers: dict[str, Any], batches: list[Any]) -> dict[str, Callable[[], None]]:
    """One zero-argument step per backend; each cycles through ``batches`` on its own."""
    state = {b: 0 for b in trainers}

    def stepper(b: str) -> Callable[[], None]:
        def step() -> None:
            trainers[b].train_step(batches[state[b] % len(batches)], timed=False)
            state[b] += 1
        return step

    return {b: stepper(b) for b in trainers}
