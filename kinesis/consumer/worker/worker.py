"""``Worker``: the Kinesis consumer process. Lease loop + shard discovery + one reader per shard.

::

    from kinesis import RecordProcessor, StreamConfig, Worker, WorkerConfig

    class Printer(RecordProcessor):
        def process_records(self, records, checkpointer, millis_behind_latest=None):
            for r in records:
                print(r.shard_id, r.sequence_number, r.data)
            checkpointer.checkpoint()

    config = WorkerConfig(
        table_name="orders-app-leases",
        streams=[StreamConfig("orders", application="orders-app", initial_position="TRIM_HORIZON")],
        lease_duration=10.0,
        health_port=8080,
    )
    Worker(config, Printer).run()       # blocks; SIGTERM hands every lease off, then returns

What it does:

* a :class:`~kinesis.lease_loop.coordinator.LeaseCoordinator` over the DynamoDB lease table runs the
  balanced, fenced lease loop (one lease per ``<application>/<stream>/<shardId>``, see
  :mod:`kinesis.consumer.worker.config`), with every stream of every application of this worker
  planned together: the fleet keeps ``max - min <= 1`` leases per member;
* :class:`~kinesis.consumer.discovery.sync.ShardSync` is its resource provider: shard discovery, lease rows
  with lineage, parents before children, new shards picked up while running;
* :class:`~kinesis.consumer.worker.pool.ConsumerPool` runs one reader thread per held shard and the
  processor lifecycle, with graceful hand-offs that lose and duplicate nothing;
* :meth:`run` turns SIGTERM/SIGINT into :meth:`stop` ``(graceful=True)``: leave the member
  list, hand every lease to its next owner, within ``shutdown_grace``;
* :meth:`status`, health endpoints (:mod:`kinesis.consumer.worker.health`) and Prometheus metrics
  (:mod:`kinesis.consumer.worker.metrics`, optional).

Clients: pass boto3 ``kinesis_client`` and ``dynamodb_client``, or a ``session`` (boto3's or
botocore's; by default one new botocore session for both) and optionally ``endpoint_url`` /
``region_name`` to build them. Membership: any :class:`hashring.Membership` (e.g.
:class:`~hashring.KubernetesMembership`); by default a
:class:`~kinesis.lease_loop.membership.SessionMembership`, the member list kept in the lease
table (``reads="scan"``: a :class:`~kinesis.lease_loop.membership.DynamoDBMembership`), with
``worker_id``.

Errors: configuration mistakes raise :class:`~kinesis.errors.ConfigurationError` when the
``WorkerConfig`` or the ``Worker`` is built (no AWS call is made then). :meth:`start` checks
the AWS side before taking any lease: the lease table is created or validated
(``LeaseTable*Error``) and every stream is listed once, so a missing stream raises
:class:`~kinesis.errors.StreamNotFoundError` naming the stream, region and endpoint.

Turn SIGTERM / SIGINT into a graceful stop request (Kubernetes sends SIGTERM on pod deletion).
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from hashring import Membership
from kinesis.consumer.discovery.manifest import shard_provider
from kinesis.consumer.retrieval.fanout import deregister_on_stop
from kinesis.consumer.shard.consumer import ShardConsumer
from kinesis.consumer.shard.lag import LagEstimate, worker_lag
from kinesis.consumer.worker import health as worker_health
from kinesis.consumer.worker import setup as worker_setup
from kinesis.consumer.worker.config import (
    ProcessorFactory,
    StreamConfig,
    WorkerConfig,
    lease_key,
    parse_lease_key,
)
from kinesis.consumer.worker.cpu import CpuUtilisation
from kinesis.consumer.worker.health import HealthServer, WorkerStatus
from kinesis.consumer.worker.metrics import build_registry, render
from kinesis.consumer.worker.pool import ConsumerPool
from kinesis.consumer.worker.watchdog import Watchdog
from kinesis.errors import ConfigurationError
from kinesis.lease_loop.coordinator import LeaseCoordinator
from kinesis.lease_loop.membership import DynamoDBMembership, SessionMembership
from kinesis.lease_loop.settings import LoadBalancing
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.timing import MONOTONIC, Clock
from kinesis.log_setup import setup_logging

__all__ = ["ProcessorFactory", "StreamConfig", "Worker", "WorkerConfig", "WorkerStatus", "lease_key", "parse_lease_key"]


DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_on_signals(
    request_stop: Callable[[], None], signals: tuple[signal.Signals, ...] = DEFAULT_SIGNALS
) -> Iterator[bool]:
    """Call ``request_stop`` on the given signals while inside the block; restore handlers after.

    Yields False (and installs nothing) outside the main thread, where Python cannot install
    signal handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous: dict[signal.Signals, Any] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        request_stop()

    for sig in signals:
        previous[sig] = signal.signal(sig, handler)
    try:
        yield True
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


