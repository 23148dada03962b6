"""Copies of engine-backed modules: ``copy.deepcopy``, pickle and ``torch.save(module)``.

An engine handle cannot be copied, so a copy is rebuilt: a new module from the constructor arguments
``_spec()`` gives (its own engine storage), then the original's state loaded into it, with the
per-parameter ``requires_grad``, per-module ``training`` flags and attributes users set after
construction carried along. The hooks users registered on the module or its submodules come along
too, as ``nn.Module``'s own deepcopy and pickle carry them; their state-dict hooks do not run while a
copy is taken or loaded (a hook that renames or adds entries would break the copy), recgo's own do.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Callable, Iterator

import torch


# nn.Module's hook tables, by attribute name; the last four hold state-dict hooks.
_HOOK_TABLES = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
                "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks",
                "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
                "_load_state_dict_post_hooks")
_STATE_HOOK_TABLES = _HOOK_TABLES[-4:]


def own_hook(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a hook recgo registers itself (copies keep those a rebuilt module registers anew, and run
    them while copying); returns ``fn``."""
    fn._recgo_own_hook = True  # type: ignore[attr-defined]
    return fn


def _is_own(hook: Any) -> bool:
    if isinstance(hook, bool):  # _forward_hooks_with_kwargs / _always_called hold flags
        return False
    inner = getattr(hook, "hook", hook)  # torch wraps load-state-dict pre hooks in _WrappedHook
    return bool(getattr(getattr(inner, "__func__", inner), "_recgo_own_hook", False))


def user_hooks(module: Any) -> dict[str, dict[str, dict[int, Any]]]:
    """The hooks users registered on ``module`` and its submodules: ``{qualified name: {table: {id:
    hook}}}`` (the flag tables' entries go with their hooks' ids; with backward hooks, the module's
    ``_is_full_backward_hook`` flag under its own name)."""
    out: dict[str, dict[str, dict[int, Any]]] = {}
    for name, m in module.named_modules():
        tables = {}
        for attr in _HOOK_TABLES:
            entries = {k: h for k, h in getattr(m, attr, {}).items() if not _is_own(h)}
            if entries:
                tables[attr] = entries
        if "_backward_hooks" in tables:  # full (register_full_backward_hook) or the old kind
            tables["_is_full_backward_hook"] = getattr(m, "_is_full_backward_hook", None)  # type: ignore[assignment]
        if tables:
            out[name] = tables
    return out


def add_hooks(module: Any, hooks: dict[str, dict[str, dict[int, Any]]]) -> None:
    """Register ``hooks`` (as :func:`user_hooks` gives them) on ``module``'s submodules of the same names."""
    mods = dict(module.named_modules())
    for name, tables in hooks.items():
        if name in mods:
            for attr, entries in tables.items():
                if attr == "_is_full_backward_hook":
                    setattr(mods[name], attr, entries)
                else:
                    getattr(mods[name], attr).update(entries)


@contextlib.contextmanager
def without_user_state_hooks(module: Any) -> Iterator[None]:
    """Users' state-dict hooks taken off ``module`` and its submodules for the duration (restored in
    their order after)."""
    saved = [(getattr(m, attr), list(getattr(m, attr).items()))
             for _, m in module.named_modules() for attr in _STATE_HOOK_TABLES]
    for table, items in saved:
        for k, h in items:
            if not _is_own(h):
                del table[k]
    try:
        yield
    finally:
        for table, items in saved:
            table.clear()
            table.update(items)


