"""Builds librecgo.so with Go (and HiGHS, once per machine) into the recgo package.

The library is declared as an extension so setuptools runs the Go build; its "build" is
``go build -buildmode=c-shared``. Python reaches it through ctypes only, so the wheel depends on no
Python ABI: it is tagged ``py3-none-manylinux_X_Y_<arch>``, where X_Y is the oldest manylinux policy
whose glibc and libstdc++ symbol versions cover those the built library needs (read from the library
itself). The result needs no Go, HiGHS or C++ toolchain at import time, only the system's libstdc++.
"""

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

ROOT = Path(__file__).resolve().parent

# manylinux policies (PEP 600): the newest GLIBC and GLIBCXX symbol versions each guarantees
# (auditwheel's manylinux-policy.json, x86_64/aarch64), oldest first.
MANYLINUX = [
    ((2, 17), (3, 4, 19)),
    ((2, 28), (3, 4, 24)),
    ((2, 31), (3, 4, 28)),
    ((2, 34), (3, 4, 29)),
    ((2, 35), (3, 4, 30)),
    ((2, 39), (3, 4, 33)),
]


def symbol_versions(lib: Path) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The newest GLIBC_x.y and GLIBCXX_x.y.z versions named in lib's dynamic string table."""
    data = lib.read_bytes()
    glibc = [tuple(map(int, m.split(b"."))) for m in re.findall(rb"(?<=\x00)GLIBC_(\d+\.\d+(?:\.\d+)?)(?=\x00)", data)]
    cxx = [tuple(map(int, m.split(b"."))) for m in re.findall(rb"(?<=\x00)GLIBCXX_(\d+\.\d+\.\d+)(?=\x00)", data)]
    return max(glibc, default=(0,)), max(cxx, default=(0,))


def platform_tag(lib: Path) -> str:
    """``manylinux_X_Y_<arch>`` for the built library (``linux_<arch>`` when no policy covers it)."""
    arch = platform.machine()
    glibc, cxx = symbol_versions(lib)
    for pol_glibc, pol_cxx in MANYLINUX:
        if glibc <= pol_glibc and cxx <= pol_cxx:
            return f"manylinux_{pol_glibc[0]}_{pol_glibc[1]}_{arch}"
    return f"linux_{arch}"


class GoBuild(build_ext):
    """Compile ./capi into recgo/librecgo.so."""

    built: Path | None = None

    def get_ext_filename(self, fullname: str) -> str:
        return os.path.join(*fullname.split(".")) + ".so"

    def build_extension(self, ext: Extension) -> None:
        if shutil.which("go") is None:
            raise RuntimeError("building recgo needs Go >= 1.26 on PATH (https://go.dev/dl), cmake and a C++ compiler")
        out = Path(self.get_ext_fullpath(ext.name)).resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.check_call(["bash", "scripts/link_highs.sh"], cwd=ROOT)
        cmd = (
            "source scripts/env.sh && go build -trimpath -buildmode=c-shared "
            f"-o '{out}' ./capi && rm -f '{out.with_suffix('.h')}'"
        )
        subprocess.check_call(["bash", "-c", cmd], cwd=ROOT)
        GoBuild.built = out


class Wheel(bdist_wheel):
    """A ``py3-none-<manylinux>`` wheel: one wheel for every supported Python on the platform."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self) -> tuple[str, str, str]:
        if GoBuild.built is None or not GoBuild.built.exists():
            return "py3", "none", f"linux_{platform.machine()}"
        return "py3", "none", platform_tag(GoBuild.built)


if __name__ == "__main__":  # setuptools runs this file as __main__; tests import its tag logic
    setup(ext_modules=[Extension("recgo.librecgo", sources=[])], cmdclass={"build_ext": GoBuild, "bdist_wheel": Wheel})
