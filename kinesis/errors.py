"""Exceptions raised by :mod:`kinesis`. Each message says what was wrong and how to fix it."""

from __future__ import annotations

from hashring.errors import ConfigurationError as _HashRingConfigurationError


class KinesisHashRingError(Exception):
    """Base class of every error raised by :mod:`kinesis`."""


class ConfigurationError(KinesisHashRingError, _HashRingConfigurationError):
    """Invalid configuration, raised when an object is built (also a ``ValueError``)."""


class LeaseLostError(KinesisHashRingError):
    """This member no longer holds the lease: stop processing the shard, do not checkpoint."""


# --- Kinesis shards, records and readers -------------------------------------------------


class StreamNotFoundError(KinesisHashRingError, LookupError):
    """The Kinesis stream does not exist in the region/endpoint the client points at."""


class ShardNotFoundError(KinesisHashRingError, LookupError):
    """The shard does not exist in the stream (wrong id, or trimmed after retention)."""


class KinesisRetriesExhaustedError(KinesisHashRingError):
    """A Kinesis call kept failing with a retryable error (throttling, 5xx) past the retry budget."""


class AggregationError(KinesisHashRingError, ValueError):
    """A KPL aggregated record could not be built or decoded."""


class RecordTooLargeError(AggregationError):
    """A record is larger than Kinesis accepts (1 MiB of data plus partition key)."""


class CheckpointError(KinesisHashRingError, ValueError):
    """A checkpoint was asked for a position that is not allowed (backwards, or not delivered)."""


# --- Spark source (spark_integration) ---------------------------------------------------


class InvalidOptionError(ConfigurationError):
    """A ``kinesis`` data source option is missing or wrong; ``option`` names it."""

    def __init__(self, message: str, option: str = ""):
        super().__init__(message)
        self.option = option


class InvalidOffsetError(KinesisHashRingError, ValueError):
    """A Spark offset for the ``kinesis`` source cannot be read (corrupt or foreign checkpoint)."""


class OffsetRangeUnavailableError(KinesisHashRingError):
    """A planned micro-batch range can no longer be read in full (records trimmed meanwhile)."""