class PortableCopies:
    """Mixin for an ``nn.Module`` subclass that defines ``_spec()`` (constructor keyword arguments
    of an equivalent empty module; the constructor also takes ``seed``, kept as ``self._seed``) and
    records the attribute names its constructor set in ``self._init_keys``. A module on the meta device
    (``self._handle is None``) copies as one on meta: nothing to load."""

    def _spec(self) -> dict[str, Any]:
        raise NotImplementedError

    def _portable_flags(self) -> dict[str, Any]:
        """Per parameter ``requires_grad`` and per module ``training``, by qualified name."""
        return {"requires_grad": {n: p.requires_grad for n, p in self.named_parameters()},  # type: ignore[attr-defined]
                "training": {n: m.training for n, m in self.named_modules()}}  # type: ignore[attr-defined]

    def _extra_attributes(self) -> dict[str, Any]:
        """Attributes set after construction (by users), which copies carry along."""
        return extra_attributes(self)

    def _state_copy(self, owned: bool) -> dict[str, Any]:
        """The state a copy loads: ``state_dict()`` (with ``owned``, every tensor a copy of its own).
        A module whose state other threads may change meanwhile returns one step of it instead."""
        state = self.state_dict()  # type: ignore[attr-defined]
        return {k: v.detach().clone() for k, v in state.items()} if owned else state

    def _portable_state(self) -> dict[str, Any]:
        """Everything a rebuilt copy needs beside its spec, as plain tensors and values."""
        with torch.no_grad(), without_user_state_hooks(self):
            tensors = self._state_copy(owned=True)
        if getattr(self, "_handle", None) is None:  # meta: shapes only
            tensors = {}
        state = {"state_dict": tensors, **self._portable_flags(), "extra": self._extra_attributes(),
                 "seed": getattr(self, "_seed", None), "hooks": user_hooks(self)}
        keep_for_child(state)
        return state

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """An independent module with its own engine storage and the same state."""
        new = type(self)(**self._spec(), seed=0)  # type: ignore[call-arg]
        memo[id(self)] = new
        # Copies of objects holding our parameters or buffers (an optimizer, a tied weight) copied after
        # this module get the new module's, as deepcopy of a plain module gives (they are alive in self).
        for old, mine in ((self.named_parameters, new.named_parameters), (self.named_buffers, new.named_buffers)):
            copies = dict(mine())  # type: ignore[operator]
            for n, t in old():  # type: ignore[operator]
                if n in copies:
                    memo.setdefault(id(t), copies[n])
        if getattr(self, "_handle", None) is not None:
            with torch.no_grad(), without_user_state_hooks(self):
                new.load_state_dict(self._state_copy(owned=False))  # type: ignore[attr-defined]
        apply_portable_state(new, {**self._portable_flags(), "extra": copy.deepcopy(self._extra_attributes(), memo),
                                   "seed": getattr(self, "_seed", None),
                                   "hooks": copy.deepcopy(user_hooks(self), memo)})
        return new

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        """Pickle (and ``torch.save(module)``) as constructor arguments plus tensors: unpickling builds
        a new module, in any process, and loads the state into its own engine storage. The state is
        the third item (``__setstate__``), so the new module exists before it is read: a hook or an
        attribute that refers back to the module gets the new one (in the arguments it recursed)."""
        return (rebuild, (type(self), self._spec()), self._portable_state())

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickling: load the state :meth:`__reduce_ex__` recorded into the module :func:`rebuild` made."""
        load_portable_state(self, state)


def extra_attributes(module: Any) -> dict[str, Any]:
    """Attributes of ``module`` set after construction (by users): those not in ``module._init_keys``."""
    return {k: v for k, v in module.__dict__.items() if k not in module._init_keys}


def rebuild(cls: type, spec: dict[str, Any], state: dict[str, Any] | None = None) -> Any:
    """Unpickling target: a new ``cls`` from ``spec`` (see ``__reduce_ex__``); with ``state`` (files
    written before session 27 pass it here) that state loaded."""
    new = cls(**spec, seed=0)  # seeded: copying must not draw from torch's global RNG
    if state is not None:
        load_portable_state(new, state)
    return new


def load_portable_state(new: Any, state: dict[str, Any]) -> None:
    """Load a ``_portable_state`` into a module built from its spec."""
    if state["state_dict"]:
        with torch.no_grad():
            new.load_state_dict(state["state_dict"])
    apply_portable_state(new, state)


def apply_portable_state(new: Any, state: dict[str, Any]) -> None:
    """Set the flags and extra attributes ``_portable_state`` recorded on a rebuilt module."""
    params, mods = dict(new.named_parameters()), dict(new.named_modules())
    for n, flag in state.get("requires_grad", {}).items():
        if n in params:
            params[n].requires_grad_(flag)
    for n, flag in state.get("training", {}).items():
        if n in mods:
            mods[n].training = flag
    new.__dict__.update(state.get("extra", {}))
    add_hooks(new, state.get("hooks", {}))
    if "seed" in state:  # the original's (reset_parameters draws its weights again); built with seed 0
        new._seed = state["seed"]


def keep_for_child(state: Any) -> None:
    """While pickling for a process being started (``torch.multiprocessing.spawn``'s arguments, a
    spawn-context ``Process``), keep ``state`` alive as long as that process object: torch's default
    file-descriptor sharing passes each tensor's storage as an fd the child opens at launch, after
    pickling returns, and the temporary copies pickled here would have closed theirs by then."""
    from multiprocessing import context

    popen = context.get_spawning_popen()
    if popen is not None:
        kept = popen.__dict__.setdefault("_recgo_kept", [])
        kept.append(state)
