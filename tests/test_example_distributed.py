"""examples/train_distributed.py, the script users copy, runs under torchrun and learns its planted labels."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _torchrun(tmp_path: Path, nproc: int, *args: str) -> str:
    env = dict({k: v for k, v in os.environ.items() if k != "GOMAXPROCS"}, OMP_NUM_THREADS="1",
               RECGO_EXAMPLE_CKPT=str(tmp_path / "ckpt"))
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                          str(ROOT / "examples" / "train_distributed.py"), *args],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    # the script users copy runs clean (it stepped its LR scheduler without the fused optimizer's step,
    # and torch warned on every rank)
    assert "Warning" not in res.stderr, res.stderr[-3000:]
    return res.stdout


def test_two_ranks_flat_learn_and_checkpoint(tmp_path: Path) -> None:
    out = _torchrun(tmp_path, 2, "--steps", "100")
    losses = [float(x) for x in re.findall(r"mean loss of the last 20 steps ([0-9.]+)", out)]
    assert len(losses) == 5, out
    assert losses[-1] < losses[0] - 0.02 and losses[-1] < 0.66, losses  # coin flips stay at 0.693
    assert "100 steps in" in out and "on 2 ranks (flat)" in out
    assert "the tables' learning rate after the warm-up: 0.05" in out, out  # LinearLR drove the fused rate
    assert "loaded back" in out and any((tmp_path / "ckpt").iterdir())


@pytest.mark.parametrize("mode", ["hierarchical"])
def test_four_ranks_as_two_nodes(tmp_path: Path, mode: str) -> None:
    out = _torchrun(tmp_path, 4, "--steps", "10", "--nodes", "2", "--mode", mode)
    assert "10 steps in" in out and f"on 4 ranks ({mode})" in out and "loaded back" in out
