"""Rules for the engine-held tables that both collections (pooled and sequence) apply.

A collection's weights, optimizer state and step counters are the engine's float32 CPU memory,
exposed zero-copy as parameters and buffers (``_engine_tensors`` of the pooled collection lists them
as *views*: ``(table, holder module, attribute, engine tensor, its address)``). Three rules follow:

* A parameter or buffer replaced by a tensor of other memory is copied back into the engine's memory
  only where replacing is a way of loading values (``load_state_dict(assign=True)``, ``to_empty`` and
  other ``_apply`` conversions, ``reset_parameters``): :func:`sync_storage`. A forward never copies:
  it refuses a swapped parameter (``torch.func.functional_call``, stateless reparametrisation), which
  would otherwise overwrite the module's weights for good: :func:`check_storage`.
* A cast or move (``.half()``, ``.bfloat16()``, ``.double()``, ``.to("meta")``, ``.to("cuda")``) of a
  built collection is refused, since the engine reads float32 CPU memory: :func:`check_cast`.
* A fused collection trains the tables whose weights require grad; ``requires_grad_(False)`` freezes
  a table (no update, no step), or the collection (no context kept either): :func:`fused_keep`.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch import nn

from ..errors import CapacityError, InvalidInputError
from ._copies import own_hook
from ._distributed_values import make_whole, tables_from_ranks

# A loaded optimizer step counter must be in [0, _MAX_STEP) (the engine's embedding.MaxStep).
_MAX_STEP = 1 << 53

#: One engine-held tensor: (table, holder module, attribute, engine tensor, its address, the parameter
#: or buffer object the collection made for it).
View = tuple[str, nn.Module, str, torch.Tensor, int, torch.Tensor]


def _replaced(views: Sequence[View]) -> list[tuple[str, nn.Module, str, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(table, holder, attribute, engine tensor, current tensor, own object) of each view that is not
    the engine's memory any more."""
    out = []
    for table, holder, name, mine, addr, own in views:
        # the module's dicts, not getattr: nn.Module.__getattr__ is Python code, and every forward runs
        # this over all tables (3 parameters or buffers each)
        cur = holder._parameters.get(name)
        if cur is None:
            cur = holder._buffers.get(name)
            if cur is None:
                continue
        if cur is not own or cur.data_ptr() != addr or cur.shape != mine.shape or cur.dtype is not mine.dtype:
            out.append((table, holder, name, mine, cur, own))
    return out


def meta_tensors(cfg: Any, optimizer: Any) -> tuple[torch.Tensor, bool, torch.Tensor, torch.Tensor]:
    """Shape-only stand-ins of a table's weight, trainability, optimizer state and step on the meta
    device (as the engine's memory gives them once materialised)."""
    w = optimizer.state_width(cfg.embedding_dim) if optimizer is not None else 0
    if cfg.num_embeddings * max(cfg.embedding_dim, w) * 8 >= 1 << 63:  # torch's size arithmetic overflows
        raise CapacityError(f"table {cfg.name!r}: {cfg.num_embeddings} rows × {max(cfg.embedding_dim, w)} values "
                            "are too many for a tensor, even on the meta device")
    state = torch.empty((cfg.num_embeddings, w) if w else (0,), device="meta", dtype=torch.float32)
    step = torch.empty(1 if optimizer is not None else 0, dtype=torch.int64, device="meta")
    return (torch.empty(cfg.num_embeddings, cfg.embedding_dim, device="meta", dtype=torch.float32), True,
            state, step)


def sync_storage(views: Sequence[View]) -> None:
    """Copy the values of each replaced parameter or buffer back into the engine's memory and point it
    there again (loading: ``load_state_dict(assign=True)``, ``_apply``, ``reset_parameters``)."""
    for table, holder, name, mine, cur, own in _replaced(views):
        if cur.shape != mine.shape:
            raise InvalidInputError(
                f"table {table!r}: {name} was replaced by a tensor of shape {tuple(cur.shape)}, "
                f"expected {tuple(mine.shape)}")
        if cur.device.type != "cpu":
            raise InvalidInputError(
                f"table {table!r}: {name} was replaced by a tensor on {cur.device}; recgo's embedding "
                "engine holds its tables in CPU memory")
        with torch.no_grad():
            mine.copy_(cur.detach())
        if own.data_ptr() != mine.data_ptr() or own.shape != mine.shape:
            own.data = mine  # moved by an _apply conversion (to_empty, .float()): back, the object kept
        if cur is not own:  # another object put in its place (assign=True, maybe another module's): ours back
            if isinstance(cur, nn.Parameter):
                own.requires_grad_(cur.requires_grad)
            (holder._parameters if name in holder._parameters else holder._buffers)[name] = own


