"""Worker wiring: configuration, shard sync (lineage rows), the shard consumer lifecycle with a
fake lease holder, health endpoints and signals. Kinesis and DynamoDB are the moto server over
HTTP; only the lease coordinator is faked, in the consumer unit tests."""

from __future__ import annotations

import json
import os
import signal
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.config import Config

from hashring import StaticMembership
from hashring.sim.explain import explain
from kinesis import (
    ConfigurationError,
    FailedBatch,
    FailureAction,
    InitializationInput,
    LeaseLostError,
    Position,
    ProcessorRetryPolicy,
    RecordProcessor,
    StreamConfig,
    StreamNotFoundError,
    Worker,
    WorkerConfig,
    lease_key,
)
from kinesis.consumer.discovery.shards import ShardDiscovery
from kinesis.consumer.discovery.sync import ShardSync
from kinesis.consumer.retrieval.polling import ShardReader
from kinesis.consumer.retrieval.readers import make_reader
from kinesis.consumer.worker.config import parse_lease_key
from kinesis.consumer.worker.health import HealthServer
from kinesis.consumer.worker.pool import ConsumerPool
from kinesis.consumer.worker.worker import stop_on_signals
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import LATEST, SHARD_END, TRIM_HORIZON, Checkpoint, Lease
from kinesis.testing import LocalAWS
from tests.support.kinesis_faults import FaultInjector
from tests.support.waiting import eventually
from tests.support.worker_journal import Journal, JournalProcessor, put_records

NO_BOTO_RETRIES = Config(retries={"total_max_attempts": 1})


def stream_config(**kw: Any) -> StreamConfig:
    return StreamConfig(kw.pop("stream", "orders"), kw.pop("application", "app"), **kw)


# --- configuration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"table_name": "x"}, "table_name"),
        ({"streams": []}, "streams is empty"),
        ({"streams": [stream_config(), stream_config()]}, "listed once"),
        ({"streams": ["orders"]}, "StreamConfig"),
        ({"lease_duration": 0}, "lease_duration"),
        ({"lease_duration": float("nan")}, "lease_duration"),
        ({"lease_duration": 3, "tick_interval": 2}, "at most half"),
        ({"lease_duration": 9, "scan_interval": 4}, "scan_interval .* at most tick_interval"),
        ({"lease_duration": 9, "scan_interval": 0}, "scan_interval"),
        ({"replicas": -1}, "replicas"),
        ({"max_concurrent_handoffs": 0}, "max_concurrent_handoffs"),
        ({"max_records": 20000}, "max_records"),
        ({"idle_backoff": -1}, "idle_backoff"),
        ({"min_read_interval": -0.1}, "min_read_interval must be a finite number of seconds >= 0"),
        ({"min_read_interval": float("inf")}, "min_read_interval"),
        ({"shutdown_grace": 0}, "shutdown_grace"),
        ({"health_port": 70000}, "health_port"),
        ({"worker_id": "has space"}, "worker_id"),
        ({"worker_id": "__member"}, "worker_id"),
        ({"lease_duration": 9, "member_timeout": 1}, "member_timeout"),
    ],
)
def test_worker_config_errors_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"table_name": "leases", "streams": [stream_config()]}
    args.update(kwargs)
    with pytest.raises(ConfigurationError, match=message):
        WorkerConfig(**args)


def test_the_worker_reads_each_shard_with_the_pacing_of_its_config() -> None:
    config = WorkerConfig(table_name="leases", streams=[stream_config()], idle_backoff=0.4, min_read_interval=0.7)
    reader = make_reader(config.streams[0], "shardId-000000000000", TRIM_HORIZON, kinesis_client=object(),
                         config=config, registrations={}, stop_event=threading.Event())
    assert isinstance(reader, ShardReader)
    assert (reader.idle_backoff, reader.min_read_interval) == (0.4, 0.7)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stream": "bad/name"}, "Kinesis stream name"),
        ({"stream": ""}, "Kinesis stream name"),
        ({"application": "a/b"}, "may not contain '/'"),
        ({"application": "__x"}, "start with '__'"),
        ({"application": ""}, "non-empty"),
        ({"initial_position": "YESTERDAY"}, "cannot parse initial position"),
        ({"initial_position": "AT_TIMESTAMP:not-a-date"}, "ISO 8601"),
        ({"initial_position": 5}, "initial_position"),
        ({"processor_factory": "not callable"}, "processor_factory"),
    ],
)
def test_stream_config_errors_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        stream_config(**kwargs)


