"""Every public Python name of recgo has a docstring: the public modules (no part of the dotted name
starts with ``_``), the classes and functions they export (``__all__``, or their public names), and
those classes' public methods and properties (a docstring inherited from a base class counts, as
``help()`` shows it)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
from typing import Any, Iterator

import recgo


def _public_modules() -> Iterator[types.ModuleType]:
    yield recgo
    for info in pkgutil.walk_packages(recgo.__path__, "recgo."):
        parts = info.name.split(".")[1:]
        if any(p.startswith("_") for p in parts) or info.name == "recgo.librecgo":  # (the C library)
            continue
        yield importlib.import_module(info.name)


def _documented(obj: Any) -> bool:
    return bool((inspect.getdoc(obj) or "").strip())


def _member_documented(cls: type, name: str, member: Any) -> bool:
    """A method's or property's docstring, its own or the nearest base class's."""
    if _documented(getattr(member, "fget", None) or getattr(member, "__func__", member)):
        return True
    return any(_documented(getattr(base, name, None)) for base in cls.__mro__[1:] if hasattr(base, name))


def undocumented(modules: Iterator[types.ModuleType], package: str) -> list[str]:
    """The public names of ``modules`` (those defined in ``package``) without a docstring."""
    missing: list[str] = []
    seen: set[int] = set()
    for mod in modules:
        if not _documented(mod):
            missing.append(mod.__name__)
        names = getattr(mod, "__all__", None) or [n for n in vars(mod) if not n.startswith("_")]
        for name in names:
            obj = getattr(mod, name, None)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)) or id(obj) in seen:
                continue
            if not getattr(obj, "__module__", "").startswith(package):
                continue  # re-exported from torch or elsewhere
            seen.add(id(obj))
            qual = f"{obj.__module__}.{obj.__qualname__}"
            if not _documented(obj):
                missing.append(qual)
            if inspect.isclass(obj):
                for mname, member in vars(obj).items():
                    if mname.startswith("_"):
                        continue
                    fn = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                    if (inspect.isfunction(fn) or isinstance(member, property)) and \
                            not _member_documented(obj, mname, member):
                        missing.append(f"{qual}.{mname}")
    return missing


def test_the_check_finds_what_it_should() -> None:
    mod = types.ModuleType("fake", "A module.")

    class Base:
        def run(self) -> None:
            """Runs."""

    class Public(Base):
        """Documented."""

        def run(self) -> None:  # inherits Base.run's docstring
            pass

        def bare(self) -> None:
            pass

        @property
        def size(self) -> int:
            return 0

        def _private(self) -> None:
            pass

    def f() -> None:
        pass

    for obj in (Base, Public, f):
        obj.__module__ = "fake"
    mod.Public, mod.f = Public, f
    assert undocumented(iter([mod]), "fake") == ["fake.test_the_check_finds_what_it_should.<locals>.Public.bare",
                                                 "fake.test_the_check_finds_what_it_should.<locals>.Public.size",
                                                 "fake.test_the_check_finds_what_it_should.<locals>.f"]


def test_every_public_name_has_a_docstring() -> None:
    assert undocumented(_public_modules(), "recgo") == []
