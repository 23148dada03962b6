"""FeatureEngine on real samples (../shared/data): Criteo, Avazu, Taobao behaviour sequences.

Each test builds a realistic spec, feeds the raw columns (byte strings, integers with missing
values as empty bags, behaviour sequences) and checks the fused output against the per-field torch
reference value for value. Skipped when the data folder is absent.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from recgo.feature import Feature, FeatureEngine, encode_strings
from recgo.feature.reference import reference

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
ROWS = 1500


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


def _check(feats: list[Feature], raw: dict, size: int) -> None:
    eng = FeatureEngine(feats)
    engine_batch = {k: encode_strings(v) if isinstance(v, list) else v for k, v in raw.items()}
    out = eng(engine_batch).to_dict()
    ref = reference(feats, raw, size)
    assert list(out) == list(ref)
    for k, (v, l) in ref.items():
        assert torch.equal(out[k].lengths(), l), k
        assert torch.equal(out[k].values(), v), k
    p = eng.plan()
    assert p.calls_after < p.calls_before


def _int_bags(column: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer column with missing values: an empty bag where the field is blank."""
    vals = [int(float(x)) for x in column if x != ""]
    return torch.tensor(vals, dtype=torch.int64), torch.tensor([0 if x == "" else 1 for x in column])


def test_criteo_13_integer_and_26_categorical_fields() -> None:
    path = _need(DATA / "criteo" / "criteo_dac_train_head10109.txt")
    rows = [line.rstrip("\n").split("\t") for _, line in zip(range(ROWS), path.open())]
    assert all(len(r) == 40 for r in rows)
    raw: dict = {}
    feats = []
    bounds = [-1, 0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 16384, 65536, 1 << 20]
    for i in range(13):
        raw[f"I{i + 1}"] = _int_bags([r[1 + i] for r in rows])
        feats.append(Feature(f"I{i + 1}").bucketize(bounds).fill_missing(len(bounds) + 1))
    for i in range(26):
        raw[f"C{i + 1}"] = [[r[14 + i].encode()] if r[14 + i] else [] for r in rows]
        feats.append(Feature(f"C{i + 1}", dtype="bytes").hash(seed=i).mod(10**5).fill_missing(0))
    feats.append(Feature("C1xC2").cross("C1", "C2").mod(10**6))
    _check(feats, raw, len(rows))


def test_avazu_categorical_and_numeric_fields() -> None:
    path = _need(DATA / "avazu" / "avazu_train_rows00001-08999.csv")
    with path.open() as f:
        rows = [r for _, r in zip(range(ROWS), csv.DictReader(f))]
    strings = ["site_id", "site_domain", "site_category", "app_id", "app_domain", "app_category",
               "device_id", "device_ip", "device_model"]
    ints = ["C1", "banner_pos", "device_type", "device_conn_type"] + [f"C{i}" for i in range(14, 22)]
    raw: dict = {}
    feats = [Feature("hour_of_day", input="hour").mod(100)]
    raw["hour"] = torch.tensor([int(r["hour"]) for r in rows])
    for c in strings:
        raw[c] = [r[c].encode() for r in rows]
        feats.append(Feature(c, dtype="bytes").hash().mod(10**6))
    for c in ints:
        raw[c] = torch.tensor([int(r[c]) for r in rows])
        feats.append(Feature(c).filter([-1]).fill_missing(0).hash(seed=7).mod(10**4))
    feats.append(Feature("site_x_app").cross("site_id", "app_id", seed=1).mod(10**6))
    _check(feats, raw, len(rows))