def test_initial_positions_are_parsed_at_build_time() -> None:
    assert stream_config(initial_position="trim_horizon").start.kind == "TRIM_HORIZON"
    at = stream_config(initial_position="AT_TIMESTAMP:2024-05-01T12:00:00").start
    assert at.kind == "AT_TIMESTAMP" and at.timestamp == datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert stream_config().start.kind == "LATEST"  # KCL's default


def test_lease_key_format_is_application_stream_shard_and_matches_hashring_explain() -> None:
    key = lease_key("orders-app", "orders", "shardId-000000000007")
    assert key == "orders-app/orders/shardId-000000000007"
    assert parse_lease_key(key) == ("orders-app", "orders", "shardId-000000000007")
    with pytest.raises(ConfigurationError, match="<application>/<stream>/<shardId>"):
        parse_lease_key("orders/shardId-1")
    # `hashring explain --strategy balanced --consumer orders-app/orders` plans these very keys
    shown = explain(["a", "b"], "orders-app/orders", ["shardId-000000000007"], strategy="balanced")
    assert shown.keys[0].hashed_key == key
    cfg = WorkerConfig("leases", [stream_config(application="orders-app")])
    assert cfg.stream_of(key) is cfg.streams[0]
    assert cfg.stream_of("other-app/orders/shardId-1") is None
    assert cfg.stream_of("orders-app/orders/x/y") is None


def test_worker_build_checks_factories_and_membership_without_calling_aws() -> None:
    dead = "http://127.0.0.1:9"  # nothing listens: any AWS call would fail
    cfg = WorkerConfig("leases", [stream_config()], worker_id="w1")
    clients = {"endpoint_url": dead, "region_name": "us-east-1"}
    w = Worker(cfg, lambda: JournalProcessor(Journal(), "w1"), **clients)
    assert w.worker_id == "w1" and w.state == "new"
    with pytest.raises(ConfigurationError, match="no processor factory"):
        Worker(cfg, **clients)
    with pytest.raises(ConfigurationError, match="processor_factory must be a callable"):
        Worker(cfg, processor_factory=42, **clients)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="differs from the membership"):
        Worker(cfg, JournalProcessor, membership=StaticMembership(["w2"], "w2"), **clients)
    with pytest.raises(ConfigurationError, match="WorkerConfig"):
        Worker({"table_name": "leases"}, JournalProcessor)  # type: ignore[arg-type]
    assert w.stop() is True  # never started: nothing to hand off


def test_start_names_a_missing_stream_and_takes_no_lease(aws: LocalAWS) -> None:
    journal = Journal()
    cfg = WorkerConfig("leases", [stream_config(stream="missing")], worker_id="w1")
    w = Worker(cfg, lambda: JournalProcessor(journal, "w1"),
               kinesis_client=aws.client("kinesis"), dynamodb_client=aws.client("dynamodb"))
    with pytest.raises(StreamNotFoundError, match="'missing'"):
        w.start()
    assert w.state == "new"
    assert LeaseTable(aws.client("dynamodb"), "leases").scan().leases == {}


# --- shard sync: lease rows with lineage ------------------------------------------------


