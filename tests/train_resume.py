"""The resume check the ``recgo train`` tests share: a run stopped, saved, loaded and finished equals
the uninterrupted one, weights and final evaluation alike."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from recgo.train import Trainer


def assert_resume_equals_whole(make: Callable[[], Trainer], steps: int, checkpoint: Path,
                               whole: Trainer | None = None) -> tuple[Trainer, Trainer]:
    """Run a trainer from ``make`` for ``steps`` steps, save it to ``checkpoint``, load that into
    another and run it to the end; assert its weights and last evaluation equal ``whole``'s (an
    uninterrupted run, trained here when not given). Returns ``(whole, resumed)``, still open."""
    if whole is None:
        whole = make()
        whole.run()
    first = make()
    first.run(steps=steps)
    first.save(checkpoint)
    first.close()
    resumed = make()
    resumed.load(checkpoint)
    assert resumed.step == steps
    resumed.run()
    for (k, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), k
    assert whole.history.evals[-1] == resumed.history.evals[-1]
    return whole, resumed
