"""HTTP health endpoints for Kubernetes probes (stdlib ``http.server`` on a daemon thread).

=============== =============================================================================
``/livez``      200 while the lease loop ticks (the last tick is younger than
                ``liveness_timeout``), else 503: a stuck worker gets restarted. An
                unreachable table does not fail it (a restart would not help).
                Aliases: ``/healthz``, ``/live``.
``/readyz``     200 while the worker can do its work: it runs, has ticked, read the lease
                table and the member list within ``readiness_timeout`` and (with
                ``DynamoDBMembership``) is in the member list; 503 with the reason
                otherwise (table unreachable, membership stale, stopping). Alias: ``/ready``.
``/status``     the worker's :meth:`~kinesis.consumer.worker.worker.Worker.status` as JSON.
``/metrics``    Prometheus text format (404 without the ``metrics`` extra).
=============== =============================================================================

Example probes::

    livenessProbe:  {httpGet: {path: /livez,  port: 8080}, periodSeconds: 10}
    readinessProbe: {httpGet: {path: /readyz, port: 8080}, periodSeconds: 5}

What a Worker says about itself: :class:`WorkerStatus`, liveness, readiness and its
startup line (no I/O).

The Worker reads its coordinator's status and its clock; these functions decide from
those values, so the probes stay cheap and are tested without a worker.
:class:`WorkerStatus` is also importable from :mod:`kinesis.consumer.worker.worker` and :mod:`kinesis`.
"""

from __future__ import annotations

import errno
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from hashring import Assignment
from kinesis.consumer.shard.consumer import ShardStatus
from kinesis.consumer.worker.config import WorkerConfig
from kinesis.errors import HealthServerError
from kinesis.lease_loop.lease_listener import CoordinatorStatus

log = logging.getLogger(__name__)


def _explain_bind_error(host: str, port: int, exc: OSError) -> str:
    where = f"the health server cannot listen on {host}:{port} ({exc.strerror or exc})"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{where}: WorkerConfig.health_port {port} is already in use, probably by another "
            "Worker in this process or pod. Give each Worker its own health_port, 0 for any free "
            "port, or None for no health server"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{where}: WorkerConfig.health_host {host!r} is not an address of this machine (use 0.0.0.0)"
    if exc.errno == errno.EACCES:
        return f"{where}: ports below 1024 need privileges; choose a WorkerConfig.health_port >= 1024"
    return f"{where}: check WorkerConfig.health_host and health_port"


class HealthSource(Protocol):
    """What the server asks (a :class:`~kinesis.consumer.worker.worker.Worker`)."""

    def is_live(self) -> bool: ...

    def is_ready(self) -> bool: ...

    def status_dict(self) -> dict[str, Any]: ...

    def metrics_text(self) -> tuple[bytes, str] | None: ...


class HealthServer:
    """Serves the probes of one worker on ``host:port`` (port 0: any free port)."""

    def __init__(self, source: HealthSource, host: str = "0.0.0.0", port: int = 8080):
        self.source = source
        handler = _handler(source)
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise HealthServerError(_explain_bind_error(host, port, exc)) from exc
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{self.port}"

    def start(self) -> HealthServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, name="worker-health", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()


def _handler(source: HealthSource) -> type[BaseHTTPRequestHandler]:
    def probe(check: Callable[[], bool | tuple[bool, str]], name: str) -> tuple[int, bytes, str]:
        why = ""
        try:
            result = check()
            ok, why = result if isinstance(result, tuple) else (result, "")
        except Exception as exc:  # a probe never crashes the server
            log.warning("%s probe failed: %s", name, exc)
            ok, why = False, f"probe raised {type(exc).__name__}"
        if ok:
            return 200, b"ok\n", "text/plain"
        return 503, (f"not {name}: {why}\n" if why else f"not {name}\n").encode(), "text/plain"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            if path in ("/livez", "/healthz", "/live"):
                code, body, ctype = probe(source.is_live, "live")
            elif path in ("/readyz", "/ready"):
                code, body, ctype = probe(getattr(source, "readiness", source.is_ready), "ready")
            elif path == "/status":
                code, body, ctype = 200, json.dumps(source.status_dict(), indent=2).encode(), "application/json"
            elif path == "/metrics":
                rendered = source.metrics_text()
                if rendered is None:
                    code, body, ctype = 404, b"metrics need prometheus_client (the 'metrics' extra)\n", "text/plain"
                else:
                    body, ctype = rendered
                    code = 200
            else:
                code, body, ctype = 404, b"try /livez, /readyz, /status or /metrics\n", "text/plain"
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("health: " + format, *args)

    return Handler


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
    max_lag_seconds: float | None = None
    """The largest lag over the shards held (:mod:`kinesis.consumer.shard.lag`; None: none measured)."""
    processing_rate: float | None = None
    """Records per second handed to processors, over the shards held."""
    arrival_rate: float | None = None
    """Records per second entering the shards held."""
    catch_up_seconds: float | None = None
    """Until every shard held is caught up at the current trends (``inf``: one is not catching up)."""
    processors_hung: int = 0
    """Processor calls past ``processor_timeout`` (:mod:`kinesis.consumer.worker.watchdog`)."""
    cpu_utilisation: float | None = None
    """This process's CPU seconds per second over the CPUs it may use (its container's limit):
    1.0 is saturated (:mod:`kinesis.consumer.worker.cpu`; None until measured)."""
    load_share: float | None = None
    """Under a load plan (``balance="load"``), this member's load over its fair share (1.0:
    exactly its share; the plan keeps every member within ``load_tolerance``); None under counts."""
    hot_shards: Mapping[str, float] = field(default_factory=dict)
    """Lease keys this member holds that the load plan found hotter than a fair share, each
    with its load over a fair share: each has a member to itself; split the shard to spread it."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (an infinite catch-up time is the string ``"inf"``: JSON has no
        infinity)."""
        out = _finite(asdict(self))
        out["shards"] = [_finite(asdict(s)) for s in self.shards]
        return out


def _finite(values: dict[str, Any]) -> dict[str, Any]:
    return {k: "inf" if isinstance(v, float) and v == float("inf") else v for k, v in values.items()}


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