def _split_and_merge(kinesis: Any, stream: str) -> None:
    """shard 0 -> children 2, 3; then merge 3 with shard 1 -> child 4."""
    shards = kinesis.list_shards(StreamName=stream)["Shards"]
    lo, hi = (int(x) for x in (shards[0]["HashKeyRange"]["StartingHashKey"], shards[0]["HashKeyRange"]["EndingHashKey"]))
    kinesis.split_shard(StreamName=stream, ShardToSplit="shardId-000000000000", NewStartingHashKey=str((lo + hi) // 2))
    kinesis.merge_shards(StreamName=stream, ShardToMerge="shardId-000000000003",
                         AdjacentShardToMerge="shardId-000000000001")


def _sync(table: LeaseTable, kinesis: Any, spec: StreamConfig) -> ShardSync:
    return ShardSync(table, [(spec, ShardDiscovery(kinesis, spec.stream, cache_ttl=0))])


def test_shard_sync_records_lineage_and_plans_parents_before_children(kinesis_resharding: LocalAWS) -> None:
    kinesis = kinesis_resharding.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=2)
    _split_and_merge(kinesis, "orders")
    table = LeaseTable.open(kinesis_resharding.client("dynamodb"), "leases")
    spec = stream_config(initial_position="TRIM_HORIZON")
    sync = _sync(table, kinesis, spec)
    assert sync(table.scan()) == []  # rows created now are planned from the next tick
    rows = table.scan().leases
    assert sorted(rows) == [spec.lease_key(f"shardId-00000000000{i}") for i in range(5)]
    assert rows[spec.lease_key("shardId-000000000002")].parents == (spec.lease_key("shardId-000000000000"),)
    assert set(rows[spec.lease_key("shardId-000000000004")].parents) == {
        spec.lease_key("shardId-000000000003"), spec.lease_key("shardId-000000000001")}
    assert all(lease.checkpoint == TRIM_HORIZON for lease in rows.values())
    key = spec.lease_key
    assert sync(table.scan()) == [key("shardId-000000000000"), key("shardId-000000000001")]
    # parent 0 finished: its children 2 and 3 become ready; 4 still waits for 3 (and 1)
    held = table.take(rows[key("shardId-000000000000")], "w1")
    assert held is not None
    table.mark_shard_end(held)
    assert sync(table.scan()) == [key("shardId-000000000001"), key("shardId-000000000002"), key("shardId-000000000003")]
    for sid in ("shardId-000000000001", "shardId-000000000003"):
        lease = table.take(table.get(key(sid)), "w1")  # type: ignore[arg-type]
        assert lease is not None
        table.mark_shard_end(lease)
    assert sync(table.scan()) == [key("shardId-000000000002"), key("shardId-000000000004")]


def test_shard_sync_latest_skips_closed_history_but_reads_new_children_from_the_start(
    kinesis_resharding: LocalAWS,
) -> None:
    kinesis = kinesis_resharding.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=2)
    kinesis.split_shard(StreamName="orders", ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**126))
    table = LeaseTable.open(kinesis_resharding.client("dynamodb"), "leases")
    spec = stream_config(initial_position="LATEST")
    sync = _sync(table, kinesis, spec)
    sync(table.scan())
    rows = table.scan().leases
    assert rows[spec.lease_key("shardId-000000000000")].checkpoint == SHARD_END  # closed: skipped
    assert rows[spec.lease_key("shardId-000000000002")].checkpoint == LATEST
    assert spec.lease_key("shardId-000000000002") in sync(table.scan())  # parent done -> ready
    # a split while the application runs: the children must not skip a record -> TRIM_HORIZON
    kinesis.split_shard(StreamName="orders", ShardToSplit="shardId-000000000001", NewStartingHashKey=str(2**127 + 2**125))
    sync(table.scan())
    rows = table.scan().leases
    assert rows[spec.lease_key("shardId-000000000004")].checkpoint == TRIM_HORIZON
    assert rows[spec.lease_key("shardId-000000000004")].parents == (spec.lease_key("shardId-000000000001"),)


