"""Optional dependencies, checked before long work so a missing one fails at once with the extra
that provides it (``pip install 'recgo[plots]'``) instead of a ModuleNotFoundError at the end."""

from __future__ import annotations

import importlib.util
import sys

from .errors import missing_extra

#: Module → the recgo extra that installs it.
EXTRAS = {"matplotlib": "plots", "yaml": "yaml", "torchrec": "compare"}


def has(module: str) -> bool:
    """Whether ``module`` can be imported (a module hidden as ``sys.modules[name] = None`` cannot)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, purpose: str) -> None:
    """Raise :class:`MissingExtraError` naming the extra when ``module`` is not importable."""
    if not has(module):
        raise missing_extra(module, EXTRAS.get(module, module), purpose)
