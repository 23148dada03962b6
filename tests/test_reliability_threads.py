"""The concurrency contract of EmbeddingBagCollection (issue 9; see the module docstring of
recgo.modules.embedding): concurrent forwards are exact, fused steps are atomic, forward contexts
belong to their autograd graph, and N threads x M steps equal a serial run where the contract says so."""

from __future__ import annotations

import gc
import threading

import pytest
import torch

from recgo import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
from recgo.errors import InvalidInputError
from recgo.modules import optim
from threaded import run_threads

TABLES = [EmbeddingBagConfig(400, 16, "t0", ["a", "b"]), EmbeddingBagConfig(300, 8, "t1", ["c"], pooling="mean")]


def batch(seed: int, lo: int = 0, span: int = 300, n: int = 16) -> KeyedJaggedTensor:
    """A batch of n samples whose IDs are in [lo, lo + span)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 5, (3 * n,), generator=gen)
    values = lo + torch.randint(0, span, (int(lengths.sum()),), generator=gen)
    return KeyedJaggedTensor(["a", "b", "c"], values, lengths)


def grad_for(seed: int, shape: torch.Size) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(10_000 + seed))


def state(ebc: EmbeddingBagCollection) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in ebc.state_dict().items()}


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_concurrent_forwards_on_one_collection_are_exact(grad: bool) -> None:
    ebc = EmbeddingBagCollection(TABLES, seed=1)
    batches = [batch(s, n=4) for s in range(8)]  # one batch size: every forward competes for one buffer
    with torch.no_grad():
        want = [ebc(b).values().clone() for b in batches]
    wrong = []

    def body(i: int) -> None:
        with torch.set_grad_enabled(grad):
            for step in range(400):
                k = (i + step) % len(batches)
                out = ebc(batches[k]).values()
                if not torch.equal(out.detach(), want[k]):
                    wrong.append((i, step))
                del out  # frees the output buffer for reuse by the next forward

    run_threads(8, body, switch_interval=None)
    assert not wrong, f"{len(wrong)} of 3200 concurrent forwards pooled wrong rows"


def test_many_training_threads_each_with_pending_forwards() -> None:
    """32 threads, each holding its graph across the others' forwards: no backward loses its context."""
    ebc = EmbeddingBagCollection(TABLES, seed=2)
    w0 = {c.name: ebc.embedding_bags[c.name].weight.detach().clone() for c in TABLES}
    grads: dict[int, list[torch.Tensor]] = {}
    all_forwarded = threading.Barrier(32)

    def body(i: int) -> None:
        out = ebc(batch(i)).values()
        all_forwarded.wait()  # 32 graphs pending at once
        g = grad_for(i, out.shape)
        gw = torch.autograd.grad((out * g).sum(), [ebc.embedding_bags[c.name].weight for c in TABLES])
        grads[i] = list(gw)

    run_threads(32, body)
    for i in range(32):  # each thread's gradient equals its serial one
        out = ebc(batch(i)).values()
        want = torch.autograd.grad((out * grad_for(i, out.shape)).sum(),
                                   [ebc.embedding_bags[c.name].weight for c in TABLES])
        for a, b in zip(grads[i], want):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    for c in TABLES:
        assert torch.equal(ebc.embedding_bags[c.name].weight.detach(), w0[c.name])
    gc.collect()
    assert len(ebc._contexts) == 0, "every context was freed with its graph"


def test_gradient_accumulation_over_many_micro_batches() -> None:
    fused = EmbeddingBagCollection(TABLES, optimizer=optim.SGD(lr=0.1), seed=3)
    ref = EmbeddingBagCollection(TABLES, optimizer=optim.SGD(lr=0.1), seed=3)
    loss = torch.zeros(())
    for s in range(20):  # 20 forwards pending before the one backward
        out = fused(batch(s)).values()
        loss = loss + (out * grad_for(s, out.shape)).sum()
    loss.backward()
    for s in range(20):  # the same updates one micro-batch at a time: SGD's updates add up
        out = ref(batch(s)).values()
        (out * grad_for(s, out.shape)).sum().backward()
    for c in TABLES:
        torch.testing.assert_close(fused.embedding_bags[c.name].weight, ref.embedding_bags[c.name].weight,
                                   rtol=1e-5, atol=1e-6)
    assert int(fused.embedding_bags.t0.optimizer_step) == 20


def test_dropped_graphs_free_their_contexts() -> None:
    ebc = EmbeddingBagCollection(TABLES, seed=4)
    outs = [ebc(batch(s)).values() for s in range(50)]
    assert len(ebc._contexts) == 50
    outs[7].sum().backward()
    assert len(ebc._contexts) == 49
    with pytest.raises((RuntimeError, InvalidInputError), match="second time|no saved forward"):
        outs[7].sum().backward(retain_graph=False)
    del outs
    gc.collect()
    assert len(ebc._contexts) == 0


def train_steps(ebc: EmbeddingBagCollection, thread: int, steps: int, disjoint: bool) -> None:
    for s in range(steps):
        seed = thread * 1000 + s
        b = batch(seed, lo=40 * thread, span=40) if disjoint else batch(seed)
        out = ebc(b).values()
        (out * grad_for(seed, out.shape)).sum().backward()


N, M = 6, 12


@pytest.mark.parametrize("opt", [optim.SGD(lr=0.2), optim.Adagrad(lr=0.2), optim.RowWiseAdagrad(lr=0.2)],
                         ids=lambda o: type(o).__name__)