def test_shard_sync_keeps_the_last_listing_when_list_shards_fails(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis", config=NO_BOTO_RETRIES)
    kinesis.create_stream(StreamName="orders", ShardCount=2)
    table = LeaseTable.open(aws.client("dynamodb"), "leases")
    spec = stream_config(initial_position="TRIM_HORIZON")
    sync = ShardSync(table, [(spec, ShardDiscovery(kinesis, "orders", cache_ttl=0, max_attempts=1))])
    sync(table.scan())
    before = sync(table.scan())
    assert len(before) == 2
    faults = FaultInjector(kinesis)
    faults.fail("ListShards", "InternalFailure", status=500, times=3)
    assert sync(table.scan()) == before  # not [] : the fleet must not drop its leases
    assert sync.listing_errors == 1 and faults.injected["ListShards"] == 1


# --- the shard consumer, with a fake lease holder ---------------------------------------


class FakeHolder:
    """Stands in for the LeaseCoordinator: records checkpoints and releases."""

    def __init__(self) -> None:
        self.held = True
        self.lost = False
        self.checkpoints: list[Checkpoint] = []
        self.prepared: list[Checkpoint] = []
        self.released: list[str] = []
        self.lock = threading.Lock()

    def holds(self, key: str) -> bool:
        return self.held and not self.lost

    def lease(self, key: str) -> Lease | None:
        return None if self.lost else Lease(key, "w1", 1)

    def checkpoint(self, key: str, checkpoint: Any) -> Lease:
        with self.lock:
            if self.lost:
                raise LeaseLostError(f"lost {key}")
            cp = Checkpoint.of(checkpoint)
            self.checkpoints.append(cp)
            return Lease(key, "w1", len(self.checkpoints), cp)

    def prepare_checkpoint(self, key: str, checkpoint: Any) -> Lease:
        with self.lock:
            if self.lost:
                raise LeaseLostError(f"lost {key}")
            self.prepared.append(Checkpoint.of(checkpoint))
            return Lease(key, "w1", len(self.checkpoints), pending_checkpoint=self.prepared[-1])

    def release(self, key: str) -> bool:
        self.released.append(key)
        return True


class Probe(JournalProcessor):
    """A journal processor that can fail, and notes whether the hand-off looked complete."""

    fail_on: bytes | None = None
    per_record = False
    completion_set_during_shutdown: bool | None = None
    completion: threading.Event | None = None
    late_checkpoint_error: Exception | None = None

    def process_records(self, records: Any, checkpointer: Any, millis_behind_latest: int | None = None) -> None:
        self._checkpointer = checkpointer
        if Probe.per_record:  # process and checkpoint record by record
            for r in records:
                if r.data == Probe.fail_on:
                    raise RuntimeError("poison record")
                self._add("record", seq=r.sequence_number, sub=r.sub_sequence_number, data=r.data)
                checkpointer.checkpoint(r)
            return
        if any(r.data == Probe.fail_on for r in records):
            raise RuntimeError("poison record")
        super().process_records(records, checkpointer, millis_behind_latest)

    def shutdown_requested(self, checkpointer: Any) -> None:
        Probe.completion_set_during_shutdown = Probe.completion is not None and Probe.completion.is_set()
        super().shutdown_requested(checkpointer)

    def lease_lost(self) -> None:
        try:
            self._checkpointer.checkpoint()
        except Exception as exc:
            Probe.late_checkpoint_error = exc
        super().lease_lost()


@pytest.fixture
def one_shard(aws: LocalAWS) -> Any:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    Probe.fail_on = None
    Probe.per_record = False
    Probe.completion = None
    Probe.completion_set_during_shutdown = None
    Probe.late_checkpoint_error = None
    return kinesis


_POOLS: list[ConsumerPool] = []


@pytest.fixture(autouse=True)
def _halt_pools() -> Iterator[None]:
    """Stop the consumers a test's pool started: they would otherwise keep reading (and
    logging) after the test, e.g. retrying a stream the next test's fixture deleted."""
    yield
    while _POOLS:
        _POOLS.pop().halt_all(5.0)


def _pool(kinesis: Any, journal: Journal, holder: FakeHolder, **cfg: Any) -> tuple[ConsumerPool, list[StreamConfig]]:
    ended: list[StreamConfig] = []
    config = WorkerConfig("leases", [stream_config()], lease_duration=1.5, idle_backoff=0.05, **cfg)
    pool = ConsumerPool(config, kinesis, lambda: Probe(journal, "w1"), on_shard_end=ended.append)
    pool.coordinator = holder
    _POOLS.append(pool)
    return pool, ended


KEY = "app/orders/shardId-000000000000"


def test_handoff_finishes_the_batch_checkpoints_then_completes(one_shard: Any) -> None:
    journal, holder = Journal(), FakeHolder()
    pool, _ = _pool(one_shard, journal, holder)
    written = put_records(one_shard, "orders", 30)
    pool.on_lease_acquired(Lease(KEY, "w1", 1, TRIM_HORIZON))
    assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) == 30, 20)
    completion = pool.on_handoff_requested(Lease(KEY, "w1", 2, TRIM_HORIZON))
    assert completion is not None
    Probe.completion = completion
    assert completion.wait(10)
    kinds = [e.kind for e in journal.snapshot()]
    assert kinds[0] == "init" and kinds[-1] == "shutdown" and kinds.count("record") == 30
    assert Probe.completion_set_during_shutdown is False  # completed only after shutdown_requested
    assert holder.checkpoints[-1] == Checkpoint(written[-1][1])  # the next owner starts after it
    assert holder.released == []  # the coordinator passes the lease on, not the consumer
    assert pool.on_handoff_requested(Lease(KEY, "w1", 3, TRIM_HORIZON)) is None  # already stopped


def test_lost_lease_stops_the_processor_and_refuses_checkpoints(one_shard: Any) -> None:
    journal, holder = Journal(), FakeHolder()
    pool, _ = _pool(one_shard, journal, holder)
    put_records(one_shard, "orders", 5)
    pool.on_lease_acquired(Lease(KEY, "w1", 1, TRIM_HORIZON))
    assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) == 5, 20)
    pool.on_lease_lost(Lease(KEY, "w1", 1, TRIM_HORIZON))
    assert journal.wait_for(lambda es: es[-1].kind == "lost", 10)
    assert isinstance(Probe.late_checkpoint_error, LeaseLostError)
    assert holder.released == []  # never touch a lease that is someone else's now


