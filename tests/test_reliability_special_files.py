"""Files recgo reads whole by path (dynamic-table checkpoints, plans, profiles, feature configs) that
are not regular files: ``/dev/zero`` was read until memory ran out (a Go fatal error killed the
process, or Python's MemoryError) and a FIFO blocked the read until a writer came. They are refused
with ``RecgoIOError`` before a byte is read, as the data readers refuse them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "dynamic": """
import recgo
ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(num_embeddings=100, embedding_dim=4, name="t",
    feature_names=["f"], dynamic=recgo.DynamicConfig())], optimizer=recgo.modules.optim.SGD(lr=0.1))
recgo.dynamic.load(ebc, "t", PATH)
""",
    "plan": "import recgo.planner as P\nP.Plan.load(PATH)\n",
    "profile": "import recgo.planner as P\nP.Profile.load(PATH)\n",
    "features": "import recgo\nrecgo.feature.load_features(PATH)\n",
}


def _run(case: str, path: str) -> subprocess.CompletedProcess:
    code = f"PATH = {path!r}\n" + CASES[case] + "\nprint('loaded')\n"
    wrapped = ("import resource\nresource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))\n"
               "from recgo.errors import RecgoIOError\ntry:\n" + "".join(f"    {ln}\n" for ln in code.splitlines())
               + "except RecgoIOError as exc:\n    print('RecgoIOError:', exc)\n")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'python'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-c", wrapped], capture_output=True, text=True, timeout=120, env=env)


# (a plan's directory is no error: Plan.load reads the plan.json in it)
@pytest.mark.parametrize("case, kind", [(c, k) for c in sorted(CASES) for k in ("device", "fifo", "directory")
                                        if (c, k) != ("plan", "directory")])
def test_a_special_file_is_refused_before_it_is_read(tmp_path: Path, case: str, kind: str) -> None:
    if kind == "device":
        path = "/dev/zero"
    elif kind == "fifo":
        path = str(tmp_path / "fifo.json")
        os.mkfifo(path)
    else:
        path = str(tmp_path)
    res = _run(case, path)
    assert res.returncode == 0, res.stderr[-2000:]
    want = "is a directory, not a file" if kind == "directory" else "is not a regular file (a pipe, socket or device)"
    assert res.stdout.startswith("RecgoIOError:") and want in res.stdout, res.stdout + res.stderr[-2000:]
