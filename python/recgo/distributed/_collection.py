"""ShardedEmbeddingBagCollection: recgo's pooled tables spread over the ranks of torch.distributed."""

from __future__ import annotations

import ctypes
from datetime import timedelta
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import nn

from .. import _lib
from .._lib import H, I64
from ..errors import InvalidInputError, NotFoundError
from .._memory import wrap
from ..data import _prepared
from ..modules._init import draw_uniform_rows
from ..modules._storage import check_cast, fused_keep
from ..modules._trace import refuse_script, traced_as_leaf
from ..modules import _eager, _recompute, _vbe, optim
from ..modules.config import _check_optimizer, _embedding_names, check_keys, key_readers
from ..modules.embedding import _check_configs
from ..modules.optim import FusedOptimizer
from ..sparse import KeyedTensor, as_kjt
from ..tensors import check_tensor, ptr
from . import _dynamic, _traffic, _weighted
from ._checkpoint import CollectionCheckpoints
from ._source import freeze, frozen_tables, on_meta, take_rows
from . import _failed
from ._exchange import COLLECTIVES, WIRE_DTYPES, Groups, agree, check_peers, drive, make_groups, pad_tables, register_tables
from ._refuse import refused_together
from ._rows import drive_rows
from ._state import own_keys, rank_keys, reloaded_keys
from ._sharding import MODES, RETURNS, SHARDING_TYPES, resolve_returns, resolve_row_splits, resolve_sharding
from ._step import _Lookup, _Shard, _Step