class LapsingHolder(FakeHolder):
    """A holder whose lease lapses (``holds`` turns False) while a GetRecords that returns
    records is in flight: what a member paused (SIGSTOP, a long GC or VM stall) in the middle
    of a read sees when it resumes. Counts the ``holds`` checks made after the lapse."""

    def __init__(self, kinesis: Any) -> None:
        super().__init__()
        self.lapsed = threading.Event()
        self.checks_after_lapse = 0
        kinesis.meta.events.register("after-call.kinesis.GetRecords", self._after_read)

    def _after_read(self, parsed: Any, **_: Any) -> None:
        if parsed.get("Records") and not self.lapsed.is_set():
            self.held = False
            self.lapsed.set()

    def holds(self, key: str) -> bool:
        if self.lapsed.is_set():
            with self.lock:
                self.checks_after_lapse += 1
        return super().holds(key)


def test_a_batch_read_while_the_lease_lapsed_is_not_delivered_and_the_next_owner_reads_it(
    one_shard: Any,
) -> None:
    # Found by the chaos suite (tests/chaos): a member SIGSTOPped during GetRecords resumed,
    # got its batch and processed it although another member had taken the shard meanwhile.
    journal, holder = Journal(), LapsingHolder(one_shard)
    pool, _ = _pool(one_shard, journal, holder)
    put_records(one_shard, "orders", 5)
    pool.on_lease_acquired(Lease(KEY, "w1", 1, TRIM_HORIZON))
    assert holder.lapsed.wait(20)
    eventually(lambda: holder.checks_after_lapse >= 3, 20, "the consumer to check the lease again")
    assert journal.records() == []  # not delivered while the lease is not valid
    holder.lost = True
    pool.on_lease_lost(Lease(KEY, "w1", 1, TRIM_HORIZON))
    assert journal.wait_for(lambda es: es[-1].kind == "lost", 10)
    assert journal.records() == [] and holder.checkpoints == []  # the next owner reads them


def test_a_batch_read_while_renewals_were_late_is_delivered_once_renewed(one_shard: Any) -> None:
    journal, holder = Journal(), LapsingHolder(one_shard)
    pool, _ = _pool(one_shard, journal, holder)
    written = put_records(one_shard, "orders", 5)
    pool.on_lease_acquired(Lease(KEY, "w1", 1, TRIM_HORIZON))
    assert holder.lapsed.wait(20)
    eventually(lambda: holder.checks_after_lapse >= 3, 20, "the consumer to check the lease again")
    assert journal.records() == []
    holder.held = True  # renewed: the batch is delivered, nothing skipped
    assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) == 5, 20)
    assert [e.seq for e in journal.records()] == [seq for _, seq in written]
    assert holder.checkpoints[-1] == Checkpoint(written[-1][1])
    pool.halt_all(10)


FAST_RETRY = {"initial_backoff": 0.01, "max_backoff": 0.04}


def test_a_poison_record_is_retried_in_place_with_backoff_keeping_the_lease(one_shard: Any) -> None:
    journal, holder = Journal(), FakeHolder()
    policy = ProcessorRetryPolicy(**FAST_RETRY, max_attempts=1000)
    pool, _ = _pool(one_shard, journal, holder, max_records=5, processor_retry=policy)
    put_records(one_shard, "orders", 10)
    Probe.fail_on = b"r7"
    pool.on_lease_acquired(Lease(KEY, "w1", 1, TRIM_HORIZON))
    eventually(lambda: pool.counters["processor_errors"] >= 3, 20)
    [status] = pool.statuses()
    assert status.state == "retrying" and status.failed_attempts >= 3
    assert status.last_error == "RuntimeError: poison record"
    Probe.fail_on = None  # the cause went away (e.g. a downstream service came back)
    assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) == 10, 20)
    eventually(lambda: pool.statuses()[0].state == "processing", 10)
    assert pool.statuses()[0].failed_attempts == 0
    # the lease was kept (no restart), and every record was processed exactly once
    assert holder.released == [] and pool.counters["consumers_started"] == 1
    assert [e.data for e in journal.records()] == [f"r{i}".encode() for i in range(10)]
    pool.halt_all(10)


