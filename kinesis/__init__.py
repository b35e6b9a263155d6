"""A pure-Python Kinesis consumer with a balanced, fenced DynamoDB lease loop."""

from kinesis.coordinator import LeaseCoordinator
from kinesis.errors import (
    CheckpointError,
    ConfigurationError,
    KinesisHashRingError,
    LeaseLostError,
    StreamNotFoundError,
)
from kinesis.lease_model import Checkpoint, Lease
from kinesis.leases import LeaseTable
from kinesis.membership import DynamoDBMembership
from kinesis.positions import InitialPosition, Position
from kinesis.processor import Checkpointer, InitializationInput, RecordProcessor
from kinesis.reader import ReadResult, ShardReader, read_range
from kinesis.records import Record
from kinesis.shards import Shard, ShardDiscovery, ready_shards, shard_order
from kinesis.worker import StreamConfig, Worker, WorkerConfig, WorkerStatus, lease_key

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "Checkpointer",
    "ConfigurationError",
    "DynamoDBMembership",
    "InitialPosition",
    "InitializationInput",
    "KinesisHashRingError",
    "Lease",
    "LeaseCoordinator",
    "LeaseLostError",
    "LeaseTable",
    "Position",
    "ReadResult",
    "Record",
    "RecordProcessor",
    "Shard",
    "ShardDiscovery",
    "ShardReader",
    "StreamConfig",
    "StreamNotFoundError",
    "Worker",
    "WorkerConfig",
    "WorkerStatus",
    "lease_key",
    "read_range",
    "ready_shards",
    "shard_order",
]