def check_storage(views: Sequence[View]) -> None:
    """Raise when a parameter or buffer is not the engine's memory at forward time (a forward reads
    the engine's memory, never the swapped tensor, and must not overwrite the module's weights)."""
    bad = _replaced(views)
    if not bad:
        return
    table, _, name, _, _, _ = bad[0]
    raise InvalidInputError(
        f"table {table!r}: its {name} is not the engine's memory at forward time (it was swapped, e.g. by "
        "torch.func.functional_call or a stateless reparametrisation, or reassigned). recgo's collections "
        "read their tables from engine memory, so functional_call / swapped parameters are not supported "
        "for engine-held weights; to change the weights, load_state_dict(...) or copy_ new values into the "
        "parameter under torch.no_grad()")


def check_cast(fn: Callable[[torch.Tensor], Any]) -> None:
    """Refuse an ``nn.Module._apply`` conversion of a built collection that does not leave float32 CPU
    tensors (``.half()``, ``.bfloat16()``, ``.double()``, ``.to("meta")``, a move to a GPU): the engine
    holds the tables as float32 CPU memory, which a cast would silently round or leave behind."""
    try:
        probe = fn(torch.empty(0, dtype=torch.float32))
    except (RuntimeError, AssertionError) as e:  # e.g. .to("cuda") without CUDA
        raise InvalidInputError(f"recgo's embedding engine holds its tables as float32 CPU memory; the "
                                f"conversion failed: {e}") from e
    if not isinstance(probe, torch.Tensor):
        return
    check_cast_dtype(probe)
    if probe.device.type != "cpu":
        raise InvalidInputError(
            f"cannot move a built recgo embedding collection to {probe.device} (.to(device), .cuda()): the "
            "engine holds its tables in CPU memory (build it with device='meta' for shapes only)")
    if probe.is_shared():
        raise InvalidInputError(
            "cannot move a recgo embedding collection into shared memory (share_memory(), for Hogwild-style "
            "torch.multiprocessing): its tables live in the Go engine's memory, which other processes cannot "
            "share (and a forked child cannot run recgo); train it in one process, whose kernels are already "
            "parallel, or across ranks with recgo.distributed")


def check_cast_dtype(probe: torch.Tensor) -> None:
    """Refuse a conversion that turned the float32 ``probe`` into another dtype, built or on meta (a
    meta collection cast to half would materialise as float32 anyway)."""
    if probe.dtype != torch.float32:
        raise InvalidInputError(
            f"cannot cast a recgo embedding collection to {probe.dtype} (.half(), .bfloat16(), .double(), "
            ".to(dtype)): the engine holds its tables as float32; cast the output instead, or leave the "
            "collection out of the cast (it is float32 either way; the modules a whole-model cast reached "
            "before this one are already cast: cast the dense modules one by one)")


def fused_keep(weights: Sequence[torch.Tensor]) -> tuple[bool, list[bool] | None]:
    """(keep, frozen) for a forward over tables of these ``weights`` with a fused update: whether it keeps
    a context (grad enabled and some weight requires grad), and per table whether the update leaves it
    out (None when none is left out): a weight that does not require grad is frozen
    (``requires_grad_(False)``, a pretrained table), and its rows, optimizer state and
    ``optimizer_step`` stay, as torch's optimizers skip a parameter without a gradient and TorchRec's
    in-backward ones skip a frozen table."""
    flags = [not w.requires_grad for w in weights]
    keep = torch.is_grad_enabled() and not all(flags)
    return keep, flags if keep and any(flags) else None


_OPTIMIZER_ENTRIES = ("optimizer_state", "optimizer_step")


def _allow_weights_only(module: nn.Module, owner: nn.Module, incompatible_keys: Any) -> None:
    """A strict load of a checkpoint that has this fused collection's weights and none of its optimizer
    entries (a TorchRec state_dict: its fused optimizer's state is saved apart, through
    ``fused_optimizer.state_dict()``) is not refused for the missing entries; the optimizer state stays
    as it is. Some entries of a collection present and others missing is still reported."""
    if owner.fused_optimizer is not None:
        attr = "embedding_bags" if module is owner else "embeddings"
        allow_weights_only(attr, getattr(module, attr), incompatible_keys)