def test_taobao_behaviour_sequences() -> None:
    path = _need(DATA / "taobao" / "taobao_UserBehavior_head.csv")
    events = defaultdict(list)
    with path.open() as f:
        for _, line in zip(range(30000), f):
            parts = line.strip().split(",")
            if len(parts) != 5:
                continue  # the file's last line is truncated (see SOURCE.md)
            user, item, cat, kind, ts = parts
            events[int(user)].append((int(ts), int(item), int(cat), kind))
    users = sorted(events)
    seqs = [sorted(events[u]) for u in users]
    lens = torch.tensor([len(s) for s in seqs])
    assert int(lens.max()) > 3 * float(lens.float().mean())  # long-tailed, as the benchmark assumes
    raw = {
        "user": torch.tensor(users),
        "hist_item": (torch.tensor([e[1] for s in seqs for e in s]), lens),
        "hist_cat": (torch.tensor([e[2] for s in seqs for e in s]), lens),
        "hist_type": [[e[3].encode() for e in s] for s in seqs],
    }
    feats = [
        Feature("user").hash().mod(10**6),
        Feature("hist_item").truncate(50, keep="last").hash().mod(10**6),
        Feature("hist_cat").truncate(20, keep="last").mod(10**4),
        Feature("recent_cat", input="hist_cat").truncate(1, keep="last"),
        Feature("hist_type", dtype="bytes").hash().mod(16),
        Feature("user_x_cat").cross("user", "recent_cat").mod(10**6),
    ]
    _check(feats, raw, len(users))


def test_example_config_equals_the_builder_spec() -> None:
    """The shipped example config (recgo.feature.example_config("criteo")) is the spec test_criteo_* builds in Python."""
    from recgo.feature import load_features

    from recgo.feature import example_config

    path = example_config("criteo")
    feats = load_features(path)
    assert len(feats) == 40 and feats[13].dtype == "bytes"
    bounds = [-1, 0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 16384, 65536, 1 << 20]
    eng = FeatureEngine(path)
    raw = {f"I{i + 1}": (torch.tensor([5, 70000]), torch.tensor([1, 0, 1])) for i in range(13)}
    raw.update({f"C{i + 1}": [[b"68fd1e64"], [], [b"80e26c9b"]] for i in range(26)})
    d = eng({k: encode_strings(v) if isinstance(v, list) else v for k, v in raw.items()}).to_dict()
    assert d["I1"].values().tolist() == [sum(b <= 5 for b in bounds), len(bounds) + 1, sum(b <= 70000 for b in bounds)]
    assert d["C1"].lengths().tolist() == [1, 1, 1] and int(d["C1"].values()[1]) == 0
    assert d["C1xC2"].lengths().tolist() == [1, 1, 1]  # every bag filled before the cross


def test_criteo_reader_config_reads_criteo_source_batches(tmp_path: Path) -> None:
    """example_config("criteo_reader") is criteo.yaml for CriteoSource's int64 categorical values: the
    pipeline takes it (criteo.yaml's bytes inputs are refused there) and a field's values are the
    reference hash of the parsed hex, mod 100k, empties filled."""
    import recgo
    from recgo.data import CriteoSource
    from recgo.feature import example_config, load_features, reference

    ints, cats = ["5"] + [""] * 12, ["68fd1e64", ""] + ["80e26c9b"] * 24
    rows = ["\t".join(["1", *ints, *cats]), "\t".join(["0", *[""] * 13, "", "1a", *[""] * 24])]
    f = tmp_path / "two.txt"
    f.write_text("\n".join(rows) + "\n")
    with pytest.raises(recgo.InvalidInputError, match='"C1" is declared bytes but the source reads int64'):
        next(iter(recgo.DataPipeline(CriteoSource(f), example_config("criteo"), batch_size=2)))
    assert [x.name for x in load_features(example_config("criteo_reader"))] == \
        [x.name for x in load_features(example_config("criteo"))]
    batch = next(iter(recgo.DataPipeline(CriteoSource(f), example_config("criteo_reader"), batch_size=2)))
    d = batch.sparse.to_dict()

    def hashed(hex_value: str, seed: int) -> int:
        return int(torch.remainder(reference.xxh64_int(torch.tensor([int(hex_value, 16)]), seed), 100000)[0])

    assert d["C1"].lengths().tolist() == [1, 1] and d["C1"].values().tolist() == [hashed("68fd1e64", 0), 0]
    assert d["C2"].values().tolist() == [0, hashed("1a", 1)]
    assert d["C3"].values().tolist() == [hashed("80e26c9b", 2), 0]
