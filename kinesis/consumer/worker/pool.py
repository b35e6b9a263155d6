"""The worker's lease listener: one :class:`~kinesis.consumer.shard.consumer.ShardConsumer` per held lease.

The lease coordinator calls :class:`ConsumerPool` on its tick thread; it starts, hands off or
stops shard consumers without blocking the tick (the hand-off and lease-lost protocol is in
:mod:`kinesis.consumer.shard.consumer`), counts what they report, and answers the worker's
status and stop calls.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from kinesis.consumer.keyed.executor import KeyedExecutor
from kinesis.consumer.retrieval.fanout import ConsumerRegistration
from kinesis.consumer.retrieval.positions import Checkpoint
from kinesis.consumer.retrieval.readers import BatchReader, make_reader
from kinesis.consumer.shard.consumer import (
    ConsumerLeases,
    NoCoordinator,
    ShardConsumer,
    ShardStatus,
)
from kinesis.consumer.worker.config import ProcessorFactory, StreamConfig, WorkerConfig
from kinesis.errors import ConfigurationError
from kinesis.lease_loop.table.model import Lease


class ConsumerPool:
    """The worker's lease listener: one :class:`ShardConsumer` per held lease (thread-safe)."""

    def __init__(
        self,
        config: WorkerConfig,
        kinesis_client: Any,
        processor_factory: ProcessorFactory | None,
        on_shard_end: Callable[[StreamConfig], None] | None = None,
        registrations: Mapping[str, ConsumerRegistration] | None = None,
        processor_style: str = "auto",
    ):
        self.config = config
        self.processor_style = processor_style
        """``"auto"``, ``"sdk"`` or ``"kclpy"`` (:mod:`kinesis.consumer.shard.processor`)."""
        self.kinesis_client = kinesis_client
        self.registrations: Mapping[str, ConsumerRegistration] = registrations or {}
        """Enhanced Fan-Out consumers by stream key prefix (streams with retrieval="fanout")."""
        self.processor_factory = processor_factory
        self.on_shard_end = on_shard_end
        self.coordinator: ConsumerLeases = NoCoordinator()
        self.poll_interval = config.effective_tick_interval / 2
        self._consumers: dict[str, ShardConsumer] = {}
        self._lock = threading.Lock()
        self._failures_logged: set[tuple[str, str, str]] = set()
        self.counters: Counter[str] = Counter(
            {
                "processor_errors": 0,
                "batches_skipped": 0,
                "records_skipped": 0,
                "read_errors": 0,
                "shard_ends": 0,
                "consumers_started": 0,
            }
        )
        self.records: Counter[tuple[str, str]] = Counter()
        self._keyed: KeyedExecutor | None = None

    # --- LeaseListener ------------------------------------------------------------------

    def on_lease_acquired(self, lease: Lease) -> None:
        spec = self.config.stream_of(lease.key)
        if spec is None:
            raise ConfigurationError(f"lease {lease.key!r} belongs to no configured stream")
        factory = spec.processor_factory or self.processor_factory
        if factory is None:  # Worker checks this at build time
            raise ConfigurationError(f"no processor factory for stream {spec.stream!r}")
        with self._lock:
            previous = self._consumers.get(lease.key)
            if previous is not None and previous.stopped.is_set():
                previous = None
            if previous is not None and previous.reason is None:
                previous.lease_lost()  # a new lease incarnation: the old consumer must stop
            consumer = ShardConsumer(self, spec, lease, factory, previous)
            self._consumers[lease.key] = consumer
            self.counters["consumers_started"] += 1
        consumer.start()

    def on_lease_lost(self, lease: Lease) -> None:
        with self._lock:
            consumer = self._consumers.get(lease.key)
        if consumer is not None:
            consumer.lease_lost()

    def on_handoff_requested(self, lease: Lease) -> threading.Event | None:
        with self._lock:
            consumer = self._consumers.get(lease.key)
        if consumer is None or consumer.stopped.is_set():
            return None
        return consumer.request_handoff()

    # --- used by consumers --------------------------------------------------------------

    def make_reader(self, spec: StreamConfig, shard_id: str, start: Checkpoint,
                    stop_event: threading.Event) -> BatchReader:
        """The reader for one shard: polling or fan-out, by ``spec.retrieval``."""
        return make_reader(
            spec, shard_id, start, kinesis_client=self.kinesis_client, config=self.config,
            registrations=self.registrations, stop_event=stop_event, max_block=self.poll_interval,
        )

    def keyed_executor(self) -> KeyedExecutor:
        """The Worker's event loop and thread pool for keyed processors (made on first use)."""
        with self._lock:
            if self._keyed is None:
                self._keyed = KeyedExecutor(threads=self.config.keyed_threads,
                                            max_pending_bytes=self.config.keyed_max_pending_bytes)
            return self._keyed

    def close(self) -> None:
        """Stop the keyed executor (after every consumer stopped)."""
        with self._lock:
            keyed, self._keyed = self._keyed, None
        if keyed is not None:
            keyed.close()

    def first_failure(self, key: str, exc: BaseException) -> bool:
        """True the first time ``key`` fails with this error (log its traceback once)."""
        seen = (key, type(exc).__name__, str(exc))
        with self._lock:
            if seen in self._failures_logged:
                return False
            self._failures_logged.add(seen)
            return True

    def is_current(self, consumer: ShardConsumer) -> bool:
        with self._lock:
            return self._consumers.get(consumer.key) is consumer

    def finished(self, consumer: ShardConsumer) -> None:
        with self._lock:
            if self._consumers.get(consumer.key) is consumer:
                del self._consumers[consumer.key]

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counters[name] += n

    def count_records(self, spec: StreamConfig, n: int) -> None:
        with self._lock:
            self.records[(spec.application, spec.stream)] += n

    def shard_ended(self, spec: StreamConfig) -> None:
        if self.on_shard_end is not None:
            self.on_shard_end(spec)

    # --- worker side --------------------------------------------------------------------

    def consumers(self) -> list[ShardConsumer]:
        with self._lock:
            return sorted(self._consumers.values(), key=lambda c: c.key)

    def request_handoff_all(self) -> None:
        """Ask every consumer to finish its batch and checkpoint now (a graceful stop begins)."""
        for c in self.consumers():
            c.request_handoff()

    def halt_all(self, timeout: float) -> list[str]:
        """Stop every consumer (processors hear lease_lost); return the keys still running."""
        consumers = self.consumers()
        for c in consumers:
            c.halt()
        deadline = time.monotonic() + timeout
        return [c.key for c in consumers if not c.join(max(0.0, deadline - time.monotonic()))]

    def totals(self) -> tuple[dict[str, int], dict[str, int]]:
        """(counters, records processed by ``"<application>/<stream>"``), copied atomically."""
        with self._lock:
            return dict(self.counters), {f"{a}/{s}": n for (a, s), n in self.records.items()}

    def statuses(self) -> list[ShardStatus]:
        return [c.status() for c in self.consumers()]

    def loads(self, metric: str, min_seconds: float = 0.0) -> dict[str, float]:
        """What each shard this worker runs costs, by ``metric`` (one of
        :data:`~kinesis.consumer.shard.load.LOAD_METRICS`). Shards measured for less than
        ``min_seconds`` are left out (they weigh the median): a shard just handed over reads
        its backlog at full speed, and that burst is not its load."""
        out: dict[str, float] = {}
        for consumer in self.consumers():
            sample = consumer.load.sample()
            if sample is not None and sample.seconds >= min_seconds:
                out[consumer.key] = sample.weight(metric)
        return out
