"""shard_model: what TorchRec's ``DistributedModelParallel(model)`` does, for recgo's collections."""

from __future__ import annotations

import warnings
from typing import Any, Iterator, Mapping

import torch
import torch.distributed as dist
from torch import nn

from ..errors import InvalidInputError, NotFoundError
from ..modules import optim
from ..modules._load_whole import whole_load
from ..modules.embedding import EmbeddingBagCollection
from ..modules._walk import outermost, replace, torchrec_kind
from ..modules.convert import carry_module_state, convert_managed
from ..modules.sequence import EmbeddingCollection
from ._collection import ShardedEmbeddingBagCollection
from . import _reduce_hook
from ._exchange import PeerFailureError, dense_group
from ._sequence import ShardedEmbeddingCollection

_SHARDED = (ShardedEmbeddingBagCollection, ShardedEmbeddingCollection)


def _kind(m: nn.Module) -> type | None:
    """The sharded class that replaces ``m`` (a recgo or TorchRec embedding collection), or None."""
    if isinstance(m, _SHARDED):
        return None
    if isinstance(m, EmbeddingBagCollection):
        return ShardedEmbeddingBagCollection
    if isinstance(m, EmbeddingCollection):
        return ShardedEmbeddingCollection
    kind = torchrec_kind(m)
    if kind is None:
        return None
    return ShardedEmbeddingBagCollection if kind == "pooled" else ShardedEmbeddingCollection


def _collections(model: nn.Module) -> list[tuple[str, nn.Module, type]]:
    """``model``'s embedding collections (qualified name, module, sharded class), outermost only, in
    ``named_modules`` order (the same on every rank: building a sharded collection is a collective)."""
    return outermost(model, _kind, inside=lambda m: isinstance(m, _SHARDED))


def _sharded_names(model: nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, _SHARDED)]


def _check_shareable(model: nn.Module, name: str, m: nn.Module) -> None:
    """A sequence collection over another collection's tables (``share=``) cannot be sharded on its own."""
    if not isinstance(m, EmbeddingCollection):
        return
    owner = m.ebc
    if m._remap is not None or any(o is owner for o in model.modules()):
        raise InvalidInputError(
            f"{name or 'the model'}: this EmbeddingCollection looks up the tables of another collection "
            "(share=); sharded collections do not share tables: give it tables of its own")


def _configs(m: nn.Module) -> list[Any]:
    return m.embedding_bag_configs() if hasattr(m, "embedding_bag_configs") else m.embedding_configs()


def _reset(m: nn.Module) -> bool:
    """Initialise ``m``'s own parameters the module's way; False when it has no way."""
    for attr in ("reset_parameters", "_reset_parameters"):  # nn.MultiheadAttention has only the latter
        fn = getattr(m, attr, None)
        if callable(fn):
            fn()
            return True
    return False


def _materialise_dense(model: nn.Module) -> None:
    """Every module outside the sharded collections that still holds meta tensors: ``to_empty`` on the
    CPU, then its ``reset_parameters`` (children before parents)."""
    skip = _sharded_names(model)
    mods = [(n, m) for n, m in model.named_modules()
            if not any(n == s or n.startswith(f"{s}.") for s in skip)]
    meta = [(n, m) for n, m in mods
            if any(t.is_meta for t in (*m.parameters(recurse=False), *m.buffers(recurse=False)))]
    with torch.no_grad():
        for _, m in meta:
            m.to_empty(device="cpu", recurse=False)
        missing = [n or type(m).__name__ for n, m in reversed(meta) if not _reset(m)]
    if missing:
        warnings.warn(f"shard_model: {missing} had parameters on the meta device and no reset_parameters(): they "
                      "were materialised uninitialised; set their values before training", stacklevel=3)


# DistributedDataParallel's arguments as TorchRec's DMP wraps the dense part (DefaultDataParallelWrapper):
# a static graph, so dense parameters a forward leaves unused do not stop the next step's reduction.
DDP_DEFAULTS: dict[str, Any] = {"static_graph": True}


# how DDP's sync before a forward says the last backward left parameters unreduced (parameters the
# forward did not use, without find_unused_parameters): the model's doing, not a failed peer
_UNUSED_PARAMETERS = "Expected to have finished reduction in the prior iteration"