def test_after_max_attempts_a_shard_is_stuck_logged_once_and_still_retried(
    one_shard: Any, caplog: pytest.LogCaptureFixture
) -> None:
    journal, holder = Journal(), FakeHolder()
    pool, _ = _pool(one_shard, journal, holder, max_records=5,
                    processor_retry=ProcessorRetryPolicy(**FAST_RETRY, max_attempts=3))
    put_records(one_shard, "orders", 10)
    Probe.fail_on = b"r7"
    with caplog.at_level("WARNING", logger="kinesis.consumer.shard.consumer"):
        pool.on_lease_acquired(Lease(KEY, "w1", 1, TRIM_HORIZON))
        eventually(lambda: pool.counters["processor_errors"] >= 6, 20)  # retried past the limit
    status = pool.statuses()[0]
    assert status.state == "stuck" and status.failed_attempts >= 6
    assert holder.released == [] and pool.counters["records_skipped"] == 0  # nothing skipped
    assert [e.data for e in journal.records()] == [f"r{i}".encode() for i in range(5)]
    ours = [r for r in caplog.records if r.name == "kinesis.consumer.shard.consumer"]
    assert sum("STUCK" in r.getMessage() for r in ours) == 1
    assert sum(r.exc_info is not None for r in ours) == 1  # one traceback, then one-liners
    pool.halt_all(10)


def test_on_exhausted_can_dead_letter_a_batch_and_the_shard_moves_on(one_shard: Any) -> None:
    journal, holder = Journal(), FakeHolder()
    dead_letters: list[FailedBatch] = []

    def dead_letter(batch: FailedBatch) -> FailureAction:
        dead_letters.append(batch)
        return FailureAction.SKIP

    policy = ProcessorRetryPolicy(**FAST_RETRY, max_attempts=2, on_exhausted=dead_letter)
    pool, _ = _pool(one_shard, journal, holder, max_records=5, processor_retry=policy)
    put_records(one_shard, "orders", 10)
    Probe.fail_on = b"r7"
    pool.on_lease_acquired(Lease(KEY, "w1", 1, TRIM_HORIZON))
    eventually(lambda: dead_letters, 20)
    later = put_records(one_shard, "orders", 3, prefix="s")
    assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) == 8, 20)
    [batch] = dead_letters
    assert [r.data for r in batch.records] == [f"r{i}".encode() for i in range(5, 10)]
    assert batch.attempts == 2 and isinstance(batch.error, RuntimeError)
    assert [e.data for e in journal.records()] == [f"r{i}".encode() for i in range(5)] + [b"s0", b"s1", b"s2"]
    assert pool.counters["records_skipped"] == 5 and holder.released == []
    assert holder.checkpoints[-1] == Checkpoint(later[-1][1])  # the checkpoint moved past them
    pool.halt_all(10)


def test_a_retry_does_not_deliver_records_the_processor_already_checkpointed(one_shard: Any) -> None:
    journal, holder = Journal(), FakeHolder()
    pool, _ = _pool(one_shard, journal, holder, max_records=10,
                    processor_retry=ProcessorRetryPolicy(**FAST_RETRY, max_attempts=1000))
    put_records(one_shard, "orders", 10)
    Probe.fail_on, Probe.per_record = b"r7", True
    pool.on_lease_acquired(Lease(KEY, "w1", 1, TRIM_HORIZON))
    eventually(lambda: pool.counters["processor_errors"] >= 2, 20)
    Probe.fail_on = None
    assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) == 10, 20)
    # r0..r6 were checkpointed one by one before r7 raised: the retries start at r7
    assert [e.data for e in journal.records()] == [f"r{i}".encode() for i in range(10)]
    pool.halt_all(10)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial_backoff": 0}, "initial_backoff must be seconds > 0"),
        ({"initial_backoff": 5, "max_backoff": 1}, "max_backoff .* must be >= initial_backoff"),
        ({"max_attempts": 0}, "max_attempts must be an int >= 1"),
        ({"on_exhausted": "skip"}, "on_exhausted must be a callable"),
    ],
)
def test_processor_retry_policy_errors_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ProcessorRetryPolicy(**kwargs)


