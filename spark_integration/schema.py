"""The row schema of the ``kinesis`` source, and records turned into Arrow batches for Spark."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from kinesis.consumer.retrieval import Record

#: Column names, in order.
COLUMNS = (
    "stream",
    "shardId",
    "sequenceNumber",
    "subSequenceNumber",
    "partitionKey",
    "approximateArrivalTimestamp",
    "data",
)

#: The schema as a Spark DDL string (what ``DataSource.schema()`` returns).
SCHEMA_DDL = (
    "stream STRING NOT NULL, shardId STRING NOT NULL, sequenceNumber STRING NOT NULL, "
    "subSequenceNumber BIGINT NOT NULL, partitionKey STRING NOT NULL, "
    "approximateArrivalTimestamp TIMESTAMP, data BINARY NOT NULL"
)


def spark_schema() -> Any:
    """The schema as a ``pyspark.sql.types.StructType`` (imports pyspark lazily)."""
    from pyspark.sql.types import (
        BinaryType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("stream", StringType(), False),
            StructField("shardId", StringType(), False),
            StructField("sequenceNumber", StringType(), False),
            StructField("subSequenceNumber", LongType(), False),
            StructField("partitionKey", StringType(), False),
            StructField("approximateArrivalTimestamp", TimestampType(), True),
            StructField("data", BinaryType(), False),
        ]
    )


@lru_cache(maxsize=1)
def arrow_schema() -> Any:
    """The Arrow schema Spark expects from ``read()`` for :func:`spark_schema` (UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(), timezone="UTC")


def to_arrow_batch(records: Sequence[Record]) -> Any:
    """One ``pyarrow.RecordBatch`` of :data:`COLUMNS` for ``records`` (faster than tuples)."""
    import pyarrow as pa

    schema = arrow_schema()
    columns = [
        [r.stream_name for r in records],
        [r.shard_id for r in records],
        [r.sequence_number for r in records],
        [r.sub_sequence_number for r in records],
        [r.partition_key for r in records],
        [r.approximate_arrival_timestamp for r in records],
        [r.data for r in records],
    ]
    arrays = [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
