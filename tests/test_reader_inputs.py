"""Inputs the readers and DataPipeline must read exactly or refuse by name: long lines, numbers out of
float32 range, every file of a source checked at open, stale resume positions, byte order marks,
argument types, NaN parameters, and close() racing next() from another thread."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import recgo
from recgo.data import Column, CriteoSource, CSVSource, SyntheticField, SyntheticSource
from recgo.feature import Feature, FeatureEngine

GOOD = "1" + "\t3" * 13 + "\tab" * 26 + "\n"
C1 = [Feature("C1").mod(10)]


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_line_longer_than_the_read_buffer_is_read_exactly(tmp_path: Path) -> None:
    items = [f"item{i}" for i in range(150_000)]  # a 1.3 MB line
    path = write(tmp_path, "long.csv", "seq,n\na|b,1\n" + "|".join(items) + ",2\nc,3\n")
    feats = [Feature("seq", dtype="bytes").hash(), Feature("n")]
    src = CSVSource(path, [Column("seq", "sequence", type="string"), Column("n")])
    batch = next(recgo.DataPipeline(src, feats, 10, depth=0))
    got = batch.sparse.to_dict()
    want = FeatureEngine(feats[:1])({"seq": [["a", "b"], items, ["c"]]}).to_dict()
    assert got["seq"].lengths().tolist() == [2, len(items), 1]
    assert torch.equal(got["seq"].values(), want["seq"].values())
    assert got["n"].values().tolist() == [1, 2, 3]


@pytest.mark.parametrize(("row", "match"), [
    ("1,1e39,5", r"line 2 column 2 \(d\): \"1e39\" is out of float32 range"),
    ("-1e39,1,5", r"line 2 column 1 \(y\): label \"-1e39\" is out of float32 range"),
])
def test_numbers_beyond_float32_are_malformed(tmp_path: Path, row: str, match: str) -> None:
    path = write(tmp_path, "o.csv", f"y,d,s\n{row}\n0,2,6\n")
    cols = [Column("y", "label"), Column("d", "dense"), Column("s")]
    with pytest.raises(recgo.InvalidInputError, match=r"o\.csv " + match):
        next(recgo.DataPipeline(CSVSource(path, cols), [Feature("s")], 4, depth=0))
    with recgo.DataPipeline(CSVSource(path, cols, skip_bad=True), [Feature("s")], 4, depth=0) as pipe:
        assert [b.dense.tolist() for b in pipe] == [[[2.0]]]
        assert pipe.stats()["skipped"] == 1


def test_every_file_is_checked_when_the_source_opens(tmp_path: Path) -> None:
    good = write(tmp_path, "good.txt", GOOD)
    missing = tmp_path / "missing.txt"
    with pytest.raises(recgo.RecgoIOError, match=r"open .*missing\.txt"):
        CriteoSource([good, missing]).schema()
    with pytest.raises(recgo.RecgoIOError, match=r"open .*missing\.txt"):
        recgo.DataPipeline(CriteoSource([good, write(tmp_path, "good2.txt", GOOD), missing]), C1, 4)
    h1, h2 = write(tmp_path, "h1.csv", "label,s\n1,2\n"), write(tmp_path, "h2.csv", "label,t\n1,2\n")
    header = r'h2\.csv line 1: missing column "s" \(the header has "label", "t"\)'
    with pytest.raises(recgo.InvalidInputError, match=header):
        CSVSource([h1, h2], [Column("label", "label"), Column("s")]).schema()


def test_stale_position_on_a_plain_file_raises(tmp_path: Path) -> None:
    path = write(tmp_path, "day.txt", GOOD * 60)
    pipe = recgo.DataPipeline(CriteoSource(path), C1, 50, depth=0)
    next(pipe)
    pos = pipe.position()
    pipe.close()
    write(tmp_path, "day.txt", GOOD * 40)  # regenerated, shorter
    with pytest.raises(recgo.InvalidInputError, match=r"day\.txt: the position's byte offset \d+ lies past the end"):
        recgo.DataPipeline(CriteoSource(path), C1, 10, position=pos)
    write(tmp_path, "day.txt", "0" + GOOD * 60)  # edited: the offset falls mid-line
    with pytest.raises(recgo.InvalidInputError, match="is not at the start of a line"):
        recgo.DataPipeline(CriteoSource(path), C1, 10, position=pos)


def test_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    path.write_text("label,s\n1,7\n", encoding="utf-8-sig")
    src = CSVSource(path, [Column("label", "label"), Column("s")])
    batch = next(recgo.DataPipeline(src, [Feature("s")], 4, depth=0))
    assert batch.labels.tolist() == [1.0] and batch.sparse.values().tolist() == [7]
    crit = tmp_path / "bom.txt"
    crit.write_text(GOOD, encoding="utf-8-sig")
    assert next(recgo.DataPipeline(CriteoSource(crit), C1, 4, depth=0)).labels.tolist() == [1.0]


@pytest.mark.parametrize(("labels", "text", "match"), [
    (True, "\t3" * 12 + "\tab" * 26, r'test\.txt line 1 column 1 \(label\): label "" is not a number \(the line has 39 '
                                      r"fields, as Criteo's unlabelled test files do: .*read it with labels=False\)"),
    (False, GOOD, r"test\.txt line 1: long line: more than 39 fields \(the line has 40 fields, as Criteo's training "
                  r"files do: .*read it with labels=True, the default\)"),
])
def test_a_criteo_file_read_with_the_wrong_labels_says_so(tmp_path: Path, labels: bool, text: str, match: str) -> None:
    """Before, a test file read with labels gave 'label "" is not a number', and a training file read without
    them 'long line: more than 39 fields', neither naming the cause."""
    path = write(tmp_path, "test.txt", text.rstrip("\n") + "\n")
    with pytest.raises(recgo.InvalidInputError, match=match):
        next(recgo.DataPipeline(CriteoSource(path, labels=labels), C1, 4, depth=0))


def test_a_caller_that_needs_labels_is_asked_for_a_labelled_file(tmp_path: Path) -> None:
    """needs_labels=True (recgo train's sources) words the advice in the reader: recgo train rewrote the
    reader's "read it with labels=False" in Python by its wording, which a rewording would have broken in
    silence. Contradicting labels=False is refused."""
    path = write(tmp_path, "test.txt", "\t3" * 12 + "\tab" * 26 + "\n")
    want = (r"\(the line has 39 fields, as Criteo's unlabelled test files do: I1\.\.I13 and C1\.\.C26, no label; "
            r"training needs the clicks: give a Criteo training file, a label first on each line\)$")
    with pytest.raises(recgo.InvalidInputError, match=want) as got:
        next(recgo.DataPipeline(CriteoSource(path, needs_labels=True), C1, 4, depth=0))
    assert "labels=False" not in str(got.value)
    with pytest.raises(recgo.InvalidInputError, match="needs_labels=True .* contradicts labels=False"):
        CriteoSource(path, labels=False, needs_labels=True)


SYNTH = SyntheticSource(50, [SyntheticField("u", 10)])


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"batch_size": 2.7}, r"batch_size must be an integer, got 2\.7 \(float\)"),
    ({"batch_size": True}, "batch_size must be an integer"),
    ({"batch_size": torch.tensor(2.0)}, "batch_size must be an integer"),
    ({"batch_size": 0}, r"batch size 0 outside \[1, 16777216\]"),
    ({"depth": -1}, r"depth -1 outside \[0, 64\]"),
    ({"depth": 1.5}, "depth must be an integer"),
    ({"threads": 0}, "threads must be at least 1, got 0"),
    ({"threads": 65}, r"threads 65 outside \[1, 64\]"),
])
def test_bad_arguments_are_named(kwargs: dict, match: str) -> None:
    args = {"batch_size": 4, **kwargs}
    with pytest.raises(recgo.InvalidInputError, match=match):
        recgo.DataPipeline(SYNTH, [Feature("u")], **args)


@pytest.mark.parametrize("size", [np.int64(8), torch.tensor(8), 8])
def test_integral_numpy_and_torch_sizes_are_accepted(size: object) -> None:
    pipe = recgo.DataPipeline(SYNTH, [Feature("u")], size, depth=np.int32(1), threads=torch.tensor(1))
    assert pipe.batch_size == 8 and next(pipe).labels.numel() == 8
    pipe.close()


def test_nan_parameter_is_named() -> None:
    src = SyntheticSource(10, [SyntheticField("u", 10, pooling=float("nan"))])
    where = r"synthetic\.fields\['u'\]\.pooling is nan \(NaN and infinities are not allowed\)"
    with pytest.raises(recgo.InvalidInputError, match=r"pipeline spec: source\." + where):
        recgo.DataPipeline(src, [Feature("u")], 4)
    with pytest.raises(recgo.InvalidInputError, match=r"SyntheticSource spec: " + where):
        src.schema()


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5])
def test_synthetic_seed_outside_uint64_is_named(seed: object) -> None:
    src = SyntheticSource(10, [SyntheticField("u", 10)], seed=seed)  # type: ignore[arg-type]
    with pytest.raises(recgo.InvalidInputError, match=r"SyntheticSource: seed must be an integer in \[0, 2\^64\)"):
        src.schema()


def test_sequence_separator_equal_to_the_delimiter_is_refused() -> None:
    with pytest.raises(recgo.InvalidInputError,
                       match=r"column 'q': the sequence separator ',' contains the delimiter ','"):
        CSVSource("x.csv", [Column("label", "label"), Column("q", "sequence", sep=",")])
    CSVSource("x.csv", [Column("q", "sequence", sep=",")], delimiter="\t")  # fine with another delimiter


@pytest.mark.parametrize("depth", [0, 2])
def test_close_racing_next_gives_the_closed_error(depth: int) -> None:
    """close() from another thread while next() runs: that next() finishes, later ones raise the
    closed error, never an internal one about a freed handle."""
    src = SyntheticSource(10_000_000, [SyntheticField("u", 1000, pooling=4.0)])
    for delay in (0.0, 0.002, 0.01, 0.03):
        pipe = recgo.DataPipeline(src, [Feature("u").mod(100)], 256, depth=depth)
        errors: list[BaseException] = []

        def loop(p: recgo.DataPipeline = pipe) -> None:
            try:
                for _ in p:
                    pass
            except BaseException as e:  # noqa: BLE001 (recorded and checked below)
                errors.append(e)

        t = threading.Thread(target=loop)
        t.start()
        time.sleep(delay)
        pipe.close()
        t.join(30)
        assert not t.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], recgo.InvalidInputError), errors
        assert str(errors[0]) == "the pipeline is closed"
    assert recgo.pipeline.goroutines()[1] == 0


def test_run_counts_the_samples_of_the_short_last_batch() -> None:
    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(1, 1)

        def forward(self, sparse: recgo.KeyedJaggedTensor, dense: torch.Tensor) -> torch.Tensor:
            return self.lin(dense)

    model = Tiny()
    src = SyntheticSource(250, [SyntheticField("u", 10)], dense=1)
    tp = recgo.TrainPipeline(model, torch.optim.SGD(model.parameters(), lr=0.1), src, [Feature("u")], 100, depth=0)
    sizes = []
    while True:
        try:
            tp.progress()
        except StopIteration:
            break
        sizes.append(tp.last_batch_size)
    assert sizes == [100, 100, 50]
    tp.close()