class ShardedModel(nn.parallel.DistributedDataParallel):
    """The ``DistributedDataParallel`` wrapper :func:`shard_model` returns (its dense parameters data
    parallel, the shards left out). Under ``torch.fx`` tracing it is its module: DDP's own forward,
    which fx cannot trace, only synchronises gradients at run time, and TorchRec's
    ``TrainPipelineSparseDist`` traces the model it is given (DMP's inner module; this one whole).
    As DMP's, its ``state_dict``, ``load_state_dict``, ``named_parameters`` and ``named_buffers`` use
    the model's own names, without DDP's ``module.`` prefix."""

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        """DDP's forward; under ``torch.fx`` symbolic tracing, the wrapped module's. A backward that
        raised part-way (a Ctrl-C in it) left DDP's Reducer mid-iteration: this forward resets it
        (:class:`._reduce_hook.Backward`), where DDP's next forward failed, and every one after."""
        if torch.fx._symbolic_trace.is_fx_symbolic_tracing():
            return self.module(*inputs, **kwargs)
        backward = _reduce_hook.Backward.due(self)
        out = super().forward(*inputs, **kwargs)
        backward.watch(out)
        return out

    def _pre_forward(self, *inputs: Any, **kwargs: Any) -> Any:
        # DDP's collectives before the forward (bucket rebuild, buffer sync): a peer that died or
        # stalled past the timeout is named as the collections name it, not gloo's bare RuntimeError.
        try:
            return super()._pre_forward(*inputs, **kwargs)
        except RuntimeError as exc:
            if _UNUSED_PARAMETERS in str(exc):  # DDP's own verdict on the model, not a peer's failure
                exc.add_note("recgo: shard_model builds DDP with static_graph=True; for a forward whose used "
                             "parameters change, pass shard_model(..., ddp_kwargs={'static_graph': False, "
                             "'find_unused_parameters': True})")
                raise
            raise PeerFailureError(
                f"rank {dist.get_rank()}: the dense part's DistributedDataParallel sync before the forward "
                f"failed: a peer died, stalled past the timeout or is out of step: {exc}") from exc

    def register_comm_hook(self, state: object, hook: Any) -> None:
        """DDP's: ``hook(state, bucket)`` reduces each bucket of dense gradients (once per model, as
        DDP allows), its failures raised from the backward as :class:`PeerFailureError` as the
        default all-reduce's are (:mod:`._reduce_hook`: DDP's own comm hook is recgo's)."""
        if getattr(self, "_recgo_reduce", None) is None:  # (DDP's own, from its constructor)
            super().register_comm_hook(state, hook)
            return
        self._check_comm_hook(hook)
        self._recgo_reduce.replace(state, hook)
        if self.logger is not None:
            self.logger._set_comm_hook_name(hook.__qualname__)

    def _register_builtin_comm_hook(self, comm_hook_type: Any) -> None:
        """DDP's built-in hooks as their Python counterparts (:meth:`register_comm_hook`)."""
        if getattr(self, "_recgo_reduce", None) is None:  # (DDP's own, from its constructor)
            super()._register_builtin_comm_hook(comm_hook_type)
            return
        self.register_comm_hook(self.process_group, _reduce_hook.builtin(comm_hook_type))

    @property
    def plan(self) -> dict[str, dict[str, str]]:
        """Each sharded collection's path → table → sharding kind (:func:`sharding_plan`; DMP's
        ``.plan`` counterpart)."""
        return sharding_plan(self.module)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """The model's state dict (its keys as the unwrapped model's, as DMP's)."""
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """Load a state dict keyed as the unwrapped model's (what :meth:`state_dict` gives). If it raises,
        the model's embedding collections are as they were (:func:`recgo.modules._load_whole.whole_load`;
        the dense part loads as ``nn.Module.load_state_dict`` leaves it)."""
        with whole_load(self.module, state_dict):
            return self.module.load_state_dict(state_dict, strict=strict, assign=assign)

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, nn.Parameter]]:
        """The model's parameters under its own names (no ``module.``), as DMP's."""
        return self.module.named_parameters(prefix=prefix, recurse=recurse, remove_duplicate=remove_duplicate)

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
        """The model's buffers under its own names (no ``module.``), as DMP's."""
        return self.module.named_buffers(prefix=prefix, recurse=recurse, remove_duplicate=remove_duplicate)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        """Copies and pickles wrap a copy of the module again (the class :meth:`wrap` made has no name
        to pickle by); a module holding sharded collections refuses, naming what to use instead."""
        return (ShardedModel.wrap, (self.module, self._recgo_ddp_kwargs, self._recgo_process_group))

    @staticmethod
    def wrap(model: nn.Module, ddp_kwargs: Mapping[str, Any] | None = None,
             process_group: Any = None) -> "ShardedModel":
        """``model`` wrapped, with ``DistributedDataParallel``'s arguments ``ddp_kwargs`` over
        :data:`DDP_DEFAULTS` (and ``process_group`` where given); its class's ``forward`` names ``model``'s parameters for torch.fx (which
        reads a root's placeholders from its forward's code, through ``__wrapped__``: ``*inputs``
        would be one placeholder that cannot be unpacked)."""
        def forward(self: ShardedModel, *inputs: Any, **kwargs: Any) -> Any:
            return ShardedModel.forward(self, *inputs, **kwargs)

        forward.__wrapped__ = type(model).forward  # type: ignore[attr-defined]
        forward.__doc__ = ShardedModel.forward.__doc__
        cls = type("ShardedModel", (ShardedModel,), {"forward": forward, "__module__": __name__,
                                                      "__qualname__": "ShardedModel", "__doc__": ShardedModel.__doc__})
        kwargs = {**DDP_DEFAULTS, **({"process_group": process_group} if process_group is not None else {}),
                  **(ddp_kwargs or {})}
        try:
            wrapped = cls(model, **kwargs)
        except TypeError as exc:  # an argument DistributedDataParallel does not take
            raise InvalidInputError(f"shard_model: ddp_kwargs {sorted(ddp_kwargs or {})}: {exc}") from None
        wrapped._recgo_ddp_kwargs = dict(ddp_kwargs or {})
        wrapped._recgo_process_group = process_group
        wrapped._recgo_reduce = _reduce_hook.install(wrapped)  # a dead peer's all-reduce: PeerFailureError
        return wrapped


