"""Prometheus metrics of a :class:`~kinesis.consumer.worker.worker.Worker` (optional extra ``metrics``).

``prometheus_client`` is imported lazily: without it :func:`build_registry` returns ``None``
and the worker runs without metrics. The collector reads :meth:`Worker.status` at scrape
time, so there is no second set of counters to keep in sync. The metrics, their types,
labels and units: ``docs/metrics.md`` (a test keeps the two in step).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kinesis.consumer.worker.worker import Worker


PER_SHARD_GAUGES: tuple[tuple[str, str, str | None, str], ...] = (
    ("kinesis_worker_lag_seconds", "MillisBehindLatest of the last read per shard, in seconds", None, "lag_seconds"),
    ("kinesis_worker_lag_age_seconds", "Seconds since each shard's lag was measured", None, "lag_age_seconds"),
    ("kinesis_worker_keyed_in_flight", "Keyed processors: records of each shard being processed now", "keyed",
     "in_flight"),
    ("kinesis_worker_keyed_queued", "Keyed processors: records of each shard waiting behind their key or for a "
     "slot", "keyed", "queued"),
    ("kinesis_worker_keyed_completed_not_checkpointed", "Keyed processors: records of each shard completed since "
     "its last progress checkpoint", "keyed", "completed_not_checkpointed"),
    ("kinesis_worker_keyed_oldest_in_flight_seconds", "Keyed processors: age of each shard's longest-running "
     "record", "keyed", "oldest_in_flight_seconds"),
    ("kinesis_worker_keyed_max_key_queue", "Keyed processors: the deepest per-key queue of each shard", "keyed",
     "max_key_queue"),
    ("kinesis_worker_keyed_stuck_records", "Keyed processors: records of each shard retried at the maximum backoff "
     "after exhausting their attempts", "keyed", "stuck"),
    ("kinesis_worker_shard_cpu", "CPU seconds per second each shard's consumer thread uses (reading and "
     "processing; smoothed over about a minute)", "load", "cpu"),
    ("kinesis_worker_shard_records_per_second", "Records per second read from each shard (smoothed)", "load",
     "records_per_s"),
    ("kinesis_worker_shard_bytes_per_second", "Payload bytes per second read from each shard (smoothed)", "load",
     "bytes_per_s"),
    ("kinesis_worker_shard_processor_busy", "Share of the time each shard's processor is inside process_records "
     "(smoothed)", "load", "processor_busy"),
)
"""Gauges labelled by shard: (name, help, the part of a ShardStatus it reads (None: the status
itself; "keyed", "load": absent for a shard without one), attribute)."""


def prometheus_available() -> bool:
    """True if ``prometheus_client`` can be imported."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


