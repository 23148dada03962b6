"""Submodules a package imports on first attribute access, so ``import recgo`` then
``recgo.distributed.shard_model(...)`` works as the docs write it (without an
``import recgo.distributed`` of its own) while ``import recgo`` stays light."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def submodules(package: str, names: tuple[str, ...]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports its submodules ``names`` when first read."""

    def __getattr__(name: str) -> Any:
        if name in names:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