_TORCHREC_KINDS = ("table_wise", "row_wise", "data_parallel")  # TorchRec sharding types recgo has too


def _torchrec_plan(plan: Any, path: str, configs: list[Any]) -> tuple[dict[str, str], dict[str, int],
                                                                    dict[str, list[int]]]:
    """The sharding, table ranks and row splits a TorchRec ``ShardingPlan`` gives the collection at
    ``path`` (whose tables' configs are ``configs``)."""
    module = plan.plan.get(path)
    if module is None:
        hint = ("; TorchRec's planner plans only TorchRec's modules, and leaves recgo's out: plan the model "
                "built with TorchRec's collections (shard_model converts them), or pass recgo.planner's plan "
                "or a sharding kind" if not plan.plan else "")
        raise InvalidInputError(f"shard_model: the TorchRec plan has no entry for the collection at {path!r} "
                                f"(it plans {sorted(plan.plan)}){hint}")
    sharding, ranks, splits = {}, {}, {}
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else None
    for cfg in configs:
        t = cfg.name
        ps = module.get(t) if hasattr(module, "get") else None
        if ps is None:
            raise InvalidInputError(f"shard_model: the TorchRec plan of {path!r} has no entry for table {t!r}")
        kind = str(getattr(ps, "sharding_type", ""))
        if kind not in _TORCHREC_KINDS:
            raise InvalidInputError(f"shard_model: the TorchRec plan shards table {t!r} {kind!r}, which recgo does "
                                    f"not have (it has {list(_TORCHREC_KINDS)}, and hash): plan it with those")
        sharding[t] = kind
        if world is not None:
            _check_torchrec_ranks(t, kind, ps, world)
        if kind == "table_wise":
            ranks[t] = int(ps.ranks[0])
        spec = getattr(ps, "sharding_spec", None)
        if kind == "row_wise" and world is not None and getattr(spec, "shards", None):
            splits[t] = _torchrec_split(cfg, spec.shards, world)
    return sharding, ranks, splits


