"""The ``kinesis`` Python data source and :func:`register`."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader

from spark_integration.options import KinesisOptions, parse_options
from spark_integration.schema import SCHEMA_DDL

NAME = "kinesis"


class KinesisDataSource(DataSource):
    """``spark.readStream.format("kinesis")`` and ``spark.read.format("kinesis")``.

    Options are validated when the source is created (at ``.load()``), before any job runs;
    streaming-only options are checked again when the stream reader is created.
    """

    def __init__(self, options: Any):
        super().__init__(options)
        # Validate now, with streaming rules (the most permissive), so typos and bad values
        # fail at .load(); batch-only rules are applied in reader().
        self._streaming = parse_options(dict(options), streaming=True)

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        from spark_integration.readers import KinesisBatchReader

        return KinesisBatchReader(parse_options(dict(self.options), streaming=False))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        from spark_integration.readers import KinesisStreamReader

        return KinesisStreamReader(self._streaming)

    @property
    def parsed_options(self) -> KinesisOptions:
        """The validated streaming options."""
        return self._streaming


def register(spark: Any) -> None:
    """Register the ``kinesis`` format on ``spark`` (a ``SparkSession``)."""
    spark.dataSource.register(KinesisDataSource)
