"""What a Worker says about itself: :class:`WorkerStatus`, liveness, readiness and its
startup line (no I/O).

The Worker reads its coordinator's status and its clock; these functions decide from
those values, so the probes stay cheap and are tested without a worker.
:class:`WorkerStatus` is also importable from :mod:`kinesis.consumer.worker` and :mod:`kinesis`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from hashring import Assignment
from kinesis.consumer.shard_status import ShardStatus
from kinesis.consumer.worker_config import WorkerConfig
from kinesis.lease_loop.lease_listener import CoordinatorStatus


@dataclass(frozen=True)
class WorkerStatus:
    """A snapshot of a worker, for logs, the ``/status`` endpoint and metrics."""

    worker_id: str
    state: str
    """new, running, stopping or stopped."""
    live: bool
    ready: bool
    members: tuple[str, ...]
    """The members of the last lease plan (the live member list minus suspected members)."""
    held: tuple[str, ...]
    pending_handoffs: Mapping[str, str | None]
    shards: tuple[ShardStatus, ...]
    lease_counters: Mapping[str, int]
    """The coordinator's counters (:data:`kinesis.lease_loop.coordinator.COUNTER_NAMES`)."""
    worker_counters: Mapping[str, int]
    """processor_errors, read_errors, shard_ends, consumers_started."""
    records_processed: Mapping[str, int]
    """``"<application>/<stream>"`` -> records handed to processors by this worker."""
    ticks: int
    seconds_since_tick: float | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        out = asdict(self)
        out["shards"] = [asdict(s) for s in self.shards]
        return out


def seconds_since(at: float | None, now: float) -> float | None:
    """Seconds from ``at`` to ``now`` (never negative), ``None`` if ``at`` is None."""
    return None if at is None else max(0.0, now - at)


def is_live(last_tick_at: float | None, started_at: float | None, now: float, timeout: float) -> bool:
    """The lease loop ticked within ``timeout``; before its first tick, the worker is live
    during the first ``timeout`` after it started."""
    since = seconds_since(last_tick_at, now)
    if since is None:
        assert started_at is not None
        since = now - started_at
    return since <= timeout


def planned_members(plan: Assignment | None) -> tuple[str, ...]:
    """The members of the coordinator's last plan (none before the first)."""
    return tuple(plan.members) if plan is not None else ()


def readiness(
    cs: CoordinatorStatus, now: float, limit: float, worker_id: str, planned: tuple[str, ...] | None
) -> tuple[bool, str]:
    """(ready, why) of a running worker: ticked once, the lease table and the member list read
    within ``limit`` seconds, and ``worker_id`` in ``planned`` unless that is None (memberships
    other than DynamoDBMembership, whose list may hold ready members only)."""
    if cs.ticks < 1:
        return False, "the lease loop has not completed a round yet"
    error = f" (last error: {cs.last_error})" if cs.last_error else ""
    stale = [f"{what} {'never read' if at is None else f'not read for {now - at:.1f} s'}"
             for what, at in (("lease table", cs.last_table_read_at), ("member list", cs.last_membership_at))
             if at is None or now - at > limit]
    if stale:  # both, when both are: a round that cannot read one may not read the other
        return False, f"{' and '.join(stale)} (readiness_timeout {limit:g} s){error}"
    if planned is not None and worker_id not in planned:
        return False, f"{worker_id} is not in the member list yet"
    return True, "ready"


def startup_line(worker_id: str, config: WorkerConfig, membership: str, health_url: str | None) -> str:
    """One line that says who the worker is and how it runs (``membership``: its class name)."""
    t = config.timing
    streams = ", ".join(
        f"{s.application}/{s.stream} from {s.start.kind}"
        + (f" (fan-out consumer {s.effective_consumer_name})" if s.fanout else "")
        for s in config.streams
    )
    return (
        f"worker {worker_id} started: table {config.table_name}, streams [{streams}], "
        f"membership {membership}, lease {t.lease_duration:g} s "
        f"(tick {t.tick_interval:.3g} s, light rounds {t.scan_interval:.3g} s), replicas "
        f"{config.replicas}, health {health_url or 'off'}"
    )