def _check_torchrec_ranks(table: str, kind: str, ps: Any, world: int) -> None:
    """Refuse a TorchRec ParameterSharding whose ranks or shards do not fit this world: recgo shards
    row-wise over ranks 0..world-1 in order (and replicates on all of them), so a plan for another
    world size would place rows on ranks this world lacks, or none on ranks it has."""
    got = [int(r) for r in ps.ranks] if getattr(ps, "ranks", None) is not None else None
    spec = getattr(ps, "sharding_spec", None)
    shards = len(spec.shards) if spec is not None and getattr(spec, "shards", None) is not None else None
    if kind == "table_wise":
        if not got or len(got) != 1 or not 0 <= got[0] < world:
            raise InvalidInputError(f"shard_model: the TorchRec plan puts table-wise table {table!r} on ranks {got}: "
                                    f"expected one rank of the world of {world}; plan for this world size")
        return
    if (got is not None and got != list(range(world))) or (kind == "row_wise" and shards not in (None, world)):
        where = f"ranks {got}" if got is not None else f"{shards} shards"
        raise InvalidInputError(f"shard_model: the TorchRec plan shards table {table!r} {kind} over {where}, "
                                f"but recgo's {kind} tables span ranks {list(range(world))} of this world in order "
                                f"(a plan for another world size?): plan for a world of {world}")


def _torchrec_split(cfg: Any, shards: Any, world: int) -> list[int]:
    """The rows per rank (rank order) a TorchRec row-wise plan's shards (ShardMetadata, one per rank)
    give table ``cfg``: shard r holds the rows [shard_offsets[0], shard_offsets[0] + shard_sizes[0]) of
    every column on rank r. Shard r is rank r's by its place in the list, as TorchRec's row-wise
    sharding takes it (``shards[rank]``), not by its placement: ``row_wise(sizes_placement)`` places
    every CPU shard on "rank:0". recgo gives rank r the rows after ranks 0..r-1's, so shards that split
    the columns too, or whose rows are not contiguous in rank order from row 0 to the last, raise."""
    t = cfg.name
    try:
        placed = [([int(x) for x in s.shard_offsets], [int(x) for x in s.shard_sizes]) for s in shards]
    except (AttributeError, TypeError, ValueError) as exc:
        raise InvalidInputError(f"shard_model: the TorchRec plan's shards of row-wise table {t!r} are not "
                                f"ShardMetadata with offsets and sizes ({exc})") from None
    split, at = [], 0
    for off, size in placed:
        if len(off) != 2 or len(size) != 2 or off[1] != 0 or size[1] != cfg.embedding_dim:
            raise InvalidInputError(f"shard_model: the TorchRec plan shards row-wise table {t!r} at offsets {off}, "
                                    f"sizes {size}: not whole rows of its {cfg.embedding_dim} columns (recgo splits "
                                    "row-wise tables by rows alone)")
        if size[0] < 0 or (size[0] and off[0] != at):  # an empty shard holds nothing wherever it starts
            break
        split.append(size[0])
        at += size[0]
    else:
        if at == cfg.num_embeddings and len(split) == world:
            return split
    shown = [(r, off[0], size[0]) for r, (off, size) in enumerate(placed)]
    raise InvalidInputError(f"shard_model: the TorchRec plan's shards of row-wise table {t!r}, as (rank, first row, "
                            f"rows) {shown}, are not contiguous rows in rank order covering its "
                            f"{cfg.num_embeddings} rows: recgo's rank r holds the rows after ranks 0..r-1's")


# FBGEMM's EmbOptimType names → the torch / torchrec optimizer class recgo's from_torch reads.
_EMB_OPTIM = {"EXACT_SGD": ("torch.optim", "SGD"), "SGD": ("torch.optim", "SGD"),
              "EXACT_ADAGRAD": ("torch.optim", "Adagrad"), "ADAGRAD": ("torch.optim", "Adagrad"),
              "EXACT_ROWWISE_ADAGRAD": ("torchrec.optim", "RowWiseAdagrad"),
              "ROWWISE_ADAGRAD": ("torchrec.optim", "RowWiseAdagrad"), "ADAM": ("torch.optim", "Adam")}
# DMP's arguments with no recgo counterpart, and why.
_DMP_ONLY = {"init_data_parallel": "the dense part is always wrapped (ddp=False leaves it unwrapped)",
             "init_parameters": "meta parameters are always initialised",
             "data_parallel_wrapper": "the dense part is wrapped in DistributedDataParallel (ddp=False: not at all)"}


