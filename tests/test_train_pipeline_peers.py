"""A TrainPipeline rank whose next batch raises tells its peers: before session 35 a rank whose pass
raised "no rows" (recgo/_pass_end.py) left its peers waiting in the step agreement until it exited
or the group's timeout passed (30 minutes for a default gloo group), then raising a gloo "Connection
closed" that named no rank. Now they raise PeerFailureError naming it at once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

import recgo
from recgo.data import CriteoSource
from recgo.feature import Feature
from spawned import one_rank, spawn

GOOD = "1" + "\t3" * 13 + "\tab" * 26 + "\n"  # a training line (40 fields)
TEST = "3\t" * 13 + "\t".join(["ab"] * 26) + "\n"  # a test file's line (39 fields): malformed with labels
LINGER = 8.0  # the longest the failing rank stays before it exits (its peer must not wait for that)


class _Dense(nn.Module):
    """A model of the dense columns alone (no sharded collection: the default group agrees)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(13, 1)

    def forward(self, sparse: recgo.KeyedJaggedTensor, dense: torch.Tensor) -> torch.Tensor:
        return self.lin(dense).squeeze(1)


def _one_rank_fails(rank: int, world: int, folder: str) -> dict[str, Any]:
    """Two cases in turn, each an error on rank 1 at its first step: a one-row file (rank 1 gets no
    rows), and a file whose rank-1 share is all malformed under skip_bad."""
    out: dict[str, Any] = {}
    cases = {"one_row": CriteoSource(Path(folder) / "one.txt"),
             "all_bad": CriteoSource(Path(folder) / "half_bad.txt", skip_bad=True)}
    for name, source in cases.items():
        model = _Dense()
        tp = recgo.TrainPipeline(model, torch.optim.SGD(model.parameters(), lr=0.1), source, [Feature("C1").mod(10)],
                                 4, depth=1)
        t0 = time.monotonic()
        try:
            tp.run(progress=False)
            out[name] = ("no error", time.monotonic() - t0)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            out[name] = (f"{type(exc).__name__}: {exc}", time.monotonic() - t0)
        tp.close()
    # Rank 1 stays until rank 0 has seen both failures (at most LINGER): a rank 0 that waited for
    # rank 1 to exit would take LINGER, and fail the test, as with a fixed sleep.
    done = Path(folder) / "rank-0-done"
    if rank == 0:
        done.touch()
    else:
        deadline = time.monotonic() + LINGER
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return out


def test_a_rank_whose_pass_has_no_rows_makes_its_peer_raise_naming_it(tmp_path: Path) -> None:
    (tmp_path / "one.txt").write_text(GOOD, encoding="utf-8")
    (tmp_path / "half_bad.txt").write_text((GOOD + TEST) * 10, encoding="utf-8")  # odd rows: rank 1's
    r0, r1 = spawn(_one_rank_fails, 2, tmp_path, str(tmp_path), wait=120)
    assert "error" not in r0 and "error" not in r1, (r0, r1)
    whys = {"one_row": "rank 1 of a world of 2 gets no rows", "all_bad": "all 10 rows read were malformed"}
    for name, why in whys.items():
        assert r1[name][0].startswith("InvalidInputError: ") and why in r1[name][0], r1[name]
    for name in ("one_row", "all_bad"):
        message, seconds = r0[name]
        assert message.startswith("PeerFailureError: rank 0: rank 1 failed to read its next batch"), message
        assert seconds < LINGER / 2, (name, seconds)


@pytest.mark.parametrize("raised, want", [
    (RuntimeError("[gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:4302"),
     "agreeing on the next step failed: a peer closed the connection"),
    (dist.DistBackendError("[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 3000ms for recv"),
     "agreeing on the next step failed: no peer answer within the group's timeout"),
    (ValueError("this rank's own mistake"), None)])
def test_the_step_agreement_says_what_failed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                             raised: Exception, want: str | None) -> None:
    """The agreement's all-reduce failing: a gloo error is classified as the exchanges classify theirs
    (before session 35 every exception read "a peer died, raised or exceeded the timeout"); any other
    exception is this rank's own and propagates as it is (it was wrapped as a PeerFailureError)."""
    from recgo import _train_pipeline
    from recgo.distributed import PeerFailureError

    def fail(*args: Any, **kwargs: Any) -> None:
        raise raised

    with one_rank(tmp_path):
        monkeypatch.setattr(dist, "all_reduce", fail)
        with pytest.raises(type(raised) if want is None else PeerFailureError) as got:
            _train_pipeline._all_have(True, dist.group.WORLD)
    if want is None:
        assert got.value is raised
    else:
        assert want in str(got.value) and "rank 0: " in str(got.value), got.value
