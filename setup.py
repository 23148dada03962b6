"""Builds librecgo.so with Go (and HiGHS, once per machine) into the recgo package.

The library is declared as an extension so wheels get a platform tag; its "build" is
``go build -buildmode=c-shared``. The result depends on no Go, HiGHS or C++ runtime at import time
beyond the system's libstdc++.
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class GoBuild(build_ext):
    """Compile ./capi into recgo/librecgo.so."""

    def get_ext_filename(self, fullname: str) -> str:
        return os.path.join(*fullname.split(".")) + ".so"

    def build_extension(self, ext: Extension) -> None:
        if shutil.which("go") is None:
            raise RuntimeError("building recgo needs Go >= 1.26 on PATH (https://go.dev/dl)")
        out = Path(self.get_ext_fullpath(ext.name)).resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.check_call(["bash", "scripts/link_highs.sh"], cwd=ROOT)
        cmd = (
            "source scripts/env.sh && go build -trimpath -buildmode=c-shared "
            f"-o '{out}' ./capi && rm -f '{out.with_suffix('.h')}'"
        )
        subprocess.check_call(["bash", "-c", cmd], cwd=ROOT)


setup(ext_modules=[Extension("recgo.librecgo", sources=[])], cmdclass={"build_ext": GoBuild})
