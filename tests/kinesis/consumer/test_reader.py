"""ShardReader and read_range over HTTP against moto (with the resharding patch), faults injected
at the HTTP layer (throttling, 5xx, expired iterators)."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.config import Config
from hypothesis import given, settings
from hypothesis import strategies as st

from kinesis.consumer.retrieval.polling import ShardReader, read_range, until_end
from kinesis.consumer.retrieval.positions import SHARD_END, InitialPosition, Position
from kinesis.consumer.retrieval.records import Record, aggregate
from kinesis.errors import (
    ConfigurationError,
    KinesisRetriesExhaustedError,
    ShardNotFoundError,
    StreamNotFoundError,
)
from kinesis.testing import LocalAWS
from tests.support.kinesis_faults import FaultInjector

STREAM = "reader-test"
SHARD = "shardId-000000000000"
NO_BOTO_RETRIES = Config(retries={"total_max_attempts": 1})


@pytest.fixture
def kinesis(kinesis_resharding: LocalAWS) -> Any:
    client = kinesis_resharding.client("kinesis", config=NO_BOTO_RETRIES)
    client.create_stream(StreamName=STREAM, ShardCount=1)
    return client


def put(client: Any, n: int, prefix: str = "r") -> list[bytes]:
    data = [f"{prefix}{i}".encode() for i in range(n)]
    client.put_records(StreamName=STREAM, Records=[{"Data": d, "PartitionKey": d.decode()} for d in data])
    return data


def put_aggregate(client: Any, keys: list[str]) -> str:
    (agg,) = aggregate([(k, f"payload-{k}".encode()) for k in keys])
    return str(client.put_record(StreamName=STREAM, **agg.put_records_entry())["SequenceNumber"])


def drain(reader: ShardReader, max_batches: int = 50) -> list[Record]:
    out: list[Record] = []
    for _ in range(max_batches):
        batch = reader.read_batch()
        out += batch.records
        if batch.shard_ended or (not batch.records and batch.millis_behind_latest == 0):
            return out
    raise AssertionError("reader did not catch up")


def datas(records: list[Record]) -> list[bytes]:
    return [r.data for r in records]


# --- start positions --------------------------------------------------------------------------


def test_trim_horizon_reads_everything_in_order_in_batches(kinesis: Any) -> None:
    written = put(kinesis, 11)
    reader = ShardReader(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON, max_records=4)
    got = drain(reader)
    assert datas(got) == written
    assert [r.position for r in got] == sorted(r.position for r in got)
    assert reader.stats.get_records_calls == 4 and reader.stats.iterators_acquired == 1
    assert reader.last_position == got[-1].position
    assert all(r.stream_name == STREAM and r.shard_id == SHARD and not r.aggregated for r in got)


def test_latest_skips_existing_records_and_reports_idle(kinesis: Any) -> None:
    put(kinesis, 3, "old")
    reader = ShardReader(kinesis, STREAM, SHARD, InitialPosition.LATEST, idle_backoff=0.7)
    empty = reader.read_batch()
    assert empty.records == [] and empty.millis_behind_latest == 0
    assert empty.suggested_wait == 0.7 and not empty.shard_ended
    new = put(kinesis, 2, "new")
    batch = reader.read_batch()
    # at the tip with records, too: one poll per idle_backoff (AWS's advice: one a second per
    # application, so several applications stay under 5 GetRecords a second per shard)
    assert datas(batch.records) == new and batch.suggested_wait == 0.7


def call_starts(client: Any) -> list[float]:
    """When each GetRecords call of ``client`` started (monotonic), appended as they happen:
    botocore's first event of a call, fired just after the reader stamps the call's start."""
    starts: list[float] = []
    client.meta.events.register("provide-client-params.kinesis.GetRecords",
                                lambda **_: starts.append(time.monotonic()))
    return starts


HOOK_LATENCY = 0.03
"""How much later than the reader's own stamp the hook may fire on a loaded machine (a thread
switch between the two): spacings seen by the hook may be short by this much."""


def test_catching_up_calls_start_min_read_interval_apart_and_ask_for_no_idle_wait(kinesis: Any) -> None:
    written = put(kinesis, 10)
    starts = call_starts(kinesis)
    reader = ShardReader(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON, max_records=4,
                         idle_backoff=30.0, min_read_interval=0.3)
    first, second, last = reader.read_batch(), reader.read_batch(), reader.read_batch()
    # full batches mean more is waiting, whatever MillisBehindLatest says: no idle wait, but
    # each call starts at least min_read_interval after the one before (processing counts)
    assert [len(b.records) for b in (first, second, last)] == [4, 4, 2]
    assert first.suggested_wait == 0.0 and second.suggested_wait == 0.0
    assert len(starts) == 3 and all(b - a >= 0.3 - HOOK_LATENCY for a, b in itertools.pairwise(starts))
    assert last.suggested_wait == 30.0  # 2 records, fewer than max_records: the tip
    assert datas(first.records + second.records + last.records) == written
    with pytest.raises(ConfigurationError, match="min_read_interval"):
        ShardReader(kinesis, STREAM, SHARD, min_read_interval=-1)
    with pytest.raises(ConfigurationError, match="idle_backoff"):
        ShardReader(kinesis, STREAM, SHARD, idle_backoff=float("nan"))


def test_a_stop_during_the_min_read_interval_returns_at_once_without_a_call(kinesis: Any) -> None:
    put(kinesis, 3)
    stop = threading.Event()
    reader = ShardReader(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON, max_records=1,
                         min_read_interval=600.0, stop_event=stop)
    assert len(reader.read_batch().records) == 1
    calls = reader.stats.get_records_calls
    stop.set()
    batch = reader.read_batch()
    assert batch.stopped and batch.records == [] and reader.stats.get_records_calls == calls


def test_a_bounded_read_ends_at_the_tip_without_waiting_idle_backoff(kinesis: Any) -> None:
    written = put(kinesis, 5)
    reader = ShardReader(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON, idle_backoff=600.0)
    before = time.monotonic()
    assert datas(list(reader.iter_records(stop_when_caught_up=True))) == written
    assert time.monotonic() - before < 300.0  # it did not wait the 600 s idle_backoff


def test_at_timestamp_starts_at_the_first_record_at_or_after_it(kinesis: Any) -> None:
    put(kinesis, 4, "early")
    # Let the clock move on so the two groups have distinct arrival times (not a synchronisation).
    threading.Event().wait(0.05)
    late = put(kinesis, 3, "late")
    everything = drain(ShardReader(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON))
    boundary = next(r for r in everything if r.data == late[0]).approximate_arrival_timestamp
    assert boundary is not None
    reader = ShardReader(kinesis, STREAM, SHARD, InitialPosition.at_timestamp(boundary))
    assert datas(drain(reader)) == late
    future = InitialPosition.at_timestamp(datetime(2999, 1, 1, tzinfo=UTC))
    assert drain(ShardReader(kinesis, STREAM, SHARD, future)) == []


def test_resume_after_a_checkpoint_delivers_strictly_later_records(kinesis: Any) -> None:
    written = put(kinesis, 6)
    everything = drain(ShardReader(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON))
    checkpoint = everything[2].position
    resumed = drain(ShardReader(kinesis, STREAM, SHARD, checkpoint))
    assert datas(resumed) == written[3:]


def test_resume_in_the_middle_of_an_aggregate_skips_processed_sub_records(kinesis: Any) -> None:
    put(kinesis, 1, "before")
    seq = put_aggregate(kinesis, ["a", "b", "c", "d"])
    after = put(kinesis, 1, "after")
    resumed = drain(ShardReader(kinesis, STREAM, SHARD, Position(seq, 1)))
    assert [(r.sequence_number, r.sub_sequence_number, r.partition_key) for r in resumed[:2]] == [
        (seq, 2, "c"), (seq, 3, "d"),
    ]
    assert datas(resumed[2:]) == after
    # A checkpoint on the last sub-record resumes after the whole aggregate.
    assert datas(drain(ShardReader(kinesis, STREAM, SHARD, Position(seq, 3)))) == after


def test_kpl_aggregate_round_trip_through_kinesis(kinesis: Any) -> None:
    keys = [f"user-{i}" for i in range(50)]
    seq = put_aggregate(kinesis, keys)
    got = drain(ShardReader(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON))
    assert [r.partition_key for r in got] == keys
    assert [r.sub_sequence_number for r in got] == list(range(50))
    assert {r.sequence_number for r in got} == {seq}
    assert datas(got) == [f"payload-{k}".encode() for k in keys]
    assert all(r.aggregated for r in got)


# --- faults -----------------------------------------------------------------------------------


def test_throttling_and_5xx_are_retried_without_loss_or_duplicates(kinesis: Any) -> None:
    written = put(kinesis, 9)
    faults = FaultInjector(kinesis)
    reader = ShardReader(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON, max_records=3, max_wait=0.05)
    first = reader.read_batch()
    faults.fail("GetRecords", "ProvisionedThroughputExceededException", times=3)
    faults.fail("GetRecords", "InternalFailure", status=500)
    rest = drain(reader)
    assert datas(first.records + rest) == written
    assert faults.injected["GetRecords"] == 4 and reader.stats.transient_retries == 4
    assert reader.stats.iterators_acquired == 1  # throttling does not need a new iterator


def test_retry_budget_exhausted_raises_and_the_reader_can_go_on(kinesis: Any) -> None:
    written = put(kinesis, 4)
    faults = FaultInjector(kinesis)
    reader = ShardReader(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON, max_records=2,
                         max_attempts=3, max_wait=0.01)
    first = reader.read_batch()
    faults.fail("GetRecords", "ProvisionedThroughputExceededException", times=3)
    with pytest.raises(KinesisRetriesExhaustedError, match=f"GetRecords on shard {SHARD}"):
        reader.read_batch()
    assert datas(first.records + drain(reader)) == written


def test_expired_iterator_is_reacquired_after_the_last_record_delivered(kinesis: Any) -> None:
    written = put(kinesis, 10)
    faults = FaultInjector(kinesis)
    reader = ShardReader(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON, max_records=4)
    first = reader.read_batch()
    faults.fail("GetRecords", "ExpiredIteratorException")
    rest = drain(reader)
    assert datas(first.records + rest) == written
    assert reader.stats.expired_iterators == 1 and reader.stats.iterators_acquired == 2
    assert faults.injected["GetRecords"] == 1


def test_expired_iterator_in_the_middle_of_an_aggregate(kinesis: Any) -> None:
    seq = put_aggregate(kinesis, ["a", "b", "c", "d", "e"])
    after = put(kinesis, 2, "after")
    reader = ShardReader(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON)
    head = list(reader.iter_records(max_records=2))
    assert [r.position for r in head] == [Position(seq, 0), Position(seq, 1)]
    assert reader.last_position == Position(seq, 1)
    faults = FaultInjector(kinesis)
    faults.fail("GetRecords", "ExpiredIteratorException")
    rest = drain(reader)
    assert [r.partition_key for r in rest[:3]] == ["c", "d", "e"]
    assert datas(rest[3:]) == after
    assert reader.stats.expired_iterators == 1


def test_expired_latest_iterator_before_any_record_loses_nothing(kinesis: Any) -> None:
    put(kinesis, 3, "old")
    reader = ShardReader(kinesis, STREAM, SHARD, InitialPosition.LATEST)
    assert reader.read_batch().records == []
    new = put(kinesis, 3, "new")
    faults = FaultInjector(kinesis)
    faults.fail("GetRecords", "ExpiredIteratorException")
    assert datas(drain(reader)) == new
    assert reader.stats.expired_iterators == 1


def test_stop_during_retries_ends_read_batch_at_once(kinesis: Any) -> None:
    put(kinesis, 2)
    faults = FaultInjector(kinesis)
    reader = ShardReader(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON, max_attempts=50, max_wait=60)
    faults.fail("GetRecords", "ProvisionedThroughputExceededException", on_inject=reader.stop)
    faults.fail("GetRecords", "ProvisionedThroughputExceededException", times=49)
    result = reader.read_batch()
    assert result.stopped and result.records == []
    assert faults.injected["GetRecords"] == 1
    assert reader.wait(30) is True  # returns at once once stopped
    assert reader.read_batch().stopped


# --- SHARD_END and errors ---------------------------------------------------------------------


def test_shard_end_after_a_split(kinesis: Any) -> None:
    before = put(kinesis, 5, "before")
    kinesis.split_shard(StreamName=STREAM, ShardToSplit=SHARD, NewStartingHashKey=str(2**127))
    after = put(kinesis, 12, "after")
    reader = ShardReader(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON, max_records=2)
    got = drain(reader)
    assert datas(got) == before
    assert reader.shard_ended
    final = reader.read_batch()
    calls = reader.stats.get_records_calls
    assert final.shard_ended and final.records == []
    assert final.child_shard_ids == ("shardId-000000000001", "shardId-000000000002")
    assert reader.read_batch().shard_ended and reader.stats.get_records_calls == calls
    children = [
        drain(ShardReader(kinesis, STREAM, f"shardId-00000000000{i}", InitialPosition.TRIM_HORIZON))
        for i in (1, 2)
    ]
    assert sorted(datas(children[0] + children[1])) == sorted(after)


def test_missing_shard_and_stream_raise_clear_errors(kinesis: Any) -> None:
    with pytest.raises(ShardNotFoundError, match=r"shardId-000000000042.*reader-test"):
        ShardReader(kinesis, STREAM, "shardId-000000000042", InitialPosition.TRIM_HORIZON).read_batch()
    with pytest.raises(StreamNotFoundError, match=r"'nope'.*us-east-1"):
        ShardReader(kinesis, "nope", SHARD, InitialPosition.TRIM_HORIZON).read_batch()


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="max_records"):
        ShardReader(None, STREAM, SHARD, max_records=10001)
    with pytest.raises(ConfigurationError, match="start must be"):
        ShardReader(None, STREAM, SHARD, "LATEST")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="a sequence number must be"):
        Position("not-a-number")
    with pytest.raises(ConfigurationError, match="timezone-aware"):
        InitialPosition.at_timestamp(datetime(2024, 1, 1))


def test_initial_position_parse() -> None:
    assert InitialPosition.parse("latest") == InitialPosition.LATEST
    assert InitialPosition.parse("TRIM_HORIZON") == InitialPosition.TRIM_HORIZON
    ts = InitialPosition.parse("AT_TIMESTAMP:2024-05-01T12:00:00")
    assert ts.timestamp == datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert InitialPosition.parse(str(ts)) == ts
    with pytest.raises(ConfigurationError, match="AT_TIMESTAMP"):
        InitialPosition.parse("SOMEWHERE")


def test_position_ordering_is_numeric_and_round_trips() -> None:
    assert Position("9", 5) < Position("10", 0) < Position("10", 1)
    assert Position.from_dict(Position("123", 4).to_dict()) == Position("123", 4)
    with pytest.raises(ConfigurationError, match="sequence_number"):
        Position.from_dict({"sub_sequence_number": 1})


# --- read_range -------------------------------------------------------------------------------


def test_read_range_between_two_positions_is_exact_and_replayable(kinesis: Any) -> None:
    put(kinesis, 3, "a")
    seq = put_aggregate(kinesis, ["k0", "k1", "k2", "k3"])
    put(kinesis, 3, "b")
    everything = drain(ShardReader(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON))
    positions = [r.position for r in everything]
    start, end = Position(seq, 1), everything[-2].position
    expected = [r for r in everything if start < r.position <= end]
    first = list(read_range(kinesis, STREAM, SHARD, start, end, batch_size=2))
    assert first == expected and len(first) == 2 + 2
    assert list(read_range(kinesis, STREAM, SHARD, start, end, batch_size=3)) == expected
    assert list(read_range(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON, None)) == everything
    capped = list(read_range(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON, None, max_records=5))
    assert capped == everything[:5]
    until_mid = list(read_range(kinesis, STREAM, SHARD, positions[0], Position(seq, 2)))
    assert [r.position for r in until_mid] == positions[1:6]


def test_read_range_stops_when_caught_up_if_until_is_never_reached(kinesis: Any) -> None:
    written = put(kinesis, 3)
    got = list(read_range(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON, Position("999999")))
    assert datas(got) == written


def test_iter_records_holds_back_unyielded_records(kinesis: Any) -> None:
    written = put(kinesis, 7)
    reader = ShardReader(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON)
    head = list(reader.iter_records(max_records=3))
    calls = reader.stats.get_records_calls
    tail = reader.read_batch()
    assert reader.stats.get_records_calls == calls  # served from what was held back
    assert datas(head) + datas(tail.records) == written
    assert reader.stats.records_delivered == 7


# --- retry helper -----------------------------------------------------------------------------


def test_a_long_retry_backoff_is_interrupted_by_the_stop_event() -> None:
    from botocore.exceptions import ClientError

    from kinesis.consumer.retrieval.failures import ShutdownRequested, call_with_retries

    stop, called = threading.Event(), threading.Event()
    outcome: list[BaseException] = []

    def throttled() -> None:
        called.set()
        raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException"}}, "GetRecords")

    def run() -> None:
        try:
            call_with_retries(throttled, what="test", max_attempts=100, initial_wait=100,
                              max_wait=100, stop_event=stop)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    assert called.wait(10)
    stop.set()
    worker.join(10)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ShutdownRequested)


def test_non_transient_errors_are_not_retried() -> None:
    from botocore.exceptions import ClientError

    from kinesis.consumer.retrieval.failures import call_with_retries

    calls = []

    def invalid() -> None:
        calls.append(1)
        raise ClientError({"Error": {"Code": "InvalidArgumentException"}}, "GetRecords")

    with pytest.raises(ClientError, match="InvalidArgumentException"):
        call_with_retries(invalid, what="test")
    assert len(calls) == 1


# --- lineage end to end -----------------------------------------------------------------------


def test_following_lineage_through_split_and_merge_keeps_per_key_order(kinesis_resharding: LocalAWS) -> None:
    from collections import defaultdict

    from kinesis.consumer.discovery.shards import ShardDiscovery, ready_shards

    client = kinesis_resharding.client("kinesis")
    client.create_stream(StreamName="lineage", ShardCount=2)
    counter: dict[str, int] = defaultdict(int)

    def write(rounds: int) -> None:
        entries = []
        for _ in range(rounds):
            for key in (f"key-{i}" for i in range(12)):
                counter[key] += 1
                entries.append({"Data": f"{key}:{counter[key]}".encode(), "PartitionKey": key})
        client.put_records(StreamName="lineage", Records=entries)

    write(2)
    s0 = client.list_shards(StreamName="lineage")["Shards"][0]
    mid = (int(s0["HashKeyRange"]["StartingHashKey"]) + int(s0["HashKeyRange"]["EndingHashKey"])) // 2
    client.split_shard(StreamName="lineage", ShardToSplit="shardId-000000000000", NewStartingHashKey=str(mid))
    write(2)
    client.merge_shards(StreamName="lineage", ShardToMerge="shardId-000000000003",
                        AdjacentShardToMerge="shardId-000000000001")
    write(2)

    shards = ShardDiscovery(client, "lineage").list_shards()
    finished: set[str] = set()
    caught_up: set[str] = set()
    seen: list[bytes] = []
    order: list[str] = []
    while ready := [s for s in ready_shards(shards, finished) if s.shard_id not in caught_up]:
        for shard in ready:
            reader = ShardReader(client, "lineage", shard.shard_id, InitialPosition.TRIM_HORIZON, idle_backoff=0)
            seen += datas(drain(reader))
            order.append(shard.shard_id)
            (finished if reader.shard_ended else caught_up).add(shard.shard_id)
    assert finished == {"shardId-000000000000", "shardId-000000000001", "shardId-000000000003"}
    assert caught_up == {"shardId-000000000002", "shardId-000000000004"}
    assert order.index("shardId-000000000004") > order.index("shardId-000000000001")
    assert order.index("shardId-000000000004") > order.index("shardId-000000000003")
    assert len(seen) == len(set(seen)) == 12 * 6  # every record exactly once
    per_key: dict[str, list[int]] = defaultdict(list)
    for item in seen:
        key, n = item.decode().split(":")
        per_key[key].append(int(n))
    assert all(values == list(range(1, 7)) for values in per_key.values())


def test_breaking_out_of_iter_records_loses_nothing(kinesis: Any) -> None:
    written = put(kinesis, 6)
    reader = ShardReader(kinesis, STREAM, SHARD, InitialPosition.TRIM_HORIZON)
    head: list[Record] = []
    for record in reader.iter_records():
        head.append(record)
        if len(head) == 2:
            break
    assert reader.last_position == head[-1].position
    assert datas(head) + datas(drain(reader)) == written


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 60), st.integers(0, 3)), max_size=12, unique=True),
       st.none() | st.tuples(st.integers(1, 60), st.integers(0, 3)))
def test_a_batch_ends_a_range_at_the_records_up_to_its_end_and_only_if_it_reaches_it(
    keys: list[tuple[int, int]], until: tuple[int, int] | None
) -> None:
    records = [Record("s", "shardId-0", str(seq), sub, "k", b"", None, None, bool(sub))
               for seq, sub in sorted(keys)]
    end = None if until is None else Position(str(until[0]), until[1])
    at_or_before = [r for r in records if end is not None and r.position <= end]
    reaches = end is not None and bool(records) and records[-1].position >= end
    assert until_end(records, end) == (len(at_or_before) if reaches else None)


def test_a_range_that_ends_at_an_initial_position_has_no_record_and_one_at_shard_end_goes_on() -> None:
    records = [Record("s", "shardId-0", "7", 0, "k", b"", None, None, False)]
    assert until_end(records, InitialPosition.LATEST) == 0  # type: ignore[arg-type]
    assert until_end(records, InitialPosition.TRIM_HORIZON) == 0  # type: ignore[arg-type]
    assert until_end(records, SHARD_END) is None  # type: ignore[arg-type]
