"""PySpark data source ``kinesis`` for Structured Streaming and batch reads.

>>> import spark_integration
>>> spark_integration.register(spark)
>>> df = spark.readStream.format("kinesis").option("streamName", "orders").load()
"""

from __future__ import annotations

from typing import Any

from kinesis.deprecation import alias_modules

__all__ = ["register"]

MOVED_MODULES = {
    "spark_integration.batch_reader": "spark_integration.readers",
    "spark_integration.handover": "spark_integration.group",
    "spark_integration.role_options": "spark_integration.options",
    "spark_integration.stream_reader": "spark_integration.readers",
}
"""Modules of 0.2 and the module each merged into (importable for one release)."""

alias_modules(MOVED_MODULES)


def register(spark: Any) -> None:
    """Register the ``kinesis`` format on a ``SparkSession`` (needs the ``spark`` extra).

    With a local master, first checks that Spark's Python workers (``PYSPARK_PYTHON``) can
    import this package, and raises ``ConfigurationError`` naming the variable if not.
    """
    try:
        from spark_integration.source import register as _register
    except ImportError as exc:
        if exc.name not in ("pyspark", "pyarrow") and not str(exc.name or "").startswith("pyspark."):
            raise
        from hashring.errors import ConfigurationError

        raise ConfigurationError(
            f"spark_integration.register() needs PySpark and pyarrow ({exc.name} is missing): "
            "pip install 'kinesis-hashring[spark]'"
        ) from exc

    from spark_integration.worker_python import check_worker_python

    check_worker_python(spark)
    _register(spark)
