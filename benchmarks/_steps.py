"""Interleaved training steps of several backends on the same few batches (end_to_end*.py,
torchrec_cpu_paths.py)."""

from __future__ import annotations

from typing import Any, Callable


def first_batches(source: Any, n: int = 4) -> list[Any]:
    """The first n prepared batches of ``source`` (serial schedule), reused for every backend's steps."""
    stream = source.stream(depth=0)
    try:
        return [next(stream) for _ in range(n)]
    finally:
        stream.close()


def steppers(trainers: dict[str, Any], batches: list[Any]) -> dict[str, Callable[[], None]]:
    """One zero-argument step per backend; each cycles through ``batches`` on its own."""
    state = {b: 0 for b in trainers}

    def stepper(b: str) -> Callable[[], None]:
        def step() -> None:
            trainers[b].train_step(batches[state[b] % len(batches)], timed=False)
            state[b] += 1
        return step

    return {b: stepper(b) for b in trainers}


def embedding_only_loss(batch: int, dim: int, max_len: int) -> Callable[[dict], Any]:
    """A fixed linear function of BST's inputs (the summed history's padded view, target, user) from the
    sequence lookups ``{key: JaggedTensor}`` of any backend: the stand-in for the Transformer in the
    embedding-only steps. Its random weights are seeded, so every caller gets the same function."""
    import torch

    from recgo.train.models import bst_inputs

    g = torch.Generator().manual_seed(0)
    w = [torch.randn(batch, max_len, dim, generator=g), torch.randn(batch, dim, generator=g),
         torch.randn(batch, dim, generator=g)]

    def loss(emb: dict) -> Any:
        hist, _, target, user = bst_inputs(emb, max_len)
        return (hist * w[0]).sum() + (target * w[1]).sum() + (user * w[2]).sum()
    return loss


def embedding_only_step(sparse: Any, batches: list[Any], dim: int, max_len: int) -> Callable[[], None]:
    """A step of a sparse half (``recgo.train.backends.SparseArch``) alone, cycling over ``batches``:
    lookups, :func:`embedding_only_loss`, backward and the sparse update; no Transformer."""
    loss = embedding_only_loss(batches[0].size, dim, max_len)
    state = [0]

    def step() -> None:
        batch = batches[state[0] % len(batches)]
        state[0] += 1
        sparse.zero_grad_sparse()
        loss(sparse.sequences(sparse.prepare(batch.sparse))).backward()
        sparse.step()
    return step
