"""PySpark data source ``kinesis`` for Structured Streaming and batch reads.

>>> import spark_integration
>>> spark_integration.register(spark)
>>> df = spark.readStream.format("kinesis").option("streamName", "orders").load()
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register the ``kinesis`` format on a ``SparkSession`` (needs the ``spark`` extra)."""
    from spark_integration.source import register as _register

    _register(spark)
