"""Building a Worker's parts from its configuration, without AWS: clients, membership,
processor factories, and the fan-out consumers deregistered after a clean stop."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import NoRegionError

from hashring import StaticMembership
from kinesis import ConfigurationError, RecordProcessor, StreamConfig, Worker, WorkerConfig
from kinesis.consumer.retrieval.fanout import ConsumerRegistration, deregister_on_stop
from kinesis.consumer.worker.setup import (
    build_client,
    check_processor_factories,
    default_session,
    resolve_reads,
    worker_membership,
)
from kinesis.lease_loop.membership import DynamoDBMembership, SessionMembership
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.timing import FakeClock


class Session:
    """Records the clients asked for; raises NoRegionError without a region when ``regionless``."""

    def __init__(self, regionless: bool = False):
        self.regionless = regionless
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def client(self, service: str, **kwargs: Any) -> str:
        self.asked.append((service, kwargs))
        if self.regionless and "region_name" not in kwargs:
            raise NoRegionError()
        return f"{service}-client"


def test_a_client_gets_the_endpoint_the_region_and_a_pool_for_many_shards() -> None:
    session = Session()
    assert build_client(session, "kinesis", "http://localhost:4566", "eu-west-1") == "kinesis-client"
    [(service, kwargs)] = session.asked
    assert service == "kinesis" and kwargs["endpoint_url"] == "http://localhost:4566"
    assert kwargs["region_name"] == "eu-west-1" and kwargs["config"].max_pool_connections == 64
    build_client(session, "dynamodb", None, None)
    assert set(session.asked[1][1]) == {"config"}


def test_a_botocore_session_makes_clients_too() -> None:
    class BotocoreSession:
        def create_client(self, service: str, **kwargs: Any) -> str:
            return f"{service} from botocore in {kwargs['region_name']}"

    assert build_client(BotocoreSession(), "kinesis", None, "eu-west-1") == "kinesis from botocore in eu-west-1"
    assert type(default_session()).__module__ == "botocore.session"  # no boto3 import (~0.04 CPU s)


def test_a_client_without_a_region_is_a_configuration_error_that_says_how_to_give_one() -> None:
    with pytest.raises(ConfigurationError, match="no AWS region for the dynamodb client: pass region_name"):
        build_client(Session(regionless=True), "dynamodb", None, None)


CONFIG = WorkerConfig(table_name="orders-leases", streams=[StreamConfig("orders", "app", "TRIM_HORIZON")])


def test_the_default_membership_is_the_member_list_in_the_lease_table_and_a_given_one_is_checked() -> None:
    table = LeaseTable(None, "orders-leases")
    named = WorkerConfig(table_name="orders-leases", worker_id="w1",
                         streams=[StreamConfig("orders", "app", "TRIM_HORIZON")])
    default = worker_membership(named, table, None, FakeClock())
    assert isinstance(default, SessionMembership) and default.self_id == "w1" and default.table is table
    assert resolve_reads("auto", default) == "scoped"  # no scan
    scanning = WorkerConfig(table_name="orders-leases", worker_id="w1", reads="scan",
                            streams=[StreamConfig("orders", "app", "TRIM_HORIZON")])
    heartbeats = worker_membership(scanning, table, None, FakeClock())
    assert isinstance(heartbeats, DynamoDBMembership) and resolve_reads("scan", heartbeats) == "scan"
    given = StaticMembership(["w1", "w2"], "w1")
    assert worker_membership(named, table, given, FakeClock()) is given
    with pytest.raises(ConfigurationError, match="differs from the membership's self_id 'w2'"):
        worker_membership(named, table, StaticMembership(["w2"], "w2"), FakeClock())
    with pytest.raises(ConfigurationError, match=r"must implement hashring\.Membership, got list"):
        worker_membership(CONFIG, table, ["w1"], FakeClock())  # type: ignore[arg-type]


class Printer(RecordProcessor):
    def process_records(self, records: Any, checkpointer: Any, millis_behind_latest: Any = None) -> None:
        pass


def test_every_stream_needs_a_processor_factory_of_its_own_or_the_workers() -> None:
    check_processor_factories(CONFIG, Printer, "auto")
    with pytest.raises(ConfigurationError, match=r"no processor factory for stream\(s\) \['orders'\]"):
        check_processor_factories(CONFIG, None, "auto")
    with pytest.raises(ConfigurationError, match="processor_factory must be a callable"):
        check_processor_factories(CONFIG, "Printer", "auto")  # type: ignore[arg-type]
    own = WorkerConfig(table_name="orders-leases", streams=[StreamConfig("orders", "app", "TRIM_HORIZON",
                                                                         processor_factory=Printer)])
    check_processor_factories(own, None, "auto")


class Registration:
    def __init__(self, fails: bool = False):
        self.fails = fails
        self.deregistered = 0

    def deregister(self) -> None:
        self.deregistered += 1
        if self.fails:
            raise RuntimeError("AccessDenied")


def test_only_the_consumers_that_ask_for_it_are_deregistered_and_failures_are_returned_not_raised() -> None:
    kept = StreamConfig("kept", "app", "LATEST", retrieval="fanout")
    removed = StreamConfig("removed", "app", "LATEST", retrieval="fanout", deregister_consumer_on_stop=True)
    failing = StreamConfig("failing", "app", "LATEST", retrieval="fanout", deregister_consumer_on_stop=True)
    polling = StreamConfig("polling", "app", "LATEST")
    regs = {kept.key_prefix: Registration(), removed.key_prefix: Registration(),
            failing.key_prefix: Registration(fails=True)}
    registrations: dict[str, ConsumerRegistration] = regs  # type: ignore[assignment]
    failed = deregister_on_stop([kept, removed, failing, polling], registrations)
    assert [(spec.stream, str(exc)) for spec, exc in failed] == [("failing", "AccessDenied")]
    assert [r.deregistered for r in regs.values()] == [0, 1, 1]


def test_a_worker_builds_both_of_its_clients_from_one_default_session(monkeypatch: pytest.MonkeyPatch) -> None:
    sessions: list[Session] = []

    def default_session() -> Session:
        sessions.append(Session())
        return sessions[-1]

    monkeypatch.setattr("kinesis.consumer.worker.setup.default_session", default_session)
    worker = Worker(CONFIG, RecordProcessor, endpoint_url="http://localhost:4566", region_name="eu-west-1")
    [session] = sessions  # a second session would load botocore's endpoint data again (~0.1 CPU s)
    assert [service for service, _ in session.asked] == ["kinesis", "dynamodb"]
    assert (worker.kinesis_client, worker.dynamodb_client) == ("kinesis-client", "dynamodb-client")
