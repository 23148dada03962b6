"""Which failure the ``--nproc`` launcher reports (recgo.train.distributed._failure), from the files
the ranks leave: a rank stopped by a fatal signal is the cause of its peers' ``PeerFailureError``s,
whichever the launcher heard of first. Under load the peer's error file came first, and the launcher
reported "rank 0 failed: PeerFailureError ..." for a rank 1 that aborted
(tests/test_train_nproc.py::test_a_crashing_rank_names_its_signal_and_python_stack failed so)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from recgo.train.distributed import _failure, _rank_file

PEER = "rank 0 failed: PeerFailureError: rank 0: the all-to-all on the world group failed: a peer closed\nTraceback..."
OWN = "rank 0 failed: ValueError: a bad batch\nTraceback..."
STACK = 'Fatal Python error: Aborted\n  File "x.py", line 3 in failing'


def _world(tmp_path: Path, errors: dict[int, str], crashes: dict[int, str], nproc: int = 2) -> str:
    result = str(tmp_path / "runs.pt")
    for r in range(nproc):
        Path(_rank_file(result, "crash", r)).write_text(crashes.get(r, ""))  # every rank opens one
    for r, text in errors.items():
        Path(_rank_file(result, "error", r)).write_text(text)
    return result


@pytest.mark.parametrize("heard_of", [0, 1])
def test_a_crashed_rank_is_reported_over_its_peers_failure(tmp_path: Path, heard_of: int) -> None:
    result = _world(tmp_path, {0: PEER}, {1: STACK})
    exc = mp.ProcessRaisedException("x", heard_of, 1) if heard_of == 0 else \
        mp.ProcessExitedException("process 1 terminated with signal SIGABRT", 1, -6, 1, "SIGABRT")
    rank, msg = _failure(result, 2, exc, [1, -signal.SIGABRT])
    assert rank == 1
    assert msg.startswith("rank 1 exited (process 1 terminated with signal SIGABRT) without a Python error")
    assert msg.endswith(f"its Python threads when it stopped:\n{STACK}")


def test_a_rank_s_own_error_is_reported_over_a_crash(tmp_path: Path) -> None:
    """An error of the rank's own (not a peer's failure) stays the report, as the earliest error."""
    result = _world(tmp_path, {0: OWN}, {1: STACK})
    assert _failure(result, 2, mp.ProcessRaisedException("x", 0, 1), [1, -6]) == (0, OWN)


def test_a_peer_failure_without_a_crash_is_reported(tmp_path: Path) -> None:
    """A peer that left without a fatal signal (killed by the system, SIGKILL): the error file stands."""
    result = _world(tmp_path, {0: PEER}, {})
    assert _failure(result, 2, mp.ProcessRaisedException("x", 0, 1), [1, -9]) == (0, PEER)


def test_no_error_file_names_the_exit_torch_saw(tmp_path: Path) -> None:
    result = _world(tmp_path, {}, {})
    exc = mp.ProcessExitedException("process 1 terminated with signal SIGKILL", 1, -9, 1, "SIGKILL")
    assert _failure(result, 2, exc, [None, -9]) == (
        1, "rank 1 exited (process 1 terminated with signal SIGKILL) without a Python error (killed or crashed)")