class ShardedEmbeddingBagCollection(CollectionCheckpoints, nn.Module):
    """Pooled embedding tables sharded over the ranks of a ``torch.distributed`` world.

    Every rank builds it with the same arguments and feeds it its own samples (a KeyedJaggedTensor
    with every feature); the output holds that rank's pooled rows ([local B, ΣD], TorchRec's
    KeyedTensor layout). Forward deduplicates each table's IDs, sends them to their owners with
    ``all_to_all_single``, the owners deduplicate again and look each distinct row up once, and the
    rows come back along the inverse maps to be pooled with one writer per bag. Backward merges the
    gradient per distinct row, sends it the same way and the owner's fused optimizer applies it.

    Args:
        tables: ``EmbeddingBagConfig`` list (recgo's or TorchRec's).
        sharding: one of ``"hash"`` (RecIS: ID → 2^16 virtual buckets → rank), ``"table_wise"``,
            ``"row_wise"`` (contiguous ranges in rank order: evenly, or as ``row_splits`` says),
            ``"data_parallel"`` (a replica per rank), ``"plan"``
            (table → rank from ``plan``, a :class:`recgo.planner.Plan` made for this world: a plan
            whose topology has another number of GPUs than the world has ranks, or other nodes or
            GPUs per node than ``nodes``/``ranks_per_node`` where given, raises InvalidInputError),
            or a mapping table → kind.
        mode: ``"flat"`` (one all-to-all over the world) or ``"hierarchical"`` (RecIS Fig. 3b:
            intra-node shuffle and merge, then the same-rail inter-node shuffle).
        nodes, ranks_per_node: the topology (default one node holding every rank); rank r is on node
            r // ranks_per_node.
        optimizer: a fused optimizer (:mod:`recgo.modules.optim`), or ``None`` to give each shard's
            ``weight`` a dense gradient for a torch optimizer.
        table_ranks: for ``table_wise``, table → rank (default: table index mod world size).
        row_splits: for ``row_wise`` tables, table → the number of rows each rank holds, in rank order
            (rank r holds the rows after ranks 0..r-1's; 0 for a rank that holds none), summing to the
            table's rows — TorchRec's uneven row-wise plans (``shard_model`` passes a plan's). A table
            it leaves out is split evenly: rank r holds rows [r·b, (r+1)·b), b = ⌈rows / world⌉. A
            table it names that is not row-wise, or a count per rank that does not fit, raises
            ``InvalidInputError`` naming the table (an unknown table ``NotFoundError``).
        seed: initial weights as ``recgo.EmbeddingBagCollection(seed=...)`` draws them (each rank keeps
            its rows of the draw, made in chunks: no rank allocates a whole table). A table whose config
            has an ``init_fn`` gets ``init_fn(shard weight)`` on each rank instead, as TorchRec's
            sharded modules apply it; data-parallel replicas are rank 0's on every rank.
        timeout: seconds (or a timedelta) any exchange may wait for a peer before raising
            :class:`PeerFailureError`.
        owner_pooling: how a table's vectors come back over the first leg (from the owner on the flat
            exchange; on the hierarchical one from the rank of the node that fetched the rows
            over the rail, the inter-node leg always moving rows merged per node) — ``"auto"``
            (default: per table, destination and step, whichever of the two moves fewer bytes, from
            counts the requester knows), ``"rows"`` (one row per distinct ID, pooled by the
            requester) or ``"pooled"`` (the owner sums each bag's rows it holds, weights included, and
            returns one partial per (bag, table); the requester adds the partials and then divides a
            MEAN bag by its total length) — or a mapping table → one of them. A rank's own IDs and
            data-parallel tables always use rows.
        wire_dtype: ``"fp32"`` (default: exact) or ``"fp16"`` — an opt-in, LOSSY exchange that
            moves rows, partial sums and gradients as float16 (half the vector bytes; every vector
            is rounded to 11 significant bits in each direction, so results no longer equal the
            single-process collection's, and values beyond float16's range overflow).
        gradient_division: ``False`` (default): an owner applies the sum of every rank's gradient of
            its rows, so the ranks train what one process trains on their concatenated batches with
            the same loss. ``True``: each rank's gradient is divided by the world size first, as
            TorchRec's DMP does by default (``torchrec.distributed.comm_ops.set_gradient_division``),
            so with a per-rank mean loss the tables step on the global-batch mean, like DDP's
            averaged dense part. The division rides the engine's merge pass (no extra pass over the
            gradient).

    ``state_dict()`` is this rank's (keys ``<table>.rank<r>_of_<world>.*`` with the rows' IDs, see
    :func:`recgo.distributed._state.rank_keys`), so ``torch.distributed.checkpoint`` saves every rank's shard and
    ``load_state_dict`` refuses another rank's; :meth:`save`/:meth:`load` re-distribute across world sizes.

    Every rank must run the same sequence of forwards and backwards (as with DDP).
    """

    __prepare_scriptable__ = refuse_script
    # what a dynamic table's snapshot (state_dict, save) holds: owners admit IDs and update rows inside
    # this rank's exchanges, so a snapshot from another thread waits for the one under way
    _snapshot_lock = COLLECTIVES

    def __init__(self, tables: Sequence[Any], sharding: str | Mapping[str, str] = "hash", *, mode: str = "flat",
                 nodes: int | None = None, ranks_per_node: int | None = None,
                 optimizer: FusedOptimizer | None = None, plan: Any = None,
                 table_ranks: Mapping[str, int] | None = None, row_splits: Mapping[str, Sequence[int]] | None = None,
                 is_weighted: bool = False,
                 seed: int | None = None, timeout: float | timedelta | None = None,
                 owner_pooling: str | Mapping[str, str] = "auto", wire_dtype: str = "fp32",
                 gradient_division: bool = False, _init: bool = True) -> None:
        super().__init__()
        _check_optimizer(optimizer)  # a torch optimizer's class or instance: names recgo's counterpart
        if mode not in MODES:
            raise InvalidInputError(f"mode {mode!r}: expected one of {sorted(MODES)}")
        self._configs = _check_configs(tables)
        self._mode = mode
        self._optimizer = optimizer
        self._is_weighted = bool(is_weighted)
        self._groups: Groups = make_groups(nodes, ranks_per_node, timeout, mode == "hierarchical")
        names = [c.name for c in self._configs]
        shapes = [(c.num_embeddings, c.embedding_dim) for c in self._configs]
        self._sharding_names, self._kinds = resolve_sharding(names, shapes, sharding, plan, table_ranks,
                                                             self._groups.world_size, nodes, ranks_per_node)
        _dynamic.check(self._configs, self._sharding_names, optimizer)
        self._row_splits = resolve_row_splits(names, [c.num_embeddings for c in self._configs], self._sharding_names,
                                              row_splits, self._groups.world_size)
        self._dynamic = [c.dynamic is not None for c in self._configs]
        self._engine_training = _eager.TRAIN
        self._returns = resolve_returns(names, owner_pooling)
        if wire_dtype not in WIRE_DTYPES:
            raise InvalidInputError(f"wire_dtype {wire_dtype!r}: expected one of {sorted(WIRE_DTYPES)}")
        self._wire = WIRE_DTYPES[wire_dtype]
        if not isinstance(gradient_division, bool):
            raise InvalidInputError(f"gradient_division: expected True or False, got {gradient_division!r}")
        self._gradient_division = gradient_division
        self._grad_scale = 1.0 / self._groups.world_size if gradient_division else 1.0
        self._seed = seed
        agree(self._groups, type(self).__name__, self._description(seed, wire_dtype))
        register_tables(len(self._configs))
        self._pad = 0  # the engine's pad table count (_sync_training)
        # The engine's features, config order: a key several tables read is one feature per table (the
        # batch carries that key once per feature, see _engine_batch), named feature@table in outputs.
        self._features = [f for t in self._configs for f in t.feature_names]
        self._names = _embedding_names(self._configs)
        self._readers = key_readers(self._features)
        self._shared = len(self._readers) < len(self._features)
        self._dims = [t.embedding_dim for t in self._configs for _ in t.feature_names]
        self._feature_tables = [i for i, t in enumerate(self._configs) for _ in t.feature_names]
        self._width = sum(self._dims)
        self._handle = self._create()
        self.embedding_bags = nn.ModuleDict()
        self._local_rows: list[int] = []
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        for i, cfg in enumerate(self._configs):
            weight, state, step, local = self._memory(i, cfg.embedding_dim)
            self._local_rows.append(local)
            has_state = optimizer is not None and optimizer.state_width(cfg.embedding_dim) > 0
            # requires_grad fused or not, as the unsharded collections' weights: requires_grad_(False) freezes
            self.embedding_bags[cfg.name] = _Shard(weight, True, state if has_state else None, step)
            if optimizer is not None:  # as DMP marks its sharded tables: dense-optimizer filters leave them out
                optim.mark_updated_in_backward([self.embedding_bags[cfg.name].weight])
            if cfg.dynamic is not None:
                cfg.dynamic.attach(self, i)  # state_dict carries the shard's ID map and rows in use
            elif _init:
                self._initialise(cfg, weight, gen)
        if _init:
            self._agree_replicas()
        self._partial_step: str | None = None  # a backward drive raised here: see _failed
        self.register_state_dict_pre_hook(_failed.refuse_state_dict)
        self.register_state_dict_post_hook(rank_keys)
        self.register_load_state_dict_pre_hook(own_keys)
        self.register_load_state_dict_post_hook(reloaded_keys)
        self._anchor = torch.zeros((), dtype=torch.float32, requires_grad=True)
        self.last_traffic: dict[str, Any] = {}
        self.total_traffic: dict[str, Any] = {}

    def __deepcopy__(self, memo: dict) -> Any:
        raise InvalidInputError(f"{type(self).__name__} cannot be copied or pickled: its shards are bound to "
                                "this world's process group; save() it and load() into a collection built on "
                                "the ranks that need it")

    def __reduce_ex__(self, protocol: Any) -> Any:
        return self.__deepcopy__({})

    # -- construction -----------------------------------------------------------------------------

    @classmethod
    def from_ebc(cls, ebc: Any, sharding: str | Mapping[str, str] = "hash", **kwargs: Any) -> "ShardedEmbeddingBagCollection":
        """Shard an existing recgo (or TorchRec) EmbeddingBagCollection: every rank takes its rows (and,
        where the fused optimizer runs the same update, their state and step: a recgo collection's, or
        the state TorchRec keeps outside its state dict, as :func:`recgo.from_torchrec` takes it) from
        ``ebc``.

        A collection on the meta device (built with ``device="meta"`` or under ``with
        torch.device("meta")``, as models are built for TorchRec's ``DistributedModelParallel``) holds no
        rows: each rank then initialises only its own, as ``seed`` (default: a recgo collection's own
        seed) and the tables' ``init_fn`` say, so a table larger than one rank's memory is never
        allocated whole.

        A table of ``ebc`` frozen with ``requires_grad_(False)`` gives a frozen shard: a torch optimizer
        over the parameters that require grad leaves it, and a fused optimizer updates the other tables
        alone. A weighted ``ebc`` gives a weighted collection unless ``is_weighted=`` says otherwise."""
        cfgs = ebc.embedding_bag_configs()
        optim.adopt(ebc, kwargs)
        kwargs.setdefault("is_weighted", bool(ebc.is_weighted()))  # (it was dropped: weights ignored)
        frozen = frozen_tables(ebc, "embedding_bags")
        if on_meta(ebc):
            kwargs.setdefault("seed", getattr(ebc, "_seed", None))
            return freeze(cls(cfgs, sharding, **kwargs), frozen)
        out = cls(cfgs, sharding, _init=False, **kwargs)
        take_rows(out, ebc, "embedding_bags")
        return freeze(out, frozen)

    def _description(self, seed: int | None, wire_dtype: str) -> dict[str, Any]:
        """What every rank must agree on (tables in order, their sharding and returns, the topology, the
        optimizer, the wire), as plain values for :func:`agree`."""
        g = self._groups
        desc: dict[str, Any] = {
            f"table {i}": (c.name, c.num_embeddings, c.embedding_dim, tuple(c.feature_names),
                           ("sum", "mean")[c.pooling_code()], c.weight_init_min, c.weight_init_max, repr(c.dynamic))
            for i, c in enumerate(self._configs)}
        # names, not the engine's codes: a rank that differs sees what it passed in the message
        sharding = tuple(f"{n} on rank {r}" if SHARDING_TYPES[n] == SHARDING_TYPES["table_wise"] else n
                         for n, (_, r) in zip(self._sharding_names, self._kinds))
        returns = {code: name for name, code in RETURNS.items()}
        desc.update(tables=len(self._configs), sharding=sharding, row_splits=self.row_splits(),
                    owner_pooling=tuple(returns[r] for r in self._returns),
                    mode=self._mode, topology=f"{g.nodes} nodes × {g.ranks_per_node} ranks",
                    optimizer=repr(self._optimizer) if self._optimizer is not None else None,
                    is_weighted=self._is_weighted, seed=seed, wire_dtype=wire_dtype,
                    gradient_division=self._gradient_division)
        return desc

    def _initialise(self, cfg: Any, weight: torch.Tensor, gen: torch.Generator | None) -> None:
        """A table's initial shard: its rows of the uniform draw an unsharded collection with the same
        generator makes (drawn chunk by chunk: no rank holds the whole table), or, for a config with an
        ``init_fn``, ``init_fn`` applied to the shard (as TorchRec's sharded modules apply it)."""
        with torch.no_grad():
            if cfg.init_fn is not None:
                cfg.init_fn(weight)
            else:
                draw_uniform_rows(weight, self.local_ids(cfg.name), cfg.num_embeddings, *cfg.init_bounds(), gen)

    def reset_parameters(self) -> None:
        """(Re-)initialise every fixed table's shard as construction did (the same ``seed``, so the same
        rows; a table's ``init_fn``; data-parallel replicas from rank 0); dynamic-ID tables initialise
        their rows as IDs arrive. Optimizer state and step are left as they are, as for the unsharded
        collection. A collective: every rank calls it."""
        gen = torch.Generator().manual_seed(self._seed) if self._seed is not None else None
        for cfg in self._configs:
            if cfg.dynamic is None:  # dynamic tables draw a row's weights as its ID arrives
                self._initialise(cfg, self.embedding_bags[cfg.name].weight, gen)
        self._agree_replicas()

    def _apply(self, fn: Any, recurse: bool = True) -> "ShardedEmbeddingBagCollection":
        """The shards are the engine's float32 CPU memory, which the engine keeps updating: a cast or a
        move (``.half()``, ``.double()``, ``.to("meta")``, ``.cuda()``) or ``share_memory()`` raises
        ``InvalidInputError``, and a conversion that would keep float32 CPU tensors (``.float()``,
        ``.cpu()``, ``to_empty(device="cpu")``) leaves them as they are instead of replacing them with
        copies the engine would never see."""
        check_cast(fn)
        return self

    def _agree_replicas(self) -> None:
        """Give every rank rank 0's initial replica of each data-parallel table (ranks whose global
        generators or ``init_fn`` draws differ would otherwise start from different replicas)."""
        for cfg, (kind, _) in zip(self._configs, self._kinds):
            if kind == SHARDING_TYPES["data_parallel"] and self._groups.world_size > 1:
                weight = self.embedding_bags[cfg.name].weight
                buf = weight.detach().contiguous()
                torch.distributed.broadcast(buf, src=0, group=self._groups.world)
                with torch.no_grad():
                    weight.copy_(buf)

    def _create(self) -> _lib.Handle:
        cfgs, g = self._configs, self._groups
        col = lambda xs: torch.tensor(xs, dtype=torch.int64)  # noqa: E731
        rows = col([c.num_embeddings for c in cfgs])
        dims = col([c.embedding_dim for c in cfgs])
        kinds = col([k for k, _ in self._kinds])
        ranks = col([r for _, r in self._kinds])
        returns = col(self._returns)
        # table-major, a row of zeros where a table has no split of its own (the engine's even one)
        splits = col([n for s in self._row_splits for n in (s or (0,) * g.world_size)])
        feat_table = col(self._feature_tables)
        feat_pool = col([t.pooling_code() for t in cfgs for _ in t.feature_names])
        opt = self._optimizer.params() if self._optimizer is not None else (0, 0.0, 0.0, 0.0, 0.0, 0.0)
        self._keep = (rows, dims, kinds, ranks, returns, splits, feat_table, feat_pool)
        made = [c.dynamic.builder(c) if c.dynamic is not None else None for c in cfgs]  # alive until built
        try:
            builders = torch.tensor([b.value if b is not None else 0 for b in made], dtype=torch.int64)
            return _lib.new_handle(
                "recgo_shard_new",
                g.nodes, g.ranks_per_node, g.rank, MODES[self._mode], len(cfgs), "\n".join(c.name for c in cfgs).encode(),
                ptr(rows), ptr(dims), ptr(kinds), ptr(ranks), ptr(returns), ptr(builders) if any(made) else None,
                ptr(splits) if any(self._row_splits) else None, *opt,
                len(self._features), "\n".join(self._features).encode(), ptr(feat_table), ptr(feat_pool))
        finally:
            for b in made:
                if b is not None:
                    b.free()

    def _memory(self, t: int, dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        f = _lib.fn("recgo_shard_table_memory")
        out = []
        local = 0
        for which, ctype, dtype in ((0, ctypes.c_float, torch.float32), (1, ctypes.c_float, torch.float32),
                                    (2, ctypes.c_int64, torch.int64)):
            addr, n, stride, lr = H(0), I64(0), I64(0), I64(0)
            _lib.call(f, self._handle.value, t, which, ctypes.byref(addr), ctypes.byref(n), ctypes.byref(stride),
                      ctypes.byref(lr))
            local = lr.value
            flat = wrap(addr.value, n.value, dtype, self._handle)
            if which == 0:
                flat = flat.view(-1, stride.value)[:local, :dim]
            elif which == 1 and stride.value:
                flat = flat.view(-1, stride.value)[:local]
            elif which == 1:
                flat = torch.empty(0, 0)
            out.append(flat)
        return out[0], out[1], out[2], local

    # -- layout queries ---------------------------------------------------------------------------

    def _table(self, name: str) -> int:
        for i, c in enumerate(self._configs):
            if c.name == name:
                return i
        raise NotFoundError(f"no table {name!r} (tables: {[c.name for c in self._configs]})")

    def local_ids(self, table: str) -> torch.Tensor:
        """The IDs of ``table`` this rank holds, in the order of its shard's rows (a dynamic-ID table's:
        those holding a row now)."""
        t = self._table(table)
        if self._dynamic[t]:
            return _dynamic.local_ids(self, table)
        out = torch.empty(self._local_rows[t], dtype=torch.int64)
        _lib.call(_lib.fn("recgo_shard_local_ids"), self._handle.value, t, ptr(out), out.numel())
        return out

    def owners(self, table: str, ids: torch.Tensor) -> torch.Tensor:
        """The rank owning each ID of ``table`` (this rank for data-parallel tables)."""
        t = self._table(table)
        ids = check_tensor(ids, "ids", (torch.int64, torch.int32), ndim=1, convert_to=torch.int64)
        out = torch.empty_like(ids)
        _lib.call(_lib.fn("recgo_shard_owners"), self._handle.value, t, ptr(ids), ids.numel(), ptr(out))
        return out

    def locate(self, table: str, ids: torch.Tensor) -> torch.Tensor:
        """Each ID's row in this rank's shard of ``table``, or −1 where another rank holds it (or, in a
        dynamic-ID table, where it has no row: this looks, it admits nothing)."""
        t = self._table(table)
        if self._dynamic[t]:
            return _dynamic.locate(self, table, check_tensor(ids, "ids", (torch.int64,), ndim=1))
        ids = check_tensor(ids, "ids", (torch.int64,), ndim=1)
        out = torch.empty_like(ids)
        _lib.call(_lib.fn("recgo_shard_locate"), self._handle.value, t, ptr(ids), ids.numel(), ptr(out))
        return out

    @property
    def groups(self) -> Groups:
        """The rank's world, node and rail process groups and topology."""
        return self._groups

    def sharding_types(self) -> dict[str, str]:
        """Table → sharding kind."""
        return {c.name: k for c, k in zip(self._configs, self._sharding_names)}

    def row_splits(self) -> dict[str, tuple[int, ...]]:
        """Row-wise table → the rows each rank holds, in rank order, for the tables ``row_splits`` split
        (the others are split evenly)."""
        return {c.name: s for c, s in zip(self._configs, self._row_splits) if s is not None}

    def owner_pooling(self) -> dict[str, str]:
        """Table → owner-pooling return policy (``"auto"``, ``"rows"`` or ``"pooled"``)."""
        names = {v: k for k, v in RETURNS.items()}
        return {c.name: names[r] for c, r in zip(self._configs, self._returns)}

    def is_weighted(self) -> bool:
        """Whether the batch's per-ID weights scale the pooled rows (as the unsharded collection's)."""
        return self._is_weighted

    def feature_names(self) -> list[str]:
        """Output keys, config order: each feature's name, or ``feature@table`` for a feature several
        tables look up (TorchRec's embedding names)."""
        return list(self._names)

    def _traced_output(self, node: Any) -> Any:
        """Under ``torch.fx`` tracing: the output over the node (``modules._trace``): a KeyedTensor over
        its values (the sequence subclass: the dict of its entries)."""
        return KeyedTensor._over(self._names, self._dims, node.values())

    @property
    def fused_optimizer(self) -> FusedOptimizer | None:
        """The fused optimizer the owners apply to their rows (None: dense gradients)."""
        return self._optimizer

    def set_fused_optimizer(self, optimizer: FusedOptimizer) -> None:
        """Change the fused optimizer's hyper-parameters on this rank's shards (learning-rate
        schedules); the kind must stay. Every rank makes the same change between the same steps, from
        the thread that runs them: the next step's header carries the hyper-parameters' fingerprint,
        and ranks that differ raise ``InvalidInputError`` there, before any row is updated."""
        optim.check_replacement(self._optimizer, optimizer)
        _lib.call(_lib.fn("recgo_shard_set_optimizer"), self._handle.value, *optimizer.params())
        self._optimizer = optimizer

    def embedding_bag_configs(self) -> list[Any]:
        """The tables' configs."""
        return list(self._configs)

    # -- forward / backward -----------------------------------------------------------------------

    def _engine_batch(self, kjt: KeyedJaggedTensor) -> tuple[KeyedJaggedTensor, torch.Tensor]:
        """The batch as the engine takes it and each of its keys' feature index (-1 for a key no table
        reads: ignored, as by the unsharded collections and TorchRec's, since one KJT may feed several
        collections). A key several tables read is repeated once per table (keys named as the
        outputs), so the engine looks it up in each."""
        keys = kjt.keys()
        check_keys(self._readers, keys)
        if not self._shared:
            return kjt, torch.tensor([self._readers[k][0] if k in self._readers else -1 for k in keys],
                                     dtype=torch.int64)
        feats = [f for k in keys for f in self._readers.get(k, ())]
        kjt = kjt._take([i for i, k in enumerate(keys) for _ in self._readers.get(k, ())],  # noqa: SLF001
                        [self._names[f] for f in feats])
        return kjt, torch.tensor(feats, dtype=torch.int64)

    @traced_as_leaf
    def forward(self, features: Any) -> KeyedTensor:
        """Pool this rank's batch (recgo or TorchRec KJT with every feature; keys no table reads are
        ignored) across the world.

        A batch of a :class:`recgo.DataPipeline` built with ``shard=`` this collection carries each
        table's distinct IDs and their partition by owner: the step uses them instead of computing
        them (same result). A batch partitioned for a collection laid out otherwise (world, rank,
        sharding, mode, tables) raises :class:`InvalidInputError`. A TorchRec variable batch with
        ``inverse_indices`` is pooled padded to its largest feature batch and expanded, as by the
        unsharded collection (``modules._vbe``). Per-ID weights that require grad get their gradient (``_weighted``)."""
        _failed.refuse(self, "forward")
        with refused_together(self) as refusal:  # a batch refused here stops the step on every rank
            vb = _vbe.variable_batch(features)
            index, size = (None, 0) if vb is None else _vbe.pooled_index(vb, self._features)
            kjt, key_feature = self._engine_batch(as_kjt(features) if vb is None else vb.kjt)
            values, lengths = kjt.values(), kjt.lengths()
            ran = self._begin_forward(values, lengths)
            weights = kjt.weights_or_none() if self._is_weighted else None
            if self._is_weighted and weights is None:
                raise InvalidInputError("this collection is weighted (is_weighted=True) but the batch has no weights")
            if _weighted.trains_weights(weights):  # rows come back and pool here (_weighted)
                refusal.sequence = True
                rows, values, lengths = _weighted.begin(self, key_feature, values, lengths, weights)
            else:
                rows, step = None, self._begin_pooled(key_feature, values, lengths, weights)
        if rows is not None:
            drive_rows(self, rows)
            ran()
            out = _weighted.pool(self, rows, key_feature, values, lengths, weights)
        else:
            drive(step.handle, self._groups, step.traffic, self._wire)
            ran()
            out = self._lookup(step, lengths.numel() // max(1, len(kjt.keys())))
        if vb is not None:
            out = _vbe.expand_pooled(out, index, self._dims, size)
        return KeyedTensor(self._names, self._dims, out)

    def _begin_pooled(self, key_feature: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor,
                      weights: torch.Tensor | None) -> _Step:
        """Begin a pooled step (``weights`` take no gradient), from a pipeline batch's partition if it has one."""
        if weights is not None:
            weights = check_tensor(weights.detach(), "weights", (torch.float32,), ndim=1)
        step = _lib.H(0)
        prepared = _prepared.prepared_handle(values, lengths) if weights is None else None
        def made() -> _Step:
            return _Step(_lib.Handle(step.value))

        if prepared is not None:  # a pipeline batch: its FORMAT stage deduplicated and partitioned it
            return _lib.call_making(_lib.fn("recgo_shard_begin_prepared"), [step], self._handle.value, prepared,
                                    ptr(key_feature), key_feature.numel(), ptr(values), values.numel(), ptr(lengths),
                                    lengths.numel(), ctypes.byref(step), then=made)
        return _lib.call_making(_lib.fn("recgo_shard_begin"), [step],
                                self._handle.value, ptr(key_feature), key_feature.numel(), ptr(values), values.numel(),
                                ptr(lengths), lengths.numel(), None if weights is None else (weights.data_ptr() or None),
                                0 if weights is None else weights.numel(), ctypes.byref(step), then=made)

    def _begin_forward(self, values: torch.Tensor, lengths: torch.Tensor) -> Callable[[], None]:
        """A forward's first local step, inside its ``refused_together``: the module's mode to the
        engine (:meth:`_sync_training`), and the activation-checkpointing guard the unsharded
        collections have (``modules._recompute``): a recomputation in backward whose dynamic tables
        admitted or evicted IDs on this rank's shard since the forward it recomputes is refused, so on
        every rank (it read rows that forward did not). Returns what to call once the forward exchange
        has run (a training forward remembers the shard's state it left, by this rank's batch)."""
        self._sync_training()
        return _recompute.check(self, self._engine_training, values, lengths)

    def _sync_training(self) -> None:
        """Give the engine the module's mode before a step begins: in eval mode (``.eval()``) dynamic
        tables admit no ID and keep their clocks; fixed tables look the same either way. And the
        table count its first ops are sized for, once a larger collection was built (``pad_tables``)."""
        mode = _eager.forward_mode(self.training)  # a checkpoint's recomputation in backward: RECOMPUTE
        if mode != self._engine_training:
            _lib.call(_lib.fn("recgo_shard_set_training"), self._handle.value, mode)
            self._engine_training = mode
        pad = pad_tables()
        if pad != self._pad:
            _lib.call(_lib.fn("recgo_shard_set_pad_tables"), self._handle.value, pad)
            self._pad = pad

    def _graph_weights(self, step: "_Step") -> list[torch.Tensor] | None:
        """The shards' weights when a step's output goes through autograd (some shard's weight requires
        grad), else None: the output is read out at once. The step keeps which shards are frozen
        (``requires_grad_(False)``), which its backward leaves out: no rank steps them (with a fused
        optimizer) or gets their gradients, and every rank must freeze the same ones."""
        shards = [s.weight for s in self.embedding_bags.values()]
        keep, step.frozen = fused_keep(shards)  # fused or not: the shards' own flags
        return shards if keep else None

    def _lookup(self, step: "_Step", size: int) -> torch.Tensor:
        """The output of a step whose forward exchange ran: through autograd (_graph_weights) or read out now."""
        shards = self._graph_weights(step)
        if shards is not None:
            return _Lookup.apply(self, step, size, self._anchor, *shards)
        out = self._output(step, size)
        self._record(step)
        return out

    def _output(self, step: "_Step", batch: int) -> torch.Tensor:
        """The ``[batch, width]`` pooled output of a step."""
        out = torch.empty(batch, self._width, dtype=torch.float32)
        _lib.call(_lib.fn("recgo_shard_pool"), step.handle.value, ptr(out), out.numel())
        return out

    def _backward(self, step: "_Step", grad: torch.Tensor, unused: list[bool] | None = None) -> list[torch.Tensor | None]:
        """Gradients of the anchor and the shards (the anchor's alone when the optimizer is fused);
        ``unused`` marks the tables this rank's loss left out, and a table no rank used gets none."""
        handle = step.handle
        fused = self._optimizer is not None
        step.begin_backward(grad, self._grad_scale, fused, unused)
        _failed.drive_backward(self, handle, step.traffic)
        self._record(step)
        if fused:
            return [torch.zeros((), dtype=torch.float32)] + [None] * len(self._configs)
        grads: list[torch.Tensor | None] = list(self._owner_grads(handle))
        if unused is not None or step.frozen is not None:
            skipped = (ctypes.c_uint8 * len(grads))()
            _lib.call(_lib.fn("recgo_shard_skipped"), handle.value, ctypes.addressof(skipped), len(grads))
            grads = [None if k else g for g, k in zip(grads, skipped)]
        return [None, *grads]

    def _owner_grads(self, handle: _lib.Handle) -> list[torch.Tensor]:
        """Each shard's dense gradient from a non-fused backward exchange's merged owner gradients."""
        f = _lib.fn("recgo_shard_owner_grads")
        out: list[torch.Tensor] = []
        for t, (cfg, shard) in enumerate(zip(self._configs, self.embedding_bags.values())):
            n = I64(0)
            _lib.call(f, handle.value, t, None, None, ctypes.byref(n))
            rows = torch.empty(n.value, dtype=torch.int64)
            vals = torch.empty(n.value, cfg.embedding_dim, dtype=torch.float32)
            _lib.call(f, handle.value, t, ptr(rows), ptr(vals), ctypes.byref(n))
            out.append(torch.zeros(tuple(shard.weight.shape), dtype=torch.float32).index_copy_(0, rows, vals))
        return out

    def _record(self, step: "_Step") -> None:
        """Add the step's counters and bytes to ``last_traffic`` / ``total_traffic``."""
        self.last_traffic = _traffic.record(step, [c.name for c in self._configs], self.total_traffic)

    def traffic(self, total: bool = False) -> dict[str, int]:
        """This rank's counters summed over tables (the last step's, or since construction with
        ``total``): IDs and vectors sent within and across nodes, gradients, bytes per group.

        ``ids_*`` count distinct IDs sent (the same whatever the return); ``vecs_*`` count the
        vectors this rank returned as an owner — rows, or per (bag, table) partial sums where it
        pooled, of which there are ``pooled_vecs`` — and ``grads_*`` the gradients it sent, one per
        row or per pooled segment (``pooled_grads``)."""
        return _traffic.summed(self.total_traffic if total else self.last_traffic)

    def check_peers(self, timeout: float | None = None) -> None:
        """Raise :class:`PeerFailureError` unless every rank reaches this barrier within ``timeout``."""
        check_peers(self._groups, timeout)

    def extra_repr(self) -> str:
        g = self._groups
        splits = f"row_splits={self.row_splits()}, " if self.row_splits() else ""
        return (f"tables={self.sharding_types()}, {splits}mode={self._mode}, owner_pooling={self.owner_pooling()}, "
                f"rank={g.rank}/{g.world_size} ({g.nodes}×{g.ranks_per_node}), width={self._width}")