log = logging.getLogger(__name__)


class Worker:
    """Consumes the configured streams as one member of a fleet. See the module docs."""

    def __init__(
        self,
        config: WorkerConfig,
        processor_factory: ProcessorFactory | None = None,
        *,
        kinesis_client: Any = None,
        dynamodb_client: Any = None,
        session: Any = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        membership: Membership | None = None,
        metrics_registry: Any = None,
        clock: Clock = MONOTONIC,
        processor_style: str = "auto",
    ):
        if not isinstance(config, WorkerConfig):
            raise ConfigurationError(f"config must be a WorkerConfig, got {type(config).__name__}")
        worker_setup.check_processor_factories(config, processor_factory, processor_style)
        self.config = config
        build = worker_setup.build_client
        if session is None and (kinesis_client is None or dynamodb_client is None):
            session = worker_setup.default_session()  # one for both: a second costs ~0.1 CPU s
        self.kinesis_client = kinesis_client or build(session, "kinesis", endpoint_url, region_name)
        self.dynamodb_client = dynamodb_client or build(session, "dynamodb", endpoint_url, region_name)
        self.clock = clock
        self.table = LeaseTable(
            self.dynamodb_client, config.table_name, create_if_missing=config.create_table, clock=clock
        )
        self.membership = membership = worker_setup.worker_membership(config, self.table, membership, clock)
        self.worker_id = membership.self_id
        self.discoveries = worker_setup.shard_discoveries(config, self.kinesis_client)
        self.reads = worker_setup.resolve_reads(config.reads, membership)
        """How the lease loop reads the table: ``config.reads`` resolved against the membership."""
        self.shard_sync = shard_provider(
            config, self.table, [(s, self.discoveries[s.key_prefix]) for s in config.streams], membership, clock,
            reads=self.reads,
        )
        self.registrations = worker_setup.fanout_registrations(config, self.kinesis_client)
        """Enhanced Fan-Out stream consumers (streams with ``retrieval="fanout"``), by key prefix."""
        self.pool = ConsumerPool(
            config, self.kinesis_client, processor_factory, on_shard_end=self._shard_ended,
            registrations=self.registrations, processor_style=processor_style,
        )
        self.coordinator = LeaseCoordinator(
            self.table,
            membership,
            self.shard_sync,
            self.pool,
            clock=clock,
            load_balancing=LoadBalancing(functools.partial(self.pool.loads, config.load_metric,
                                                           min(30.0, config.load_balance_interval / 2)),
                                         config.load_balance_interval, config.load_tolerance)
            if config.balance == "load" else None,
            **config.coordinator_kwargs(self.reads),
        )
        self.pool.coordinator = self.coordinator
        self._own_membership_thread = (
            isinstance(membership, DynamoDBMembership) and membership.table.table_name != config.table_name
        )
        self._metrics_registry_arg = metrics_registry
        self._registry: Any = None
        self._health: HealthServer | None = None
        self._state = "new"
        self._started_at: float | None = None
        self._stop_requested = threading.Event()
        self._stopped = threading.Event()
        self._stop_result = False
        self._cpu = CpuUtilisation()
        self.watchdog = Watchdog(config.processor_timeout, time.monotonic) if config.processor_timeout else None
        """Reports processor calls past ``processor_timeout`` (None: off)."""
        self._lock = threading.Lock()

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> Worker:
        """Check the lease table and streams, then join the fleet (non-blocking)."""
        with self._lock:
            if self._state != "new":
                raise ConfigurationError(f"a Worker starts once (it is {self._state}): build a new one")
            self._state = "starting"
        try:
            self.table.ensure_table()
            for discovery in self.discoveries.values():
                discovery.list_shards(force=True)  # StreamNotFoundError names the stream
            for registration in self.registrations.values():
                registration.ensure()  # register or reuse the fan-out consumer; wait until ACTIVE
            if self._own_membership_thread:
                assert isinstance(self.membership, DynamoDBMembership)
                self.membership.start()
            self._registry = build_registry(self, self._metrics_registry_arg)
            if self.config.health_port is not None:
                self._health = HealthServer(self, self.config.health_host, self.config.health_port).start()
            self._started_at = self.clock()
            self.coordinator.start()
            if self.watchdog is not None:
                threading.Thread(target=self._watch, name=f"watchdog-{self.worker_id}", daemon=True).start()
        except BaseException:
            with self._lock:
                self._state = "new"
            if self._health is not None:
                self._health.stop()
                self._health = None
            raise
        with self._lock:
            self._state = "running"
        log.info("%s", self.startup_line())
        return self

    def _watch(self) -> None:
        """The watchdog's thread: check the processor calls until the Worker stops, at least
        twice per ``processor_timeout`` and once per tick."""
        assert self.watchdog is not None
        interval = min(self.watchdog.timeout / 2, self.config.effective_tick_interval)
        while not self._stopped.wait(interval):
            try:
                watched = self._watched()
                self.watchdog.check(watched)
                self.watchdog.check_readers(watched)
            except Exception:  # a check that fails must not end the watch
                log.exception("worker %s: the processor watchdog's check failed", self.worker_id)

    def _watched(self) -> list[ShardConsumer]:
        """The shard consumers whose calls the watchdog times: the pool's, and the ones they
        replaced that have not finished (a lease taken again while its old consumer hangs)."""
        out = []
        for consumer in self.pool.consumers():
            current: ShardConsumer | None = consumer
            while current is not None and current not in out:
                out.append(current)
                previous = current.previous
                current = previous if previous is not None and not previous.stopped.is_set() else None
        return out

    def startup_line(self) -> str:
        """One line that says who this worker is and how it runs (logged at start)."""
        return worker_health.startup_line(self.worker_id, self.config, type(self.membership).__name__,
                                          self.health_url)

    def run(self, *, install_signal_handlers: bool = True, configure_logging: bool = True) -> bool:
        """Start (if needed), block until SIGTERM/SIGINT or :meth:`request_stop`, then stop gracefully.

        ``configure_logging``: call :func:`kinesis.setup_logging` (INFO with timestamps to
        stderr), which does nothing if the application already configured logging; pass False
        to leave logging alone. Returns what :meth:`stop` returns: True if every lease was
        handed off in time. Raises :class:`~kinesis.errors.DuplicateMemberIdError` if another
        process took this worker's member id over (this one stopped processing at once).
        """
        if configure_logging:
            setup_logging()
        if self._state == "new":
            self.start()
        if install_signal_handlers:
            with stop_on_signals(self.request_stop):
                self._wait_for_stop_request()
        else:
            self._wait_for_stop_request()
        refused = self.coordinator.refused
        stopped = self.stop(graceful=refused is None)
        if refused is not None:
            raise refused
        return stopped

    def _wait_for_stop_request(self) -> None:
        """Until a stop is requested, or the lease loop refuses to run (a duplicate member id)."""
        while not self._stop_requested.wait(0.5):
            if self.coordinator.refused is not None:
                return

    def request_stop(self) -> None:
        """Ask :meth:`run` to stop gracefully (safe from signal handlers and other threads)."""
        self._stop_requested.set()

    def stop(self, graceful: bool = True, timeout: float | None = None) -> bool:
        """Stop; return True if no lease was left behind.

        ``graceful=True``: leave the member list and hand every lease to its next owner, each
        processor finishing with ``shutdown_requested`` (checkpoint), waiting at most
        ``timeout`` seconds (default ``shutdown_grace``); processors still busy then hear
        ``lease_lost`` and their leases expire. ``graceful=False``: stop renewing at once
        (like a crash; the leases expire and are taken over from their checkpoints).
        """
        with self._lock:
            state = self._state
            if state in ("stopping", "stopped"):
                wait = True
            else:
                wait = False
                self._state = "stopping"
        self._stop_requested.set()
        if wait:
            self._stopped.wait()
            return self._stop_result
        if state == "new":
            with self._lock:
                self._state = "stopped"
            self._stopped.set()
            return True
        grace = self.config.shutdown_grace if timeout is None else timeout
        log.info("worker %s stopping (%s, grace %.1f s)", self.worker_id,
                 "graceful: handing every lease off" if graceful else "not graceful", grace)
        started = time.monotonic()
        if graceful:
            # Every processor finishes its batch and checkpoints while the coordinator
            # completes its current tick: its first stopping tick then hands off at once.
            self.pool.request_handoff_all()
        clean = self.coordinator.stop(graceful=graceful, timeout=grace)
        remaining = max(1.0, grace - (time.monotonic() - started))
        left = self.pool.halt_all(remaining)
        self.pool.close()
        if left:
            log.warning("worker %s: shard consumers still running at exit: %s", self.worker_id, left)
        if self._own_membership_thread:
            assert isinstance(self.membership, DynamoDBMembership)
            self.membership.stop()
        if self._health is not None:
            self._health.stop()
            self._health = None
        if clean and not left:  # a failure leaves the consumer registered; the stop is clean anyway
            for spec, exc in deregister_on_stop(self.config.streams, self.registrations):
                log.warning("worker %s: deregistering stream consumer %r of %s failed: %s",
                            self.worker_id, spec.effective_consumer_name, spec.stream, exc)
        self._stop_result = clean and not left
        with self._lock:
            self._state = "stopped"
        self._stopped.set()
        log.info("worker %s stopped (%s)", self.worker_id, "clean" if self._stop_result else "leases left to expire")
        return self._stop_result

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(graceful=True)

    # --- health and status ---------------------------------------------------------------

    @property
    def state(self) -> str:
        with self._lock:
            return self._state

    @property
    def health_url(self) -> str | None:
        """``http://host:port`` of the health server, if one runs."""
        return self._health.url if self._health is not None else None

    def is_live(self) -> bool:
        """The liveness probe: the lease loop ticked within ``liveness_timeout`` (and does not
        refuse to run under a member id another process uses)."""
        if self.state not in ("running", "stopping") or self.coordinator.refused is not None:
            return False
        if self.config.on_processor_timeout == "restart" and self.watchdog is not None and self.watchdog.hung:
            return False  # a processor call will not return: only a new process frees its shard
        return worker_health.is_live(self.coordinator.status().last_tick_at, self._started_at, self.clock(),
                                     self.config.effective_liveness_timeout)

    def is_ready(self) -> bool:
        """The readiness probe (see :meth:`readiness`)."""
        return self.readiness()[0]

    def readiness(self) -> tuple[bool, str]:
        """(ready, why): running and ticked once; the lease table and the member list read
        successfully within ``readiness_timeout``; with a membership kept in the lease table
        (the default SessionMembership, DynamoDBMembership), in the last plan.

        Being in the member list is not required with other memberships: on Kubernetes the
        list holds Ready pods only, so waiting for it would deadlock.
        """
        if self.state != "running":
            return False, f"worker is {self.state}"
        cs = self.coordinator.status()
        listed = isinstance(self.membership, DynamoDBMembership | SessionMembership)
        planned = worker_health.planned_members(self.coordinator.last_plan) if listed else None
        return worker_health.readiness(cs, self.clock(), self.config.effective_readiness_timeout,
                                       self.worker_id, planned)

    def status(self) -> WorkerStatus:
        """A consistent-enough snapshot (each part is read atomically)."""
        cs = self.coordinator.status()
        running = self.state in ("running", "stopping")
        members = worker_health.planned_members(self.coordinator.last_plan) if running else ()
        worker_counters, records = self.pool.totals()
        shards = tuple(self.pool.statuses())
        lag = worker_lag([LagEstimate(s.lag_seconds, None, s.processing_rate, s.arrival_rate, s.catch_up_seconds)
                          for s in shards if s.key in cs.held])
        return WorkerStatus(
            worker_id=self.worker_id,
            state=self.state,
            live=self.is_live(),
            ready=self.is_ready(),
            members=members,
            held=cs.held,
            pending_handoffs=dict(cs.pending_handoffs),
            shards=shards,
            lease_counters=dict(cs.counters),
            worker_counters=worker_counters,
            records_processed=records,
            ticks=cs.ticks,
            seconds_since_tick=worker_health.seconds_since(self.coordinator.status().last_tick_at, self.clock()),
            max_lag_seconds=lag.max_lag_seconds,
            processing_rate=lag.processing_rate,
            arrival_rate=lag.arrival_rate,
            catch_up_seconds=lag.catch_up_seconds,
            processors_hung=len(self.watchdog.hung) if self.watchdog is not None else 0,
            cpu_utilisation=self._cpu.read(),
            **self._load_status(cs.held),
        )

    def _load_status(self, held: tuple[str, ...]) -> dict[str, Any]:
        """``load_share`` and ``hot_shards`` of :meth:`status` (a load plan only)."""
        report = self.coordinator.load_report()
        me = self.worker_id
        if report is None or me not in report.fair_shares or report.fair_shares[me] <= 0:
            return {}
        share = report.member_loads[me] / report.fair_shares[me]
        return {"load_share": share,
                "hot_shards": {k: v for k, v in report.hot_shares.items() if k in held}}

    def status_dict(self) -> dict[str, Any]:
        """:meth:`status` as a JSON-friendly dict."""
        return self.status().to_dict()

    @property
    def metrics_registry(self) -> Any:
        """The prometheus_client registry with this worker's metrics (None without the extra)."""
        return self._registry

    def metrics_text(self) -> tuple[bytes, str] | None:
        """Prometheus text exposition (None without prometheus_client)."""
        if self._registry is None:
            return None
        return render(self._registry)

    def _shard_ended(self, spec: StreamConfig) -> None:
        self.shard_sync.invalidate(spec.stream)

    def __repr__(self) -> str:
        return f"Worker({self.worker_id!r}, table={self.config.table_name!r}, state={self.state})"
