"""Buffers sized by the batch size alone, and the size a capacity error names.

A structural group (truncate, filter, fill_missing, cross) allocated its new lengths (M·B words) and
offsets (M·(B+1)), and every group the offsets of the features it reads, before anything was
checked; with empty bags no values check came later either. 128 features truncating one input of
4,194,304 empty bags (a 32 MiB lengths tensor) asked Go for 4 GiB of offsets at once: under a memory
limit Go died with its fatal "out of memory", killing Python. A cross's capacity error named the limit
but not the values the batch would have needed.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import recgo
from recgo.feature import Feature, FeatureEngine

_CAPPED = r"""
import json, resource, sys
import torch
import recgo
from recgo.feature import Feature, FeatureEngine
M, B = 128, 1 << 22
ops = {"truncate": lambda f: f.truncate(1), "position": lambda f: f.position()}
engines = {k: FeatureEngine([op(Feature(f"f{i}", input="a")) for i in range(M)]) for k, op in ops.items()}
batch = {"a": (torch.empty(0, dtype=torch.int64), torch.zeros(B, dtype=torch.int64))}
vm = int([l for l in open("/proc/self/status") if l.startswith("VmSize")][0].split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (2 << 30),) * 2)  # 2 GiB more than this process maps now
out = {}
for k, eng in engines.items():
    try:
        out[k] = ["ran", eng(batch).values().numel()]
    except Exception as e:
        out[k] = [type(e).__name__, str(e)]
print(json.dumps(out))
"""


def test_a_fan_out_over_a_large_batch_of_empty_bags_raises_and_the_process_survives() -> None:
    """In a child process under an address-space limit 2 GiB above its own: the old engine died there
    (rc -6, "fatal error: out of memory"); now each group is refused before its buffers exist."""
    run = subprocess.run([sys.executable, "-c", _CAPPED], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    per = 2**22 + 1
    for op in ("truncate", "position"):
        assert got[op] == ["CapacityError", f"fused {op} group of 128 features: {128 * per} offsets in all ({per} per "
                           "feature for the batch of 4194304) would exceed the limit of 268435456 values per buffer; "
                           "raise max_values or split the batch"]


def test_offsets_past_max_values_are_refused_and_a_batch_within_runs() -> None:
    eng = FeatureEngine([Feature(f"f{i}", input="a").filter([0]) for i in range(8)], max_values=1000)
    with pytest.raises(recgo.CapacityError, match=r"fused filter group of 8 features: 1608 offsets in all \(201 per "
                                                  r"feature for the batch of 200\) would exceed the limit of 1000"):
        eng({"a": (torch.empty(0, dtype=torch.int64), torch.zeros(200, dtype=torch.int64))})
    out = eng({"a": (torch.empty(0, dtype=torch.int64), torch.zeros(100, dtype=torch.int64))})  # 808 offsets
    assert out.lengths().tolist() == [0] * 800


def test_a_dense_inputs_all_ones_lengths_are_checked_first() -> None:
    """A dense input's lengths (one per sample) were allocated before any check; the error came later,
    from another buffer, without naming them."""
    eng = FeatureEngine([Feature("a").truncate(1)], max_values=1000)
    with pytest.raises(recgo.CapacityError, match=r'feature "a": the 1500 lengths \(all ones\) of its dense input "a" '
                                                  r"would exceed the limit of 1000 values per buffer"):
        eng({"a": torch.arange(1500)})
    assert eng({"a": torch.arange(400)}).values().tolist() == list(range(400))


@pytest.mark.parametrize("n, want", [(60000, 3_600_000_000), (20, 400)])
def test_a_cross_capacity_error_names_the_values_the_batch_needs(n: int, want: int) -> None:
    eng = FeatureEngine([Feature("a", output=False), Feature("b", output=False), Feature("ab").cross("a", "b")],
                        max_values=None if n > 20 else 399)
    limit = eng.max_values
    bag = (torch.arange(n), torch.tensor([n]))
    with pytest.raises(recgo.CapacityError, match=rf'feature "ab": cross would produce more than {limit} values of the '
                                                  rf"batch of 1 \(limit {limit} values per buffer; the batch needs "
                                                  rf"{want} in all\); raise max_values"):
        eng({"a": bag, "b": bag})


def test_a_cross_past_64_bits_names_its_exact_need() -> None:
    """Eight fields of 300 IDs make 300^8 = 6.561e19 tuples, past int64 and uint64: named exactly."""
    eng = FeatureEngine([Feature("a", output=False), Feature("x").cross(*["a"] * 8)])
    with pytest.raises(recgo.CapacityError, match=rf"the batch needs {300**8} in all"):
        eng({"a": (torch.arange(300), torch.tensor([300]))})
