"""How a shard consumer reads its shard: polling (GetRecords) or Enhanced Fan-Out (SubscribeToShard).

Both readers present one interface, :class:`BatchReader`, so the consumer loop, checkpoints
and hand-offs are shared code; :func:`make_reader` picks one by ``StreamConfig.retrieval``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Protocol

from kinesis.consumer.retrieval.fanout import ConsumerRegistration, FanOutReader
from kinesis.consumer.retrieval.polling import ReadResult, ShardReader
from kinesis.consumer.retrieval.positions import Checkpoint, Position
from kinesis.consumer.worker.config import StreamConfig, WorkerConfig
from kinesis.errors import ConfigurationError


class BatchReader(Protocol):
    """What the shard consumer needs from a reader."""

    @property
    def last_position(self) -> Position | None: ...

    def read_batch(self) -> ReadResult: ...

    def wait(self, seconds: float) -> bool: ...

    def close(self) -> None: ...


def make_reader(
    spec: StreamConfig,
    shard_id: str,
    start: Checkpoint,
    *,
    kinesis_client: Any,
    config: WorkerConfig,
    registrations: Mapping[str, ConsumerRegistration],
    stop_event: threading.Event,
    max_block: float = 1.0,
) -> BatchReader:
    """The reader for one shard of ``spec``, starting at ``start``, stopped by ``stop_event``."""
    attempts, option = config.kinesis_retry_attempts, "WorkerConfig.kinesis_retry_attempts"
    if not spec.fanout:
        return ShardReader(
            kinesis_client, spec.stream, shard_id, start,
            max_records=config.max_records, idle_backoff=config.idle_backoff,
            min_read_interval=config.min_read_interval, stop_event=stop_event,
            max_attempts=attempts, retry_option=option, refused_resume="trim_horizon",
        )
    registration = registrations.get(spec.key_prefix)
    if registration is None:
        raise ConfigurationError(f"stream {spec.stream!r} reads with fan-out but has no consumer registration")
    return FanOutReader(
        kinesis_client, spec.stream, shard_id, registration, start,
        max_records=config.max_records, stop_event=stop_event, max_block=max_block,
        max_attempts=attempts, retry_option=option, refused_resume="trim_horizon",
    )
