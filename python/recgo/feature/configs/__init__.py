"""Example FeatureEngine configs that ship with recgo: ``example_config("criteo")`` is the path of
``criteo.yaml`` (Criteo's 26 hashed categorical fields, as raw hex strings in bytes, and 13 bucketized
integer fields); ``example_config("criteo_reader")`` is the same spec for the batches of
:class:`recgo.data.CriteoSource`, whose categorical fields arrive parsed from hex as int64."""

from __future__ import annotations

from pathlib import Path

from ...errors import NotFoundError


def example_config(name: str) -> Path:
    """Path of the shipped example config ``name`` (without ``.yaml``)."""
    here = Path(__file__).parent
    path = here / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in here.glob("*.yaml"))
        raise NotFoundError(f"no example FeatureEngine config {name!r}; shipped: {known}")
    return path