def test_processor_retry_policy_backoff_doubles_up_to_the_maximum() -> None:
    policy = ProcessorRetryPolicy(initial_backoff=0.5, max_backoff=3)
    assert [policy.backoff(n) for n in (1, 2, 3, 4, 50)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert policy.decide(FailedBatch("k", "s", "sh", (), 1, RuntimeError())) is FailureAction.RETRY
    odd = ProcessorRetryPolicy(on_exhausted=lambda batch: "later")
    with pytest.raises(ConfigurationError, match=r"return FailureAction\.SKIP or FailureAction\.RETRY"):
        odd.decide(FailedBatch("k", "s", "sh", (), 1, RuntimeError()))


def test_latest_is_pinned_to_a_timestamp_on_first_acquisition(one_shard: Any) -> None:
    journal, holder = Journal(), FakeHolder()
    pool, _ = _pool(one_shard, journal, holder)
    put_records(one_shard, "orders", 3, prefix="old")
    pool.on_lease_acquired(Lease(KEY, "w1", 1, LATEST))
    assert eventually(lambda: len(holder.checkpoints) == 1, 10)
    pinned = holder.checkpoints[0]
    assert pinned.sequence_number == "AT_TIMESTAMP" and pinned.timestamp is not None
    put_records(one_shard, "orders", 4, prefix="new")
    assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) == 4, 20)
    assert [e.data for e in journal.records()] == [f"new{i}".encode() for i in range(4)]


def test_no_reads_while_the_lease_is_not_valid(one_shard: Any) -> None:
    journal, holder = Journal(), FakeHolder()
    holder.held = False
    pool, _ = _pool(one_shard, journal, holder)
    put_records(one_shard, "orders", 3)
    pool.on_lease_acquired(Lease(KEY, "w1", 1, TRIM_HORIZON))
    assert not journal.wait_for(lambda es: any(e.kind == "record" for e in es), 1.0)
    holder.held = True
    assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) == 3, 20)


def test_shard_end_checkpoints_shard_end_releases_and_wakes_discovery(
    kinesis_resharding: LocalAWS,
) -> None:
    kinesis = kinesis_resharding.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    put_records(kinesis, "orders", 6)
    kinesis.split_shard(StreamName="orders", ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**127))
    journal, holder = Journal(), FakeHolder()
    pool, ended = _pool(kinesis, journal, holder)
    pool.on_lease_acquired(Lease(KEY, "w1", 1, TRIM_HORIZON))
    assert eventually(lambda: holder.released == [KEY], 20)
    assert [e.kind for e in journal.snapshot()][-1] == "ended"
    assert holder.checkpoints[-1] == SHARD_END
    assert len(journal.records()) == 6 and [s.stream for s in ended] == ["orders"]
    assert pool.counters["shard_ends"] == 1


@pytest.mark.parametrize(("checkpoint", "pending", "seen"), [("1", "2", Position("2")), ("2", "1", None)])
def test_the_pending_checkpoint_of_a_lease_reaches_initialize_and_prepare_writes_through(
    one_shard: Any, checkpoint: str, pending: str, seen: Position | None
) -> None:
    put_records(one_shard, "orders", 3)
    holder, inits = FakeHolder(), []

    class Preparer(RecordProcessor):
        def initialize(self, init: InitializationInput) -> None:
            inits.append(init)

        def process_records(self, records: Any, checkpointer: Any, millis_behind_latest: int | None = None) -> None:
            checkpointer.prepare_checkpoint()

    config = WorkerConfig("leases", [stream_config()], lease_duration=1.5, idle_backoff=0.05)
    pool = ConsumerPool(config, one_shard, Preparer)
    pool.coordinator = holder
    _POOLS.append(pool)
    pool.on_lease_acquired(Lease(KEY, "w1", 1, Checkpoint(checkpoint), pending_checkpoint=Checkpoint(pending)))
    assert eventually(lambda: holder.prepared == [Checkpoint("3")], 20)
    # a pending checkpoint behind the checkpoint (cleared by nobody: an older release) is not shown
    assert inits[0].pending_checkpoint == seen and inits[0].checkpoint == Position(checkpoint)
    assert holder.checkpoints == []


def test_an_acquired_shard_end_lease_is_released_at_once(one_shard: Any) -> None:
    journal, holder = Journal(), FakeHolder()
    pool, _ = _pool(one_shard, journal, holder)
    pool.on_lease_acquired(Lease(KEY, "w1", 1, SHARD_END))
    assert eventually(lambda: holder.released == [KEY], 10)
    assert journal.snapshot() == []  # no processor was even built


# --- health endpoints and signals -------------------------------------------------------