def _sharder_optimizers(sharders: Any) -> dict[type, optim.FusedOptimizer]:
    """The fused optimizer TorchRec sharders' ``fused_params`` give each sharded class (DMP's
    ``sharders=[EmbeddingCollectionSharder(fused_params)]``); quantized communication
    (``qcomm_codecs_registry``) is ignored with a warning."""
    import importlib

    out: dict[type, optim.FusedOptimizer] = {}
    for s in sharders or []:
        name = type(s).__name__
        kind = (ShardedEmbeddingBagCollection if "EmbeddingBag" in name
                else ShardedEmbeddingCollection if "EmbeddingCollection" in name else None)
        if kind is None:
            raise InvalidInputError(f"shard_model: sharder {name} shards no module recgo shards (recgo takes "
                                    "EmbeddingBagCollectionSharder and EmbeddingCollectionSharder)")
        if getattr(s, "qcomm_codecs_registry", None):
            warnings.warn(f"shard_model: {name}'s qcomm_codecs_registry quantizes DMP's all-to-alls (e.g. to FP16); "
                          "recgo exchanges float32 and ignores it", UserWarning, stacklevel=3)
        params = dict(getattr(s, "fused_params", None) or {})
        if "optimizer" not in params:
            continue
        opt = params.pop("optimizer")
        found = _EMB_OPTIM.get(str(getattr(opt, "name", opt)).upper())
        if found is None:
            raise InvalidInputError(f"shard_model: {name}'s fused optimizer {opt} has no recgo counterpart (recgo "
                                    f"has {sorted(_EMB_OPTIM)})")
        kw = {"lr": params.pop("learning_rate")} if "learning_rate" in params else {}
        takes = {"SGD": (), "Adam": ("eps", "beta1", "beta2")}.get(found[1], ("eps",))  # FBGEMM ignores the rest
        kw.update({k: params.pop(k) for k in takes if k in params})
        for k in ("eps", "beta1", "beta2", "weight_decay_mode"):
            params.pop(k, None)
        decay = params.pop("weight_decay", 0.0)
        if decay:
            optim.warn_fbgemm_decay(f"shard_model: {name}'s fused_params", "DistributedModelParallel", decay, 4)
        if params:
            warnings.warn(f"shard_model: {name}'s fused_params {sorted(params)} tune FBGEMM's kernels; recgo's "
                          "have no such settings and ignore them", UserWarning, stacklevel=3)
        out[kind] = optim.from_torch(getattr(importlib.import_module(found[0]), found[1]), kw)
    return out


def _check_dmp_arguments(kwargs: dict[str, Any]) -> None:
    """Refuse, by name, what shard_model cannot take: DMP's own arguments and unknown ones."""
    import inspect

    device = kwargs.pop("device", None)
    if device is not None and torch.device(device).type != "cpu":
        raise InvalidInputError(f"shard_model: device {device}: recgo's sharded tables live in CPU memory")
    _check_env(kwargs.pop("env", None))
    dmp_only = sorted(set(kwargs) & set(_DMP_ONLY))
    if dmp_only:
        k = dmp_only[0]
        raise InvalidInputError(f"shard_model: DistributedModelParallel's {k}= has no recgo counterpart: {_DMP_ONLY[k]}")
    takes = set()
    for cls in _SHARDED:
        takes |= {n for n, p in inspect.signature(cls.__init__).parameters.items()  # not the private _init
                  if n not in ("self", "tables", "sharding") and not n.startswith("_") and p.kind != p.VAR_KEYWORD}
    unknown = sorted(set(kwargs) - takes)
    if unknown:
        raise InvalidInputError(f"shard_model: unknown arguments {unknown} (the sharded collections take "
                                f"{sorted(takes)})")


def _check_env(env: Any) -> None:
    """DMP's ``env=``: a TorchRec ``ShardingEnv`` over torch.distributed's default (world) group, which
    recgo shards over (``ShardingEnv.from_process_group(dist.group.WORLD)``, as TorchRec's sharding
    tutorial passes it), is taken; one over another group, or a local one (``from_local``, no group),
    raises naming it, as recgo has no way to shard over another group."""
    if env is None:
        return
    pg = getattr(env, "process_group", None)
    if pg is not None and dist.is_available() and dist.is_initialized() and pg is dist.group.WORLD:
        return
    what = ("no process group (ShardingEnv.from_local)" if pg is None
            else "a process group other than torch.distributed's default one")
    raise InvalidInputError(f"shard_model: DistributedModelParallel's env= has {what}: recgo shards over the "
                            "default (world) group only; leave env= out, or pass "
                            "ShardingEnv.from_process_group(dist.group.WORLD)")


def _is_torchrec_plan(plan: Any) -> bool:
    return type(plan).__name__ == "ShardingPlan" and isinstance(getattr(plan, "plan", None), Mapping)


