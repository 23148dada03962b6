"""ShardedEmbeddingCollection: recgo's sequence (unpooled) tables spread over the ranks of torch.distributed."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import nn

from ..errors import InvalidInputError
from ..jagged import JaggedTensor
from ..keyed import ReadyDict
from ..modules import _vbe, optim
from ..modules._sequence_batch import as_torchrec, jagged, key_counts, torchrec_dtypes, with_indices
from ..modules._trace import traced_as_leaf
from ..modules.config import _as_sequence_config, table_list
from ..sparse import as_kjt
from ..tensors import check_tensor
from ._refuse import refused_together
from ._collection import ShardedEmbeddingBagCollection
from ._rows import begin_rows, drive_rows, key_rows
from ._source import freeze, frozen_tables, on_meta, take_rows
from . import _failed


class ShardedEmbeddingCollection(ShardedEmbeddingBagCollection):
    """Sequence (unpooled) embedding tables sharded over the ranks of a ``torch.distributed`` world,
    with the output of :class:`recgo.EmbeddingCollection` (TorchRec's ``EmbeddingCollection`` name).

    Every rank builds it with the same arguments and feeds it its own samples (a KeyedJaggedTensor
    with every feature; per-ID weights are ignored, as TorchRec does); ``forward`` returns
    ``{feature: JaggedTensor}`` with ``[n, D]`` values (one row per ID, the batch's lengths), TorchRec
    JaggedTensors for a TorchRec input. Forward deduplicates each table's IDs over its features,
    sends them to their owners (``all_to_all_single``, flat or hierarchical), the owners deduplicate
    again and return one row per distinct ID, and the rank expands the rows along its inverse map.
    Backward adds each lookup's gradient to its distinct row's, sends the merged gradients to the
    owners, which merge them over the requesters and apply the fused optimizer once per row.

    The arguments are :class:`ShardedEmbeddingBagCollection`'s (``tables`` are ``EmbeddingConfig``s,
    recgo's or TorchRec's; ``row_splits`` splits row-wise tables unevenly, as there), without owner
    pooling, weighting or wire narrowing: rows always come back whole; ``need_indices=True`` gives
    each output its feature's IDs as its ``weights()``, as the unsharded collection's (``from_ec`` and
    ``shard_model`` carry it over). ``optimizer=None`` gives each shard's ``weight`` the dense gradient
    of its rows (merged over every rank's lookups) for a torch optimizer. The shards, ``local_ids``,
    ``locate``, ``save``/``load`` (which re-distribute across world sizes), counters and
    ``check_peers`` are the pooled collection's; the shards are ``embeddings.<table>``.

    Every rank must run the same sequence of forwards and backwards (as with DDP).
    """

    def __init__(self, tables: Sequence[Any], sharding: str | Mapping[str, str] = "hash", *,
                 optimizer: Any = None, need_indices: bool = False, **kwargs: Any) -> None:
        if not isinstance(need_indices, bool):
            raise InvalidInputError(f"need_indices must be a bool, got {need_indices!r}")
        self._need_indices = need_indices
        for bad in ("owner_pooling", "is_weighted", "wire_dtype"):
            if bad in kwargs:
                raise InvalidInputError(f"ShardedEmbeddingCollection: {bad} applies to pooled lookups only")
        tables = table_list(tables, "ShardedEmbeddingCollection", "EmbeddingConfig")
        self._seq_configs = [_as_sequence_config(t) for t in tables]
        super().__init__([c.bag_config() for c in self._seq_configs], sharding, optimizer=optimizer,
                         owner_pooling="rows", **kwargs)
        self._modules["embeddings"] = self._modules.pop("embedding_bags")

    @property
    def embedding_bags(self) -> nn.ModuleDict:  # type: ignore[override]
        """The shards (the pooled collection's code reads them under this name); ``embeddings`` is
        the registered name."""
        mods = self._modules
        return mods["embeddings"] if "embeddings" in mods else mods["embedding_bags"]  # type: ignore[return-value]

    @classmethod
    def from_ebc(cls, ebc: Any, sharding: str | Mapping[str, str] = "hash", **kwargs: Any) -> Any:
        """Not for sequence tables: raises :class:`InvalidInputError` pointing to :meth:`from_ec`."""
        raise InvalidInputError("ShardedEmbeddingCollection.from_ebc: use from_ec")

    @classmethod
    def from_ec(cls, ec: Any, sharding: str | Mapping[str, str] = "hash", **kwargs: Any) -> "ShardedEmbeddingCollection":
        """Shard an existing recgo (or TorchRec) ``EmbeddingCollection``: every rank takes its rows (and,
        from a recgo collection with the same fused optimizer, their state and step) from ``ec``. On the
        meta device, as :meth:`ShardedEmbeddingBagCollection.from_ebc`: each rank initialises only its
        rows (``seed`` defaults to the recgo collection's). Frozen tables give frozen shards, as for
        ``from_ebc``."""
        optim.adopt(ec, kwargs)
        kwargs.setdefault("need_indices", bool(ec.need_indices()))  # TorchRec's and recgo's accessor
        frozen = frozen_tables(ec, "embeddings")
        if on_meta(ec):
            kwargs.setdefault("seed", getattr(getattr(ec, "ebc", None), "_seed", None))
            return freeze(cls(ec.embedding_configs(), sharding, **kwargs), frozen)
        out = cls(ec.embedding_configs(), sharding, _init=False, **kwargs)
        take_rows(out, ec, "embeddings")
        return freeze(out, frozen)

    def need_indices(self) -> bool:
        """Whether each output carries its feature's IDs as its weights (TorchRec's accessor)."""
        return self._need_indices

    def embedding_configs(self) -> list[Any]:
        """The tables' configs (TorchRec's accessor name)."""
        return list(self._seq_configs)

    def embedding_bag_configs(self) -> list[Any]:
        """The tables as the pooled configs the shards are built from."""
        return list(self._configs)

    def _traced_output(self, node: Any) -> dict[str, Any]:  # type: ignore[override]
        """Under ``torch.fx`` tracing: the output dict of the node's entries (``modules._trace``)."""
        return {k: node[k] for k in self._names}

    # -- forward / backward -----------------------------------------------------------------------

    @traced_as_leaf
    def forward(self, features: Any) -> ReadyDict:  # type: ignore[override]
        """Look up every ID of this rank's batch (recgo or TorchRec KJT with every feature; keys no
        table reads are ignored) across the world: ``{feature: JaggedTensor}`` with ``[n, D]`` values,
        in config order (a ``dict`` with ``wait()``, which TorchRec scripts call on DMP's output)."""
        torchrec_in = torchrec_dtypes(features)  # a TorchRec batch's dtypes, which the outputs keep
        _failed.refuse(self, "forward")
        with refused_together(self, sequence=True):  # a batch refused here stops the step on every rank
            vb = _vbe.variable_batch(features, pooled=False)  # outputs: each key's own batch
            kjt, key_feature = self._engine_batch(as_kjt(features) if vb is None else vb.kjt)
            feats = key_feature.tolist()
            values = check_tensor(kjt.values(), "values", (torch.int64, torch.int32), ndim=1, convert_to=torch.int64)
            lengths = check_tensor(kjt.lengths(), "lengths", (torch.int64, torch.int32), ndim=1,
                                   convert_to=torch.int64)
            ran = self._begin_forward(values, lengths)
            handle = begin_rows(self, key_feature, values, lengths)
        drive_rows(self, handle)
        ran()
        K = len(feats)
        B = lengths.numel() // max(1, K)
        counts = key_counts(lengths, K, values.numel())
        dims = [self._dims[f] if f >= 0 else 0 for f in feats]  # 0: a key no table reads has no rows
        parts = key_rows(self, handle, feats, [n * d for n, d in zip(counts, dims)])
        pos = {self._names[f]: i for i, f in enumerate(feats) if f >= 0}
        out: dict[str, JaggedTensor] = {}
        for k in self._names:  # config order, as the unsharded collection returns them
            i = pos[k]
            s = B if vb is None else vb.strides[self._features[feats[i]]]
            out[k] = jagged(parts[i].view(counts[i], dims[i]), lengths[i * B:i * B + s])
        if self._need_indices:
            # the engine batch's keys are the output names (a key several tables read is repeated under each)
            out = with_indices(out, kjt, {k: k for k in self._names})
        return ReadyDict(as_torchrec(out, torchrec_in) if torchrec_in else out)
