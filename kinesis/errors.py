"""Exceptions raised by :mod:`kinesis`. Each message says what was wrong and how to fix it."""

from __future__ import annotations

from hashring.errors import ConfigurationError as _HashRingConfigurationError


class KinesisHashRingError(Exception):
    """Base class of every error raised by :mod:`kinesis`."""


class ConfigurationError(KinesisHashRingError, _HashRingConfigurationError):
    """Invalid configuration, raised when an object is built (also a ``ValueError``)."""


class LeaseLostError(KinesisHashRingError):
    """This member no longer holds the lease: stop processing the shard, do not checkpoint."""
