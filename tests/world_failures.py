"""The misuse phases of test_distributed.py's spawned worlds: ranks that build different
collections, skip a backward, drift apart in their optimizer schedules, or die or fall silent in
the middle of a step. Each returns what the rank saw (the error's type and message, and how long
it took), for the tests to assert on."""

from __future__ import annotations

import os
import time
from typing import Any

import recgo
from recgo.modules import optim
from sharded_batches import SHARDING, configs, global_batch, local_batch

FAIL_TIMEOUT = 6.0


def skipped_backward(rank: int, world: int) -> dict:
    """The last rank skips its first step's backward (a loop that catches an exception between forward
    and backward): its next forward meets the others' backward, and every rank raises
    InvalidInputError naming both (gloo aborted the processes on the ops' unequal sizes before the
    exchange opened each drive with the step's phase and number)."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    sh = ShardedEmbeddingBagCollection(configs(), SHARDING | {"tp": "hash"}, optimizer=optim.SGD(lr=0.1),
                                       timeout=FAIL_TIMEOUT)
    try:
        for step in range(2):
            out = sh(local_batch(global_batch(step, world), rank)).values()
            if not (step == 0 and rank == world - 1):
                out.sum().backward()
    except recgo.InvalidInputError as exc:
        return {"error_type": type(exc).__name__, "message": str(exc)}
    return {"error_type": None}


def optimizer_drift(rank: int, world: int) -> str | None:
    """The last rank's schedule sets another rate: the next step raises on every rank (each owner and
    data-parallel replica trained on at its own rank's rate)."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    sh = ShardedEmbeddingBagCollection(configs(), SHARDING | {"tp": "hash"}, optimizer=optim.SGD(lr=0.1),
                                       timeout=FAIL_TIMEOUT)
    sh.set_fused_optimizer(optim.SGD(lr=0.7 if rank == world - 1 else 0.1))
    try:
        sh(local_batch(global_batch(0, world), rank)).values().sum().backward()
    except recgo.InvalidInputError as exc:
        return str(exc)
    return None


def mismatch_phase(rank: int, world: int) -> dict:
    """The last rank builds the collection with another table dimension (before the construction's
    agreement, gloo aborted the processes on the first all-to-all's unequal sizes): every rank must
    raise InvalidInputError naming the rank and the table."""
    from recgo.distributed import ShardedEmbeddingBagCollection

    def build(cfgs: list, sharding: dict, **kw: Any) -> dict:
        try:
            ShardedEmbeddingBagCollection(cfgs, sharding, optimizer=optim.SGD(lr=0.1), timeout=FAIL_TIMEOUT, **kw)
        except recgo.InvalidInputError as exc:
            return {"error_type": type(exc).__name__, "message": str(exc)}
        return {"error_type": None}

    cfgs = configs()
    if rank == world - 1:
        cfgs[1] = recgo.EmbeddingBagConfig(40, 16, "tt", ["t1"], pooling="mean")
    got = build(cfgs, SHARDING | {"tp": "hash"})
    last = rank == world - 1
    got["sharding"] = build(configs(), SHARDING | {"tp": "hash", "th": "row_wise" if last else "hash"})
    # hierarchical on the last rank only: the ranks would create different node and rail groups, and
    # waited in gloo's store barrier until a bare 'Wait timeout'
    got["mode"] = build(configs(), SHARDING | {"tp": "hash"}, mode="hierarchical" if last else "flat",
                        nodes=world if last else None)
    got["float_topology"] = build(configs(), SHARDING | {"tp": "hash"}, mode="hierarchical", nodes=world / 2 + 0.5)
    return got


FAIL_TIMEOUT = 6.0


def fail_phase(rank: int, world: int, how: str) -> dict:
    """The last rank dies (os._exit) or stops answering (sleeps) while the others run a step, which
    must raise PeerFailureError within the configured timeout. After a death the survivors also build
    a collection, load a checkpoint and save one (:func:`_after_death`)."""
    from recgo.distributed import PeerFailureError, ShardedEmbeddingBagCollection

    def build() -> Any:
        return ShardedEmbeddingBagCollection(configs(), SHARDING | {"tp": "hash"}, optimizer=optim.SGD(lr=0.1),
                                             timeout=FAIL_TIMEOUT)

    sh = build()
    kjt = local_batch(global_batch(0, world), rank)
    sh(kjt).values().sum().backward()  # a good step first
    ckpt = os.path.join(os.environ["RECGO_TEST_OUT"], f"{how}-ckpt")
    if how == "kill":
        sh.save(ckpt)  # a good checkpoint of the world, for the survivors' load
    if rank == world - 1:
        if how == "kill":
            os._exit(3)
        time.sleep(10 * FAIL_TIMEOUT)
        return {}
    t0 = time.monotonic()
    try:
        sh(kjt).values().sum().backward()
    except PeerFailureError as exc:
        got = {"error_type": type(exc).__name__, "seconds": time.monotonic() - t0, "message": str(exc)}
    else:
        return {"error_type": None}
    if how == "kill":
        got["after"] = _after_death(build, sh, ckpt)
    return got


def _after_death(build: Any, sh: Any, ckpt: str) -> dict:
    """What a survivor of a dead peer sees when it builds a collection (the construction's agreement),
    loads a checkpoint (the load's agreement), saves one and gathers the state dict: each the error's
    type and message."""
    from recgo.distributed import gather_state_dict

    out: dict[str, dict] = {}
    for what, fn in (("build", build), ("load", lambda: sh.load(ckpt)), ("save", lambda: sh.save(ckpt + "-2")),
                     ("gather", lambda: gather_state_dict(sh))):
        try:
            fn()
            out[what] = {"error_type": None}
        except Exception as exc:  # noqa: BLE001 - the test asserts on the class
            out[what] = {"error_type": type(exc).__name__, "message": str(exc)}
    return out
