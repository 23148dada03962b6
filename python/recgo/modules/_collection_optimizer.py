"""The ``torch.optim.Optimizer`` face of the fused optimizers of a model's recgo collections
(:class:`CollectionOptimizer`, re-exported by :mod:`recgo.modules.optim`), for torch's
learning-rate schedulers and checkpoints.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import replace
from typing import Any

import torch

from ..errors import InvalidInputError
from . import _fused_update
from .optim import _HYPER, Adam, _number


def fused_collections(model: Any) -> list[tuple[str, Any]]:
    """The modules of ``model`` (itself included) that own a fused optimizer, outermost first; one per
    set of tables (a sequence collection and the pooled one it looks up count once)."""
    out: list[tuple[str, Any]] = []
    seen: set[int] = set()
    for name, m in model.named_modules():
        if any(n == "" or name.startswith(f"{n}.") for n, _ in out):
            continue  # inside one already taken: the same tables
        if not hasattr(m, "set_fused_optimizer") or getattr(m, "fused_optimizer", None) is None:
            continue
        key = id(getattr(m, "_owner", m))
        if key not in seen:
            seen.add(key)
            out.append((name, m))
    return out


class CollectionOptimizer(torch.optim.Optimizer):
    """The ``torch.optim.Optimizer`` face of the fused optimizers of the recgo collections in a model
    (unsharded or sharded), so that torch's learning-rate schedulers drive them, as they drive
    TorchRec's ``DistributedModelParallel.fused_optimizer``.

    One param group per collection (``"name"``: its path in the model), holding the fused optimizer's
    hyper-parameters under their recgo names (``lr``, ``eps``, ``beta1``, ``beta2``,
    ``weight_decay``) and no parameters: the rows are updated inside backward, not here. When every
    collection's optimizer is Adam or AdamW, each group also holds torch's ``betas`` pair (kept equal to
    ``beta1``/``beta2``, whichever was changed), so ``OneCycleLR``'s default ``cycle_momentum`` cycles
    beta1 as it does for ``torch.optim.Adam``; with SGD or Adagrad it raises, as for torch's. ``zero_grad()``
    and ``step()`` hand changed values to the collections (``set_fused_optimizer``), as TorchRec's
    fused optimizers do with the learning rate, so the usual loop (``zero_grad``, ``backward``,
    ``step``, ``scheduler.step()``) runs each backward at the rate the scheduler last set. An unsharded
    collection also takes its group's changes when its fused backward runs, so a loop that calls
    ``zero_grad()`` after ``step()``, then ``scheduler.step()``, or one that never calls them, runs each
    backward at the rate the group holds then too, as a torch optimizer's ``step()`` reads it (such a
    loop ran one step late before: the first backward of a warm-up at the full rate); sharded
    collections take it at ``zero_grad()`` and ``step()``, as DMP's fused optimizers do.
    A value set on a collection itself (``set_fused_optimizer``) is kept, and shown in its group from
    the next hand-over on. Each group also names its optimizer kind (``"fused_optimizer"``), and
    ``load_state_dict`` refuses groups of another kind or another number of collections.
    ``state_dict()`` holds the hyper-parameters; the tables' optimizer state is in the model's.
    It can be an entry of TorchRec's ``CombinedOptimizer([it, dense])`` (or a named entry,
    ``("fused", it)``), whose schedulers then drive both: built while ``torchrec`` is imported, it is
    also a TorchRec ``KeyedOptimizer`` (with no keyed parameters), as DMP's ``fused_optimizer`` is;
    without ``torchrec`` it is a plain ``torch.optim.Optimizer`` and TorchRec is never imported. Copies
    (``copy.deepcopy``, pickle) keep driving the copied model's collections. Call it from the thread
    that runs the steps (on every rank alike for sharded collections). ``scaler.step(it)`` runs its
    ``step()`` (``torch.amp.GradScaler``; it has no gradients to unscale: see
    :func:`recgo.modules.optim.set_grad_scaler` for the fused updates').

    Raises:
        InvalidInputError: ``model`` has no collection with a fused optimizer.
    """

    #: GradScaler.step calls step() directly: there are no gradients to unscale or check (the fused
    #: updates ran in the backward; set_grad_scaler unscales theirs). Without it, it raised "No inf
    #: checks were recorded for this optimizer".
    _step_supports_amp_scaling = True

    def __new__(cls, *args: Any, **kwargs: Any) -> "CollectionOptimizer":
        if cls is CollectionOptimizer and sys.modules.get("torchrec") is not None:  # None: hidden/unusable
            from ._keyed_optimizer import KeyedCollectionOptimizer  # imports torchrec.optim.keyed

            cls = KeyedCollectionOptimizer
        return super().__new__(cls)

    def __init__(self, model: Any) -> None:
        self._collections = fused_collections(model)
        if not self._collections:
            raise InvalidInputError("CollectionOptimizer: the model has no recgo collection with a fused optimizer")
        groups = [{"params": [], "name": n, "fused_optimizer": type(m.fused_optimizer).__name__,
                   **{k: getattr(m.fused_optimizer, k) for k in _HYPER}} for n, m in self._collections]
        defaults: dict[str, Any] = {"_save_param_groups": False}  # what TorchRec's CombinedOptimizer reads
        if all(isinstance(m.fused_optimizer, Adam) for _, m in self._collections):
            for g in groups:
                g["betas"] = (g["beta1"], g["beta2"])
            defaults["betas"] = groups[0]["betas"]  # torch's schedulers look for the key here
        torch.optim.Optimizer.__init__(self, groups, defaults)  # not KeyedOptimizer's, in the keyed subclass
        self._betas = [(g["beta1"], g["beta2"]) for g in self.param_groups]  # as last handed over
        self._synced = [m.fused_optimizer for _, m in self._collections]  # each collection's, as last handed over
        self.params: dict[str, torch.Tensor] = {}  # KeyedOptimizer's name → parameter map: none here
        self._built = True  # add_param_group refuses from here
        self._follow()

    def _follow(self, only: list[int] | None = None) -> None:
        """Have each collection (those ``only`` lists) take this optimizer's pending changes when its
        fused backward runs (:meth:`_pull`; a sharded collection never calls it), rather than those of
        another optimizer over it that handed values over before this one."""
        for i, (_, m) in enumerate(self._collections):
            if only is None or i in only:
                _fused_update.follow(getattr(m, "_owner", m), self)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if "_collections" in state:  # a copy follows the copied collections
            self._follow()

    def _pull(self, owner: Any) -> None:
        """Before a fused backward of ``owner``'s tables: hand over what its groups changed since the
        last hand-over (a scheduler's step after this optimizer's ``step()`` and ``zero_grad()``)."""
        mine = [i for i, (_, m) in enumerate(self._collections) if getattr(m, "_owner", m) is owner]
        if any(self._pending(i) for i in mine):
            self._push(only=mine)

    def _pending(self, i: int) -> bool:
        """Whether group ``i`` holds a value its collection was not handed."""
        group, last = self.param_groups[i], self._synced[i]
        if "betas" in group and tuple(group["betas"]) != self._betas[i]:
            return True
        return any(k not in group or bool(group[k] != getattr(last, k)) for k in _HYPER)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Refused once built (TorchRec's ``KeyedOptimizer`` refuses it too): the groups are the
        collections' fused optimizers, so an added group's parameters would never be updated.

        Raises:
            InvalidInputError: always, after construction.
        """
        if getattr(self, "_built", False):
            raise InvalidInputError("CollectionOptimizer.add_param_group: its groups are the collections' fused "
                                    "optimizers (one each) and an added group would never be stepped; give other "
                                    "parameters a torch optimizer of their own (TorchRec's CombinedOptimizer "
                                    "takes both)")
        torch.optim.Optimizer.add_param_group(self, param_group)

    def __getstate__(self) -> dict[str, Any]:
        # torch's keeps only defaults, state and param_groups: a copy would lose its collections
        return self.__dict__

    def _sync_betas(self) -> None:
        """Make ``betas`` and ``beta1``/``beta2`` agree, taking whichever changed since the last push."""
        for i, group in enumerate(self.param_groups):
            if "betas" not in group:
                continue
            pair, old = tuple(float(b) for b in group["betas"]), self._betas[i]
            if pair != old:
                group["beta1"], group["beta2"] = pair
            group["betas"] = (group["beta1"], group["beta2"])
            self._betas[i] = group["betas"]

    def _push(self, force: bool = False, only: list[int] | None = None) -> None:
        """Hand the hyper-parameters each group changed since the last hand-over (every one, when
        ``force``) to its collection, keeping the ones changed on the collection itself meanwhile
        (``set_fused_optimizer``: they were put back to the group's stale values), and make the groups
        show what the collections now run. ``only``: the groups to hand over (default: all)."""
        self._sync_betas()
        changes = []
        for i, (group, (name, m)) in enumerate(zip(self.param_groups, self._collections)):
            if only is not None and i not in only:
                continue
            lacks = [k for k in _HYPER if k not in group]
            if lacks:
                raise InvalidInputError(f"CollectionOptimizer: the group of {name or 'the model'!r} lacks {lacks}")
            mine = {k: _number(group[k]) for k in _HYPER}
            changes.append((i, m, replace(m.fused_optimizer, **self._merged(i, mine, force))))  # bools, strings: refused
        for i, m, new in changes:  # every group built first: a refused one left the groups before it changed
            if new != m.fused_optimizer:
                m.set_fused_optimizer(new)
            self._adopt(i, new)
        self._follow(only)

    def _merged(self, i: int, group: dict[str, Any], force: bool = False) -> dict[str, Any]:
        """What collection ``i`` runs after a hand-over of ``group``: the group's value of each
        hyper-parameter changed in it since the last hand-over (every one, when ``force``), the
        collection's own value of the rest (a ``set_fused_optimizer`` change since then is kept).
        Checks nothing: ``state_dict`` must not raise, ``_push`` validates what it hands over."""
        cur, last = self._collections[i][1].fused_optimizer, self._synced[i]
        return {k: group[k] if k in group and (force or group[k] != getattr(last, k)) else getattr(cur, k)
                for k in _HYPER}

    def _adopt(self, i: int, fused: Any) -> None:
        """Make group ``i`` show ``fused``, its collection's optimizer as last handed over."""
        group = self.param_groups[i]
        group.update({k: getattr(fused, k) for k in _HYPER}, fused_optimizer=type(fused).__name__)
        if "betas" in group:
            group["betas"] = self._betas[i] = (group["beta1"], group["beta2"])
        self._synced[i] = fused

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Hand changed hyper-parameters to the collections (there are no gradients to clear)."""
        self._push()

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """Hand changed hyper-parameters to the collections; returns ``closure()`` if given."""
        loss = closure() if closure is not None else None
        self._push()
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load the hyper-parameters and hand them to the collections.

        Raises:
            InvalidInputError: ``state_dict`` is not one this optimizer saved (e.g. a TorchRec fused
                optimizer's, which holds per-row state under ``state`` and no ``param_groups``)."""
        if not isinstance(state_dict, dict) or "param_groups" not in state_dict:
            keys = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict).__name__
            raise InvalidInputError(
                f"CollectionOptimizer.load_state_dict: expected the dict its state_dict() gives (with "
                f"'param_groups'), got {keys}. A TorchRec fused optimizer's state dict holds the tables' "
                "optimizer state, which recgo keeps in the model's state dict (the tables' optimizer_state "
                "entries): load the TorchRec checkpoint into the TorchRec model and its optimizer, then "
                "convert it with recgo.from_torchrec, which carries that state over")
        self._check_groups(state_dict["param_groups"])
        keyed = state_dict.get("state") or {}
        before = ([dict(g) for g in self.param_groups], list(self._betas), list(self._synced),
                  [m.fused_optimizer for _, m in self._collections])
        # torch's (not KeyedOptimizer's, in the keyed subclass) for the hyper-parameters
        torch.optim.Optimizer.load_state_dict(self, {**state_dict, "state": {}})
        try:
            self._push(force=True)
        except Exception:  # a refused value (NaN, a string, a missing key) stayed in the groups, failing every step
            for g, old in zip(self.param_groups, before[0]):
                g.clear()
                g.update(old)
            self._betas, self._synced = before[1], before[2]
            for (_, m), fused in zip(self._collections, before[3]):
                if m.fused_optimizer != fused:
                    m.set_fused_optimizer(fused)
            raise
        for name, st in keyed.items():  # a wrapper's entries (see state_dict)
            if name in self.params:
                self.state[self.params[name]] = copy.deepcopy(st)

    def _check_groups(self, groups: Any) -> None:
        """Refuse saved groups that are not one per collection, each with the hyper-parameters of the same
        kind of fused optimizer (an Adagrad group's unused ``beta1``/``beta2`` of 0 loaded into an Adam
        collection ran it on with both betas 0; torch's own checks raised a bare ValueError or KeyError)."""
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise InvalidInputError(f"CollectionOptimizer.load_state_dict: 'param_groups' must be a list of dicts "
                                    f"(one per collection), got {type(groups).__name__}")
        names = [n or "the model" for n, _ in self._collections]
        if len(groups) != len(names):
            raise InvalidInputError(f"CollectionOptimizer.load_state_dict: the state dict has {len(groups)} group(s), "
                                    f"one per collection, this optimizer {len(names)} ({names}): it was saved for "
                                    "another model")
        for g, name, (_, m) in zip(groups, names, self._collections):
            lacks = [k for k in ("params", *_HYPER) if k not in g]
            if lacks:
                raise InvalidInputError(f"CollectionOptimizer.load_state_dict: the saved group for {name!r} lacks "
                                        f"{lacks}")
            kind, mine = g.get("fused_optimizer"), type(m.fused_optimizer).__name__
            if kind is not None and kind != mine:
                raise InvalidInputError(f"CollectionOptimizer.load_state_dict: the saved group for {name!r} is "
                                        f"{kind}'s, the collection runs {mine}: its hyper-parameters do not apply "
                                        "(set the collection's optimizer to match first, or leave the checkpoint's "
                                        "optimizer state out)")

    def state_dict(self) -> dict[str, Any]:
        """The hyper-parameters, one group per collection, under ``param_groups`` (torch's layout),
        and under ``state``, by name, the state a TorchRec wrapper keeps in this optimizer for
        parameters it added to ``params`` (``WarmupOptimizer``'s progress): torch's state_dict found
        no group holding them and raised a bare ``KeyError``."""
        for i, group in enumerate(self.param_groups):  # changed on the collection itself: saved as it runs
            group.update(self._merged(i, group))
        names = {id(p): k for k, p in self.params.items()}
        state = {names[id(p)]: copy.deepcopy(v) for p, v in self.state.items() if id(p) in names}
        groups = [{**{k: copy.deepcopy(v) for k, v in g.items() if k != "params"}, "params": []}
                  for g in self.param_groups]
        return {"state": state, "param_groups": groups}

    def save_param_groups(self, save: bool) -> None:
        """TorchRec's ``KeyedOptimizer.save_param_groups`` (a ``CombinedOptimizer`` sets it on its
        entries). Raises for ``True`` with several collections: TorchRec keys a saved group by its
        parameters' names, and these groups have none, so every group but the last would load into
        the same one (save this optimizer's own ``state_dict()`` instead)."""
        if save and len(self.param_groups) > 1:
            raise InvalidInputError(
                f"save_param_groups(True): this CollectionOptimizer has {len(self.param_groups)} groups (one per "
                "collection) and no parameters, which TorchRec keys saved groups by, so they would load into one; "
                "checkpoint its own state_dict() (the hyper-parameters of every collection) instead")
        self.defaults["_save_param_groups"] = bool(save)

    def post_load_state_dict(self) -> None:
        """Hand the hyper-parameters to the collections after TorchRec's ``CombinedOptimizer`` loaded
        a state dict (the KeyedOptimizer hook): the loaded values, all of them."""
        self._push(force=True)
