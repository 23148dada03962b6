"""The oldest torch release recgo runs on, checked at import (a clear error instead of failures deep
inside, or silently wrong results, on older ones)."""

from __future__ import annotations

import re

import torch

MIN_TORCH = (2, 12)

# What the releases before MIN_TORCH lack (each found by running the test suite on them, session 29).
_WHY = ("torch.library.custom_op cannot infer the schema of recgo's ops before 2.7; "
        "a freed storage's use count differs before about 2.9 (recgo's output pool would hand out memory "
        "a live output still uses); torch.compiler.is_exporting is wrong under torch.compile before 2.12; "
        "activation checkpointing maps KeyedJaggedTensor leaves to None before 2.12")


def check(version: str | None = None) -> None:
    """Raise ImportError when torch (``version``, default the installed one) is older than MIN_TORCH."""
    version = torch.__version__ if version is None else version
    m = re.match(r"(\d+)\.(\d+)", str(version))
    if m is None:  # an unusual build string: let it run
        return
    if (int(m[1]), int(m[2])) < MIN_TORCH:
        want = ".".join(map(str, MIN_TORCH))
        raise ImportError(f"recgo needs torch >= {want}, found {version}: {_WHY}. Upgrade with "
                          f"pip install 'torch>={want}'")