def _sparse_gradients(model: nn.Module, ignored: set[str]) -> bool:
    """Whether a module of the dense part (outside ``ignored``) is torch's embedding with sparse gradients."""
    return any(isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.sparse and m.weight.requires_grad
               and (f"{n}.weight" if n else "weight") not in ignored for n, m in model.named_modules())


def _gloo_threads(group: Any) -> int | None:
    """How many worker threads ``group``'s gloo backend runs (None: not gloo, or torch hides it)."""
    try:
        return int(group._get_backend(torch.device("cpu")).options._threads)
    except Exception:  # another backend, or a torch without these private names: nothing to say
        return None


def shard_model(model: nn.Module | None = None, sharding: str | Mapping[str, str] | None = None, *, ddp: bool = True,
                gradient_division: bool = True, module: nn.Module | None = None, sharders: Any = None,
                ddp_kwargs: Mapping[str, Any] | None = None, **kwargs: Any) -> nn.Module:
    """Shard every embedding collection of ``model`` over the ranks of ``torch.distributed`` and make
    the rest data parallel — what TorchRec's ``DistributedModelParallel(model)`` does:

    * each recgo or TorchRec ``EmbeddingBagCollection`` (or TorchRec's ``FusedEmbeddingBagCollection``,
      whose optimizer carries over) is replaced in its parent by a
      :class:`ShardedEmbeddingBagCollection` (:meth:`~ShardedEmbeddingBagCollection.from_ebc`), each
      ``EmbeddingCollection`` by a :class:`ShardedEmbeddingCollection` (``from_ec``), with
      ``sharding`` and ``kwargs`` (``mode``, ``nodes``, ``optimizer``, ``timeout``, ...; a table → value
      mapping for ``sharding``, ``owner_pooling``, ``table_ranks`` or ``row_splits`` may name the
      tables of every collection, each gets its own). A collection
      built on the meta device (``with torch.device("meta"): model = MyModel()``) is never
      materialised whole: each rank initialises only its rows, as the collection's seed and its
      tables' ``init_fn`` say; a built one gives each rank its rows and their optimizer state (a recgo
      collection's, or TorchRec's where recgo's optimizer runs the same update: see
      :func:`recgo.from_torchrec`).
    * the collection inside a TorchRec ``FeatureProcessedEmbeddingBagCollection`` is sharded as any
      other, its feature processors (``PositionWeightedModule``, ``PositionWeightedModuleCollection``)
      staying dense parameters under DDP: the position weights they make train, as under DMP (the
      sharded collection gives per-ID weights that require grad their gradient);
    * a TorchRec managed-collision collection becomes recgo's dynamic-ID tables first (as
      :func:`recgo.from_torchrec` converts it, its MCH state carried over), whose collection is then
      sharded (its tables by ID hash unless ``sharding`` says otherwise); one built around recgo's
      collection raises ``InvalidInputError`` (its MCH modules would remap IDs on each rank apart);
    * every other parameter or buffer still on the meta device is materialised on the CPU and
      initialised by its module's ``reset_parameters()`` (``nn.MultiheadAttention``'s
      ``_reset_parameters``); a module with neither gets a warning, as its values are then arbitrary.
    * with ``ddp`` (default) the model is wrapped in ``DistributedDataParallel`` over its dense
      parameters, the shards left out (their gradients go to their owners, not through DDP's
      all-reduce); DDP starts every rank from rank 0's dense weights. As under DMP it is built with
      ``static_graph=True`` (dense parameters a forward leaves unused then train on); ``ddp_kwargs``
      gives DDP other arguments (``{"static_graph": False, "find_unused_parameters": True}`` for a
      forward whose used parameters change from step to step). DDP runs on a process group of its
      own with the collections' ``timeout`` (unless ``ddp_kwargs`` names a ``process_group``), so a dead
      or stalled peer fails its collectives within that timeout too, not the default group's 30
      minutes, with :class:`PeerFailureError` (before the forward, and in the backward's all-reduce,
      whose comm hook is recgo's: ``register_comm_hook`` replaces what it runs for each bucket).
      Where the dense part keeps torch's ``nn.Embedding``/``nn.EmbeddingBag`` with ``sparse=True``,
      that group runs its collectives on one gloo thread (:func:`sparse_ddp_group` says why); an
      embedding with sparse gradients written otherwise (``F.embedding(..., sparse=True)``) is not
      seen: pass ``ddp_kwargs={"process_group": sparse_ddp_group(timeout)}`` for it.

    DMP's spellings work too: ``module=`` for ``model``, ``device=`` (the CPU), ``sharders=``
    (TorchRec sharders whose ``fused_params`` name the tables' fused optimizer, as bert4rec's script
    passes them), ``plan=``; DMP's other arguments, and unknown ones, raise ``InvalidInputError``.

    ``sharding`` defaults to ``"plan"`` when ``plan=`` is given, else ``"hash"``. ``plan`` is a
    :class:`recgo.planner.Plan`, or TorchRec's ``ShardingPlan`` (DMP's ``plan=``: its table-wise,
    row-wise and data-parallel tables are sharded so, each table-wise one on its rank and each
    row-wise one split as its shards split the rows, an uneven split included (TorchRec's
    ``device_memory_sizes`` or ``row_wise(sizes_placement)``; passed on as ``row_splits`` and
    ``table_ranks``, so either argument with such a plan raises); row-wise shards that are not contiguous rows in rank
    order covering the table, or that split its columns too, raise naming the table, as do
    column-wise and the table-row/column kinds).

    The tables' fused optimizer is ``optimizer`` if given, else a recgo collection's own, else the one
    ``apply_optimizer_in_backward`` gave a collection's tables, as DMP reads it
    (:func:`recgo.modules.optim.from_torch`); with none, the shards get dense gradients.

    ``gradient_division`` (default True here, as in TorchRec's DMP; the collections' own default is
    False): each rank's embedding gradient is divided by the world size, so with a per-rank mean loss
    the tables step on the global-batch mean, as DDP's averaged dense gradients do.

    Every rank must call it with the same model and arguments. A sequence collection built with
    ``share=`` another collection raises ``InvalidInputError`` (sharded collections own their tables).
    Returns the DDP wrapper, or ``model`` itself with ``ddp=False`` or no dense parameters (DDP
    refuses a model without them; a collection given alone is returned as its sharded counterpart).
    Every return carries, as DMP's wrapper does: ``.module``, the model with its collections sharded
    (the wrapped model; ``model`` itself where it is returned), ``.plan``, each sharded collection's
    path → table → sharding kind (:func:`sharding_plan`), and ``.fused_optimizer``, a
    :class:`~recgo.modules.optim.CollectionOptimizer` over the tables' fused optimizers for torch's
    learning-rate schedulers (None when no table has one). A returned model that has an attribute
    ``module`` or ``plan`` of its own keeps it. (Before session 43 only the wrapper had ``.module``,
    and no return had ``.plan``.)
    """
    if module is not None:
        if model is not None:
            raise InvalidInputError("shard_model: give the model once (model or module=)")
        model = module
    if not isinstance(model, nn.Module):
        raise InvalidInputError(f"shard_model: expected an nn.Module, got {type(model).__name__}")
    _check_dmp_arguments(kwargs)
    by_sharder = _sharder_optimizers(sharders)
    # TorchRec's managed-collision collections: their MCH state into dynamic-ID tables first
    model = convert_managed(model, kwargs.get("optimizer"), sharding=True)
    found = _collections(model)
    for name, m, _ in found:
        _check_shareable(model, name, m)
    tables = [[c.name for c in _configs(m)] for _, m, _ in found]
    torchrec_plan = kwargs.pop("plan") if _is_torchrec_plan(kwargs.get("plan")) else None
    if torchrec_plan is not None and sharding not in (None, "plan"):
        raise InvalidInputError(f"shard_model: sharding={sharding!r} and a TorchRec plan: the plan says how each "
                                "table is sharded; give one of them")
    if sharding is None:
        sharding = "plan" if kwargs.get("plan") is not None else "hash"
    for what, says in (("row_splits", "splits the row-wise tables' rows (its shards' sizes)"),
                       ("table_ranks", "puts each table-wise table on its rank")):
        if torchrec_plan is not None and what in kwargs:  # the plan's would silently replace the argument
            raise InvalidInputError(f"shard_model: {what}= and a TorchRec plan: the plan {says}; give one of them")
    per_table = {"sharding": sharding, **{k: kwargs.pop(k) for k in ("owner_pooling", "table_ranks", "row_splits")
                                          if k in kwargs}}
    for what, v in per_table.items():  # a table → value mapping covers the tables of every collection
        if isinstance(v, Mapping):
            known = {n for ns in tables for n in ns}
            unknown = sorted(set(v) - known)
            if unknown:
                raise NotFoundError(f"shard_model: {what} names tables {unknown}, which no collection of the model "
                                    f"has (its tables: {sorted(known)})")
    for (name, m, cls), names in zip(found, tables):
        mine = {k: ({n: x for n, x in v.items() if n in names} if isinstance(v, Mapping) else v)
                for k, v in per_table.items()}
        if torchrec_plan is not None:
            mine["sharding"], mine["table_ranks"], mine["row_splits"] = _torchrec_plan(torchrec_plan, name, _configs(m))
        build = cls.from_ebc if cls is ShardedEmbeddingBagCollection else cls.from_ec
        extra = {"optimizer": by_sharder[cls]} if cls in by_sharder and "optimizer" not in kwargs else {}
        new = build(m, mine.pop("sharding"), gradient_division=gradient_division, **mine, **extra, **kwargs)
        # its training flag and the user's forward and backward hooks (state-dict hooks were written for
        # the unsharded keys: they warn)
        carry_module_state([(m, new)], name, state_hooks=False, what="shard_model")
        model = replace(model, name, new)
    _materialise_dense(model)
    if not ddp:
        return _finish(model, model)
    ignore = [f"{n}.{p}" if n else p for n in _sharded_names(model)
              for p, _ in (*model.get_submodule(n).named_parameters(), *model.get_submodule(n).named_buffers())]
    dense = [p for n, p in model.named_parameters() if n not in set(ignore) and p.requires_grad]
    if not dense:
        return _finish(model, model)
    nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ignore)
    group = None
    timeout = next((model.get_submodule(n)._groups.timeout for n in _sharded_names(model)), None)
    sparse = _sparse_gradients(model, set(ignore))
    given = (ddp_kwargs or {}).get("process_group")
    if timeout is not None and "process_group" not in (ddp_kwargs or {}):  # DDP under the collections' timeout
        group = dense_group(timeout, sparse=sparse)
    elif sparse and given is not None and (threads := _gloo_threads(given) or 1) > 1:
        warnings.warn("shard_model: the dense part has torch embeddings with sparse gradients and ddp_kwargs' "
                      f"process_group runs gloo on {threads} threads: in torch 2.14 two sparse "
                      "all-reduces at once can corrupt the heap; pass recgo.distributed.sparse_ddp_group() "
                      "or leave process_group out", stacklevel=2)
    return _finish(ShardedModel.wrap(model, ddp_kwargs, group), model)


