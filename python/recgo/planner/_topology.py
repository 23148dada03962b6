"""The cluster a plan is for, and this machine's GPUs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import torch

from .. import _lib
from ..errors import NotFoundError
from ..tensors import int64

GB = 1e9


@dataclass
class Topology:
    """The cluster a plan is for. Budgets in bytes, bandwidths in bytes per second.

    ``hbm_bytes`` is each GPU's HBM budget for embeddings, ``host_bytes`` each node's host-memory
    budget for the rows reached over UVM; ``batch_size`` is the global batch. The defaults are
    RecShard's evaluation cluster: 2 nodes × 8 GPUs with 24 GB HBM each (declared once, in Go's
    ``cost.DefaultTopology``; they reach Python through the C ABI's constants).
    """

    nodes: int = _lib.const("TopologyNodes")
    gpus_per_node: int = _lib.const("TopologyGPUsPerNode")
    hbm_bytes: int = _lib.const("TopologyHBMBytes")
    host_bytes: int = _lib.const("TopologyHostBytes")
    hbm_bandwidth: float = float(_lib.const("TopologyHBMBandwidth"))
    uvm_bandwidth: float = float(_lib.const("TopologyUVMBandwidth"))
    batch_size: int = _lib.const("TopologyBatchSize")

    @property
    def num_gpus(self) -> int:
        """Nodes × GPUs per node."""
        return self.nodes * self.gpus_per_node

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the Go planner reads.

        Raises:
            InvalidInputError: an integer field is not an integer in int64's range (Go's JSON reader
                refused ``hbm_bytes=10**40`` with its own wording).
        """
        for f in fields(self):
            if f.type == "int":
                int64(f"topology: {f.name}", getattr(self, f.name))
        return asdict(self)

    def is_default(self) -> bool:
        """Whether every field has its default (RecShard's cluster, not necessarily yours)."""
        return self == Topology()

    def describe(self) -> str:
        """One line: nodes × GPUs, HBM per GPU, host memory per node, bandwidths, batch."""
        return (f"{self.nodes} node(s) × {self.gpus_per_node} GPU(s), {self.hbm_bytes / GB:g} GB HBM per GPU, "
                f"{self.host_bytes / GB:g} GB host per node, HBM {self.hbm_bandwidth / GB:g} GB/s, "
                f"UVM {self.uvm_bandwidth / GB:g} GB/s, batch {self.batch_size}")

    @staticmethod
    def local(hbm_share: float = 0.8, **overrides: Any) -> "Topology":
        """This machine's GPUs (count and memory from NVML, loaded at run time by librecgo.so, else
        torch.cuda), one node, ``hbm_share`` of the smallest GPU's memory as the embedding budget,
        and RecShard defaults for the rest. Without a GPU the defaults stand; ``overrides`` set any
        field explicitly."""
        facts: dict[str, Any] = {}
        try:
            gpus = local_gpus()
        except NotFoundError:
            gpus = []
            if torch.cuda.is_available():
                gpus = [{"name": torch.cuda.get_device_name(i),
                         "memory_bytes": torch.cuda.get_device_properties(i).total_memory}
                        for i in range(torch.cuda.device_count())]
        if gpus:
            facts = {"nodes": 1, "gpus_per_node": len(gpus),
                     "hbm_bytes": int(min(g["memory_bytes"] for g in gpus) * hbm_share)}
        facts.update(overrides)
        return Topology(**facts)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Topology":
        """From the JSON form (unknown keys are ignored)."""
        names = {f.name for f in fields(Topology)}
        return Topology(**{k: v for k, v in d.items() if k in names})


def local_gpus() -> list[dict[str, Any]]:
    """The local GPUs as ``[{"name", "memory_bytes"}]`` via NVML; NotFoundError without a driver."""
    return _lib.call_json("recgo_gpu_info")
