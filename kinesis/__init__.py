"""A pure-Python Kinesis consumer with a balanced, fenced DynamoDB lease loop."""

from kinesis.clock import FakeClock
from kinesis.coordinator import (
    CoordinatorStatus,
    LeaseCoordinator,
    LeaseListener,
    NullListener,
)
from kinesis.errors import (
    CheckpointError,
    CheckpointRegressionError,
    ConfigurationError,
    CorruptLeaseError,
    DuplicateMemberIdError,
    KinesisAccessDeniedError,
    KinesisHashRingError,
    LeaseLostError,
    LeaseTableAccessDeniedError,
    LeaseTableError,
    LeaseTableNotFoundError,
    LeaseTableSchemaError,
    StreamNotActiveError,
    StreamNotFoundError,
)
from kinesis.lease_model import (
    LATEST,
    SHARD_END,
    TRIM_HORIZON,
    Checkpoint,
    Lease,
    LeaseState,
    TableSnapshot,
)
from kinesis.leases import LeaseTable
from kinesis.membership import DynamoDBMembership
from kinesis.positions import InitialPosition, Position
from kinesis.processing_failures import FailedBatch, FailureAction, ProcessorRetryPolicy
from kinesis.processor import Checkpointer, InitializationInput, RecordProcessor
from kinesis.reader import ReadResult, ShardReader, read_range
from kinesis.records import Record
from kinesis.shards import Shard, ShardDiscovery, ready_shards, shard_order
from kinesis.worker import StreamConfig, Worker, WorkerConfig, WorkerStatus, lease_key

__all__ = [
    "LATEST",
    "SHARD_END",
    "TRIM_HORIZON",
    "Checkpoint",
    "CheckpointError",
    "CheckpointRegressionError",
    "Checkpointer",
    "ConfigurationError",
    "CoordinatorStatus",
    "CorruptLeaseError",
    "DuplicateMemberIdError",
    "DynamoDBMembership",
    "FailedBatch",
    "FailureAction",
    "FakeClock",
    "InitialPosition",
    "InitializationInput",
    "KinesisAccessDeniedError",
    "KinesisHashRingError",
    "Lease",
    "LeaseCoordinator",
    "LeaseListener",
    "LeaseLostError",
    "LeaseState",
    "LeaseTable",
    "LeaseTableAccessDeniedError",
    "LeaseTableError",
    "LeaseTableNotFoundError",
    "LeaseTableSchemaError",
    "NullListener",
    "Position",
    "ProcessorRetryPolicy",
    "ReadResult",
    "Record",
    "RecordProcessor",
    "Shard",
    "ShardDiscovery",
    "ShardReader",
    "StreamConfig",
    "StreamNotActiveError",
    "StreamNotFoundError",
    "TableSnapshot",
    "Worker",
    "WorkerConfig",
    "WorkerStatus",
    "lease_key",
    "read_range",
    "ready_shards",
    "shard_order",
]
