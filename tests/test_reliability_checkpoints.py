"""Checkpoint integrity (issue 9): EmbeddingBagCollection.save/load carry CRC-32s of every tensor and of
the metadata; damaged, truncated and foreign files raise RecgoIOError naming the file and the part,
and every single-bit flip of a small checkpoint is detected or provably loads identically."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import recgo
from recgo import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
from recgo.errors import RecgoIOError
from recgo.modules import load_checkpoint, optim, save_checkpoint


def small(kind: str) -> EmbeddingBagCollection:
    """A tiny trained collection: a fixed 4x2 table, or a dynamic one with a few IDs, with Adagrad."""
    dyn = recgo.DynamicConfig(seed=1) if kind == "dynamic" else None
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(4, 2, "t", ["f"], dynamic=dyn)],
                                 optimizer=optim.Adagrad(lr=0.1), seed=0)
    ids = torch.tensor([1, 3, 2, 1]) if kind == "fixed" else torch.tensor([50, 9, 7, 50])
    out = ebc(KeyedJaggedTensor(["f"], ids, torch.tensor([2, 2]))).values()
    (out * torch.tensor([[1.0, -2.0], [0.5, 3.0]])).sum().backward()
    return ebc


def flat(sd: dict[str, torch.Tensor]) -> list[tuple[str, str, tuple[int, ...], bytes]]:
    return [(k, str(v.dtype), tuple(v.shape), v.detach().contiguous().numpy().tobytes(), v.requires_grad) for k, v in sd.items()]


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch.load's warnings about the damaged pickles
@pytest.mark.parametrize("kind", ["fixed", "dynamic"])
def test_every_single_bit_flip_is_detected_or_loads_identically(tmp_path: Path, kind: str) -> None:
    ebc = small(kind)
    path = tmp_path / "ck.pt"
    ebc.save(path)
    data = path.read_bytes()
    want = flat(ebc.state_dict())
    assert flat(load_checkpoint(path)) == want
    bad = tmp_path / "bad.pt"
    detected = identical = 0
    # Bytes spread evenly over the whole file (every one for files up to 600 bytes), each with one bit
    # flipped, the bit rotating with the position: a bounded sweep (about 600 loads) that reaches
    # every record, zip header and the pickled metadata.
    stride = -(-len(data) // 600)
    for pos in range(0, len(data), stride):
        flipped = bytearray(data)
        flipped[pos] ^= 1 << ((pos // stride) % 8)
        bad.write_bytes(bytes(flipped))
        try:
            got = load_checkpoint(bad)
        except RecgoIOError as exc:
            assert str(bad) in str(exc), exc
            detected += 1
            continue
        assert flat(got) == want, f"a flip at byte {pos} loaded different contents"
        identical += 1
    assert detected > (detected + identical) // 4, (detected, identical)


@pytest.mark.parametrize("kind", ["fixed", "dynamic"])
def test_corrupted_tensor_names_the_entry_and_leaves_the_collection(tmp_path: Path, kind: str) -> None:
    ebc = small(kind)
    sd = {k: v.clone() for k, v in ebc.state_dict().items()}
    path = tmp_path / "ck.pt"
    ebc.save(path)
    obj = torch.load(path, weights_only=True)
    obj["state_dict"]["embedding_bags.t.weight"].view(-1)[0] += 1.0  # rewrite with the old checksums
    torch.save(obj, path)
    fresh = small(kind)
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    with pytest.raises(RecgoIOError, match=r"ck\.pt: checksum mismatch in checkpoint entry 'embedding_bags\.t\.weight'"):
        fresh.load(path)
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, before[k]), k
    save_checkpoint(sd, path)
    fresh.load(path)
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, sd[k]), k


def test_truncated_empty_and_foreign_files_raise_recgo_io_error(tmp_path: Path) -> None:
    ebc = small("fixed")
    path = tmp_path / "ck.pt"
    ebc.save(path)
    data = path.read_bytes()
    cut = tmp_path / "cut.pt"
    for n in (0, 1, 30, len(data) // 2, len(data) - 1):
        cut.write_bytes(data[:n])
        with pytest.raises(RecgoIOError, match=r"cut\.pt: cannot read the checkpoint: not a readable recgo checkpoint"):
            ebc.load(cut)
    # a dynamic table's file cut in its archive's directory made torch raise OSError EINVAL, shown as if the
    # file could not be opened ("cannot read the checkpoint: OSError: Invalid argument")
    dyn = small("dynamic")
    dyn.save(path)
    data = path.read_bytes()
    for n in range(len(data) - 380, len(data), 22):
        cut.write_bytes(data[:n])
        with pytest.raises(RecgoIOError, match=r"cut\.pt: cannot read the checkpoint: not a readable recgo checkpoint"):
            dyn.load(cut)
    cut.write_bytes(b"\xff\xfe not a checkpoint \x00" * 10)
    with pytest.raises(RecgoIOError, match="cut.pt"):
        ebc.load(cut)
    with pytest.raises(RecgoIOError, match="missing.pt"):
        ebc.load(tmp_path / "missing.pt")
    plain = tmp_path / "plain.pt"
    torch.save(ebc.state_dict(), plain)
    with pytest.raises(RecgoIOError, match="not a recgo checkpoint"):
        ebc.load(plain)
    ebc.load_state_dict(torch.load(plain, weights_only=True))  # the documented way for plain files


def test_a_failed_save_names_the_target_not_the_temporary_file(tmp_path: Path) -> None:
    ebc = small("fixed")
    with pytest.raises(RecgoIOError, match=r"no-such-folder/ck\.pt: cannot write the checkpoint") as err:
        ebc.save(tmp_path / "no-such-folder" / "ck.pt")
    assert ".tmp" not in str(err.value)
    (tmp_path / "taken").mkdir()
    with pytest.raises(RecgoIOError, match=r"taken: cannot write the checkpoint"):  # a folder in the file's place
        ebc.save(tmp_path / "taken")
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]  # no temporary file left behind


def test_dynamic_checkpoint_holds_only_the_rows_in_use(tmp_path: Path) -> None:
    """A 2M-row bound with a handful of IDs writes a small file, and round-trips bit-exactly."""
    def make() -> EmbeddingBagCollection:
        return EmbeddingBagCollection([EmbeddingBagConfig(2_000_000, 16, "t", ["f"], dynamic=recgo.DynamicConfig())],
                                      optimizer=optim.Adam(lr=0.01), seed=0)

    a = make()
    for s in range(3):
        ids = torch.arange(10) * 1000 + s
        out = a(KeyedJaggedTensor(["f"], ids, torch.tensor([5, 5]))).values()
        out.sum().backward()
    path = tmp_path / "dyn.pt"
    a.save(path)
    assert path.stat().st_size < 64 * 1024, path.stat().st_size
    sd = a.state_dict()
    assert sd["embedding_bags.t.weight"].shape == (30, 16)
    assert sd["embedding_bags.t.optimizer_state"].shape == (30, 32)
    b = make()
    b.load(path)
    for k, v in b.state_dict().items():
        assert torch.equal(v, sd[k]), k
    assert recgo.dynamic.stats(b, "t").resident_bytes < 8 << 20, "loading committed only the rows in use"
    batch = KeyedJaggedTensor(["f"], torch.tensor([1000, 5]), torch.tensor([1, 1]))
    for m in (a, b):
        m.eval()
    assert torch.equal(a(batch).values(), b(batch).values())


def test_dynamic_table_file_round_trip_and_every_bit_flip(tmp_path: Path) -> None:
    """recgo.dynamic.save/load: the engine's checksummed per-table file."""
    a = small("dynamic")
    path = tmp_path / "t.dyn"
    recgo.dynamic.save(a, "t", path)
    want = flat(a.state_dict())
    b = small("dynamic")
    b(KeyedJaggedTensor(["f"], torch.tensor([123]), torch.tensor([1, 0]))).values().sum().backward()
    recgo.dynamic.load(b, "t", path)
    assert flat(b.state_dict()) == want
    data = path.read_bytes()
    bad = tmp_path / "bad.dyn"
    # Every byte, one bit each (rotating); the Go tests flip every bit of such files.
    for pos in range(len(data)):
        flipped = bytearray(data)
        flipped[pos] ^= 1 << (pos % 8)
        bad.write_bytes(bytes(flipped))
        with pytest.raises(RecgoIOError, match="bad.dyn"):
            recgo.dynamic.load(b, "t", bad)
    assert flat(b.state_dict()) == want, "failed loads left the table unchanged"
    for n in (0, 10, len(data) // 2, len(data) - 1):
        bad.write_bytes(data[:n])
        with pytest.raises(RecgoIOError, match="bad.dyn"):
            recgo.dynamic.load(b, "t", bad)


def test_nested_training_state_round_trips_and_detects_damage(tmp_path: Path) -> None:
    from recgo.modules import load_state, save_state

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "position": {"row": 7, "file": 0},
             "betas": (0.9, 0.99), "none": None, "name": "x"}
    save_state(state, tmp_path / "s.pt")
    back = load_state(tmp_path / "s.pt")
    assert back["position"] == {"row": 7, "file": 0} and back["betas"] == (0.9, 0.99) and back["none"] is None
    assert set(back["optimizer"]["state"]) == {0, 1}  # int keys survive
    fresh = torch.optim.Adam(torch.nn.Linear(3, 2).parameters())
    fresh.load_state_dict(back["optimizer"])
    assert torch.equal(back["model"]["weight"], model.weight.detach())
    raw = bytearray((tmp_path / "s.pt").read_bytes())
    raw[len(raw) // 2] ^= 0x10
    (tmp_path / "bad.pt").write_bytes(bytes(raw))
    try:
        again = load_state(tmp_path / "bad.pt")
    except recgo.RecgoIOError:
        return
    assert torch.equal(again["model"]["weight"], model.weight.detach())  # a flip in padding changes nothing


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_checkpoint_files_follow_the_umask(tmp_path: Path, mask: int) -> None:
    """save_state writes through a private temporary file; the checkpoint still gets the mode any file
    open() makes (0666 less the umask), not mkstemp's 0600."""
    import os

    from recgo.modules import save_state

    old = os.umask(mask)
    try:
        save_state({"w": torch.ones(3)}, tmp_path / "ck")
    finally:
        os.umask(old)
    assert (tmp_path / "ck").stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_save_removes_the_temporary_files_of_killed_writers(tmp_path: Path) -> None:
    """A save killed mid-write (a preempted job: SIGKILL runs no cleanup) left a checkpoint-sized
    temporary file beside the target, and later saves never removed it. A save now removes those of a
    dead writer of this machine untouched for five minutes and any older than a day, and keeps a live
    writer's, a recent one's and another machine's (a host name with dots is read whole)."""
    import os
    import socket
    import subprocess
    import time

    from recgo import dynamic

    host = socket.gethostname()
    dead = subprocess.Popen(["true"])  # a process that has ended: its pid is free
    dead.wait()
    live = subprocess.Popen(["sleep", "30"])
    try:
        for target, save in (("ck.pt", lambda p: small("fixed").save(p)),
                             ("table.bin", lambda p: dynamic.save(small("dynamic"), "t", p))):
            names = {"dead": f".{target}.{host}-{dead.pid}.x1.tmp", "live": f".{target}.{host}-{live.pid}.x2.tmp",
                     "just_dead": f".{target}.{host}-{dead.pid}.x6.tmp",  # maybe a live writer in another pid namespace
                     "dotted_host": f".{target}.{host}.example.org-{dead.pid}.x7.tmp",  # another machine
                     "old_foreign": f".{target}.elsewhere-1.x3.tmp", "new_foreign": f".{target}.elsewhere-2.x4.tmp",
                     "old_unnamed": f".{target}.abc123.tmp", "other_target": f".other.pt.{host}-{dead.pid}.x5.tmp"}
            for n in names.values():
                (tmp_path / n).write_bytes(b"partial")
            now = time.time()
            for k, age in (("old_foreign", 2 * 86400), ("old_unnamed", 2 * 86400), ("dead", 600), ("live", 600),
                           ("dotted_host", 600), ("other_target", 600)):
                os.utime(tmp_path / names[k], (now - age, now - age))
            save(tmp_path / target)
            left = {k for k, n in names.items() if (tmp_path / n).exists()}
            assert left == {"live", "just_dead", "dotted_host", "new_foreign", "other_target"}, (target, left)
            assert not [n for n in os.listdir(tmp_path) if n.startswith(f".{target}.{host}-{os.getpid()}.")]
            for n in names.values():
                (tmp_path / n).unlink(missing_ok=True)
    finally:
        live.kill()
        live.wait()