class FakeHealth:
    def __init__(self) -> None:
        self.live = True
        self.ready = False

    def is_live(self) -> bool:
        return self.live

    def is_ready(self) -> bool:
        if self.ready is None:
            raise RuntimeError("membership down")
        return self.ready

    def status_dict(self) -> dict[str, Any]:
        return {"worker_id": "w1"}

    def metrics_text(self) -> tuple[bytes, str] | None:
        return None


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_health_endpoints_answer_probes() -> None:
    source = FakeHealth()
    server = HealthServer(source, "127.0.0.1", 0).start()
    try:
        assert _get(server.url + "/livez")[0] == 200
        assert _get(server.url + "/healthz")[0] == 200
        assert _get(server.url + "/live")[0] == 200  # the paths of examples/k8s/*.yaml
        assert _get(server.url + "/readyz")[0] == 503
        source.ready = True
        assert _get(server.url + "/readyz") == (200, b"ok\n")
        assert _get(server.url + "/ready")[0] == 200
        source.ready = None  # type: ignore[assignment]  # a probe that raises fails, the server lives
        assert _get(server.url + "/readyz")[0] == 503
        source.live = False
        assert _get(server.url + "/livez")[0] == 503
        assert json.loads(_get(server.url + "/status")[1]) == {"worker_id": "w1"}
        assert _get(server.url + "/metrics")[0] == 404
        assert _get(server.url + "/nope")[0] == 404
    finally:
        server.stop()


def test_sigterm_becomes_a_stop_request_and_handlers_are_restored() -> None:
    requested = threading.Event()
    before = signal.getsignal(signal.SIGTERM)
    with stop_on_signals(requested.set) as installed:
        assert installed
        os.kill(os.getpid(), signal.SIGTERM)
        assert requested.wait(5)
    assert signal.getsignal(signal.SIGTERM) == before
    outside: list[bool] = []

    def in_thread() -> None:
        with stop_on_signals(requested.set) as ok:
            outside.append(ok)

    t = threading.Thread(target=in_thread)
    t.start()
    t.join()
    assert outside == [False]  # only the main thread can install handlers


def test_a_stuck_shard_is_counted_in_the_metrics() -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    from kinesis.consumer.shard.consumer import ShardStatus
    from kinesis.consumer.worker.metrics import build_registry, render
    from kinesis.consumer.worker.worker import WorkerStatus

    def shard(state: str, n: int) -> ShardStatus:
        return ShardStatus(f"app/orders/s{n}", "app", "orders", f"s{n}", state, 5, 1, 0, None,
                           failed_attempts=12 if state == "stuck" else 0)

    class Source:
        def status(self) -> WorkerStatus:
            return WorkerStatus("w1", "running", True, True, ("w1",), ("a", "b", "c"), {},
                                (shard("stuck", 1), shard("processing", 2), shard("stuck", 3)),
                                {}, {"processor_errors": 24, "records_skipped": 7}, {}, 3, 0.1)

    text = render(build_registry(Source()))[0].decode()  # type: ignore[arg-type]
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert values["kinesis_worker_shards_stuck"] == 2
    assert values["kinesis_worker_records_skipped_total"] == 7
    assert values["kinesis_worker_processor_errors_total"] == 24


def test_a_shard_that_is_not_catching_up_shows_infinite_catch_up_in_metrics_and_status() -> None:
    pytest.importorskip("prometheus_client")
    import json
    import math

    from prometheus_client.parser import text_string_to_metric_families

    from kinesis.consumer.shard.consumer import ShardStatus
    from kinesis.consumer.worker.metrics import build_registry, render
    from kinesis.consumer.worker.worker import WorkerStatus

    behind = ShardStatus("app/orders/s1", "app", "orders", "s1", "processing", 5, 1, 90_000, None,
                         lag_seconds=90.0, lag_age_seconds=0.5, processing_rate=20.0, arrival_rate=30.0,
                         catch_up_seconds=math.inf)
    status = WorkerStatus("w1", "running", True, True, ("w1",), ("app/orders/s1",), {}, (behind,), {}, {}, {}, 3,
                          0.1, max_lag_seconds=90.0, processing_rate=20.0, arrival_rate=30.0,
                          catch_up_seconds=math.inf)

    class Source:
        def status(self) -> WorkerStatus:
            return status

    text = render(build_registry(Source()))[0].decode()  # type: ignore[arg-type]
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert values["kinesis_worker_max_lag_seconds"] == 90.0
    assert values["kinesis_worker_catch_up_seconds"] == math.inf
    assert values["kinesis_worker_arrival_records_per_second"] == 30.0
    assert values["kinesis_worker_lag_age_seconds"] == 0.5
    as_json = json.loads(json.dumps(status.to_dict(), allow_nan=False))  # strict JSON: no Infinity
    assert as_json["catch_up_seconds"] == "inf" and as_json["shards"][0]["catch_up_seconds"] == "inf"