def allow_weights_only(attr: str, tables: Any, incompatible_keys: Any) -> None:
    """:func:`_allow_weights_only` for a fused collection whose tables are ``tables`` (a ModuleDict of
    holders with ``weight`` and optimizer buffers) under the state-dict name ``attr``: the optimizer
    entries go from the missing keys when all of them are missing and none of the weights is."""
    opt, weights = [], []
    for name, holder in tables.items():
        weights.append(f"{attr}.{name}.weight")
        opt += [f"{attr}.{name}.{b}" for b in _OPTIMIZER_ENTRIES
                if b in holder._buffers and b not in holder._non_persistent_buffers_set]
    missing = incompatible_keys.missing_keys
    if not opt or not missing:
        return
    first = opt[0]
    for key in [k for k in missing if k.endswith(first) and (k == first or k[:-len(first)].endswith("."))]:
        prefix = key[:-len(first)]  # where the collection sits in the loaded model
        ours = {prefix + k for k in opt}
        if ours <= set(missing) and not any(prefix + w in missing for w in weights):
            missing[:] = [k for k in missing if k not in ours]


@own_hook
def materialised_before_load(module: nn.Module, state_dict: Any, prefix: str, local_metadata: Any, *_: Any) -> None:
    """``load_state_dict`` pre-hook of both collections, which runs also when the collection is nested
    in the model being loaded: a collection still on the meta device whose entries the state dict
    holds is materialised first, so torch copies them into engine memory (it copied into the meta
    tensors, a no-op, and the model stayed on meta; the collection's own ``load_state_dict`` did).
    Its entries are checked before torch copies any (:func:`check_checkpoint`; a nested load skipped
    the check, and a step counter of −5 or NaN loaded, to be refused only at the next backward). A
    TorchRec DMP's ShardedTensor table (or a DTensor) held whole here loads as the plain tensor, and so
    do a recgo sharded collection's entries of every rank of one world (``tables_from_ranks``)."""
    make_whole(state_dict, prefix)
    tables = "embeddings." if hasattr(module, "embeddings") else "embedding_bags."
    held = getattr(module, tables[:-1])
    tables_from_ranks(state_dict, prefix + tables,
                      [c for c in getattr(module, "ebc", module).embedding_bag_configs() if c.name in held], held)
    mine = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
    if not mine:
        return
    # on the meta device against the stand-ins' shapes first: a refused load leaves it there
    check_checkpoint(mine, module, tables, prefix, assign=bool((local_metadata or {}).get("assign_to_params_buffers")))
    if getattr(module, "_handle", 0) is None:
        module._materialise()
        from .. import dynamic

        dynamic.check_checkpoint(getattr(module, "ebc", module), mine, tables)  # needs the engine's tables


@own_hook
def synced_after_load(module: nn.Module, incompatible_keys: Any) -> None:
    """``load_state_dict`` post-hook of both collections (it runs also when the collection is nested in
    the model being loaded): a parameter replaced by ``assign=True`` is copied back into engine memory.
    A collection still on the meta device whose tensors a nested ``load_state_dict(..., assign=True)``
    replaced (torch's meta-initialisation pattern; the collection's own ``load_state_dict`` materialises
    first) is materialised here and takes the assigned values."""
    owner = getattr(module, "ebc", module)  # a sequence collection's tables are its owner's
    _allow_weights_only(module, owner, incompatible_keys)
    if owner._handle is not None:
        owner._sync_storage()
        if getattr(module, "_handle", 0) is None:  # a sequence collection over an owner built since
            module._materialise()
        return
    assigned = []
    for cfg in owner.embedding_bag_configs():
        holder = owner.embedding_bags[cfg.name]
        for name in ("weight", "optimizer_state", "optimizer_step"):
            t = getattr(holder, name, None)
            if t is not None and t.device.type != "meta":
                assigned.append((cfg.name, name, t))
    if not assigned:
        return  # nothing assigned: still shapes only
    module._materialise()
    for table, name, t in assigned:
        mine = getattr(owner.embedding_bags[table], name)
        if t.shape != mine.shape or t.device.type != "cpu":
            raise InvalidInputError(f"table {table!r}: {name} was assigned a tensor of shape {tuple(t.shape)} on "
                                    f"{t.device}, expected {tuple(mine.shape)} on cpu")
        with torch.no_grad():
            mine.copy_(t.detach())


