"""Exceptions raised by :mod:`kinesis`. Each message says what was wrong and how to fix it."""

from __future__ import annotations

from hashring.errors import ConfigurationError as _HashRingConfigurationError
from kinesis.deprecation import moved

ACCESS_DENIED_CODES = frozenset({"AccessDeniedException", "AccessDenied", "UnauthorizedOperation"})
"""AWS error codes that mean the credentials lack an IAM permission (never retried)."""


def is_access_denied(exc: BaseException) -> bool:
    """True for a botocore ``ClientError`` that says the credentials lack a permission: an
    :data:`ACCESS_DENIED_CODES` code, or HTTP 403 (VPC endpoint policies, some emulators)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return False
    code = response.get("Error", {}).get("Code")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in ACCESS_DENIED_CODES or status == 403


def access_denied_message(operation: str, target: str, action: str, cause: BaseException) -> str:
    """What was refused and how to fix it: grant ``action`` on ``target``'s ARN."""
    return (
        f"access denied: {operation} on {target}: {cause}. Grant {action} on its ARN to the "
        "credentials' role or user (the least-privilege policy is in docs/security.md)"
    )


class KinesisHashRingError(Exception):
    """Base class of every error raised by :mod:`kinesis`."""


class ConfigurationError(KinesisHashRingError, _HashRingConfigurationError):
    """Invalid configuration, raised when an object is built (also a ``ValueError``)."""


class ProcessorStyleError(ConfigurationError):
    """A processor is neither a ``kinesis.RecordProcessor`` nor an amazon-kclpy v3 processor,
    or not the style the Worker was told (``processor_style``); the message says which fits."""


class LeaseLostError(KinesisHashRingError):
    """This member no longer holds the lease: stop processing the shard, do not checkpoint."""


# --- Kinesis shards, records and readers -------------------------------------------------


class StreamNotFoundError(KinesisHashRingError, LookupError):
    """The Kinesis stream does not exist in the region/endpoint the client points at."""


class ShardNotFoundError(KinesisHashRingError, LookupError):
    """The shard does not exist in the stream (wrong id, or trimmed after retention)."""


class StartingPositionRejectedError(ConfigurationError):
    """Kinesis refused a starting sequence number (``InvalidArgumentException``): it is not of
    this shard, or it was trimmed after the retention period."""


class StreamNotActiveError(KinesisHashRingError):
    """The Kinesis stream exists but is not ACTIVE (being created, deleted or updated)."""


class KinesisAccessDeniedError(KinesisHashRingError, PermissionError):
    """The credentials lack an IAM permission for a Kinesis call; ``action`` names it."""

    def __init__(self, message: str, action: str = ""):
        super().__init__(message)
        self.action = action


class HealthServerError(KinesisHashRingError, OSError):
    """The health server could not listen on ``health_host:health_port``."""


class KinesisRetriesExhaustedError(KinesisHashRingError):
    """A Kinesis call kept failing with a retryable error (throttling, 5xx) past the retry budget."""


class AggregationError(KinesisHashRingError, ValueError):
    """A KPL aggregated record could not be built or decoded."""


class RecordTooLargeError(AggregationError):
    """A record is larger than Kinesis accepts (1 MiB of data plus partition key)."""


class CheckpointError(KinesisHashRingError, ValueError):
    """A checkpoint was asked for a position that is not allowed (backwards, or not delivered)."""


# --- Enhanced Fan-Out (SubscribeToShard) ---------------------------------------------------


class FanOutConsumerLimitError(KinesisHashRingError):
    """The stream already has the most registered consumers Kinesis allows (20 by default)."""


class FanOutConsumerNotActiveError(KinesisHashRingError):
    """The registered stream consumer did not become ACTIVE in time (or is being deleted)."""


# --- Lease table, coordinator and DynamoDB membership -------------------------------------


class LeaseTableError(KinesisHashRingError):
    """Base class of lease table errors."""


class LeaseTableNotFoundError(LeaseTableError, LookupError):
    """The lease table does not exist and creating it was disabled."""


class LeaseTableSchemaError(LeaseTableError):
    """The lease table exists but its key schema is not the one this library writes."""


class LeaseTableAccessDeniedError(LeaseTableError, PermissionError):
    """The credentials lack an IAM permission on the lease table; ``action`` names it."""

    def __init__(self, message: str, action: str = ""):
        super().__init__(message)
        self.action = action


class LeaseTableNotReadyError(LeaseTableError):
    """The lease table did not become ACTIVE before the deadline."""


class LeaseTableUnavailableError(LeaseTableError):
    """A lease table call kept failing with a transient error (throttling, 5xx, network)."""


class CorruptLeaseError(LeaseTableError):
    """A lease row has missing or ill-typed attributes; it is never overwritten."""

    def __init__(self, key: str, reason: str):
        super().__init__(
            f"lease row {key!r} is corrupt ({reason}); it is left untouched: fix or delete the "
            "item in DynamoDB by hand"
        )
        self.key = key
        self.reason = reason


class InvalidLeaseKeyError(LeaseTableError, ValueError):
    """A lease key is empty, not a string, or uses the reserved ``__`` prefix."""


class InvalidCheckpointError(LeaseTableError, ConfigurationError):
    """A position in a shard is malformed: a sentinel with a sub-sequence number, AT_TIMESTAMP
    without a timezone-aware timestamp, or (:class:`InvalidSequenceNumberError`) a bad sequence
    number."""


class InvalidSequenceNumberError(InvalidCheckpointError, CheckpointError):
    """A sequence number or sub-sequence number is malformed. The one validator
    (:mod:`kinesis.sequence_numbers`) raises it, whatever the value came from: a constructor, a
    checkpoint call, kclpy's checkpointer, a lease row or a Spark offset (the last two wrap its
    message in theirs, naming the row or the offset entry)."""


class CorruptCheckpointError(CorruptLeaseError):
    """A lease row whose checkpoint has a malformed sequence number (never overwritten). Its
    ``__cause__`` is the validator's :class:`InvalidSequenceNumberError`. It is not itself a
    :class:`CheckpointError`: a processor that handles a bad checkpoint argument must not
    swallow a corrupt lease table."""


class CheckpointRegressionError(LeaseTableError, CheckpointError):
    """A checkpoint would move backwards; checkpoints only move forward."""


class DuplicateMemberIdError(KinesisHashRingError):
    """Another process heartbeats with this member id: every member needs a unique id."""


_MOVED = {name: "spark_integration.errors" for name in (
    "InvalidOptionError", "InvalidOffsetError", "InvalidOffsetSequenceNumberError", "OffsetRangeUnavailableError",
    "DataLossError")}
"""The Spark source's errors, here before 0.2, now in :mod:`spark_integration.errors` (kept one release)."""

__getattr__ = moved(__name__, _MOVED)
