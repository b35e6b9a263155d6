"""PySpark data source ``kinesis`` for Structured Streaming and batch reads."""

__all__: list[str] = []
