"""The errors of the Spark ``kinesis`` source: options, offsets and data loss.

They derive from :mod:`kinesis.errors`' classes (a source error is a ``KinesisHashRingError``;
an invalid option is a ``ConfigurationError``), so one ``except`` still catches them all.
"""

from __future__ import annotations

from kinesis.errors import ConfigurationError, InvalidSequenceNumberError, KinesisHashRingError


class InvalidOptionError(ConfigurationError):
    """A ``kinesis`` data source option is missing or wrong; ``option`` names it."""

    def __init__(self, message: str, option: str = ""):
        super().__init__(message)
        self.option = option


class InvalidOffsetError(KinesisHashRingError, ValueError):
    """A Spark offset for the ``kinesis`` source cannot be read (corrupt or foreign checkpoint)."""


class InvalidOffsetSequenceNumberError(InvalidOffsetError, InvalidSequenceNumberError):
    """A Spark offset entry has a malformed sequence number (the message names the entry)."""


class OffsetRangeUnavailableError(KinesisHashRingError):
    """A planned micro-batch range can no longer be read in full (records trimmed meanwhile)."""


class DataLossError(OffsetRangeUnavailableError):
    """Records the query had not read yet are gone (trimmed after the retention period, or the
    stream was re-created); raised with ``failOnDataLoss=true``, naming the shard and range."""
