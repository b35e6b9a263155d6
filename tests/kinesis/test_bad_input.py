"""The bad-input catalogue: one test id per row of ``docs/bad-input.md``.

Each row names the input, asserts the behaviour (a named exception whose message says what
was wrong and how to fix it, or a logged and counted skip) and, where data is involved, that
nothing was lost: a corrupt lease row is never written, records around a malformed KPL
aggregate are still delivered, a batch the processor raised on is retried, not dropped.

Real parts only: boto3 over HTTP to the moto server (``aws``), the fault proxy and the
``before-send`` injector for AWS errors, the official kubernetes client against the fake API
server (``fake_k8s``). Keep ``docs/bad-input.md`` in step with the ids here.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from hashring import HashRing, KubernetesMembership, StaticMembership
from hashring.errors import (
    ConfigurationError as HashRingConfigurationError,
)
from hashring.errors import (
    InvalidReplicasError,
    KubernetesAPIError,
    KubernetesPermissionError,
    OwnPodNotFoundError,
)
from kinesis import (
    ConfigurationError,
    FailedBatch,
    InitializationInput,
    KinesisAccessDeniedError,
    LeaseTableAccessDeniedError,
    LeaseTableNotFoundError,
    LeaseTableSchemaError,
    ProcessorRetryPolicy,
    Record,
    StreamConfig,
    StreamNotActiveError,
    StreamNotFoundError,
    Worker,
    WorkerConfig,
)
from kinesis.consumer.retrieval.polling import read_range
from kinesis.consumer.retrieval.positions import InitialPosition
from kinesis.consumer.retrieval.records import MAGIC, aggregate
from kinesis.lease_loop.coordinator import LeaseCoordinator
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import TRIM_HORIZON, Lease, lease_to_item
from kinesis.testing import LocalAWS, client_for
from spark_integration.errors import InvalidOptionError
from spark_integration.options import parse_options
from tests.support.fake_k8s import FakeClock, FakeKubernetes
from tests.support.kinesis_faults import FaultInjector
from tests.support.waiting import eventually
from tests.support.worker_journal import Journal, JournalProcessor, put_records

TABLE = "bad-input-leases"
NS = "streaming"
SHARD0 = "shardId-000000000000"


def has_all(text: str, *phrases: str) -> None:
    missing = [p for p in phrases if p not in text]
    assert not missing, f"{missing} not in: {text}"


# --- configuration ---------------------------------------------------------------------------

_STREAMS = [StreamConfig("orders", "app")]


def _group(**opts: str) -> dict[str, str]:
    return {"streamName": "orders", "leaseTable": "leases", "applicationName": "app", **opts}


CONFIG_ROWS = [
    pytest.param(lambda: WorkerConfig(TABLE, _STREAMS, kinesis_retry_attempts=0), ConfigurationError,
                 ("kinesis_retry_attempts", "in 1..100", "got 0"), id="config-worker-retry-attempts-zero"),
    pytest.param(lambda: WorkerConfig(TABLE, _STREAMS, processor_retry={"max_attempts": 3}), ConfigurationError,
                 ("processor_retry must be a kinesis.ProcessorRetryPolicy",), id="config-worker-retry-policy-as-dict"),
    pytest.param(lambda: WorkerConfig(TABLE, _STREAMS, health_host=""), ConfigurationError,
                 ("health_host must be a host name or address",), id="config-worker-empty-health-host"),
    pytest.param(lambda: WorkerConfig(TABLE, "orders"), ConfigurationError,
                 ("streams must be a list of StreamConfig", "'orders'"), id="config-worker-streams-as-string"),
    pytest.param(lambda: StreamConfig("orders", "orders app"), ConfigurationError,
                 ("may not contain '/' or whitespace", "<application>/<stream>/<shardId>"),
                 id="config-stream-application-with-space"),
    pytest.param(lambda: LeaseCoordinator(LeaseTable(None, TABLE), StaticMembership(["a"], "a"), ["k"],
                                          write_threads=0), ConfigurationError,
                 ("write_threads must be an int >= 1",), id="config-coordinator-write-threads-zero"),
    pytest.param(lambda: LeaseCoordinator(LeaseTable(None, TABLE), StaticMembership(["a"], "a"), ["k"],
                                          reads="everything"), ConfigurationError,
                 ("reads must be 'scan' or 'scoped'",), id="config-coordinator-unknown-reads"),
    pytest.param(lambda: HashRing(StaticMembership(["a", "b"], "a"), replicas=True), InvalidReplicasError,
                 ("replicas must be an int", "backup owners"), id="config-hashring-replicas-bool"),
    pytest.param(lambda: KubernetesMembership("daemonset", namespace=NS, pod_name="p"),
                 HashRingConfigurationError, ("unknown mode 'daemonset'",), id="config-k8s-unknown-mode"),
    pytest.param(lambda: parse_options(_group(applicationName="orders/app"), streaming=True), InvalidOptionError,
                 ("'applicationName'", "may not contain '/'", "<application>/<stream>/<shardId>"),
                 id="config-spark-application-with-slash"),
]


@pytest.mark.parametrize(("build", "error", "phrases"), CONFIG_ROWS)
def test_configuration(build: Callable[[], object], error: type[Exception], phrases: tuple[str, ...]) -> None:
    with pytest.raises(error) as info:
        build()
    assert isinstance(info.value, ValueError), "every configuration error is also a ValueError"
    has_all(str(info.value), *phrases)


# --- helpers: a Worker against moto -------------------------------------------------------------


def build_worker(aws: LocalAWS, factory: Callable[[], Any], *, kinesis: Any = None, dynamodb: Any = None,
                 streams: list[StreamConfig] | None = None, **cfg: Any) -> Worker:
    settings: dict[str, Any] = {"lease_duration": 1.0, "idle_backoff": 0.05, "shard_sync_interval": 1.0,
                                "shutdown_grace": 5.0, "worker_id": "w1"}
    settings.update(cfg)
    config = WorkerConfig(TABLE, streams or [StreamConfig("orders", "app", "TRIM_HORIZON")], **settings)
    return Worker(config, factory, kinesis_client=kinesis or aws.client("kinesis"),
                  dynamodb_client=dynamodb or aws.client("dynamodb"))


@contextmanager
def running(worker: Worker) -> Iterator[Worker]:
    worker.start()
    try:
        yield worker
    finally:
        worker.stop(graceful=False, timeout=5)


def table_rows(aws: LocalAWS) -> list[dict[str, Any]]:
    return list(aws.client("dynamodb").scan(TableName=TABLE, ConsistentRead=True)["Items"])


def one_shard(aws: LocalAWS) -> Any:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    return kinesis


def data_of(journal: Journal) -> list[bytes]:
    return [e.data for e in journal.records()]


# --- lease table ----------------------------------------------------------------------------


def test_table_missing_with_creation_disabled(aws: LocalAWS) -> None:
    kinesis = one_shard(aws)
    calls = FaultInjector(kinesis)  # counts requests; injects nothing
    worker = build_worker(aws, lambda: JournalProcessor(Journal(), "w1"), kinesis=kinesis, create_table=False)
    with pytest.raises(LeaseTableNotFoundError) as info:
        worker.start()
    has_all(str(info.value), f"'{TABLE}' does not exist", "create_table=False", "hash key 'leaseKey'",
            "allow creation")
    assert worker.state == "new"
    assert TABLE not in aws.client("dynamodb").list_tables()["TableNames"], "nothing was created"
    assert sum(calls.requests.values()) == 0, "no stream is read before the table is there"


def test_table_with_wrong_key_schema(aws: LocalAWS) -> None:
    one_shard(aws)
    dynamodb = aws.client("dynamodb")
    dynamodb.create_table(TableName=TABLE, KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                          BillingMode="PAY_PER_REQUEST")
    dynamodb.put_item(TableName=TABLE, Item={"id": {"S": "someone-elses-row"}, "v": {"N": "1"}})
    before = table_rows(aws)
    worker = build_worker(aws, lambda: JournalProcessor(Journal(), "w1"))
    with pytest.raises(LeaseTableSchemaError) as info:
        worker.start()
    has_all(str(info.value), "'id'", "exactly one hash key 'leaseKey' of type S",
            "use another table name or recreate the table")
    assert table_rows(aws) == before, "the foreign table is left as it was"


def test_table_access_denied(aws: LocalAWS) -> None:
    from tests.support.fault_proxy import Fault, fault_proxy

    one_shard(aws)
    with fault_proxy(aws.endpoint_url) as proxy:
        proxy.queue("DescribeTable", Fault("error", "AccessDeniedException", 400))
        dynamodb = client_for("dynamodb", proxy.endpoint_url, aws.region)
        worker = build_worker(aws, lambda: JournalProcessor(Journal(), "w1"), dynamodb=dynamodb)
        with pytest.raises(LeaseTableAccessDeniedError) as info:
            worker.start()
        assert info.value.action == "dynamodb:DescribeTable"
        has_all(str(info.value), f"DescribeTable on lease table '{TABLE}'", "Grant dynamodb:DescribeTable",
                "docs/security.md")
        assert proxy.requests["DescribeTable"] == 1, "a denial is not retried"
        assert proxy.requests["CreateTable"] == 0, "a denial is not taken for a missing table"


# --- lease table: corrupt rows under a running worker ------------------------------------------

CORRUPT_KINDS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "counter-as-string": (lambda item: item.update(leaseCounter={"S": "three"}), "leaseCounter"),
    "negative-counter": (lambda item: item.update(leaseCounter={"N": "-4"}), "must be >= 0"),
    "missing-checkpoint": (lambda item: item.pop("checkpoint"), "missing attribute 'checkpoint'"),
    "owner-not-a-string": (lambda item: item.update(leaseOwner={"N": "7"}), "'leaseOwner' must be a string"),
    "sub-sequence-not-a-number": (lambda item: item.update(checkpointSubSequenceNumber={"S": "x"}),
                                  "checkpointSubSequenceNumber"),
    "state-disagrees-with-checkpoint": (lambda item: item.update(leaseState={"S": "SHARD_END"}), "disagrees"),
    "at-timestamp-without-timestamp": (lambda item: item.update(checkpoint={"S": "AT_TIMESTAMP"}),
                                       "bad checkpoint"),
}
HEALTHY = len(CORRUPT_KINDS)  # the last shard's row is healthy
GHOST = "__member__#ghost"


@dataclass
class CorruptRun:
    keys: dict[str, str]
    before: dict[str, dict[str, Any]]
    after: dict[str, dict[str, Any]]
    reported: dict[str, str]
    logged: list[str]
    processed_shards: set[str]
    healthy_records: list[bytes]
    written: dict[str, int]
    held: tuple[str, ...]
    members: tuple[str, ...]


def _explicit_hash_keys(kinesis: Any) -> dict[str, str]:
    shards = kinesis.list_shards(StreamName="orders")["Shards"]
    return {s["ShardId"]: s["HashKeyRange"]["StartingHashKey"] for s in shards}


@pytest.fixture(scope="module")
def corrupt_run(_moto_server: LocalAWS) -> CorruptRun:
    """One worker over 8 shards whose first 7 lease rows are corrupt (one kind each), plus a
    corrupt heartbeat row; the rows are compared before and after several lease rounds."""
    aws = _moto_server
    aws.reset()
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=HEALTHY + 1)
    table = LeaseTable.open(aws.client("dynamodb"), TABLE)
    dynamodb = table.client
    keys = {}
    for i, (kind, (corrupt, _)) in enumerate(CORRUPT_KINDS.items()):
        key = f"app/orders/shardId-{i:012d}"
        item = lease_to_item(Lease(key, None, 0, TRIM_HORIZON))
        corrupt(item)
        dynamodb.put_item(TableName=TABLE, Item=item)
        keys[kind] = key
    dynamodb.put_item(TableName=TABLE, Item={"leaseKey": {"S": GHOST}, "memberId": {"S": "someone-else"},
                                             "heartbeat": {"N": "1"}, "incarnation": {"S": "x"}})
    keys["heartbeat-row-member-id-mismatch"] = GHOST

    def raw(key: str) -> dict[str, Any]:
        return dict(dynamodb.get_item(TableName=TABLE, Key={"leaseKey": {"S": key}}, ConsistentRead=True)["Item"])

    before = {k: raw(k) for k in keys.values()}
    written: dict[str, int] = {}
    for shard, ehk in _explicit_hash_keys(kinesis).items():
        for n in range(3):
            kinesis.put_record(StreamName="orders", Data=f"{shard}-{n}".encode(), PartitionKey="pk",
                               ExplicitHashKey=ehk)
        written[shard] = 3
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = Collect(level=logging.ERROR)
    leases_log = logging.getLogger("kinesis.lease_loop.table")
    leases_log.addHandler(handler)
    journal = Journal()
    worker = build_worker(aws, lambda: JournalProcessor(journal, "w1"))
    healthy_shard = f"shardId-{HEALTHY:012d}"
    try:
        with running(worker):
            assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) >= 3, 30)
            ticks = worker.coordinator.status().ticks
            eventually(lambda: worker.coordinator.status().ticks >= ticks + 4, 20, "four more rounds")
            status = worker.status()
    finally:
        leases_log.removeHandler(handler)
    return CorruptRun(
        keys=keys,
        before=before,
        after={k: raw(k) for k in keys.values()},
        reported=worker.table.corrupt_rows,
        logged=messages,
        processed_shards={e.shard_id for e in journal.records()},
        healthy_records=[e.data for e in journal.records() if e.shard_id == healthy_shard],
        written=written,
        held=status.held,
        members=status.members,
    )


@pytest.mark.parametrize("kind", [*CORRUPT_KINDS, "heartbeat-row-member-id-mismatch"])
def test_corrupt_row_is_reported_skipped_and_never_written(corrupt_run: CorruptRun, kind: str) -> None:
    key = corrupt_run.keys[kind]
    phrase = CORRUPT_KINDS[kind][1] if kind in CORRUPT_KINDS else "does not match the key"
    assert phrase in corrupt_run.reported[key], corrupt_run.reported.get(key)
    ours = [m for m in corrupt_run.logged if f"lease row {key!r} is corrupt" in m]
    assert len(ours) == 1, f"logged once over many rounds, got {ours}"
    has_all(ours[0], "left untouched", "fix or delete the item in DynamoDB by hand", "(skipped)")
    assert corrupt_run.after[key] == corrupt_run.before[key], "the corrupt row was written to"
    # the rest of the stream is processed in full; the corrupt row's shard is not processed,
    # so no checkpoint can move past its records (they wait for the row to be fixed)
    assert corrupt_run.healthy_records == [f"shardId-{HEALTHY:012d}-{n}".encode() for n in range(3)]
    assert corrupt_run.held == (f"app/orders/shardId-{HEALTHY:012d}",)
    assert corrupt_run.members == ("w1",), "a corrupt heartbeat row never counts as a member"
    if kind in CORRUPT_KINDS:
        assert key.rsplit("/", 1)[1] not in corrupt_run.processed_shards


# --- streams ---------------------------------------------------------------------------------------


def test_stream_missing_among_several(aws: LocalAWS) -> None:
    one_shard(aws)
    streams = [StreamConfig("orders", "app"), StreamConfig("payments", "app")]
    worker = build_worker(aws, lambda: JournalProcessor(Journal(), "w1"), streams=streams)
    with pytest.raises(StreamNotFoundError) as info:
        worker.start()
    has_all(str(info.value), "'payments' not found", "region us-east-1", "Check the stream name",
            "create the stream")
    assert [r for r in table_rows(aws) if not r["leaseKey"]["S"].startswith("__")] == [], \
        "no lease row, not even for the stream that exists"


@pytest.mark.parametrize(
    ("code", "error", "phrases"),
    [
        pytest.param("ResourceInUseException", StreamNotActiveError,
                     ("'orders' is not ACTIVE", "being created, deleted or updated", "wait until"),
                     id="stream-being-deleted"),
        pytest.param("AccessDeniedException", KinesisAccessDeniedError,
                     ("ListShards on Kinesis stream 'orders'", "Grant kinesis:ListShards", "docs/security.md"),
                     id="stream-access-denied-listshards"),
    ],
)
def test_stream_refused_at_start(aws: LocalAWS, code: str, error: type[Exception],
                                 phrases: tuple[str, ...]) -> None:
    kinesis = one_shard(aws)
    faults = FaultInjector(kinesis)
    faults.fail("ListShards", code)
    worker = build_worker(aws, lambda: JournalProcessor(Journal(), "w1"), kinesis=kinesis)
    with pytest.raises(error) as info:
        worker.start()
    has_all(str(info.value), *phrases)
    assert faults.requests["ListShards"] == 1, "not retried: waiting does not fix it"
    assert worker.state == "new" and not worker.coordinator.status().held


@pytest.mark.parametrize("operation", ["GetRecords", "GetShardIterator"],
                         ids=["stream-access-denied-getrecords", "stream-access-denied-getsharditerator"])
def test_read_access_denied_while_running_keeps_the_lease_and_loses_nothing(
        aws: LocalAWS, operation: str, caplog: pytest.LogCaptureFixture) -> None:
    kinesis = one_shard(aws)
    put_records(kinesis, "orders", 10)
    faults = FaultInjector(kinesis)
    faults.fail(operation, "AccessDeniedException", times=3)
    journal = Journal()
    with caplog.at_level(logging.WARNING, logger="kinesis.consumer.shard.consumer"), \
            running(build_worker(aws, lambda: JournalProcessor(journal, "w1"), kinesis=kinesis)) as worker:
        assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) >= 10, 30)
        counters = worker.status().worker_counters
    assert faults.injected[operation] == 3
    assert counters["read_errors"] == 3 and counters["consumers_started"] == 1, "kept the lease"
    assert data_of(journal) == [f"r{i}".encode() for i in range(10)], "each record once, in order"
    denied = [r.getMessage() for r in caplog.records if "read failed" in r.getMessage()]
    assert len(denied) == 3
    has_all(denied[0], f"Grant kinesis:{operation}", "docs/security.md")


# --- Kubernetes ------------------------------------------------------------------------------------


def k8s_member(fake: FakeKubernetes, pod: str, mode: str = "deployment", **kw: Any) -> KubernetesMembership:
    args: dict[str, Any] = {"namespace": NS, "pod_name": pod, "api_client": fake.api_client(),
                            "clock": FakeClock(), "retry_backoff": 0.01, "retries": 2}
    args.update(kw)
    return KubernetesMembership(mode, **args)


def test_k8s_401_on_the_list(fake_k8s: FakeKubernetes) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=2)
    fake_k8s.fail(401, verb="list", resource="pods")
    with pytest.raises(KubernetesPermissionError) as info:
        k8s_member(fake_k8s, pods[0]).members()
    assert info.value.status == 401
    has_all(str(info.value), "401 Unauthorized", "token")
    assert fake_k8s.count("list", "pods") == 1, "401 is not retried"


def test_k8s_403_on_statefulset_scale(fake_k8s: FakeKubernetes) -> None:
    pods = fake_k8s.add_statefulset("ledger", replicas=2)
    fake_k8s.forbid("get", "statefulsets/scale")
    with pytest.raises(KubernetesPermissionError) as info:
        k8s_member(fake_k8s, pods[0], "statefulset").members()
    assert (info.value.status, info.value.verb, info.value.resource) == (403, "get", "statefulsets/scale")
    has_all(str(info.value), "403 Forbidden", "statefulsets/scale", "verbs: [\"get\"]")


def test_k8s_404_on_own_pod_in_statefulset_mode(fake_k8s: FakeKubernetes) -> None:
    fake_k8s.add_statefulset("ledger", replicas=2)
    with pytest.raises(OwnPodNotFoundError) as info:
        k8s_member(fake_k8s, "ledger-7", "statefulset").members()
    has_all(str(info.value), "'ledger-7'", f"'{NS}'", "POD_NAME")


def test_k8s_500_on_own_pod(fake_k8s: FakeKubernetes) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=2)
    fake_k8s.fail(500, verb="get", resource="pods")
    with pytest.raises(KubernetesAPIError) as info:
        k8s_member(fake_k8s, pods[0]).members()
    assert info.value.status == 500
    has_all(str(info.value), "after 2 attempts")
    assert fake_k8s.count("get", "pods") == 2, "a 500 is retried up to `retries`"


def test_k8s_timeouts_on_every_attempt(fake_k8s: FakeKubernetes) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=2)
    fake_k8s.fail(delay=0.3, verb="list")
    with pytest.raises(KubernetesAPIError) as info:
        k8s_member(fake_k8s, pods[0], request_timeout=0.05).members()
    has_all(str(info.value), "after 2 attempts")
    assert "timed out" in str(info.value).lower() or "timeout" in str(info.value).lower()


MALFORMED_PODS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "k8s-malformed-pod-conditions-a-string": (lambda p: p["status"].update(conditions="Ready"),
                                              "status.conditions is not a list of objects"),
    "k8s-malformed-pod-condition-null": (lambda p: p["status"].update(conditions=[None]),
                                         "status.conditions is not a list of objects"),
    "k8s-malformed-pod-status-a-list": (lambda p: p.update(status=["Ready"]), "status is a list"),
    "k8s-malformed-pod-empty-name": (lambda p: p["metadata"].update(name=""), "metadata.name is missing"),
}


@pytest.mark.parametrize("kind", list(MALFORMED_PODS))
def test_k8s_malformed_pod_is_skipped_logged_and_counted(fake_k8s: FakeKubernetes, kind: str,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=2)
    bad = copy.deepcopy(fake_k8s._get("pods", pods[1]))
    bad["metadata"]["name"] = "orders-5d8f7c9b6-broken"
    bad["metadata"]["uid"] = "broken-uid"
    breaks, problem = MALFORMED_PODS[kind]
    breaks(bad)
    fake_k8s.put_raw_pod(bad)
    clock = FakeClock()
    member = k8s_member(fake_k8s, pods[0], clock=clock)
    ring = HashRing(member)
    with caplog.at_level(logging.WARNING, logger="hashring.membership"):
        assert member.members() == tuple(sorted(pods)), "the well-formed pods are still the members"
        for _ in range(3):
            clock.advance(10)
            assert member.members() == tuple(sorted(pods))
    assert member.malformed_pods_skipped == 4, "counted on every list that carried it"
    warnings = [r.getMessage() for r in caplog.records if "malformed pod" in r.getMessage()]
    assert len(warnings) == 1, "logged once"
    has_all(warnings[0], problem, "skipped (not a member)", "fix whatever serves or rewrites it")
    owners = {ring.owners("orders", f"shard-{i}")[0] for i in range(20)}
    assert owners == set(pods), "every key has a well-formed owner"


# --- records -------------------------------------------------------------------------------------------


def read_all(kinesis: Any) -> list[Record]:
    return list(read_range(kinesis, "orders", SHARD0, InitialPosition.TRIM_HORIZON))


def test_record_with_empty_data(aws: LocalAWS) -> None:
    kinesis = one_shard(aws)
    for data in (b"before", b"", b"after"):
        kinesis.put_record(StreamName="orders", Data=data, PartitionKey="pk")
    records = read_all(kinesis)
    assert [r.data for r in records] == [b"before", b"", b"after"]
    assert not records[1].aggregated and records[1].sub_sequence_number == 0


def test_record_of_exactly_one_mib(aws: LocalAWS) -> None:
    kinesis = one_shard(aws)
    big = bytes(range(256)) * (1024 * 1024 // 256)
    big = big[: 1024 * 1024 - len("pk")]  # data + partition key = Kinesis' 1 MiB limit
    for data in (b"before", big, b"after"):
        kinesis.put_record(StreamName="orders", Data=data, PartitionKey="pk")
    records = read_all(kinesis)
    assert [len(r.data) for r in records] == [6, len(big), 5]
    assert hashlib.sha256(records[1].data).digest() == hashlib.sha256(big).digest()


def test_kpl_aggregate_with_an_empty_user_record(aws: LocalAWS) -> None:
    kinesis = one_shard(aws)
    [agg] = aggregate([("k1", b"x"), ("k2", b""), ("k1", b"y")])
    kinesis.put_record(StreamName="orders", Data=agg.data, PartitionKey=agg.partition_key)
    records = read_all(kinesis)
    assert [(r.data, r.partition_key, r.sub_sequence_number) for r in records] == [
        (b"x", "k1", 0), (b"", "k2", 1), (b"y", "k1", 2)]
    assert all(r.aggregated for r in records)


def _with_digest(body: bytes) -> bytes:
    return MAGIC + body + hashlib.md5(body, usedforsecurity=False).digest()


MALFORMED_AGGREGATES: dict[str, Callable[[bytes], bytes]] = {
    "kpl-md5-mismatch": lambda good: good[:-1] + bytes([good[-1] ^ 0xFF]),
    "kpl-index-out-of-range": lambda good: _with_digest(b"\x0a\x01k" + b"\x1a\x05\x08\x05\x1a\x01x"),
    "kpl-truncated-varint": lambda good: _with_digest(b"\x0a\x01k\x1a\x03\x08\xff\xff"),
}


@pytest.mark.parametrize("kind", list(MALFORMED_AGGREGATES))
def test_malformed_kpl_aggregate_is_passed_through_and_its_neighbours_delivered(
        aws: LocalAWS, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    kinesis = one_shard(aws)
    [good] = aggregate([("k", b"a0"), ("k", b"a1")])
    bad = MALFORMED_AGGREGATES[kind](good.data)
    seqs = [kinesis.put_record(StreamName="orders", Data=data, PartitionKey="pk")["SequenceNumber"]
            for data in (good.data, bad, good.data)]
    with caplog.at_level(logging.WARNING, logger="kinesis.consumer.retrieval.records"):
        records = read_all(kinesis)
    assert [(r.sequence_number, r.sub_sequence_number, r.data) for r in records] == [
        (seqs[0], 0, b"a0"), (seqs[0], 1, b"a1"), (seqs[1], 0, bad), (seqs[2], 0, b"a0"), (seqs[2], 1, b"a1")]
    assert not records[2].aggregated, "delivered unchanged as a plain record"
    [warning] = [r.getMessage() for r in caplog.records if f"record {seqs[1]} in shard" in r.getMessage()]
    has_all(warning, "passing it through as a plain record")


# --- processor code that raises ---------------------------------------------------------------------


FAST = {"initial_backoff": 0.01, "max_backoff": 0.02}


def flaky(journal: Journal, *, fail: str, times: int) -> Callable[[], JournalProcessor]:
    """A journal processor that raises in ``fail`` ("init" or "r3": a batch holding r3) ``times`` times."""
    left = [times]

    class Flaky(JournalProcessor):
        def initialize(self, init: InitializationInput) -> None:
            if fail == "init" and left[0] > 0:
                left[0] -= 1
                raise RuntimeError("initialize failed")
            super().initialize(init)

        def process_records(self, records: list[Record], checkpointer: Any,
                            millis_behind_latest: int | None = None) -> None:
            if fail == "r3" and left[0] > 0 and any(r.data == b"r3" for r in records):
                left[0] -= 1
                raise RuntimeError("poison record")
            super().process_records(records, checkpointer, millis_behind_latest)

    return lambda: Flaky(journal, "w1")


def _raise_in_handler(batch: FailedBatch) -> Any:
    raise RuntimeError("dead-letter queue unreachable")


@pytest.mark.parametrize(
    ("handler", "logged"),
    [
        pytest.param(_raise_in_handler, "on_exhausted raised RuntimeError: dead-letter queue unreachable",
                     id="processor-on-exhausted-raises"),
        pytest.param(lambda batch: "later", "return FailureAction.SKIP or FailureAction.RETRY",
                     id="processor-on-exhausted-returns-junk"),
    ],
)
def test_a_broken_on_exhausted_handler_retries_the_batch(
        aws: LocalAWS, handler: Callable[[FailedBatch], Any], logged: str,
        caplog: pytest.LogCaptureFixture) -> None:
    kinesis = one_shard(aws)
    put_records(kinesis, "orders", 6)
    journal = Journal()
    policy = ProcessorRetryPolicy(**FAST, max_attempts=2, on_exhausted=handler)
    with caplog.at_level(logging.WARNING, logger="kinesis.consumer.shard.consumer"), \
            running(build_worker(aws, flaky(journal, fail="r3", times=4), processor_retry=policy,
                                 max_records=3)) as worker:
        assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) >= 6, 30)
        counters = worker.status().worker_counters
    assert data_of(journal) == [f"r{i}".encode() for i in range(6)], "the poison batch was retried, not dropped"
    assert counters["processor_errors"] == 4 and counters["records_skipped"] == 0
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(logged in m and "the batch is retried" in m for m in errors), errors


def test_processor_initialize_raises(aws: LocalAWS, caplog: pytest.LogCaptureFixture) -> None:
    kinesis = one_shard(aws)
    put_records(kinesis, "orders", 5)
    journal = Journal()
    with caplog.at_level(logging.ERROR, logger="kinesis.consumer.shard.consumer"), \
            running(build_worker(aws, flaky(journal, fail="init", times=2))) as worker:
        assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) >= 5, 30)
        counters = worker.status().worker_counters
    assert data_of(journal) == [f"r{i}".encode() for i in range(5)], "nothing skipped or repeated"
    assert counters["processor_errors"] == 2 and counters["consumers_started"] == 3
    failed = [r for r in caplog.records if "shard consumer failed" in r.getMessage()]
    assert len(failed) == 2 and failed[0].exc_info is not None
    assert not failed[1].exc_info, "the same failure again: one line, no second traceback"
    assert "initialize failed" in str(failed[0].exc_info[1])


def test_processor_factory_returns_a_wrong_type(aws: LocalAWS, caplog: pytest.LogCaptureFixture) -> None:
    kinesis = one_shard(aws)
    put_records(kinesis, "orders", 5)
    journal = Journal()
    made = [0]

    def factory() -> Any:
        made[0] += 1
        return object() if made[0] == 1 else JournalProcessor(journal, "w1")

    with caplog.at_level(logging.ERROR, logger="kinesis.consumer.shard.consumer"), \
            running(build_worker(aws, factory)) as worker:
        assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) >= 5, 30)
        counters = worker.status().worker_counters
    assert data_of(journal) == [f"r{i}".encode() for i in range(5)]
    assert counters["processor_errors"] == 1
    [failed] = [r for r in caplog.records if "shard consumer failed" in r.getMessage()]
    assert failed.exc_info is not None
    has_all(str(failed.exc_info[1]), "returned object", "not a kinesis.RecordProcessor")
