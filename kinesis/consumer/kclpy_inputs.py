"""The objects an amazon-kclpy v3 processor receives, built from the SDK's own.

Same names and attributes as ``amazon_kclpy.messages`` (``InitializeInput``,
``ProcessRecordsInput``, ``LeaseLostInput``, ``ShardEndedInput``, ``ShutdownRequestedInput``
and ``Record``), so a processor written for amazon-kclpy reads them unchanged. Additions, all
optional to use: ``InitializeInput.pending_checkpoint`` (two-phase checkpoints, as KCL's
``InitializationInput.pendingCheckpointSequenceNumber``), ``InitializeInput.stream_name`` and
``KclpyRecord.record`` (the SDK :class:`~kinesis.consumer.records.Record`).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kinesis.consumer.positions import Position
from kinesis.consumer.processor import InitializationInput
from kinesis.consumer.records import Record as SdkRecord

if TYPE_CHECKING:
    from kinesis.consumer.kclpy_checkpointer import KclpyCheckpointer


class KclpyRecord:
    """One user record, shaped like ``amazon_kclpy.messages.Record``."""

    __slots__ = ("record",)

    def __init__(self, record: SdkRecord):
        self.record = record
        """The SDK record this one shows."""

    @property
    def binary_data(self) -> bytes:
        """The record's bytes."""
        return self.record.data

    @property
    def data(self) -> str:
        """The record's bytes, base64-encoded (as the MultiLangDaemon hands them to kclpy)."""
        return base64.b64encode(self.record.data).decode("ascii")

    @property
    def sequence_number(self) -> str:
        return self.record.sequence_number

    @property
    def sub_sequence_number(self) -> int:
        """The index inside a KPL aggregate (0 for a plain record)."""
        return self.record.sub_sequence_number

    @property
    def partition_key(self) -> str:
        return self.record.partition_key

    @property
    def approximate_arrival_timestamp(self) -> datetime | None:
        """When Kinesis accepted the record (timezone-aware; kclpy gives local naive time)."""
        return self.record.approximate_arrival_timestamp

    @property
    def timestamp_millis(self) -> int | None:
        """:attr:`approximate_arrival_timestamp` in milliseconds since the Unix epoch."""
        ts = self.record.approximate_arrival_timestamp
        return None if ts is None else int(ts.timestamp() * 1000)

    def get(self, field: str) -> Any:
        """A field by its MultiLangDaemon JSON name (``data``, ``partitionKey``, ...)."""
        fields = {
            "data": self.data,
            "partitionKey": self.partition_key,
            "sequenceNumber": self.sequence_number,
            "subSequenceNumber": self.sub_sequence_number,
            "approximateArrivalTimestamp": self.timestamp_millis,
        }
        if field not in fields:
            raise KeyError(field)
        return fields[field]

    def __repr__(self) -> str:
        return f"Record({self.sequence_number}/{self.sub_sequence_number}, key={self.partition_key!r})"


@dataclass(frozen=True)
class InitializeInput:
    """What ``initialize(initialize_input)`` is told about the shard it now owns."""

    shard_id: str
    sequence_number: str
    """The checkpoint the processor starts after, or the initial position's name
    (``TRIM_HORIZON``, ``LATEST``, ``AT_TIMESTAMP``) for a shard never checkpointed, as KCL."""
    sub_sequence_number: int
    pending_checkpoint: Position | None = None
    """A checkpoint a previous owner prepared and did not commit (``.sequence_number``,
    ``.sub_sequence_number``), or None."""
    stream_name: str = ""
    action: str = "initialize"

    @classmethod
    def of(cls, init: InitializationInput) -> InitializeInput:
        """From the SDK's :class:`~kinesis.consumer.processor.InitializationInput`."""
        start = init.checkpoint or init.initial_position  # an initial position's number is its name
        return cls(init.shard_id, start.sequence_number, start.sub_sequence_number, init.pending_checkpoint,
                   init.stream_name)


@dataclass(frozen=True)
class ProcessRecordsInput:
    """One batch for ``process_records(process_records_input)`` (never empty)."""

    records: Sequence[KclpyRecord]
    checkpointer: KclpyCheckpointer
    millis_behind_latest: int | None = None
    action: str = "processRecords"


@dataclass(frozen=True)
class LeaseLostInput:
    """``lease_lost(lease_lost_input)``: another member owns the shard; checkpoints fail."""

    action: str = "leaseLost"


@dataclass(frozen=True)
class ShardEndedInput:
    """``shard_ended(shard_ended_input)``: call ``checkpointer.checkpoint()`` to finish the shard."""

    checkpointer: KclpyCheckpointer
    action: str = "shardEnded"


@dataclass(frozen=True)
class ShutdownRequestedInput:
    """``shutdown_requested(shutdown_requested_input)``: checkpoint what is done (hand-off or stop)."""

    checkpointer: KclpyCheckpointer
    action: str = "shutdownRequested"
