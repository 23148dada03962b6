"""The training job's progress bars (tqdm), one helper so every bar honours ``--no-progress`` alike."""

from __future__ import annotations

from typing import Any


def progress_bar(total: int | None, desc: str, enabled: bool, unit: str = "step", delay: float = 0.0,
                 position: int | None = None) -> Any:
    """A tqdm bar of ``total`` units (None: unknown), or None when ``enabled`` is false (``--no-progress``).
    ``delay``: seconds before it shows, so work that ends sooner (a small file) prints nothing;
    ``position``: its line among bars shown together (an interleaved run's backends)."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=True, delay=delay, position=position,
                unit_scale=unit == "B", unit_divisor=1024 if unit == "B" else 1000)