class WorkerCollector:
    """A prometheus_client custom collector over one worker's status."""

    def __init__(self, worker: Worker):
        self.worker = worker

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        status = self.worker.status()
        w = status.worker_id
        held = GaugeMetricFamily("kinesis_worker_leases_held", "Leases held by this worker", labels=["worker"])
        held.add_metric([w], len(status.held))
        yield held
        ready = GaugeMetricFamily("kinesis_worker_ready", "1 when the worker is ready", labels=["worker"])
        ready.add_metric([w], 1.0 if status.ready else 0.0)
        yield ready
        records = CounterMetricFamily(
            "kinesis_worker_records_processed", "Records handed to processors",
            labels=["worker", "application", "stream"],
        )
        for name, n in sorted(status.records_processed.items()):
            application, stream = name.split("/", 1)
            records.add_metric([w, application, stream], n)
        yield records
        lag = GaugeMetricFamily(
            "kinesis_worker_millis_behind_latest", "MillisBehindLatest of the last GetRecords per shard",
            labels=["worker", "application", "stream", "shard"],
        )
        for shard in status.shards:
            if shard.millis_behind_latest is not None:
                lag.add_metric([w, shard.application, shard.stream, shard.shard_id], shard.millis_behind_latest)
        yield lag
        for name, doc, part, attr in PER_SHARD_GAUGES:
            gauge = GaugeMetricFamily(name, doc, labels=["worker", "application", "stream", "shard"])
            for shard in status.shards:
                source = shard if part is None else getattr(shard, part)
                if source is not None and (value := getattr(source, attr)) is not None:
                    gauge.add_metric([w, shard.application, shard.stream, shard.shard_id], value)
            yield gauge
        hot = GaugeMetricFamily(
            "kinesis_worker_hot_shard", "Leases held here that the load plan found hotter than a fair share "
            "(value: load over a fair share): each has a member to itself; split the shard",
            labels=["worker", "lease"],
        )
        for key, share in sorted(status.hot_shards.items()):
            hot.add_metric([w, key], share)
        yield hot
        for name, doc, value in (
            ("kinesis_worker_cpu_utilisation", "This process's CPU seconds per second over the CPUs it may "
             "use (its container's limit)", status.cpu_utilisation),
            ("kinesis_worker_load_share", "Under balance='load': this member's load over its fair share",
             status.load_share),
            ("kinesis_worker_max_lag_seconds", "The largest lag over the shards held, in seconds "
             "(the autoscaling signal)", status.max_lag_seconds),
            ("kinesis_worker_processing_records_per_second", "Records per second handed to processors "
             "(smoothed over about a minute)", status.processing_rate),
            ("kinesis_worker_arrival_records_per_second", "Records per second entering the shards held "
             "(smoothed)", status.arrival_rate),
            ("kinesis_worker_catch_up_seconds", "Seconds until every shard held is caught up at the "
             "current trends (+Inf: not catching up)", status.catch_up_seconds),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=["worker"])
            if value is not None:
                gauge.add_metric([w], value)
            yield gauge
        stuck = GaugeMetricFamily(
            "kinesis_worker_shards_stuck",
            "Shards whose processor failed on the same batch max_attempts times (still retried)",
            labels=["worker"],
        )
        stuck.add_metric([w], sum(1 for shard in status.shards if shard.state == "stuck"))
        yield stuck
        hung = GaugeMetricFamily(
            "kinesis_worker_processors_hung", "Processor calls running longer than processor_timeout",
            labels=["worker"],
        )
        hung.add_metric([w], status.processors_hung)
        yield hung
        lost = GaugeMetricFamily(
            "kinesis_worker_shards_data_loss",
            "Shards held and not processed after a data loss (on_data_loss='stop_shard')", labels=["worker"],
        )
        lost.add_metric([w], sum(1 for shard in status.shards if shard.state == "data-loss"))
        yield lost
        c = status.lease_counters
        for name, value, doc in (
            ("kinesis_worker_handoffs", c.get("handoffs", 0), "Graceful hand-offs given to another member"),
            (
                "kinesis_worker_takeovers",
                c.get("takeovers", 0) + c.get("orphans_taken", 0),
                "Expired or orphaned leases taken over",
            ),
            ("kinesis_worker_lease_loop_errors", c.get("lease_loop_errors", 0), "Failed lease-loop operations"),
            (
                "kinesis_worker_processor_errors",
                status.worker_counters.get("processor_errors", 0),
                "Failed processor attempts (each batch is retried in place with backoff)",
            ),
            (
                "kinesis_worker_data_loss_events",
                status.worker_counters.get("data_loss_events", 0),
                "Resume positions found trimmed by the retention period (records lost; see the ERROR log)",
            ),
            (
                "kinesis_worker_data_loss_seconds",
                status.worker_counters.get("data_loss_ms", 0) / 1000,
                "Arrival-time span of the records lost to data losses, in seconds (losses whose "
                "checkpoint has no arrival time are counted in events only)",
            ),
            (
                "kinesis_worker_reader_restarts",
                status.worker_counters.get("reader_restarts", 0),
                "Readers restarted by the watchdog because their reads stopped advancing",
            ),
            (
                "kinesis_worker_records_skipped",
                status.worker_counters.get("records_skipped", 0),
                "Records skipped by ProcessorRetryPolicy.on_exhausted (e.g. dead-lettered)",
            ),
        ):
            family = CounterMetricFamily(name, doc, labels=["worker"])
            family.add_metric([w], value)
            yield family
        events = CounterMetricFamily(
            "kinesis_worker_lease_events", "Lease coordinator event counters", labels=["worker", "event"]
        )
        for event, value in sorted(c.items()):
            events.add_metric([w, event], value)
        yield events


def build_registry(worker: Worker, registry: Any = None) -> Any:
    """A ``CollectorRegistry`` with the worker's collector (None without prometheus_client)."""
    try:
        from prometheus_client import CollectorRegistry
    except ImportError:
        return None
    if registry is None:
        registry = CollectorRegistry()
    registry.register(WorkerCollector(worker))
    return registry


def render(registry: Any) -> tuple[bytes, str]:
    """The text exposition of ``registry`` and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return generate_latest(registry), CONTENT_TYPE_LATEST
