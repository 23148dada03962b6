"""Optional dependencies, checked before long work so a missing one fails at once with the extra
that provides it (``pip install 'recgo[plots]'``) instead of a ModuleNotFoundError at the end."""

from __future__ import annotations

import importlib
import sys

from .errors import import_failure, require_extra

#: Module → the recgo extra that installs it.
EXTRAS = {"matplotlib": "plots", "yaml": "yaml", "torchrec": "compare"}


def has(module: str) -> bool:
    """Whether ``module`` can be imported (a module hidden as ``sys.modules[name] = None`` cannot, nor one
    that is installed but fails to import, e.g. torchrec over an fbgemm-gpu built for another torch)."""
    return _problem(module) is None


def _problem(module: str) -> BaseException | None:
    """None when ``module`` imports; otherwise the exception its import raised."""
    if module in sys.modules and sys.modules[module] is not None:
        return None
    try:
        importlib.import_module(module)
    except Exception as exc:  # ModuleNotFoundError when absent; OSError etc. when a compiled part fails
        return exc
    return None


def why_not(module: str) -> str:
    """Why ``module`` cannot be used, for a one-line note ('' when it can)."""
    exc = _problem(module)
    if exc is None:
        return ""
    if isinstance(exc, ModuleNotFoundError):
        return f"{module} is not installed"
    return f"{module} {import_failure(exc)}"


def require(module: str, purpose: str) -> None:
    """Raise :class:`MissingExtraError` naming the extra when ``module`` is not importable."""
    require_extra(module, EXTRAS.get(module, module), purpose)
