"""A collection's own strict ``load_state_dict``: missing and unexpected keys refused before anything loads.

torch's ``load_state_dict`` copies every entry that matches and only then raises for the keys that do
not, so a refused checkpoint left the collection half loaded (the tables before the bad key, and a
dynamic-ID table's ID map, which its pre-hook imports as torch walks the tables). The collections'
own ``load_state_dict`` runs :func:`refuse_mismatched_keys` in a load pre-hook registered last for the
call (:func:`checked_keys`), so the user's pre-hooks on the collection (one that drops an entry its
state-dict hook added) run first; a load of a model they are nested in keeps torch's behaviour.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from torch import nn

from ..errors import StateDictKeysError
from ._storage import allow_weights_only


def _expected(module: nn.Module) -> tuple[set[str], set[str]]:
    """The keys ``module.state_dict()`` holds (parameters and persistent buffers), and the dynamic-ID
    tables' ID-map entries it also writes (optional on load: a checkpoint of the weights alone loads)."""
    from ..dynamic import _KEYS

    required, optional = set(), set()
    for name, mod in module.named_modules():
        p = f"{name}." if name else ""
        required |= {p + n for n, v in mod._parameters.items() if v is not None}
        required |= {p + n for n, v in mod._buffers.items()
                     if v is not None and n not in mod._non_persistent_buffers_set}
        if getattr(mod, "_recgo_dynamic_attached", False):
            optional |= {p + k for k in _KEYS}
    return required, optional


@contextlib.contextmanager
def checked_keys(module: nn.Module, strict: bool, attr: str, fused: bool) -> Iterator[None]:
    """Within it, a strict ``load_state_dict`` of ``module`` itself checks the keys
    (:func:`refuse_mismatched_keys`) after the module's other load pre-hooks and before any entry is
    copied."""
    if not strict:
        yield
        return

    def hook(mod: nn.Module, state_dict: Any, prefix: str, *_: Any) -> None:
        if mod is module and prefix == "":
            refuse_mismatched_keys(module, state_dict, attr, fused)

    handle = module.register_load_state_dict_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def refuse_mismatched_keys(module: nn.Module, state_dict: Any, attr: str, fused: bool) -> None:
    """Raise :class:`StateDictKeysError` (torch's message) when a strict load of ``state_dict`` into
    ``module`` would miss keys or find unexpected ones, before any entry is copied. ``attr`` is the
    tables' state-dict name (``embedding_bags`` or ``embeddings``); a ``fused`` collection takes a
    checkpoint of its weights without its optimizer entries (TorchRec's), as torch's path does."""
    if not hasattr(state_dict, "keys"):
        return  # torch names a state dict that is not a mapping
    required, optional = _expected(module)
    given = set(state_dict.keys())
    unexpected = sorted(str(k) for k in given - required - optional)
    missing = SimpleNamespace(missing_keys=sorted(required - given))
    if fused:
        allow_weights_only(attr, getattr(module, attr), missing)
    if not unexpected and not missing.missing_keys:
        return
    msgs = []
    if unexpected:
        msgs.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ". ")
    if missing.missing_keys:
        msgs.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing.missing_keys) + ". ")
    raise StateDictKeysError(f"Error(s) in loading state_dict for {type(module).__name__}:\n\t" + "\n\t".join(msgs)
                             + "\n\tNothing was loaded (load_state_dict(..., strict=False) loads the keys that match)")
