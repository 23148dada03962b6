"""recgo: the sparse front end of recommender training, a Go engine used from PyTorch.

Feature preprocessing, embedding tables, their sharding and tiered placement, and the input
pipeline run in ``librecgo.so``; this package wraps them as ordinary ``torch.nn`` modules.
"""

from __future__ import annotations

from ._torch_version import check as _check_torch

_check_torch()
from ._lib import num_threads, set_num_threads, version as library_version
from ._threads import share_cores
from .errors import (
    AbiError,
    CapacityError,
    ForkError,
    InternalError,
    InvalidInputError,
    LibraryNotFoundError,
    MissingExtraError,
    NotFoundError,
    RecgoError,
    RecgoIOError,
    SolverError,
    StateDictKeysError,
)
from .jagged import JaggedTensor
from .sparse import KeyedJaggedTensor, KeyedTensor
from . import _pytree

_pytree.register()
from . import modules
from .modules import (EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig, from_torchrec,
                      to_torchrec)
from . import dynamic
from .dynamic import DynamicConfig
from . import planner
from . import feature
from .feature import Feature, FeatureEngine, load_features
from . import data
from .pipeline import DataPipeline, TrainPipeline

__version__ = "0.1.0"

from ._lazy import submodules as _submodules

__getattr__ = _submodules(__name__, ("distributed", "train"))  # imported on first use (torch.distributed, the models)

__all__ = [
    "AbiError",
    "CapacityError",
    "DataPipeline",
    "DynamicConfig",
    "EmbeddingBagCollection",
    "EmbeddingBagConfig",
    "EmbeddingCollection",
    "EmbeddingConfig",
    "Feature",
    "FeatureEngine",
    "from_torchrec",
    "ForkError",
    "InternalError",
    "InvalidInputError",
    "JaggedTensor",
    "KeyedJaggedTensor",
    "KeyedTensor",
    "LibraryNotFoundError",
    "MissingExtraError",
    "NotFoundError",
    "RecgoError",
    "RecgoIOError",
    "SolverError",
    "StateDictKeysError",
    "TrainPipeline",
    "data",
    "dynamic",
    "feature",
    "library_version",
    "load_features",
    "modules",
    "num_threads",
    "set_num_threads",
    "share_cores",
    "to_torchrec",
    "planner",
]