def check_checkpoint(state_dict: Any, module: nn.Module, prefix: str, shown: str = "", assign: bool = False) -> None:
    """Refuse, before anything is loaded, whatever would refuse the load once a table has changed: an
    entry of an engine-held tensor with another shape (another configuration), or that torch cannot copy
    (not a dense tensor; assigned from another device with ``assign``), an optimizer step counter
    outside ``[0, 2^53)``, an impossible optimizer state, a dynamic-ID table's entries the engine would
    refuse (checked by the engine, changing nothing). ``prefix`` is the collection's key prefix for its
    tables (``embedding_bags.`` or ``embeddings.``), ``shown`` the collection's own in the model being
    loaded (for messages). So a load refused changes no table, and keeps no copy of them."""
    from .. import dynamic as _dynamic

    owner = getattr(module, "ebc", module)
    dynamic = {f"{prefix}{c.name}." for c in owner.embedding_bag_configs() if c.dynamic is not None}
    own = {f"{prefix}{k}": v for k, v in _held(owner).items()}
    dims = {c.name: c.embedding_dim for c in owner.embedding_bag_configs()}
    for k, v in state_dict.items():
        if k not in own:
            continue
        if not isinstance(v, torch.Tensor) or v.device.type == "meta":  # torch refused it after earlier tables loaded
            raise InvalidInputError(f"checkpoint entry {shown + k!r} is a "
                                    f"{'meta tensor (no values)' if isinstance(v, torch.Tensor) else type(v).__name__}"
                                    ", not a tensor of values: nothing was loaded")
        if v.layout != torch.strided or v.is_complex() or v.is_quantized:
            raise InvalidInputError(f"checkpoint entry {shown + k!r} is a {v.layout} {v.dtype} tensor, not a dense "
                                    "real one: nothing was loaded")
        if assign and v.device.type != "cpu":
            raise InvalidInputError(f"checkpoint entry {shown + k!r} is on {v.device}: load_state_dict(assign=True) "
                                    "takes CPU tensors (recgo's engine holds its tables in CPU memory); nothing was "
                                    "loaded")
        if k.endswith(".optimizer_step"):
            step = v.reshape(-1)
            if step.numel() != 1 or step.dtype != torch.int64 or not 0 <= int(step[0]) < _MAX_STEP:
                raise InvalidInputError(
                    f"checkpoint entry {shown + k!r} = {step.tolist()} ({step.dtype}) is not an optimizer step in "
                    "[0, 2^53): a corrupted or foreign checkpoint")
        if k.rpartition(".")[0] + "." not in dynamic:
            if tuple(v.shape) != tuple(own[k].shape):
                raise InvalidInputError(
                    f"checkpoint entry {shown + k!r} has shape {tuple(v.shape)}, this collection's is "
                    f"{tuple(own[k].shape)} (a checkpoint of another configuration?)")
        elif v.dim() != own[k].dim() or v.shape[1:] != own[k].shape[1:] or v.shape[0] > own[k].shape[0]:
            # rows in use, at most the table's row bound (a forged 2^40 rows were checked value by value)
            raise InvalidInputError(
                f"checkpoint entry {shown + k!r} has shape {tuple(v.shape)}; this dynamic table holds at most "
                f"{tuple(own[k].shape)} (a checkpoint of another configuration, or a corrupted one)")
        if k.endswith(".optimizer_state") and owner.fused_optimizer is not None:
            check_optimizer_state(shown + k, v, owner.fused_optimizer, dims[k[len(prefix):].rpartition(".")[0]])
    if dynamic and owner._handle is not None:  # (on the meta device: once materialised)
        _dynamic.check_checkpoint(owner, state_dict, prefix)


def _held(owner: nn.Module) -> dict[str, torch.Tensor]:
    """The tensors the engine holds, by key under the tables' prefix (``<table>.<name>``): its memory, or
    on the meta device the stand-ins of their shapes."""
    if owner._handle is not None:
        return {f"{table}.{name}": mine for table, _, name, mine, _, _ in owner._engine_views}
    return {f"{table}.{name}": v for table, m in owner.embedding_bags.items()
            for name in ("weight", *_OPTIMIZER_ENTRIES)
            if (v := getattr(m, name, None)) is not None and v.numel()}


def check_optimizer_state(key: str, state: torch.Tensor, optimizer: Any, dim: int) -> None:
    """Refuse a loaded optimizer state that no training could have left: a value that is not finite,
    or a negative running sum of squares (Adagrad's, Adam's second moment). Either would turn the next
    update's rows into NaN or huge values, silently (a negative Adagrad sum took a row to −1e9)."""
    width = optimizer.state_width(dim)
    if state.numel() == 0 or width == 0 or state.numel() % width:
        return  # a shape check names another layout
    rows = state.detach().reshape(-1, width)
    step = max(1, (1 << 20) // width)  # a block at a time: isfinite's temporaries of a whole big state
    for block in rows.split(step):      # were several times its size
        # as the engine will hold them: float64's 1e39 is finite, its float32 inf; an integer -5 is a
        # negative sum as much as -5.0 is
        block = block.to(torch.float32)
        if not bool(torch.isfinite(block).all()):
            raise InvalidInputError(f"checkpoint entry {key!r} holds values that are not finite (NaN or ±inf): a "
                                    "corrupted checkpoint, or one of a run that diverged")
        sq = block[:, optimizer.squares(dim)]
        if sq.numel() and bool((sq < 0).any()):
            raise InvalidInputError(f"checkpoint entry {key!r} holds negative running sums of squared gradients "
                                    f"({type(optimizer).__name__}'s): a corrupted or foreign checkpoint")

