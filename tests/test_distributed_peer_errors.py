"""The construction's and the load's agreements (``_exchange.gather_objects``) say what failed as the
exchanges do: gloo's closed connection or timeout is a :class:`PeerFailureError` worded as such (it
read "a peer did not join within the timeout" for every failure, a dead peer's included), and this
rank's own exception (a value that does not pickle) propagates as it is (it was wrapped as a
PeerFailureError). The dead peer of a real world is test_distributed.py's killed-rank phase."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from spawned import one_rank


@pytest.mark.parametrize("raised, want", [
    (RuntimeError("[gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:4302"),
     "rank 0: loading ckpt: gathering every rank's part failed: a peer closed the connection"),
    (dist.DistBackendError("[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 3000ms for recv"),
     "rank 0: loading ckpt: gathering every rank's part failed: no peer answer within the 5 s timeout"),
    (ValueError("this rank's own mistake"), None)])
def test_the_agreements_say_what_failed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                        raised: Exception, want: str | None) -> None:
    from recgo.distributed import PeerFailureError
    from recgo.distributed._exchange import make_groups, peer_failure

    def fail(*args: Any, **kwargs: Any) -> None:
        raise raised

    with one_rank(tmp_path):
        groups = make_groups(None, None, 5, False)
        monkeypatch.setattr(dist, "all_gather_object", fail)
        with pytest.raises(type(raised) if want is None else PeerFailureError) as got:
            peer_failure(groups, "loading ckpt", None)
    if want is None:
        assert got.value is raised
    else:
        assert str(got.value).startswith(want), got.value
        assert "did not join" not in str(got.value)


def test_a_value_that_does_not_pickle_is_this_ranks_own_error(tmp_path: Path) -> None:
    from recgo.distributed._exchange import gather_objects, make_groups

    with one_rank(tmp_path):
        groups = make_groups(None, None, 5, False)
        with pytest.raises((pickle.PicklingError, AttributeError, TypeError)) as got:
            gather_objects(groups, "building it", {"init": lambda: 0})
    assert "pickle" in str(got.value).lower(), got.value
