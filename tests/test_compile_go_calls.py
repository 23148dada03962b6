"""torch.compile over helpers that call the Go library directly (not through a custom op): they run
eagerly (torch.compiler.disable), so batches of changing sizes give the eager results. Traced, the Go
call read pointers dynamo had baked in from an earlier shape: a managed-collision collection's
remapped features came back −1 from the second batch size on, silently."""

from __future__ import annotations

import pytest
import torch

import recgo
from recgo.modules.managed import ManagedCollisionEmbeddingBagCollection, ManagedCollisionEmbeddingCollection


@pytest.mark.parametrize("sequence", [False, True])
def test_managed_collision_remapped_features_under_compile(sequence: bool) -> None:
    def build() -> torch.nn.Module:
        if sequence:
            cfg = recgo.EmbeddingConfig(100, 4, "t", ["f"], dynamic=recgo.DynamicConfig())
            return ManagedCollisionEmbeddingCollection(recgo.EmbeddingCollection([cfg], seed=1), {}, True)
        cfg = recgo.EmbeddingBagConfig(100, 4, "t", ["f"], dynamic=recgo.DynamicConfig())
        return ManagedCollisionEmbeddingBagCollection(recgo.EmbeddingBagCollection([cfg], seed=1), {}, True)

    eager, compiled = build(), torch.compile(build(), backend="eager")
    with torch.no_grad():
        for n in (3, 5, 8, 4):
            kjt = recgo.KeyedJaggedTensor(["f"], torch.arange(n) * 7 + 1000 + n, lengths=torch.ones(n, dtype=torch.int64))
            (got, got_rows), (want, want_rows) = compiled(kjt), eager(kjt)
            assert got_rows.values().tolist() == want_rows.values().tolist()
            assert min(want_rows.values().tolist()) >= 0  # every ID was admitted
            if sequence:
                torch.testing.assert_close(got["f"].values(), want["f"].values(), rtol=0, atol=0)
            else:
                torch.testing.assert_close(got.values(), want.values(), rtol=0, atol=0)


def test_importing_recgo_leaves_dynamo_unimported() -> None:
    """torch._dynamo takes over a second to import: disabling the helpers at import time made every
    process that imports recgo (each rank, each CLI run) pay it."""
    import subprocess
    import sys

    code = "import sys, recgo, recgo.dynamic; print('torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
