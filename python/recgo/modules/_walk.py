"""Finding and replacing a model's embedding collections: the one walk ``shard_model`` and
``from_torchrec`` share."""

from __future__ import annotations

from typing import Callable, TypeVar

from torch import nn

from ..errors import InvalidInputError

K = TypeVar("K")

# TorchRec's CPU embedding modules by class name: "pooled" or "sequence".
_TORCHREC_KINDS = {"EmbeddingBagCollection": "pooled", "FusedEmbeddingBagCollection": "pooled",
                   "EmbeddingCollection": "sequence", "FusedEmbeddingCollection": "sequence"}


def torchrec_class(m: object) -> str | None:
    """The class name of ``m`` when the class is TorchRec's, else None."""
    return type(m).__name__ if type(m).__module__.startswith("torchrec.") else None


def torchrec_kind(m: nn.Module) -> str | None:
    """``"pooled"`` or ``"sequence"`` for TorchRec's ``EmbeddingBagCollection``,
    ``FusedEmbeddingBagCollection``, ``EmbeddingCollection`` and ``FusedEmbeddingCollection`` (which
    TorchRec builds on meta or CUDA only); None for any other module."""
    name = torchrec_class(m)
    if name in _TORCHREC_KINDS and type(m).__module__.startswith("torchrec.quant"):
        raise InvalidInputError(f"{type(m).__module__}.{name} is a quantized inference module: recgo converts "
                                "TorchRec's training collections (convert the model before quantizing it)")
    return None if name is None else _TORCHREC_KINDS.get(name)


def outermost(model: nn.Module, kind: Callable[[nn.Module], K | None],
              inside: Callable[[nn.Module], bool] = lambda m: False) -> list[tuple[str, nn.Module, K]]:
    """The modules of ``model`` (itself included) for which ``kind`` says something, as (qualified name,
    module, kind), outermost only, in ``named_modules`` order; nothing inside a found module or inside
    one for which ``inside`` is true is looked at."""
    found: list[tuple[str, nn.Module, K]] = []
    taken = [n for n, m in model.named_modules() if inside(m)]
    for name, m in model.named_modules():
        if any(n == "" or name == n or name.startswith(f"{n}.") for n in taken):
            continue
        k = kind(m)
        if k is not None:
            found.append((name, m, k))
            taken.append(name)
    return found


def replace(model: nn.Module, name: str, new: nn.Module) -> nn.Module:
    """``model`` with its submodule ``name`` replaced by ``new`` at every path that holds that module
    (a collection shared by two towers stays shared), or ``new`` itself when ``name`` is empty: the
    model was the module."""
    if not name:
        return new
    old = model.get_submodule(name)
    paths = [n for n, m in model.named_modules(remove_duplicate=False) if m is old]
    for path in paths:
        parent_name, _, attr = path.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, attr, new)
    return model
