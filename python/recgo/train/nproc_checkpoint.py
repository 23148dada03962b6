"""Checkpoints of a ``--nproc N`` run: every rank writes its part, rank 0 marks the set complete.

A checkpoint is a folder (the backend's ``--checkpoint`` path) holding one sub-folder per saved step
and a ``latest`` file naming the newest complete one::

    <checkpoint>.<backend>/
        latest                      # "step-00000012": written last, atomically, by rank 0
        step-00000012/
            rank-0-of-2.pt ...      # per rank: step, config, this rank's reader position and history,
                                    # dense weights + dense optimizer (identical on every rank under DDP)
            recgo-shards/           # recgo: ShardedEmbedding(Bag)Collection.save, one file per rank
            torchrec-dcp/           # TorchRec: torch.distributed.checkpoint of DMP's sharded
                                    # state_dict and its fused optimizer's state_dict

The torch backend's replicated tables and their optimizer state live in the rank files. Every rank
saves, then all meet at a barrier, then rank 0 points ``latest`` at the step and removes older steps:
a job stopped while saving leaves the previous complete checkpoint in place.

Resuming needs the same world size (each rank's reader position belongs to its shard of the data;
the trainer's config check refuses another ``nproc``); the recgo shard files themselves re-distribute
onto any world size (:meth:`recgo.distributed.ShardedEmbeddingBagCollection.load`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import RecgoIOError

if TYPE_CHECKING:
    from .loop import Trainer

LATEST = "latest"


def _barrier() -> None:
    import torch.distributed as dist

    dist.barrier()


def _rank_file(step_dir: Path, rank: int, size: int) -> Path:
    return step_dir / f"rank-{rank}-of-{size}.pt"


def save_ranks(trainer: "Trainer", path: str | os.PathLike[str]) -> Path:
    """Write ``trainer``'s part of a checkpoint of step ``trainer.step`` under folder ``path`` (a
    collective: every rank calls it); returns the step's folder."""
    from ..modules import save_state

    world = trainer.world
    root = Path(path)
    step_dir = root / f"step-{trainer.step:08d}"
    step_dir.mkdir(parents=True, exist_ok=True)
    sparse = trainer.model.sparse
    state = trainer.state()
    state.pop("model")
    state["dense"] = trainer.model.dense.module.state_dict()
    state["world_size"] = world.size
    if sparse.backend == "recgo":
        sparse.module.save(step_dir / "recgo-shards")
        state["sparse_optimizer"] = {}
    elif sparse.backend == "torchrec":
        import torch.distributed.checkpoint as dcp

        dcp.save({"model": sparse.module.state_dict(), "optim": sparse.module.fused_optimizer.state_dict()},
                 checkpoint_id=str(step_dir / "torchrec-dcp"))
        state["sparse_optimizer"] = {}
    else:
        state["sparse"] = sparse.module.state_dict()
    save_state(state, _rank_file(step_dir, world.rank, world.size))
    _barrier()
    if world.rank == 0:
        tmp = root / f".{LATEST}.tmp"
        tmp.write_text(step_dir.name)
        os.replace(tmp, root / LATEST)
        for old in root.glob("step-*"):
            if old.name != step_dir.name and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
    _barrier()
    return step_dir


def exists(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a complete ``--nproc`` checkpoint."""
    return (Path(path) / LATEST).is_file()


def saved_step(path: str | os.PathLike[str]) -> int | None:
    """The step of the newest complete checkpoint under ``path`` (from ``latest``); None without one."""
    try:
        return int(_latest(Path(path)).name.rsplit("-", 1)[-1])
    except (RecgoIOError, ValueError):
        return None


STEP_DIR = "_step_dir"  # key load_rank_state adds: the step folder the state was read from


def _latest(root: Path) -> Path:
    try:
        return root / (root / LATEST).read_text().strip()
    except OSError as exc:
        raise RecgoIOError(f"{root}: no complete --nproc checkpoint ({LATEST} is missing): {exc}") from exc


def load_rank_state(world: Any, path: str | os.PathLike[str]) -> dict[str, Any]:
    """The file of rank ``world.rank`` (of ``world.size``) of the newest complete checkpoint under
    ``path`` (step, config, optimizers, reader position, history, dense weights); ``RecgoIOError`` when
    the folder holds no complete checkpoint or one written by another world size."""
    from ..modules import load_state

    step_dir = _latest(Path(path))
    rank_file = _rank_file(step_dir, world.rank, world.size)
    if not rank_file.is_file():
        found = sorted(p.name for p in step_dir.glob("rank-*-of-*.pt"))
        raise RecgoIOError(f"{step_dir}: no {rank_file.name} (the checkpoint holds {found}; resume with the "
                           f"--nproc it was written with)")
    state = load_state(rank_file)
    state[STEP_DIR] = str(step_dir)  # restore_model reads the sparse half from the same step
    return state


def restore_model(trainer: "Trainer", state: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Load the dense weights of ``state`` (from :func:`load_rank_state`) and the sparse half of the
    checkpoint under ``path`` into ``trainer``'s model (a collective for the recgo and TorchRec
    backends; the TorchRec fused optimizer's state comes back here too). The sparse half is read from
    the step ``state`` came from, not from whatever ``latest`` names by now."""
    step_dir = Path(state[STEP_DIR]) if STEP_DIR in state else _latest(Path(path))
    sparse = trainer.model.sparse
    trainer.model.dense.module.load_state_dict(state["dense"])
    if sparse.backend == "recgo":
        sparse.module.load(step_dir / "recgo-shards")
    elif sparse.backend == "torchrec":
        import torch.distributed.checkpoint as dcp

        sd, osd = sparse.module.state_dict(), sparse.module.fused_optimizer.state_dict()
        dcp.load({"model": sd, "optim": osd}, checkpoint_id=str(step_dir / "torchrec-dcp"))
        sparse.module.load_state_dict(sd)
        sparse.module.fused_optimizer.load_state_dict(osd)
    else:
        sparse.module.load_state_dict(state["sparse"])