def sharding_plan(model: nn.Module) -> dict[str, dict[str, str]]:
    """Each sharded collection of ``model`` (its path, ``""`` for the model itself) → table → sharding
    kind: what :func:`shard_model` made of it, as ``.plan`` gives it (recgo's counterpart of DMP's
    ``ShardingPlan``; the collection's ``owners``/``local_ids`` place the rows)."""
    return {n: m.sharding_types() for n, m in model.named_modules() if isinstance(m, _SHARDED)}


def _finish(out: nn.Module, model: nn.Module) -> nn.Module:
    """``out`` (the DDP wrapper around ``model``, or ``model`` itself) with what every return of
    :func:`shard_model` carries, as DMP's wrapper does: ``module`` (``model``, its collections sharded),
    ``plan`` (:func:`sharding_plan`) and ``fused_optimizer`` (a
    :class:`~recgo.modules.optim.CollectionOptimizer` over the tables' fused optimizers, for LR
    schedulers; None when no table has one). The wrapper has the first two already (DDP's ``module``,
    :attr:`ShardedModel.plan`); on the model itself they are plain attributes (not a registered
    submodule: ``model.module`` is ``model``), except where the model has an attribute of that name of
    its own, which it keeps (its forward may use it). A sharded collection given alone keeps its own
    ``fused_optimizer`` property."""
    own = {"module": model, "plan": sharding_plan(model)}
    if out is model:
        for name, value in own.items():
            if not _has_attribute(model, name):
                object.__setattr__(model, name, value)  # (setattr would register model under itself)
    if not hasattr(type(out), "fused_optimizer"):
        fused = optim.CollectionOptimizer(model) if optim.fused_collections(model) else None
        object.__setattr__(out, "fused_optimizer", fused)  # (an attribute, not a registered module)
    return out


def _has_attribute(m: nn.Module, name: str) -> bool:
    """Whether ``m`` has an attribute ``name`` of its own (its class's, its instance's, a submodule,
    parameter or buffer of that name)."""
    try:
        getattr(m, name)
    except AttributeError:
        return False
    return True
