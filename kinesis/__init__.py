"""A pure-Python Kinesis consumer with a balanced, fenced DynamoDB lease loop."""

from kinesis.consumer.fanout_reader import FanOutReader
from kinesis.consumer.kclpy_adapter import KclpyProcessor
from kinesis.consumer.kclpy_checkpointer import KclpyCheckpointError
from kinesis.consumer.positions import (
    LATEST,
    SHARD_END,
    TRIM_HORIZON,
    Checkpoint,
    InitialPosition,
    Position,
)
from kinesis.consumer.prepared_checkpointer import PreparedCheckpointer
from kinesis.consumer.processing_failures import FailedBatch, FailureAction, ProcessorRetryPolicy
from kinesis.consumer.processor import Checkpointer, InitializationInput, RecordProcessor
from kinesis.consumer.reader import ReadResult, ShardReader, read_range
from kinesis.consumer.records import Record
from kinesis.consumer.shards import Shard, ShardDiscovery, ready_shards, shard_order
from kinesis.consumer.worker import StreamConfig, Worker, WorkerConfig, WorkerStatus, lease_key
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
from kinesis.lease_loop.clock import FakeClock
from kinesis.lease_loop.coordinator import (
    CoordinatorStatus,
    LeaseCoordinator,
    LeaseListener,
    NullListener,
)
from kinesis.lease_loop.lease_model import Lease, LeaseState, TableSnapshot
from kinesis.lease_loop.leases import LeaseTable
from kinesis.lease_loop.membership import DynamoDBMembership
from kinesis.lease_loop.session_membership import SessionMembership
from kinesis.log_setup import setup_logging

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
    "FanOutConsumerLimitError",
    "FanOutConsumerNotActiveError",
    "FanOutReader",
    "InitialPosition",
    "InitializationInput",
    "InvalidSequenceNumberError",
    "KclpyCheckpointError",
    "KclpyProcessor",
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
    "PreparedCheckpointer",
    "ProcessorRetryPolicy",
    "ProcessorStyleError",
    "ReadResult",
    "Record",
    "RecordProcessor",
    "SessionMembership",
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
    "setup_logging",
    "shard_order",
]
