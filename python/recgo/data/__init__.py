"""recgo.data: the sources the input pipeline reads (Criteo TSV, CSV, Parquet, synthetic).

Readers run in Go; these classes describe them. Iterate prepared batches with
:class:`recgo.DataPipeline`, or train with :class:`recgo.TrainPipeline`.
"""

from __future__ import annotations

from .sources import (
    Column,
    CriteoSource,
    CSVSource,
    ParquetSource,
    PlantedLabel,
    Schema,
    Source,
    SyntheticField,
    SyntheticSource,
    default_criteo_like,
)

__all__ = ["CSVSource", "Column", "CriteoSource", "ParquetSource", "PlantedLabel", "Schema", "Source",
           "SyntheticField", "SyntheticSource", "default_criteo_like"]
