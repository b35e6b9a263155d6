"""What a :class:`~kinesis.consumer.worker.worker.Worker` consumes and how: ``StreamConfig`` and ``WorkerConfig``.

Both validate everything when they are built, so a typo fails at start-up with a named
:class:`~kinesis.errors.ConfigurationError` (a ``ValueError``), never at the first tick.

Lease keys. One lease per (application, stream, shard), with the key::

    <application>/<stream>/<shardId>        e.g. "orders-app/orders/shardId-000000000007"

Application names may not contain ``/`` and may not start with ``__`` (reserved for the
membership rows of the lease table); Kinesis stream names never contain ``/``. The key is
also what the balanced planner hashes, so ``hashring explain --strategy balanced --consumer
<application>/<stream>`` shows exactly the placement a fleet of workers computes.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from hashring import HashRingError
from hashring.loads import check_tolerance
from kinesis.consumer.kclpy import KclpyRecordProcessor
from kinesis.consumer.keyed.processor import KeyedProcessor
from kinesis.consumer.retrieval.positions import InitialPosition
from kinesis.consumer.shard.failures import ProcessorRetryPolicy
from kinesis.consumer.shard.load import LOAD_METRICS
from kinesis.consumer.shard.processor import RecordProcessor
from kinesis.durations import check_seconds
from kinesis.errors import ConfigurationError
from kinesis.lease_loop.timing import DURATIONS, Durations, LeaseTiming

ProcessorFactory = Callable[[], RecordProcessor | KclpyRecordProcessor | KeyedProcessor]
"""Builds one fresh processor per shard lease (called on every acquisition): a
:class:`RecordProcessor`, an amazon-kclpy v3 processor (see
:mod:`kinesis.consumer.shard.processor`) or a
:class:`~kinesis.consumer.keyed.processor.KeyedProcessor`."""

_STREAM_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,128}")
_TABLE_NAME = re.compile(r"[a-zA-Z0-9_.-]{3,255}")
_MEMBER_ID = re.compile(r"[^\s/]{1,256}")


def lease_key(application: str, stream: str, shard_id: str) -> str:
    """The lease key of one shard: ``"<application>/<stream>/<shardId>"``."""
    return f"{application}/{stream}/{shard_id}"


def parse_lease_key(key: str) -> tuple[str, str, str]:
    """``(application, stream, shard_id)`` from a key made by :func:`lease_key`."""
    parts = key.split("/")
    if len(parts) != 3 or not all(parts):
        raise ConfigurationError(
            f"lease key {key!r} is not of the form '<application>/<stream>/<shardId>'"
        )
    return parts[0], parts[1], parts[2]


def _check_application(name: object) -> str:
    if not isinstance(name, str) or not name or len(name) > 256:
        raise ConfigurationError(f"application must be a non-empty string (<= 256 chars), got {name!r}")
    if "/" in name or name.startswith("__") or any(c.isspace() for c in name):
        raise ConfigurationError(
            f"application {name!r} may not contain '/' or whitespace nor start with '__' "
            "(it is the first part of the lease key '<application>/<stream>/<shardId>')"
        )
    return name


def _check_stream(name: object) -> str:
    if not isinstance(name, str) or not _STREAM_NAME.fullmatch(name):
        raise ConfigurationError(
            f"stream must be a Kinesis stream name (1-128 of a-z A-Z 0-9 _ . -), got {name!r}"
        )
    return name


def _initial_position(value: object) -> InitialPosition:
    if isinstance(value, InitialPosition):
        return value
    if isinstance(value, str):
        return InitialPosition.parse(value)
    raise ConfigurationError(
        f"initial_position must be an InitialPosition or 'LATEST', 'TRIM_HORIZON' or "
        f"'AT_TIMESTAMP:<ISO 8601>', got {value!r}"
    )


RETRIEVALS = ("polling", "fanout")
_CONSUMER_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,128}")


def _check_retrieval(spec: StreamConfig) -> None:
    if spec.retrieval not in RETRIEVALS:
        raise ConfigurationError(
            f"retrieval of stream {spec.stream!r} must be 'polling' (GetRecords) or 'fanout' "
            f"(Enhanced Fan-Out, SubscribeToShard), got {spec.retrieval!r}"
        )
    if not isinstance(spec.deregister_consumer_on_stop, bool):
        raise ConfigurationError(
            f"deregister_consumer_on_stop must be True or False, got {spec.deregister_consumer_on_stop!r}"
        )
    if not spec.fanout:
        if spec.consumer_name is not None or spec.deregister_consumer_on_stop:
            raise ConfigurationError(
                f"consumer_name and deregister_consumer_on_stop of stream {spec.stream!r} apply to "
                "Enhanced Fan-Out only: set retrieval='fanout' or leave them unset"
            )
        return
    name = spec.effective_consumer_name
    if not _CONSUMER_NAME.fullmatch(name):
        raise ConfigurationError(
            f"consumer_name of stream {spec.stream!r} must be a Kinesis consumer name (1-128 of "
            f"a-z A-Z 0-9 _ . -), got {name!r}"
            + ("" if spec.consumer_name else " (the application name; pass consumer_name=...)")
        )


@dataclass(frozen=True)
class StreamConfig:
    """One stream consumed by one application (consumer name).

    ``initial_position`` is where shards without a checkpoint start (KCL's default: LATEST);
    a string such as ``"TRIM_HORIZON"`` or ``"AT_TIMESTAMP:2024-05-01T12:00:00+00:00"`` is
    parsed. ``processor_factory`` overrides the worker's default factory for this stream.

    ``retrieval``: ``"polling"`` (default: GetRecords, shared 2 MB/s per shard) or ``"fanout"``
    (Enhanced Fan-Out: SubscribeToShard pushes records over a dedicated 2 MB/s per shard and
    consumer). With ``"fanout"`` the worker registers (or reuses) the stream consumer
    ``consumer_name`` (default: ``application``) at start and waits until it is ACTIVE;
    ``deregister_consumer_on_stop`` deregisters it after a clean stop (off by default: other
    members of the fleet still use it). See ``docs/enhanced-fan-out.md``.
    """

    stream: str
    application: str
    initial_position: InitialPosition | str = InitialPosition.LATEST
    processor_factory: ProcessorFactory | None = field(default=None, compare=False)
    retrieval: str = "polling"
    consumer_name: str | None = None
    deregister_consumer_on_stop: bool = False

    def __post_init__(self) -> None:
        _check_stream(self.stream)
        _check_application(self.application)
        object.__setattr__(self, "initial_position", _initial_position(self.initial_position))
        if self.processor_factory is not None and not callable(self.processor_factory):
            raise ConfigurationError(
                f"processor_factory of stream {self.stream!r} must be a callable returning a "
                f"RecordProcessor, got {self.processor_factory!r}"
            )
        _check_retrieval(self)

    @property
    def fanout(self) -> bool:
        """True when this stream is read with Enhanced Fan-Out (SubscribeToShard)."""
        return self.retrieval == "fanout"

    @property
    def effective_consumer_name(self) -> str:
        """The registered stream consumer's name: ``consumer_name``, else ``application``."""
        return self.consumer_name or self.application

    @property
    def start(self) -> InitialPosition:
        """The validated initial position."""
        assert isinstance(self.initial_position, InitialPosition)
        return self.initial_position

    @property
    def key_prefix(self) -> str:
        """``"<application>/<stream>/"``: every lease key of this stream starts with it."""
        return f"{self.application}/{self.stream}/"

    def lease_key(self, shard_id: str) -> str:
        """The lease key of ``shard_id`` in this stream."""
        return lease_key(self.application, self.stream, shard_id)


def default_worker_id() -> str:
    """``<hostname>-<pid>``: unique per process (on Kubernetes the hostname is the pod name)."""
    import os

    return f"{socket.gethostname()}-{os.getpid()}"


def _seconds(name: str, value: object, *, allow_none: bool = False, allow_zero: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    return check_seconds(name, value, allow_zero=allow_zero)


def _positive_int(name: str, value: object, *, lo: int = 1, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        bound = f"in {lo}..{hi}" if hi is not None else f">= {lo}"
        raise ConfigurationError(f"{name} must be an int {bound}, got {value!r}")
    return value


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a :class:`~kinesis.consumer.worker.worker.Worker` needs besides clients and processors.

    Lease timing (see :class:`~kinesis.lease_loop.coordinator.LeaseCoordinator`): ``lease_duration``
    (a lease not renewed for that long, on the observer's clock, is expired), ``tick_interval``
    (default ``lease_duration / 3``), ``scan_interval`` (light rounds between ticks that find
    hand-offs, newcomers and expiries sooner; default ``tick_interval / 3``, one scan request
    each), ``replicas`` backups per lease, ``backup_grace``,
    ``orphan_timeout``, ``handoff_timeout``, ``adopt_timeout``, ``max_concurrent_handoffs``;
    validated once into :attr:`timing` (a :class:`~kinesis.lease_loop.timing.LeaseTiming`), which
    the coordinator takes as it is.

    ``member_timeout`` only applies to the :class:`~kinesis.lease_loop.membership.DynamoDBMembership`
    the worker builds when none is given (default ``2 * lease_duration``: a crashed member's
    first backup takes over at lease expiry, before membership drops it).

    ``shutdown_grace``: how long a graceful stop (SIGTERM) waits for processors to finish and
    hand their leases off; keep it below the pod's ``terminationGracePeriodSeconds``.

    Reading: ``max_records`` per GetRecords (1..10000); Kinesis allows 5 GetRecords per second
    per shard, shared by every application reading it, so a shard is polled once per
    ``idle_backoff`` at its tip (records or not; AWS advises one poll a second per application)
    and at most once per ``min_read_interval`` while catching up (4 a second by default);
    ``kinesis_retry_attempts`` (attempts per Kinesis call on throttling, 5xx and connection
    errors, with jittered exponential backoff), ``shard_sync_interval``
    (how long a ListShards listing is cached; new shards are found within it).

    Reads: ``reads="scoped"`` reads only the rows that can change this member's decision (no
    scan in steady state, ``docs/fleet-scale.md``) and leaves shard discovery to one member per
    stream, which publishes a shard manifest that the others poll every
    ``manifest_poll_interval`` (default ``shard_sync_interval / 2``;
    :mod:`kinesis.consumer.discovery.manifest`); it needs a membership outside the lease table
    (the default :class:`~kinesis.lease_loop.membership.SessionMembership`, whose
    member list its members keep in the table without a scan, ``KubernetesMembership``,
    ``StaticMembership``). ``reads="scan"`` scans the lease table every round (with a
    ``DynamoDBMembership``, whose heartbeats are in the table: the Worker's default then).
    ``reads="auto"`` (default): scoped, unless the membership given is a
    ``DynamoDBMembership``. ``backup_check_interval`` (scoped only; default
    ``lease_duration / 2``): how often a member reads the session rows of the members it
    watches; shorter takes a crashed member that is still listed over sooner, for more reads.

    Balance: ``balance="count"`` (default) gives members equal numbers of leases;
    ``balance="load"`` (scoped reads) gives them equal shares of what the leases cost: each
    member measures every shard it holds (``load_metric``: ``"cpu"``, the CPU seconds per
    second of the shard's thread, reading and processing included; or ``"records"`` or
    ``"bytes"`` per second; smoothed over about a minute, :mod:`kinesis.consumer.shard.load`)
    and writes it on its session row every ``load_balance_interval / 2``; the owner of the plan
    chore reads them at most once per ``load_balance_interval`` (default 60 s) and, when a member
    is more than ``load_tolerance`` (default 0.2) above or below its fair share, publishes a
    plan balanced by load (:func:`hashring.balance_loads`: a shard hotter than a fair share gets
    a member to itself, the rest balance around it), moving leases by graceful hand-offs. Until
    every member reports loads (an older build, a member just started), counts balance.

    Processor failures: ``processor_retry`` (:class:`~kinesis.consumer.shard.failures.ProcessorRetryPolicy`):
    a batch the processor raised on is retried in place with exponential backoff; after
    ``max_attempts`` the shard is reported stuck and retried at ``max_backoff`` unless its
    ``on_exhausted`` handler skips (e.g. dead-letters) the batch. ``processor_timeout``
    (seconds; default None: off): a ``process_records`` call running longer is reported once
    with its thread's stack, counted, and shown in ``status()``
    (:mod:`kinesis.consumer.worker.watchdog`); ``on_processor_timeout``: ``"wait"`` (default:
    report and keep waiting) or ``"restart"`` (the liveness probe fails while a call is hung,
    so Kubernetes restarts the pod: Python cannot stop a thread). The same timeout bounds a
    shard whose reads stop advancing while it reads (no record and no read that finds it
    caught up: a stuck iterator, a lost fan-out subscription): reported once, counted
    (``reader_restarts``), and its reader restarted from the last record delivered.

    Data loss: a shard whose resume position (its checkpoint, or the last record delivered
    when an iterator expired) was trimmed by the retention period is logged as an ERROR
    naming the shard, the checkpoint and the oldest record still there, and counted;
    ``on_data_loss``: ``"continue"`` (default, as KCL: go on from the oldest record still
    there) or ``"stop_shard"`` (hold the lease and process nothing, the checkpoint left where
    it was, until the Worker stops: an operator restarts it with ``"continue"`` to go on).

    Keyed-parallel processors (:class:`~kinesis.consumer.keyed.processor.KeyedProcessor`): their
    ``async def process`` calls share one event loop thread, their plain ``process`` calls a pool
    of ``keyed_threads`` threads (default 32), and every shard's pending payload bytes together
    stay under ``keyed_max_pending_bytes`` (default 256 MiB; reading pauses at it). Per-shard
    limits are the processor class's.

    Health: ``health_port`` (None: no server; 0: any free port) on ``health_host``;
    ``liveness_timeout`` (default ``max(3 ticks, lease_duration)``): the liveness probe fails
    when the lease loop has not ticked for that long (it is stuck: a restart helps).
    ``readiness_timeout`` (default ``lease_duration``): the readiness probe fails when the
    lease table or the member list could not be read for that long (the member cannot do
    its work: it holds no valid lease, so others should), and recovers with the next read.
    """

    table_name: str
    streams: Sequence[StreamConfig]
    worker_id: str | None = None
    lease_duration: float = 10.0
    tick_interval: float | None = None
    scan_interval: float | None = None
    replicas: int = 1
    max_concurrent_handoffs: int = 2
    backup_grace: float | None = None
    orphan_timeout: float | None = None
    handoff_timeout: float | None = None
    adopt_timeout: float | None = None
    member_timeout: float | None = None
    shutdown_grace: float = 20.0
    max_records: int = 10000
    idle_backoff: float = 1.0
    min_read_interval: float = 0.25
    kinesis_retry_attempts: int = 8
    shard_sync_interval: float = 30.0
    create_table: bool = True
    health_port: int | None = None
    health_host: str = "0.0.0.0"
    liveness_timeout: float | None = None
    readiness_timeout: float | None = None
    processor_retry: ProcessorRetryPolicy = field(default_factory=ProcessorRetryPolicy)
    reads: Literal["auto", "scan", "scoped"] = "auto"
    manifest_poll_interval: float | None = None
    backup_check_interval: float | None = None
    processor_timeout: float | None = None
    on_processor_timeout: Literal["wait", "restart"] = "wait"
    on_data_loss: Literal["continue", "stop_shard"] = "continue"
    balance: Literal["count", "load"] = "count"
    load_metric: Literal["cpu", "records", "bytes"] = "cpu"
    load_balance_interval: float = 60.0
    load_tolerance: float = 0.2
    keyed_threads: int = 32
    keyed_max_pending_bytes: int = 256 * 1024 * 1024
    _timing: LeaseTiming = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.table_name, str) or not _TABLE_NAME.fullmatch(self.table_name):
            raise ConfigurationError(
                f"table_name must be a DynamoDB table name (3-255 of a-z A-Z 0-9 _ . -), got "
                f"{self.table_name!r}"
            )
        streams = self.streams
        if isinstance(streams, StreamConfig):
            streams = (streams,)
        if not isinstance(streams, Iterable) or isinstance(streams, str | bytes):
            raise ConfigurationError(f"streams must be a list of StreamConfig, got {streams!r}")
        streams = tuple(streams)
        if not streams:
            raise ConfigurationError("streams is empty: give at least one StreamConfig(stream, application)")
        for s in streams:
            if not isinstance(s, StreamConfig):
                raise ConfigurationError(f"streams must hold StreamConfig objects, got {s!r}")
        pairs = [(s.application, s.stream) for s in streams]
        dupes = sorted({p for p in pairs if pairs.count(p) > 1})
        if dupes:
            raise ConfigurationError(f"each (application, stream) may be listed once; repeated: {dupes}")
        object.__setattr__(self, "streams", streams)
        if self.worker_id is not None and (
            not isinstance(self.worker_id, str)
            or not _MEMBER_ID.fullmatch(self.worker_id)
            or self.worker_id.startswith("__")
        ):
            raise ConfigurationError(
                f"worker_id must be a non-empty string without whitespace or '/', not starting "
                f"with '__' (e.g. the pod name), got {self.worker_id!r}"
            )
        _positive_int("replicas", self.replicas, lo=0)
        durations = cast(Durations, {name: getattr(self, name) for name in DURATIONS})
        timing = LeaseTiming.of(self.lease_duration, replicas=self.replicas, **durations)
        object.__setattr__(self, "_timing", timing)
        for name in ("member_timeout", "liveness_timeout", "readiness_timeout"):
            _seconds(name, getattr(self, name), allow_none=True)
        _seconds("shutdown_grace", self.shutdown_grace)
        _seconds("shard_sync_interval", self.shard_sync_interval)
        _seconds("manifest_poll_interval", self.manifest_poll_interval, allow_none=True)
        _seconds("backup_check_interval", self.backup_check_interval, allow_none=True)
        _seconds("processor_timeout", self.processor_timeout, allow_none=True)
        if self.on_data_loss not in ("continue", "stop_shard"):
            raise ConfigurationError(f"on_data_loss must be 'continue' or 'stop_shard', got {self.on_data_loss!r}")
        if self.on_processor_timeout not in ("wait", "restart"):
            raise ConfigurationError(
                f"on_processor_timeout must be 'wait' or 'restart', got {self.on_processor_timeout!r}"
            )
        if self.on_processor_timeout == "restart" and self.processor_timeout is None:
            raise ConfigurationError(
                "on_processor_timeout='restart' needs processor_timeout (seconds a process_records call may "
                "run before the watchdog reports it), e.g. processor_timeout=300"
            )
        if self.reads not in ("auto", "scan", "scoped"):
            raise ConfigurationError(f"reads must be 'auto', 'scan' or 'scoped', got {self.reads!r}")
        if self.backup_check_interval is not None and self.reads == "scan":
            raise ConfigurationError(
                "backup_check_interval only applies to scoped reads (the scan loop reads every row "
                "every round): set reads='scoped' (or 'auto') or leave backup_check_interval unset"
            )
        if self.balance not in ("count", "load"):
            raise ConfigurationError(f"balance must be 'count' or 'load', got {self.balance!r}")
        if self.load_metric not in LOAD_METRICS:
            raise ConfigurationError(f"load_metric must be one of {LOAD_METRICS}, got {self.load_metric!r}")
        _seconds("load_balance_interval", self.load_balance_interval)
        try:
            check_tolerance(self.load_tolerance)
        except HashRingError as exc:
            raise ConfigurationError(f"load_{exc}") from None
        if self.balance == "load" and self.reads == "scan":
            raise ConfigurationError(
                "balance='load' needs scoped reads (the published plan carries the loads): set "
                "reads='scoped' or 'auto', or balance='count'")
        _seconds("idle_backoff", self.idle_backoff, allow_zero=True)
        _seconds("min_read_interval", self.min_read_interval, allow_zero=True)
        if not isinstance(self.processor_retry, ProcessorRetryPolicy):
            raise ConfigurationError(
                f"processor_retry must be a kinesis.ProcessorRetryPolicy, got {self.processor_retry!r}"
            )
        _positive_int("max_concurrent_handoffs", self.max_concurrent_handoffs)
        _positive_int("keyed_threads", self.keyed_threads, hi=4096)
        _positive_int("keyed_max_pending_bytes", self.keyed_max_pending_bytes, hi=1 << 40)
        _positive_int("max_records", self.max_records, hi=10000)
        _positive_int("kinesis_retry_attempts", self.kinesis_retry_attempts, hi=100)
        if self.health_port is not None:
            _positive_int("health_port", self.health_port, lo=0, hi=65535)
        if not isinstance(self.health_host, str) or not self.health_host:
            raise ConfigurationError(f"health_host must be a host name or address, got {self.health_host!r}")
        if self.member_timeout is not None and self.member_timeout < 2 * self.effective_tick_interval:
            raise ConfigurationError(
                f"member_timeout ({self.member_timeout:g} s) must be >= 2 ticks "
                f"({2 * self.effective_tick_interval:g} s): members heartbeat once per tick"
            )

    @property
    def timing(self) -> LeaseTiming:
        """Every lease-loop duration, validated, with defaults filled in."""
        return self._timing

    @property
    def effective_tick_interval(self) -> float:
        """``tick_interval``, or ``lease_duration / 3`` when unset."""
        return self._timing.tick_interval

    @property
    def effective_member_timeout(self) -> float:
        """``member_timeout``, or ``2 * lease_duration`` when unset."""
        return float(self.member_timeout) if self.member_timeout is not None else 2 * self.lease_duration

    @property
    def effective_readiness_timeout(self) -> float:
        """``readiness_timeout``, or ``lease_duration`` when unset."""
        return float(self.readiness_timeout) if self.readiness_timeout is not None else self.lease_duration

    @property
    def effective_liveness_timeout(self) -> float:
        """``liveness_timeout``, or ``max(3 ticks, lease_duration)`` when unset."""
        if self.liveness_timeout is not None:
            return float(self.liveness_timeout)
        return max(3 * self.effective_tick_interval, self.lease_duration)

    def stream_of(self, key: str) -> StreamConfig | None:
        """The stream config a lease key belongs to (None for a foreign key)."""
        for s in self.streams:
            if key.startswith(s.key_prefix) and "/" not in key[len(s.key_prefix) :]:
                return s
        return None

    def coordinator_kwargs(self, reads: str) -> dict[str, Any]:
        """The :class:`~kinesis.lease_loop.coordinator.LeaseCoordinator` keyword arguments, with
        ``reads`` resolved against the membership (:func:`~kinesis.consumer.worker.setup.resolve_reads`)."""
        if reads == "scan" and self.backup_check_interval is not None:
            raise ConfigurationError(
                "backup_check_interval only applies to scoped reads, and reads resolve to 'scan' "
                "here (reads='scan', or a DynamoDBMembership): use the default membership, a "
                "KubernetesMembership or a StaticMembership, or leave backup_check_interval unset"
            )
        if reads == "scan" and self.balance == "load":
            raise ConfigurationError(
                "balance='load' needs scoped reads, and reads resolve to 'scan' here (a "
                "DynamoDBMembership): use the default membership, a KubernetesMembership or a "
                "StaticMembership, or balance='count'")
        scoped = reads == "scoped" and self.backup_check_interval
        return {
            "timing": self._timing,
            "replicas": self.replicas,
            "max_concurrent_handoffs": self.max_concurrent_handoffs,
            "reads": reads,
            **({"backup_check_interval": self.backup_check_interval} if scoped else {}),
        }
