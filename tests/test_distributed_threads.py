"""Sharded collections driven from several threads of each rank (world 2, gloo). The collections of a
process share their process groups and gloo pairs each rank's ops in the order it issues them, so
two threads' steps used to interleave their all-to-alls: the peer met ops of other sizes and gloo
aborted the process (``EnforceNotMet``), or read a step's data as its header. Now each rank runs a
step's ops, and a save or load, one at a time (``_exchange.COLLECTIVES``): whole steps meet whole
steps, and ranks that run them in other orders raise ``InvalidInputError`` naming both, as one
thread calling the collections in other orders does (docs/sharding.md)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

import recgo
from recgo.distributed import PeerFailureError, ShardedEmbeddingBagCollection
from recgo.errors import InvalidInputError
from recgo.modules import optim
from spawned import spawn
from test_pipeline_shard import BATCH, FEATURES, SOURCE

TIMEOUT = 10  # the collections' timeout (seconds): a thread left waiting for its peer raises by then


def _collection(table: str, feature: str) -> ShardedEmbeddingBagCollection:
    config = recgo.EmbeddingBagConfig(name=table, embedding_dim=4, num_embeddings=300, feature_names=[feature])
    return ShardedEmbeddingBagCollection([config], "hash", optimizer=optim.SGD(lr=0.1), seed=3, timeout=TIMEOUT)


def _run_threads(jobs: dict[str, Callable[[], None]]) -> dict[str, str]:
    """Run the jobs on threads of their own; each one's outcome: "ok" or its exception's type name."""
    out: dict[str, str] = {}

    def run(name: str, job: Callable[[], None]) -> None:
        try:
            job()
            out[name] = "ok"
        except (InvalidInputError, PeerFailureError) as exc:
            out[name] = type(exc).__name__
        except BaseException as exc:  # anything else is a failure of the test
            out[name] = f"unexpected {type(exc).__name__}: {exc}"

    threads = [threading.Thread(target=run, args=item, daemon=True) for item in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(3 * TIMEOUT)
    out["alive"] = str(sum(t.is_alive() for t in threads))
    return out


def _two_collections_from_two_threads(rank: int, world: int) -> dict[str, Any]:
    """Each rank trains two collections, each from a thread of its own, at once."""
    batches = [b.sparse for _, b in zip(range(20), recgo.DataPipeline(SOURCE, FEATURES, BATCH, depth=0))]
    first, second = _collection("a", "u"), _collection("b", "i")

    def train(coll: ShardedEmbeddingBagCollection) -> Callable[[], None]:
        def job() -> None:
            for kjt in batches:
                coll(kjt).values().sum().backward()
        return job

    t0 = time.monotonic()
    out: dict[str, Any] = _run_threads({"first": train(first), "second": train(second)})
    out["seconds"] = time.monotonic() - t0
    return out


def test_two_collections_trained_from_two_threads_raise_instead_of_aborting(tmp_path: Path) -> None:
    results = spawn(_two_collections_from_two_threads, 2, tmp_path, wait=120)
    for rank, res in enumerate(results):
        assert "error" not in res, f"rank {rank}: {res['error']}"  # the process lived to report
        assert res["alive"] == "0", res
        assert res["seconds"] < 3 * TIMEOUT, res
        for name in ("first", "second"):
            assert res[name] in ("ok", "InvalidInputError", "PeerFailureError"), (rank, name, res[name])
