"""A pure-Python Kinesis consumer with a balanced, fenced DynamoDB lease loop.

This package is the Worker's surface: the Worker and its configuration, the processor API,
positions, memberships and the errors a Worker user catches. The generic lease loop (for
other resources than shards) is :mod:`kinesis.lease_loop`; test doubles are in
:mod:`kinesis.testing`; the readers and shard discovery are internal to
:mod:`kinesis.consumer`.
"""

from kinesis.consumer.kclpy import KclpyCheckpointError, KclpyProcessor
from kinesis.consumer.keyed.async_batch import AsyncRecordProcessor
from kinesis.consumer.keyed.processor import KeyedProcessor
from kinesis.consumer.retrieval.positions import (
    LATEST,
    SHARD_END,
    TRIM_HORIZON,
    Checkpoint,
    InitialPosition,
    Position,
)
from kinesis.consumer.retrieval.records import Record
from kinesis.consumer.shard.failures import FailedBatch, FailureAction, ProcessorRetryPolicy
from kinesis.consumer.shard.processor import (
    Checkpointer,
    InitializationInput,
    PreparedCheckpointer,
    RecordProcessor,
)
from kinesis.consumer.worker.worker import (
    StreamConfig,
    Worker,
    WorkerConfig,
    WorkerStatus,
    lease_key,
)
from kinesis.deprecation import moved
from kinesis.errors import (
    CheckpointError,
    CheckpointRegressionError,
    ConfigurationError,
    CorruptLeaseError,
    DuplicateMemberIdError,
    FanOutConsumerLimitError,
    FanOutConsumerNotActiveError,
    InvalidSequenceNumberError,
    KinesisAccessDeniedError,
    KinesisHashRingError,
    LeaseLostError,
    LeaseTableAccessDeniedError,
    LeaseTableError,
    LeaseTableNotFoundError,
    LeaseTableSchemaError,
    ProcessorStyleError,
    StreamNotActiveError,
    StreamNotFoundError,
)
from kinesis.lease_loop.membership import DynamoDBMembership, SessionMembership
from kinesis.log_setup import setup_logging

__all__ = [
    "LATEST",
    "SHARD_END",
    "TRIM_HORIZON",
    "AsyncRecordProcessor",
    "Checkpoint",
    "CheckpointError",
    "CheckpointRegressionError",
    "Checkpointer",
    "ConfigurationError",
    "CorruptLeaseError",
    "DuplicateMemberIdError",
    "DynamoDBMembership",
    "FailedBatch",
    "FailureAction",
    "FanOutConsumerLimitError",
    "FanOutConsumerNotActiveError",
    "InitialPosition",
    "InitializationInput",
    "InvalidSequenceNumberError",
    "KclpyCheckpointError",
    "KclpyProcessor",
    "KeyedProcessor",
    "KinesisAccessDeniedError",
    "KinesisHashRingError",
    "LeaseLostError",
    "LeaseTableAccessDeniedError",
    "LeaseTableError",
    "LeaseTableNotFoundError",
    "LeaseTableSchemaError",
    "Position",
    "PreparedCheckpointer",
    "ProcessorRetryPolicy",
    "ProcessorStyleError",
    "Record",
    "RecordProcessor",
    "SessionMembership",
    "StreamConfig",
    "StreamNotActiveError",
    "StreamNotFoundError",
    "Worker",
    "WorkerConfig",
    "WorkerStatus",
    "lease_key",
    "setup_logging",
]

_MOVED = {
    "CoordinatorStatus": "kinesis.lease_loop",
    "LeaseCoordinator": "kinesis.lease_loop",
    "LeaseListener": "kinesis.lease_loop",
    "NullListener": "kinesis.lease_loop",
    "Lease": "kinesis.lease_loop",
    "LeaseState": "kinesis.lease_loop",
    "LeaseTable": "kinesis.lease_loop",
    "TableSnapshot": "kinesis.lease_loop",
    "FakeClock": "kinesis.testing",
    "FanOutReader": "kinesis.consumer.retrieval.fanout",
    "ReadResult": "kinesis.consumer.retrieval.polling",
    "ShardReader": "kinesis.consumer.retrieval.polling",
    "read_range": "kinesis.consumer.retrieval.polling",
    "Shard": "kinesis.consumer.discovery.shards",
    "ShardDiscovery": "kinesis.consumer.discovery.shards",
    "ready_shards": "kinesis.consumer.discovery.shards",
    "shard_order": "kinesis.consumer.discovery.shards",
}
"""Names this package exported before 0.2, and where they live now (kept one release)."""


__getattr__ = moved(__name__, _MOVED)
