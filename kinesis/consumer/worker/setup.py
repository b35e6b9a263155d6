"""Building a Worker's parts from its configuration: clients, membership, shard discovery,
fan-out registrations, and the checks of its processor factories (no AWS call is made)."""

from __future__ import annotations

from typing import Any

from hashring import Membership
from kinesis.consumer.discovery.shards import ShardDiscovery
from kinesis.consumer.kclpy import check_factory, check_style
from kinesis.consumer.keyed.processor import KeyedProcessor
from kinesis.consumer.keyed.runner import check_keyed_class
from kinesis.consumer.retrieval.fanout import ConsumerRegistration
from kinesis.consumer.worker.config import ProcessorFactory, WorkerConfig, default_worker_id
from kinesis.errors import ConfigurationError
from kinesis.lease_loop.membership import DynamoDBMembership, SessionMembership
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.timing import Clock


def check_processor_factories(
    config: WorkerConfig, processor_factory: ProcessorFactory | None, processor_style: str
) -> None:
    """Every stream has a processor factory (its own or the worker's) of ``processor_style``."""
    if processor_factory is not None and not callable(processor_factory):
        raise ConfigurationError(
            f"processor_factory must be a callable returning a RecordProcessor (e.g. the class), "
            f"got {processor_factory!r}"
        )
    check_style(processor_style)
    if processor_factory is not None:
        _check(processor_factory, processor_style, "the processor factory")
    for s in config.streams:
        if s.processor_factory is not None:
            _check(s.processor_factory, processor_style, f"the processor factory of stream {s.stream!r}")
    missing = [s.stream for s in config.streams if s.processor_factory is None and processor_factory is None]
    if missing:
        raise ConfigurationError(
            f"no processor factory for stream(s) {missing}: pass Worker(config, processor_factory) "
            "or set StreamConfig.processor_factory"
        )


def _check(factory: ProcessorFactory, style: str, source: str) -> None:
    """A KeyedProcessor class has its limits checked; any other factory its style."""
    if isinstance(factory, type) and issubclass(factory, KeyedProcessor):
        check_keyed_class(factory)
    else:
        check_factory(factory, style, source=source)


def default_session() -> Any:
    """A new botocore session: the standard credential chain and region (``AWS_*`` environment,
    config files, instance metadata). Its clients are the ones boto3 makes (boto3's own
    additions are for S3 and resources); importing boto3 on top would cost ~0.04 CPU s."""
    import botocore.session

    return botocore.session.Session()


def build_client(session: Any, service: str, endpoint_url: str | None, region_name: str | None) -> Any:
    """A client for ``service`` from ``session``: a boto3 session, a botocore one, or (None) a
    new :func:`default_session`."""
    from botocore.config import Config
    from botocore.exceptions import NoRegionError

    if session is None:
        session = default_session()
    kwargs: dict[str, Any] = {"config": Config(max_pool_connections=64)}
    if endpoint_url is not None:
        kwargs["endpoint_url"] = endpoint_url
    if region_name is not None:
        kwargs["region_name"] = region_name
    make = session.client if hasattr(session, "client") else session.create_client  # boto3 / botocore
    try:
        return make(service, **kwargs)
    except NoRegionError as exc:
        raise ConfigurationError(
            f"no AWS region for the {service} client: pass region_name=..., a session with a "
            "region, ready-made clients, or set AWS_DEFAULT_REGION"
        ) from exc


def resolve_reads(reads: str, membership: Membership) -> str:
    """``reads`` ("auto": "scan" with a DynamoDBMembership, whose heartbeats the scans carry;
    "scoped" with any other, the default SessionMembership included)."""
    if reads != "auto":
        return reads
    return "scan" if isinstance(membership, DynamoDBMembership) else "scoped"


def worker_membership(
    config: WorkerConfig, table: LeaseTable, membership: Membership | None, clock: Clock
) -> Membership:
    """``membership`` checked against ``config``; by default a SessionMembership in ``table``
    (the member list as a document its members keep: no scan), or with ``reads="scan"`` a
    DynamoDBMembership (heartbeat rows the scans carry)."""
    if membership is None:
        member_id = config.worker_id or default_worker_id()
        if config.reads == "scan":
            return DynamoDBMembership(table, member_id, member_timeout=config.effective_member_timeout, clock=clock)
        return SessionMembership(table, member_id, clock=clock)
    if not isinstance(membership, Membership):
        raise ConfigurationError(
            f"membership must implement hashring.Membership, got {type(membership).__name__}"
        )
    if config.worker_id is not None and config.worker_id != membership.self_id:
        raise ConfigurationError(
            f"worker_id {config.worker_id!r} differs from the membership's self_id "
            f"{membership.self_id!r}: leave worker_id unset when passing a membership"
        )
    return membership


def shard_discoveries(config: WorkerConfig, kinesis_client: Any) -> dict[str, ShardDiscovery]:
    """One shard discovery per stream, by key prefix."""
    return {
        s.key_prefix: ShardDiscovery(
            kinesis_client,
            s.stream,
            cache_ttl=config.shard_sync_interval,
            max_attempts=config.kinesis_retry_attempts,
            retry_option="WorkerConfig.kinesis_retry_attempts",
        )
        for s in config.streams
    }


def fanout_registrations(config: WorkerConfig, kinesis_client: Any) -> dict[str, ConsumerRegistration]:
    """The Enhanced Fan-Out consumer registration of every fan-out stream, by key prefix."""
    return {
        s.key_prefix: ConsumerRegistration(
            kinesis_client, s.stream, s.effective_consumer_name, max_attempts=config.kinesis_retry_attempts
        )
        for s in config.streams
        if s.fanout
    }
