"""Every name the benchmarks import from recgo exists: a benchmark runs for minutes, so none runs in the
tests, and a name moved inside the package (``benchmarks/embedding.py`` crashed after the stage counters
moved to ``recgo.modules._stages``) would otherwise be found only by the next person timing it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
FILES = sorted(BENCHMARKS.glob("*.py"))


def _recgo_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None) of every ``import recgo...`` and ``from recgo... import name``,
    at any depth (many benchmarks import inside the function that needs it)."""
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "recgo"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "recgo":
            out += [(node.lineno, node.module, a.name) for a in node.names]
    return out


def test_there_are_benchmarks_that_import_recgo() -> None:
    assert len(FILES) >= 10 and sum(bool(_recgo_imports(f)) for f in FILES) >= 10


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_benchmark_imports_resolve(path: Path) -> None:
    missing = []
    for line, module, name in _recgo_imports(path):
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{path.name}:{line}: import {module}: {exc}")
            continue
        if name is not None and name != "*" and not hasattr(mod, name):
            try:  # a submodule not yet imported
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{path.name}:{line}: {module} has no {name}")
    assert not missing, "\n".join(missing)
