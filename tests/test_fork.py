"""A process forked after it loaded librecgo.so cannot use recgo: the child gets a named ForkError.

Each case runs in a fresh interpreter (with a timeout) that forks, so a hang or crash is reported as
a failure instead of stalling the suite. Forking with recgo used only in the children keeps working.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

_PRELUDE = """
import multiprocessing as mp, os, sys
import recgo, torch
from recgo import _lib

def ebc():
    cfg = [recgo.EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=10, feature_names=["f"])]
    return recgo.EmbeddingBagCollection(tables=cfg)

def forward(m):
    kjt = recgo.KeyedJaggedTensor.from_lengths_sync(["f"], torch.tensor([1, 2, 3]), torch.tensor([1, 2]))
    return m(kjt).values()
"""


def _run(body: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "case.py"  # a file, so 'spawn' children can import the script's functions
    script.write_text(_PRELUDE + body)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180,
                          env=env, cwd=tmp_path)


def test_a_child_forked_after_the_library_loaded_raises_fork_error(tmp_path: Path) -> None:
    res = _run("""
m = ebc()
forward(m)                               # the parent has used the library
def child(q):
    try:
        forward(m)
        q.put("no error")
    except recgo.ForkError as e:
        q.put("ForkError: " + str(e))
    except BaseException as e:
        q.put("other: %r" % e)
ctx = mp.get_context("fork")
q = ctx.Queue()
p = ctx.Process(target=child, args=(q,))
p.start()
print(q.get(timeout=60))
p.join(60)
print("exit", p.exitcode)
print("parent", float(forward(m).sum()) == float(forward(m).sum()))
""", tmp_path)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "ForkError: " in out, out
    assert "spawn" in out and "forked from pid" in out, out
    assert "exit 0" in out and "parent True" in out, out


def test_raw_os_fork_child_gets_fork_error_and_freeing_handles_is_silent(tmp_path: Path) -> None:
    res = _run("""
m = ebc()
pid = os.fork()
if pid == 0:
    code = 3
    try:
        _lib.version()
    except recgo.ForkError:
        code = 0
    del m                                 # the handle's capsule destructor must not call into Go here
    os._exit(code)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
""", tmp_path)
    assert res.returncode == 0, res.stderr
    assert "child 0" in res.stdout, res.stdout + res.stderr


def test_forking_with_recgo_used_only_in_the_children_works(tmp_path: Path) -> None:
    res = _run("""
def child(q):
    q.put(forward(ebc()).shape[0])
ctx = mp.get_context("fork")
q = ctx.Queue()
ps = [ctx.Process(target=child, args=(q,)) for _ in range(2)]
for p in ps: p.start()
print(sorted(q.get(timeout=60) for _ in ps))
for p in ps: p.join(60)
print("exits", [p.exitcode for p in ps])
""", tmp_path)
    assert res.returncode == 0, res.stderr
    assert "[2, 2]" in res.stdout and "exits [0, 0]" in res.stdout, res.stdout + res.stderr
    assert "ForkError" not in res.stdout + res.stderr


def test_spawned_workers_of_a_parent_that_used_recgo_work(tmp_path: Path) -> None:
    res = _run("""
def child(q):
    q.put(forward(ebc()).shape[0])
if __name__ == "__main__":
    forward(ebc())
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    print("spawned", q.get(timeout=90))
    p.join(60)
""", tmp_path)
    assert res.returncode == 0, res.stderr
    assert "spawned 2" in res.stdout, res.stdout + res.stderr



def test_a_child_forked_while_a_thread_is_inside_a_call_raises_instead_of_hanging(tmp_path: Path) -> None:
    """A thread of the parent inside ``next()`` or a forward holds the object's lock at the fork; in the
    child that thread is gone and the lock never came free: ``next()``, the forward and the exit through
    ``DataPipeline.__del__`` waited forever (/tmp/probe-s35-conc/fork_lock_hang.py). The threads hold
    the locks here (as ``next()`` and ``OutputPool.take`` do for their whole call) so the fork surely
    lands inside."""
    res = _run("""
import threading, time
from recgo.data import SyntheticField, SyntheticSource
from recgo.feature import Feature
pipe = recgo.DataPipeline(SyntheticSource(1000, [SyntheticField("f", 10, 1.1)]), [Feature("f").mod(10)], 10)
m = ebc()
forward(m)
held, done = threading.Barrier(3), threading.Event()
def hold(lock):
    with lock:
        held.wait()
        done.wait()
for lock in (pipe._lock, m._outputs._lock):
    threading.Thread(target=hold, args=(lock,), daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    got = []
    for call in (lambda: next(pipe), lambda: forward(m)):
        try:
            call()
        except recgo.ForkError:
            got.append("ForkError")
    print(got, flush=True)
    sys.exit(0)                           # DataPipeline.__del__ runs close(), which takes the lock too
for _ in range(300):
    done_pid, status = os.waitpid(pid, os.WNOHANG)
    if done_pid:
        print("child", os.waitstatus_to_exitcode(status))
        break
    time.sleep(0.1)
else:
    os.kill(pid, 9)
    print("child hung")
done.set()
print("parent", len(next(pipe).labels))
""", tmp_path)
    assert res.returncode == 0, res.stderr
    assert "['ForkError', 'ForkError']" in res.stdout and "child 0" in res.stdout, res.stdout + res.stderr
    assert "parent 10" in res.stdout, res.stdout + res.stderr
