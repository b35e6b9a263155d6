"""A pure-Python Kinesis consumer with a balanced, fenced DynamoDB lease loop."""

from kinesis.errors import ConfigurationError, KinesisHashRingError, LeaseLostError
from kinesis.positions import InitialPosition, Position
from kinesis.processor import Checkpointer, InitializationInput, RecordProcessor
from kinesis.reader import ReadResult, ShardReader, read_range
from kinesis.records import Record
from kinesis.shards import Shard, ShardDiscovery, ready_shards, shard_order

__all__ = [
    "Checkpointer",
    "ConfigurationError",
    "InitialPosition",
    "InitializationInput",
    "KinesisHashRingError",
    "LeaseLostError",
    "Position",
    "ReadResult",
    "Record",
    "RecordProcessor",
    "Shard",
    "ShardDiscovery",
    "ShardReader",
    "read_range",
    "ready_shards",
    "shard_order",
]