def test_stress_shared_collection_disjoint_rows_equals_serial(opt: optim.FusedOptimizer) -> None:
    """N threads x M fused steps on one collection, each thread on its own rows: bit-equal to serial."""
    shared = EmbeddingBagCollection(TABLES, optimizer=opt, seed=5)
    serial = EmbeddingBagCollection(TABLES, optimizer=opt, seed=5)
    run_threads(N, lambda i: train_steps(shared, i, M, disjoint=True))
    for i in range(N):
        train_steps(serial, i, M, disjoint=True)
    a, b = state(shared), state(serial)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert int(shared.embedding_bags.t0.optimizer_step) == N * M


def test_stress_shared_collection_overlapping_rows_steps_are_atomic() -> None:
    """Overlapping rows with SGD: the updates commute, so any serial order gives the same weights (up to
    float rounding), and the step counter counts every step (a torn increment would lose some)."""
    shared = EmbeddingBagCollection(TABLES, optimizer=optim.SGD(lr=0.05), seed=6)
    serial = EmbeddingBagCollection(TABLES, optimizer=optim.SGD(lr=0.05), seed=6)
    run_threads(N, lambda i: train_steps(shared, i, M, disjoint=False))
    for i in range(N):
        train_steps(serial, i, M, disjoint=False)
    for c in TABLES:
        torch.testing.assert_close(shared.embedding_bags[c.name].weight, serial.embedding_bags[c.name].weight,
                                   rtol=1e-5, atol=1e-5)
    assert int(shared.embedding_bags.t0.optimizer_step) == N * M


def test_stress_separate_collections_equal_serial() -> None:
    """N threads x M Adam steps, one collection each: every one bit-equal to its serial twin."""
    mine = [EmbeddingBagCollection(TABLES, optimizer=optim.Adam(lr=0.01), seed=7) for _ in range(N)]
    run_threads(N, lambda i: train_steps(mine[i], i, M, disjoint=False))
    for i in range(N):
        twin = EmbeddingBagCollection(TABLES, optimizer=optim.Adam(lr=0.01), seed=7)
        train_steps(twin, i, M, disjoint=False)
        a, b = state(mine[i]), state(twin)
        for k in a:
            assert torch.equal(a[k], b[k]), (i, k)


def test_compiled_gradient_accumulation_keeps_every_context() -> None:
    """Under torch.compile(fullgraph=True, aot_eager) the ticket is a saved tensor of the compiled
    graph: 12 compiled micro-batches pending before one backward all update, as in eager."""
    compiled_ebc = EmbeddingBagCollection(TABLES, optimizer=optim.SGD(lr=0.1), seed=8)
    eager_ebc = EmbeddingBagCollection(TABLES, optimizer=optim.SGD(lr=0.1), seed=8)

    def loss(ebc: EmbeddingBagCollection, kjt: KeyedJaggedTensor, g: torch.Tensor) -> torch.Tensor:
        return (ebc(kjt).values() * g).sum()

    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)
    total_c, total_e = torch.zeros(()), torch.zeros(())
    for s in range(12):  # one batch shape: one compilation
        ids = torch.randint(0, 300, (24,), generator=torch.Generator().manual_seed(s))
        b = KeyedJaggedTensor(["a", "b", "c"], ids, torch.full((12,), 2))
        g = grad_for(s, torch.Size([4, 40]))
        total_c = total_c + compiled(compiled_ebc, b, g)
        total_e = total_e + loss(eager_ebc, b, g)
    assert len(compiled_ebc._contexts) == 12
    total_c.backward()
    total_e.backward()
    for c in TABLES:
        torch.testing.assert_close(compiled_ebc.embedding_bags[c.name].weight, eager_ebc.embedding_bags[c.name].weight)
    assert int(compiled_ebc.embedding_bags.t0.optimizer_step) == 12
    assert len(compiled_ebc._contexts) == 0


def test_save_while_another_thread_trains_writes_one_consistent_step(tmp_path) -> None:
    """save() wrote views of moving tables: the checksums, taken first, disagreed with the bytes torch
    then wrote (13 of 15 files refused to load), and the tables could come from different steps. It now
    copies every table under the engine's lock first."""
    tables = [EmbeddingBagConfig(20000, 64, "t0", ["a", "b"]), EmbeddingBagConfig(300, 8, "t1", ["c"])]
    ebc = EmbeddingBagCollection(tables, optimizer=optim.Adagrad(lr=0.01), seed=1)
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 4, (3 * 512,), generator=gen)
    batch = KeyedJaggedTensor(["a", "b", "c"], torch.randint(0, 300, (int(lengths.sum()),), generator=gen), lengths)
    stop = threading.Event()

    def train() -> None:
        while not stop.is_set():
            ebc(batch).values().sum().backward()

    worker = threading.Thread(target=train)
    worker.start()
    try:
        steps = []
        for i in range(8):
            ebc.save(tmp_path / f"c{i}.pt")
            fresh = EmbeddingBagCollection(tables, optimizer=optim.Adagrad(lr=0.01), seed=2)
            fresh.load(tmp_path / f"c{i}.pt")  # raised "checksum mismatch" before
            s = fresh.state_dict()
            steps.append((int(s["embedding_bags.t0.optimizer_step"]), int(s["embedding_bags.t1.optimizer_step"])))
    finally:
        stop.set()
        worker.join()
    assert all(a == b for a, b in steps), steps  # every batch updates both tables: one step of both
    assert steps[-1][0] > steps[0][0], steps  # training ran meanwhile
