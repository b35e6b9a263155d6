"""Enhanced Fan-Out: the event-stream encoder, the test endpoint, FanOutReader and Workers with
``retrieval="fanout"``.

Kinesis is moto behind ``tests/support/fanout_endpoint.py`` (SubscribeToShard served as a real
event stream over HTTP/1.1, everything else proxied to moto); the clients are real boto3
clients, so botocore parses real event-stream bytes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer

from kinesis import (
    ConfigurationError,
    FanOutConsumerLimitError,
    InitialPosition,
    KinesisAccessDeniedError,
    Position,
    StreamConfig,
    Worker,
    WorkerConfig,
)
from kinesis.consumer.retrieval.fanout import ConsumerRegistration, FanOutReader
from kinesis.errors import StartingPositionRejectedError
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.testing import LocalAWS, client_for
from tests.support import eventstream
from tests.support.fanout_endpoint import FanOutEndpoint, fanout_endpoint
from tests.support.waiting import eventually
from tests.support.worker_journal import Entry, Journal, JournalProcessor, put_records

TABLE = "fanout-test-leases"
logging.getLogger("werkzeug").setLevel(logging.ERROR)


@pytest.fixture
def endpoint(aws: LocalAWS) -> Iterator[FanOutEndpoint]:
    with fanout_endpoint(aws.endpoint_url, takeover_guard=1.0) as ep:
        yield ep


def kinesis_via(ep: FanOutEndpoint) -> Any:
    return client_for("kinesis", ep.endpoint_url)


def fanout_worker(aws: LocalAWS, ep: FanOutEndpoint, journal: Journal, worker_id: str,
                  streams: list[StreamConfig] | None = None, **config: Any) -> Worker:
    settings: dict[str, Any] = {"lease_duration": 10.0, "tick_interval": 2.0 / 3, "idle_backoff": 0.1,
                                "shard_sync_interval": 1.0, "shutdown_grace": 10.0}
    settings.update(config)
    cfg = WorkerConfig(
        table_name=TABLE,
        streams=tuple(streams or [StreamConfig("orders", "app", "TRIM_HORIZON", retrieval="fanout")]),
        worker_id=worker_id,
        **settings,
    )
    return Worker(cfg, lambda: JournalProcessor(journal, worker_id),
                  kinesis_client=kinesis_via(ep), dynamodb_client=aws.client("dynamodb"))


def count_calls(client: Any, operation: str) -> list[int]:
    """A one-element list counting ``operation`` calls made by ``client``."""
    calls = [0]

    def count(**_: Any) -> None:
        calls[0] += 1

    client.meta.events.register(f"before-call.kinesis.{operation}", count)
    return calls


def held(w: Worker) -> int:
    return len(w.status().held)


def shard_order_ok(entries: list[Entry]) -> bool:
    by_shard: dict[str, list[tuple[int, int]]] = {}
    for e in entries:
        if e.kind == "record":
            by_shard.setdefault(e.shard_id, []).append((int(e.seq), e.sub))
    return all(a < b for seqs in by_shard.values() for a, b in pairwise(seqs))


def registered(ep: FanOutEndpoint, stream: str = "orders", name: str = "app") -> ConsumerRegistration:
    registration = ConsumerRegistration(kinesis_via(ep), stream, name, poll_interval=0.05)
    registration.ensure()
    return registration


def read_all(reader: FanOutReader, until: int, timeout: float = 30.0) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < until and time.monotonic() < deadline:
        batch = reader.read_batch()
        out += batch.records
        if batch.shard_ended:
            break
    return out


# --- the encoder -------------------------------------------------------------------------------


def test_encoded_messages_round_trip_through_botocores_decoder_in_any_chunking() -> None:
    messages = [
        eventstream.initial_response(),
        eventstream.event("SubscribeToShardEvent", {"Records": [], "ContinuationSequenceNumber": "7",
                                                    "MillisBehindLatest": 0}),
        eventstream.exception("ResourceInUseException", "taken over"),
        eventstream.encode_message({}, b""),
        eventstream.encode_message({"x": "\u00e9" * 300}, bytes(range(256)) * 40),
    ]
    wire = b"".join(messages)
    for chunk in (1, 7, 4096, len(wire)):
        buffer = EventStreamBuffer()
        decoded = []
        for i in range(0, len(wire), chunk):
            buffer.add_data(wire[i : i + chunk])
            decoded += list(buffer)
        assert len(decoded) == len(messages)
        assert decoded[0].headers == {":message-type": "event", ":event-type": "initial-response",
                                      ":content-type": "application/json"}
        assert decoded[1].payload == b'{"Records": [], "ContinuationSequenceNumber": "7", "MillisBehindLatest": 0}'
        assert decoded[2].headers[":exception-type"] == "ResourceInUseException"
        assert decoded[3].headers == {} and decoded[3].payload == b""
        assert decoded[4].headers == {"x": "\u00e9" * 300} and decoded[4].payload == bytes(range(256)) * 40


def test_a_corrupted_message_fails_botocores_checksum() -> None:
    wire = bytearray(eventstream.event("SubscribeToShardEvent", {"Records": []}))
    wire[-6] ^= 0x01  # a payload byte
    buffer = EventStreamBuffer()
    buffer.add_data(bytes(wire))
    with pytest.raises(ChecksumMismatch):
        list(buffer)


# --- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1.0, float("inf"), float("nan")])
def test_fanout_reader_durations_must_be_finite_positive_seconds(value: float) -> None:
    # the reader used its own "> 0" check, which let infinity through (a subscription never renewed)
    with pytest.raises(ConfigurationError, match="renew_after must be a finite number of seconds > 0"):
        FanOutReader(None, "orders", "shardId-000000000000", None, renew_after=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"retrieval": "push"}, "retrieval .* 'polling' .* 'fanout'"),
        ({"consumer_name": "x"}, "consumer_name .* Enhanced Fan-Out only"),
        ({"deregister_consumer_on_stop": True}, "Enhanced Fan-Out only"),
        ({"retrieval": "fanout", "consumer_name": "has space"}, "consumer_name"),
    ],
)
def test_fanout_configuration_errors_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        StreamConfig("orders", "app", **kwargs)
    assert StreamConfig("orders", "app", retrieval="fanout").effective_consumer_name == "app"


# --- registration ------------------------------------------------------------------------------


def test_a_registered_consumer_is_reused_and_a_new_one_waited_for_until_active(
    aws: LocalAWS, endpoint: FanOutEndpoint
) -> None:
    kinesis = kinesis_via(endpoint)
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    endpoint.report_creating(3)
    describes = count_calls(kinesis, "DescribeStreamConsumer")
    first = ConsumerRegistration(kinesis, "orders", "app", poll_interval=0.05)
    arn = first.ensure()
    # not found, registered CREATING, described CREATING twice, then ACTIVE
    assert first.registered_here and describes[0] == 4
    second = ConsumerRegistration(kinesis_via(endpoint), "orders", "app", poll_interval=0.05)
    assert second.ensure() == arn and not second.registered_here
    stream_arn = kinesis.describe_stream_summary(StreamName="orders")["StreamDescriptionSummary"]["StreamARN"]
    assert [c["ConsumerName"] for c in kinesis.list_stream_consumers(StreamARN=stream_arn)["Consumers"]] == ["app"]


def test_the_consumer_limit_fails_start_naming_the_fix_and_takes_no_lease(
    aws: LocalAWS, endpoint: FanOutEndpoint
) -> None:
    kinesis = kinesis_via(endpoint)
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    stream_arn = kinesis.describe_stream_summary(StreamName="orders")["StreamDescriptionSummary"]["StreamARN"]
    for i in range(20):  # moto does not enforce the quota; the endpoint answers like AWS at it
        kinesis.register_stream_consumer(StreamARN=stream_arn, ConsumerName=f"other-{i}")
    endpoint.fail("RegisterStreamConsumer", "LimitExceededException", times=20)  # past botocore's retries
    worker = fanout_worker(aws, endpoint, Journal(), "w1")
    with pytest.raises(FanOutConsumerLimitError) as info:
        worker.start()
    text = str(info.value)
    assert "20 registered consumers" in text and "limit is 20" in text
    assert "deregister-stream-consumer" in text and "retrieval='polling'" in text and "other-7" in text
    assert LeaseTable(aws.client("dynamodb"), TABLE).scan().leases == {}


def test_below_the_limit_limit_exceeded_is_a_rate_limit_and_registration_retries(
    aws: LocalAWS, endpoint: FanOutEndpoint
) -> None:
    kinesis = kinesis_via(endpoint)
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    endpoint.fail("RegisterStreamConsumer", "LimitExceededException", times=7)  # more than botocore retries
    lists = count_calls(kinesis, "ListStreamConsumers")
    registration = ConsumerRegistration(kinesis, "orders", "app", poll_interval=0.05)
    assert registration.ensure().endswith("/consumer/app") and registration.registered_here
    assert lists[0] >= 1  # it checked the quota before treating it as a rate limit


def test_access_denied_names_the_action_at_start_and_when_subscribing(
    aws: LocalAWS, endpoint: FanOutEndpoint
) -> None:
    kinesis = kinesis_via(endpoint)
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    endpoint.fail("RegisterStreamConsumer", "AccessDeniedException")
    with pytest.raises(KinesisAccessDeniedError) as info:
        fanout_worker(aws, endpoint, Journal(), "w1").start()
    assert info.value.action == "kinesis:RegisterStreamConsumer"
    assert "Grant kinesis:RegisterStreamConsumer" in str(info.value) and "docs/security.md" in str(info.value)
    registration = registered(endpoint)
    endpoint.fail("SubscribeToShard", "AccessDeniedException")
    reader = FanOutReader(kinesis, "orders", "shardId-000000000000", registration, InitialPosition.TRIM_HORIZON)
    with pytest.raises(KinesisAccessDeniedError) as denied:
        reader.read_batch()
    assert denied.value.action == "kinesis:SubscribeToShard" and registration.arn in str(denied.value)


# --- the reader --------------------------------------------------------------------------------


def test_ended_subscriptions_are_renewed_from_the_continuation_losing_and_repeating_nothing(
    aws: LocalAWS,
) -> None:
    with fanout_endpoint(aws.endpoint_url, subscription_lifetime=0.5, heartbeat=0.1) as ep:
        kinesis = kinesis_via(ep)
        kinesis.create_stream(StreamName="orders", ShardCount=1)
        registration = registered(ep)
        written = put_records(kinesis, "orders", 20, prefix="a")
        reader = FanOutReader(kinesis, "orders", "shardId-000000000000", registration,
                              InitialPosition.TRIM_HORIZON, min_subscribe_interval=0.2, max_block=0.2)
        got = read_all(reader, 20)
        more: list[tuple[str, str]] = []
        for i in range(6):  # records arrive across several subscriptions
            more += put_records(kinesis, "orders", 5, prefix=f"b{i}-")
            got += read_all(reader, 5)
            deadline = time.monotonic() + 10
            while len(ep.calls("subscribed")) < i + 2 and time.monotonic() < deadline:
                got += reader.read_batch().records  # reading on renews the ended subscription
        reader.close()
        assert [r.sequence_number for r in got] == [seq for _, seq in written + more]  # in order, once
        renewals = ep.calls("subscribed")[1:]
        assert len(renewals) >= 6 and reader.stats.renewals >= 6
        assert all(c.starting_position["Type"] == "AFTER_SEQUENCE_NUMBER" for c in renewals)
        assert all(int(b.starting_position["SequenceNumber"]) >= int(a.starting_position["SequenceNumber"])
                   for a, b in pairwise(renewals))
        assert reader.continuation == got[-1].sequence_number


def test_a_subscription_is_renewed_before_the_service_ends_it(aws: LocalAWS, endpoint: FanOutEndpoint) -> None:
    kinesis = kinesis_via(endpoint)
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    registration = registered(endpoint)
    reader = FanOutReader(kinesis, "orders", "shardId-000000000000", registration, InitialPosition.TRIM_HORIZON,
                          renew_after=1.2, min_subscribe_interval=0.1, max_block=0.1)  # guard: 1 s
    written: list[tuple[str, str]] = []
    got: list[Any] = []
    while reader.stats.renewals < 2:
        written += put_records(kinesis, "orders", 3, prefix=f"r{reader.stats.renewals}-")
        got += read_all(reader, 3, timeout=10)
    reader.close()
    assert [r.sequence_number for r in got] == [seq for _, seq in written]
    subscribed = endpoint.calls("subscribed")
    assert len(subscribed) >= 3 and all(c.outcome == "subscribed" for c in endpoint.calls())  # no ResourceInUse
    assert all(c.starting_position["Type"] == "AFTER_SEQUENCE_NUMBER" for c in subscribed[1:])
    assert eventually(lambda: endpoint.live_subscriptions() == 0, 5)  # every replaced one was closed


def test_resource_in_use_backs_off_and_subscribe_is_rate_limited(aws: LocalAWS, endpoint: FanOutEndpoint) -> None:
    kinesis = kinesis_via(endpoint)
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    registration = registered(endpoint)
    written = put_records(kinesis, "orders", 10)
    endpoint.fail("SubscribeToShard", "ResourceInUseException", times=3)
    reader = FanOutReader(kinesis, "orders", "shardId-000000000000", registration,
                          InitialPosition.TRIM_HORIZON, min_subscribe_interval=0.2, max_block=0.1)
    got = read_all(reader, 10)
    reader.close()
    assert [r.sequence_number for r in got] == [seq for _, seq in written]
    calls = endpoint.calls()
    assert [c.outcome for c in calls] == ["ResourceInUseException"] * 3 + ["subscribed"]
    gaps = [b.at - a.at for a, b in pairwise(calls)]
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4 and gaps[2] >= 0.8, gaps  # exponential backoff
    assert reader.stats.resource_in_use == 3


def test_a_subscription_taken_over_by_a_newer_call_ends_and_is_resumed_without_loss(
    aws: LocalAWS, endpoint: FanOutEndpoint
) -> None:
    kinesis = kinesis_via(endpoint)
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    registration = registered(endpoint)
    written = put_records(kinesis, "orders", 10, prefix="a")
    reader = FanOutReader(kinesis, "orders", "shardId-000000000000", registration,
                          InitialPosition.TRIM_HORIZON, min_subscribe_interval=0.2, max_block=0.1)
    got = read_all(reader, 10)
    eventually(lambda: time.monotonic() - endpoint.calls("subscribed")[0].at > 1.1, 5, "the takeover guard (1 s)")
    intruder = kinesis.subscribe_to_shard(ConsumerARN=registration.arn, ShardId="shardId-000000000000",
                                          StartingPosition={"Type": "LATEST"})
    intruder["EventStream"].close()
    written += put_records(kinesis, "orders", 10, prefix="b")
    got += read_all(reader, 10)
    reader.close()
    assert [r.sequence_number for r in got] == [seq for _, seq in written]
    assert len(endpoint.calls("subscribed")) >= 3  # reader, intruder, reader again


# --- Workers -----------------------------------------------------------------------------------


def test_a_fanout_worker_processes_every_record_in_order_per_shard_without_get_records(
    aws: LocalAWS, endpoint: FanOutEndpoint
) -> None:
    kinesis = kinesis_via(endpoint)
    kinesis.create_stream(StreamName="orders", ShardCount=4)
    written = put_records(kinesis, "orders", 200)
    journal = Journal()
    worker = fanout_worker(aws, endpoint, journal, "w1")
    get_records = count_calls(worker.kinesis_client, "GetRecords")
    worker.start()
    try:
        assert journal.wait_for(lambda _: set(written) <= journal.processed(), 30)
        more = put_records(kinesis, "orders", 100, prefix="late")
        assert journal.wait_for(lambda _: set(more) <= journal.processed(), 30)
        assert journal.duplicates() == 0 and shard_order_ok(journal.snapshot())
        assert get_records[0] == 0
        assert {c.shard_id for c in endpoint.calls("subscribed")} == {f"shardId-00000000000{i}" for i in range(4)}
        assert "fan-out consumer app" in worker.startup_line()
    finally:
        assert worker.stop(graceful=True)


def test_a_graceful_handoff_between_fanout_workers_loses_and_duplicates_nothing(
    aws: LocalAWS, endpoint: FanOutEndpoint
) -> None:
    kinesis = kinesis_via(endpoint)
    kinesis.create_stream(StreamName="orders", ShardCount=4)
    written = put_records(kinesis, "orders", 100)
    journal = Journal()
    w1 = fanout_worker(aws, endpoint, journal, "w1").start()
    w2 = fanout_worker(aws, endpoint, journal, "w2").start()
    stop = threading.Event()

    def trickle() -> None:
        i = 0
        while not stop.wait(0.05):
            written.extend(put_records(kinesis, "orders", 5, prefix=f"t{i}-"))
            i += 1

    producer = threading.Thread(target=trickle, daemon=True)
    try:
        assert eventually(lambda: held(w1) == 2 and held(w2) == 2, 30)
        producer.start()
        assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) > 200, 30)
        before1, before2 = w1.status().lease_counters, w2.status().lease_counters
        assert w1.stop(graceful=True) is True
        assert eventually(lambda: held(w2) == 4, 30)
        assert journal.wait_for(lambda es: sum(e.kind == "record" and e.worker == "w2" and
                                               e.shard_id in w1_shards(es) for e in es) > 20, 30)
        stop.set()
        producer.join()
        assert journal.wait_for(lambda _: set(written) <= journal.processed(), 30)
        assert journal.duplicates() == 0 and shard_order_ok(journal.snapshot())
        c1, c2 = w1.status().lease_counters, w2.status().lease_counters
        assert c1["handoffs"] - before1["handoffs"] == 2 and c2["adopted"] - before2["adopted"] == 2
        assert c2["takeovers"] + c2["orphans_taken"] == 0  # no expiry wait anywhere
    finally:
        stop.set()
        w1.stop()
        w2.stop()


def w1_shards(entries: list[Entry]) -> set[str]:
    return {e.shard_id for e in entries if e.kind == "shutdown" and e.worker == "w1"}


def test_fanout_resharding_parents_finish_before_children(kinesis_resharding: LocalAWS) -> None:
    aws = kinesis_resharding
    with fanout_endpoint(aws.endpoint_url, takeover_guard=1.0) as ep:
        kinesis = kinesis_via(ep)
        kinesis.create_stream(StreamName="orders", ShardCount=2)
        written = put_records(kinesis, "orders", 60, prefix="a")
        journal = Journal()
        workers = [fanout_worker(aws, ep, journal, f"w{i}").start() for i in (1, 2)]
        try:
            assert journal.wait_for(lambda _: set(written) <= journal.processed(), 30)
            shard0 = kinesis.list_shards(StreamName="orders")["Shards"][0]["HashKeyRange"]
            middle = (int(shard0["StartingHashKey"]) + int(shard0["EndingHashKey"])) // 2
            kinesis.split_shard(StreamName="orders", ShardToSplit="shardId-000000000000",
                                NewStartingHashKey=str(middle))
            written += put_records(kinesis, "orders", 60, prefix="b")
            kinesis.merge_shards(StreamName="orders", ShardToMerge="shardId-000000000003",
                                 AdjacentShardToMerge="shardId-000000000001")
            written += put_records(kinesis, "orders", 60, prefix="c")
            assert journal.wait_for(lambda _: set(written) <= journal.processed(), 60)
            entries = journal.snapshot()
            assert journal.duplicates() == 0 and shard_order_ok(entries)
            parents = {"shardId-000000000002": ["shardId-000000000000"],
                       "shardId-000000000003": ["shardId-000000000000"],
                       "shardId-000000000004": ["shardId-000000000003", "shardId-000000000001"]}
            records = [e for e in entries if e.kind == "record"]
            for child, ps in parents.items():
                first_child = min((e.t for e in records if e.shard_id == child), default=None)
                if first_child is None:
                    continue
                for p in ps:
                    assert max(e.t for e in records if e.shard_id == p) < first_child, (child, p)
            ended = {e.shard_id for e in entries if e.kind == "ended"}
            assert ended == {"shardId-000000000000", "shardId-000000000001", "shardId-000000000003"}
        finally:
            for w in workers:
                w.stop()


def test_deregister_on_a_clean_stop_is_opt_in(aws: LocalAWS, endpoint: FanOutEndpoint) -> None:
    kinesis = kinesis_via(endpoint)
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    stream_arn = kinesis.describe_stream_summary(StreamName="orders")["StreamDescriptionSummary"]["StreamARN"]

    def consumers() -> list[str]:
        return [c["ConsumerName"] for c in kinesis.list_stream_consumers(StreamARN=stream_arn)["Consumers"]]

    kept = fanout_worker(aws, endpoint, Journal(), "w1").start()
    assert kept.stop(graceful=True) and consumers() == ["app"]
    spec = StreamConfig("orders", "app", "TRIM_HORIZON", retrieval="fanout", deregister_consumer_on_stop=True)
    removed = fanout_worker(aws, endpoint, Journal(), "w2", [spec]).start()
    assert removed.stop(graceful=True) and consumers() == []


def test_a_checkpoint_inside_the_stream_resumes_right_after_it(aws: LocalAWS, endpoint: FanOutEndpoint) -> None:
    kinesis = kinesis_via(endpoint)
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    registration = registered(endpoint)
    written = put_records(kinesis, "orders", 10)
    reader = FanOutReader(kinesis, "orders", "shardId-000000000000", registration, Position(written[3][1]))
    got = read_all(reader, 6)
    reader.close()
    assert [r.sequence_number for r in got] == [seq for _, seq in written[4:]]
    assert endpoint.calls("subscribed")[0].starting_position == {
        "Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": written[3][1]}


def test_a_refused_resume_position_is_a_data_gap_then_the_trim_horizon_for_the_worker(
    aws: LocalAWS, endpoint: FanOutEndpoint
) -> None:
    kinesis = kinesis_via(endpoint)
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    registration = registered(endpoint)
    written = put_records(kinesis, "orders", 6)
    checkpoint = Position(written[2][1])
    endpoint.fail("SubscribeToShard", "InvalidArgumentException")
    strict = FanOutReader(kinesis, "orders", "shardId-000000000000", registration, checkpoint)
    with pytest.raises(StartingPositionRejectedError):  # the default: the caller decides (Spark)
        strict.read_batch()
    strict.close()
    endpoint.fail("SubscribeToShard", "InvalidArgumentException")
    reader = FanOutReader(kinesis, "orders", "shardId-000000000000", registration, checkpoint,
                          refused_resume="trim_horizon", min_subscribe_interval=0.05, max_block=0.2)
    lost, got = [], []
    deadline = time.monotonic() + 20
    while len(got) < 6 and time.monotonic() < deadline:
        batch = reader.read_batch()
        lost += [batch.lost] if batch.lost is not None else []
        got += batch.records
    reader.close()
    assert [r.sequence_number for r in got] == [seq for _, seq in written]  # nothing still there skipped
    assert len(lost) == 1 and lost[0].after == checkpoint and lost[0].refused is not None


def test_a_subscription_lost_without_an_error_is_restarted_by_the_watchdog(aws: LocalAWS) -> None:
    # a caught-up shard's subscription goes silent with its connection open: the reader's
    # waits without events are no reads (their lag is the last event's), so the watchdog
    # sees no progress for processor_timeout and subscribes again from the last record
    with fanout_endpoint(aws.endpoint_url, takeover_guard=1.0, heartbeat=0.1) as ep:
        kinesis = kinesis_via(ep)
        kinesis.create_stream(StreamName="orders", ShardCount=1)
        first = put_records(kinesis, "orders", 5, prefix="a")
        journal = Journal()
        worker = fanout_worker(aws, ep, journal, "w1", processor_timeout=1.5).start()
        try:
            assert journal.wait_for(lambda _: set(first) <= journal.processed(), 30)
            assert eventually(lambda: worker.status().shards[0].millis_behind_latest == 0, 30)
            subscribed = len(ep.calls("subscribed"))
            ep.silence()
            later = put_records(kinesis, "orders", 5, prefix="b")
            assert journal.wait_for(lambda _: set(later) <= journal.processed(), 30), worker.status()
            assert worker.status().worker_counters["reader_restarts"] >= 1
            assert len(ep.calls("subscribed")) > subscribed
            assert journal.duplicates() == 0 and len(journal.records()) == 10
        finally:
            worker.stop()
