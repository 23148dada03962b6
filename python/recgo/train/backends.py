"""The sparse half of a model, three ways, from one description and one set of initial weights.

* ``recgo``: :class:`recgo.EmbeddingBagCollection` / :class:`recgo.EmbeddingCollection` with a fused
  optimizer (rows updated inside backward).
* ``torchrec``: what a TorchRec user writes on CPU: ``FusedEmbeddingBagCollection`` (FBGEMM's fused
  CPU kernels) for pooled features; ``EmbeddingCollection`` with ``apply_optimizer_in_backward`` for
  sequences.
* ``torch``: ``nn.EmbeddingBag`` / ``nn.Embedding`` with ``sparse=True`` and a torch optimizer.

Every backend starts from the same weights (:func:`initial_weights`) and applies the same optimizer
(SGD or Adagrad with the same learning rate and epsilon), so their training curves can be compared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .._memory import physical_memory
from ..errors import CapacityError, InvalidInputError
from ..jagged import JaggedTensor
from ..sparse import KeyedJaggedTensor

BACKENDS = ("recgo", "torchrec", "torch")
OPTIMIZERS = ("sgd", "adagrad")


@dataclass(frozen=True)
class TableSpec:
    """One embedding table: name, rows and the sparse keys that look it up."""

    name: str
    rows: int
    features: tuple[str, ...]


@dataclass(frozen=True)
class SparseOptim:
    """The embedding optimizer every backend applies."""

    kind: str = "adagrad"
    lr: float = 0.05
    eps: float = 1e-8

    def __post_init__(self) -> None:
        if self.kind not in OPTIMIZERS:
            raise InvalidInputError(f"sparse optimizer {self.kind!r}: choose one of {OPTIMIZERS}")

    def torch_class(self) -> type[torch.optim.Optimizer]:
        """The matching torch optimizer class."""
        return torch.optim.SGD if self.kind == "sgd" else torch.optim.Adagrad

    def torch_kwargs(self) -> dict[str, float]:
        """Its keyword arguments (torch's names)."""
        return {"lr": self.lr} if self.kind == "sgd" else {"lr": self.lr, "eps": self.eps}

    def recgo(self) -> Any:
        """The matching recgo fused optimizer."""
        from ..modules import optim

        return optim.SGD(lr=self.lr) if self.kind == "sgd" else optim.Adagrad(lr=self.lr, eps=self.eps)


def initial_weights(tables: list[TableSpec], dim: int, seed: int) -> dict[str, torch.Tensor]:
    """Uniform ±√(1/rows) weights per table (TorchRec's default range), from ``seed``."""
    need = sum(t.rows for t in tables) * dim * 4  # float32
    have = physical_memory()
    if have is not None and need > have:  # refused before torch tries (a dim of 10^8 asked for 40 GB per table)
        raise CapacityError(f"the embedding tables' initial weights take {need / 2**30:.1f} GiB ({sum(t.rows for t in tables)} "
                            f"rows of dim {dim}), more than this machine's {have / 2**30:.1f} GiB of memory: lower "
                            "dim or max_rows")
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for t in tables:
        bound = math.sqrt(1.0 / t.rows)
        out[t.name] = torch.empty(t.rows, dim).uniform_(-bound, bound, generator=gen)
    return out


class SparseArch(nn.Module):
    """Embedding lookups of one backend. ``pooled(kjt)`` → ``[B, F, D]`` in ``keys`` order (sum pooling);
    ``sequences(kjt)`` → ``{key: JaggedTensor}`` of ``[N, D]`` rows. ``step()`` runs the optimizer of
    backends that do not update inside backward."""

    def __init__(self, backend: str, tables: list[TableSpec], dim: int, optim: SparseOptim,
                 weights: dict[str, torch.Tensor], pooled: bool, world: Any = None, seed: int = 0) -> None:
        super().__init__()
        if backend not in BACKENDS:
            raise InvalidInputError(f"backend {backend!r}: choose one of {BACKENDS}")
        self.backend, self.dim, self.is_pooled = backend, dim, pooled
        self.keys = [f for t in tables for f in t.features]
        self.rows = {t.name: t.rows for t in tables}
        self._table_of = {f: t.name for t in tables for f in t.features}
        self._opt: torch.optim.Optimizer | None = None
        self.world = world
        self.plan: dict[str, str] = {}
        if world is not None and world.size > 1:
            self._build_distributed(tables, optim, weights, seed)
            return
        build = {"recgo": self._build_recgo, "torchrec": self._build_torchrec, "torch": self._build_torch}[backend]
        build(tables, optim, weights)

    def _build_distributed(self, tables: list[TableSpec], optim: SparseOptim, weights: dict[str, torch.Tensor],
                           seed: int) -> None:
        """Sharded (recgo, torchrec) or replicated under DDP (torch) on ``self.world``'s ranks."""
        from . import distributed as D

        w, pooled = self.world, self.is_pooled
        if self.backend == "recgo":
            self.module = D.build_recgo(tables, self.dim, optim, weights, w, seed, pooled=pooled)
            self.plan = {n: f"{k}" for n, k in self.module.sharding_types().items()}
        elif self.backend == "torchrec":
            self.module, self.plan = D.build_torchrec(tables, self.dim, optim, weights, w, pooled=pooled)
        else:
            self.module, self._opt = D.build_torch(tables, self.dim, optim, weights, self.keys, self._table_of,
                                                   pooled=pooled, timeout=w.timeout)

    # -- construction ----------------------------------------------------------------------------

    def _build_recgo(self, tables: list[TableSpec], optim: SparseOptim, weights: dict[str, torch.Tensor]) -> None:
        import recgo

        if self.is_pooled:
            cfgs = [recgo.EmbeddingBagConfig(num_embeddings=t.rows, embedding_dim=self.dim, name=t.name,
                                             feature_names=list(t.features)) for t in tables]
            # seed=: the weights are loaded next, so skip the global generator's TorchRec-order draws
            self.module = recgo.EmbeddingBagCollection(cfgs, optimizer=optim.recgo(), seed=0)
            prefix = "embedding_bags"
        else:
            cfgs = [recgo.EmbeddingConfig(num_embeddings=t.rows, embedding_dim=self.dim, name=t.name,
                                          feature_names=list(t.features)) for t in tables]
            self.module = recgo.EmbeddingCollection(cfgs, optimizer=optim.recgo(), seed=0)
            prefix = "embeddings"
        self._load(prefix, weights)

    def _build_torchrec(self, tables: list[TableSpec], optim: SparseOptim, weights: dict[str, torch.Tensor]) -> None:
        import torchrec

        if self.is_pooled:
            from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection

            cfgs = [torchrec.EmbeddingBagConfig(num_embeddings=t.rows, embedding_dim=self.dim, name=t.name,
                                                feature_names=list(t.features)) for t in tables]
            self.module = FusedEmbeddingBagCollection(tables=cfgs, optimizer_type=optim.torch_class(),
                                                      optimizer_kwargs=optim.torch_kwargs(), device=torch.device("cpu"))
            self._load("embedding_bags", weights)
        else:
            from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

            cfgs = [torchrec.EmbeddingConfig(num_embeddings=t.rows, embedding_dim=self.dim, name=t.name,
                                             feature_names=list(t.features)) for t in tables]
            self.module = torchrec.EmbeddingCollection(tables=cfgs, device=torch.device("cpu"))
            self._load("embeddings", weights)
            apply_optimizer_in_backward(optim.torch_class(), self.module.parameters(), optim.torch_kwargs())

    def _build_torch(self, tables: list[TableSpec], optim: SparseOptim, weights: dict[str, torch.Tensor]) -> None:
        make = (lambda t: nn.EmbeddingBag(t.rows, self.dim, mode="sum", sparse=True)) if self.is_pooled else (
            lambda t: nn.Embedding(t.rows, self.dim, sparse=True))
        self.module = nn.ModuleDict({t.name: make(t) for t in tables})
        with torch.no_grad():
            for t in tables:
                self.module[t.name].weight.copy_(weights[t.name])
        self._opt = optim.torch_class()(self.module.parameters(), **optim.torch_kwargs())

    def _load(self, prefix: str, weights: dict[str, torch.Tensor]) -> None:
        own = self.module.state_dict()
        with torch.no_grad():
            for name, w in weights.items():
                own[f"{prefix}.{name}.weight"].copy_(w)

    # -- lookups ---------------------------------------------------------------------------------

    def prepare(self, kjt: KeyedJaggedTensor) -> Any:
        """The batch in the backend's input type (part of input preparation, timed as such)."""
        if self.backend == "torchrec":
            return kjt.to_torchrec()
        if self.backend == "torch":
            return {k: (v.values(), v.offsets()[:-1] if self.is_pooled else v.lengths())
                    for k, v in zip(kjt.keys(), _jagged(kjt))}
        return kjt

    def pooled(self, batch: Any) -> torch.Tensor:
        """``[B, F, D]`` pooled embeddings of a prepared batch."""
        if self.backend == "torch":
            if self.world is not None and self.world.size > 1:
                return self.module(batch)
            return torch.stack([self.module[self._table_of[k]](*batch[k]) for k in self.keys], 1)
        out = self.module(batch)
        if hasattr(out, "wait"):
            out = out.wait()  # TorchRec's DMP returns an awaitable
        pooled = out.values().view(out.values().shape[0], len(self.keys), self.dim)
        got = list(out.keys())
        if got != self.keys:  # TorchRec's DMP groups its output by sharding, not in the config's order
            pooled = pooled[:, [got.index(k) for k in self.keys]]
        return pooled

    def sequences(self, batch: Any) -> dict[str, JaggedTensor]:
        """``{key: JaggedTensor}`` with ``[N, D]`` values."""
        if self.backend == "torch":
            if self.world is not None and self.world.size > 1:
                rows = self.module(batch)
                return {k: JaggedTensor(rows[k], lengths=lens) for k, (_, lens) in batch.items()}
            return {k: JaggedTensor(self.module[self._table_of[k]](v), lengths=lens) for k, (v, lens) in batch.items()}
        out = self.module(batch)
        if hasattr(out, "wait"):
            out = out.wait()  # TorchRec's DMP returns an awaitable
        return {k: (jt if isinstance(jt, JaggedTensor) else JaggedTensor.from_torchrec(jt)) for k, jt in out.items()}

    def zero_grad_sparse(self) -> None:
        """Clear gradients of backends whose optimizer runs after backward."""
        if self._opt is not None:
            self._opt.zero_grad(set_to_none=True)

    def step(self) -> None:
        """Apply the optimizer of backends that do not update inside backward."""
        if self._opt is not None:
            self._opt.step()

    def optimizer_state(self) -> dict[str, Any]:
        """Optimizer state kept outside the module's state_dict (for checkpoints): the torch optimizer's,
        TorchRec's fused optimizer's, or (TorchRec's EmbeddingCollection) the state of the optimizers
        ``apply_optimizer_in_backward`` attached to each weight."""
        if self._opt is not None:
            return self._opt.state_dict()
        if self.backend != "torchrec":
            return {}
        fused = self._torchrec_fused()
        if fused is not None:
            return fused.state_dict()
        return {"in_backward": {n: [o.state_dict() for o in getattr(p, "_in_backward_optimizers", ())]
                                for n, p in self.module.named_parameters()}}

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`optimizer_state`."""
        if not state:
            return
        if self._opt is not None:
            self._opt.load_state_dict(state)
        elif self.backend == "torchrec" and "in_backward" in state:
            for n, p in self.module.named_parameters():
                for o, s in zip(getattr(p, "_in_backward_optimizers", ()), state["in_backward"].get(n, ())):
                    o.load_state_dict(s)
        elif self.backend == "torchrec":
            fused = self._torchrec_fused()
            if fused is None:
                raise InvalidInputError("the checkpoint holds a fused optimizer's state, this TorchRec module has none")
            fused.load_state_dict(state)

    def _torchrec_fused(self) -> Any:
        """TorchRec's fused optimizer of the module, or None: ``FusedEmbeddingBagCollection`` gives it
        from a method, ``DistributedModelParallel`` from a property."""
        fused = getattr(self.module, "fused_optimizer", None)
        return fused() if callable(fused) else fused


def _jagged(kjt: KeyedJaggedTensor) -> list[JaggedTensor]:
    b = kjt.stride()
    out, start = [], 0
    lengths = kjt.lengths().view(len(kjt.keys()), b) if kjt.keys() else kjt.lengths()
    for i, n in enumerate(kjt.length_per_key()):
        out.append(JaggedTensor(kjt.values()[start:start + n], lengths=lengths[i]))
        start += n
    return out
