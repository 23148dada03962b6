"""recgo's FeatureEngine (RecIS §3.1): declarative per-field transforms fused across fields in Go.

>>> from recgo.feature import Feature, FeatureEngine
>>> eng = FeatureEngine([Feature("hist").truncate(50, keep="last").hash().mod(10**6),
...                      Feature("price", dtype="float").bucketize([1, 10, 100])])
>>> kjt = eng({"hist": (values, lengths), "price": prices})       # doctest: +SKIP
>>> print(eng.plan().table())                                     # doctest: +SKIP

:mod:`recgo.feature.reference` holds the per-field torch implementation that defines the same
transforms with torch ops (used by the tests and the benchmark).
"""

from .configs import example_config
from .engine import FeatureEngine, FeaturePlan, FusionGroup, encode_strings
from .spec import Feature, load_config, load_features

from .._lazy import submodules as _submodules

__getattr__ = _submodules(__name__, ("reference",))  # imported on first use

__all__ = ["Feature", "FeatureEngine", "example_config", "FeaturePlan", "FusionGroup", "encode_strings", "load_config", "load_features"]
