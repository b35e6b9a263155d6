"""KPL aggregation: our encoder/decoder, interop with the reference aws-kinesis-agg, and
records_from_response (de-aggregation, corrupt aggregates passed through with a warning)."""

from __future__ import annotations

import base64
import copy
import gc
import hashlib
import logging
import pickle
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from aws_kinesis_agg import aggregator as ref_aggregator
from aws_kinesis_agg import deaggregator as ref_deaggregator
from hypothesis import given, settings
from hypothesis import strategies as st

from kinesis.consumer.retrieval.positions import Position
from kinesis.consumer.retrieval.records import (
    DIGEST_SIZE,
    MAGIC,
    MAX_RECORD_BYTES,
    Record,
    RecordAggregator,
    UserRecord,
    aggregate,
    deaggregate,
    partition_key_hash,
    records_from_response,
)
from kinesis.errors import AggregationError, RecordTooLargeError

ARRIVAL = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
FIELDS = ("stream_name", "shard_id", "sequence_number", "sub_sequence_number", "partition_key", "data",
          "approximate_arrival_timestamp", "explicit_hash_key", "aggregated")

user_records = st.lists(
    st.builds(
        UserRecord,
        partition_key=st.text(min_size=1, max_size=20),
        data=st.binary(max_size=300),
        explicit_hash_key=st.none() | st.integers(0, 2**128 - 1).map(str),
    ),
    min_size=1,
    max_size=40,
)


def raw(data: bytes, seq: str = "100", pk: str = "outer") -> dict[str, object]:
    return {"Data": data, "SequenceNumber": seq, "PartitionKey": pk, "ApproximateArrivalTimestamp": ARRIVAL}


# --- our encoder and decoder --------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(user_records)
def test_aggregate_then_deaggregate_is_identity(records: list[UserRecord]) -> None:
    (agg,) = aggregate(records)
    assert agg.data.startswith(MAGIC)
    assert agg.count == len(records)
    assert deaggregate(agg.data) == records
    assert agg.partition_key == records[0].partition_key
    expected_ehk = records[0].explicit_hash_key or str(partition_key_hash(records[0].partition_key))
    assert agg.explicit_hash_key == expected_ehk


def test_partition_key_hash_is_the_kinesis_md5() -> None:
    assert partition_key_hash("a") == int(hashlib.md5(b"a").hexdigest(), 16)


@settings(max_examples=100, deadline=None)
@given(user_records)
def test_our_aggregates_decode_with_the_reference_library(records: list[UserRecord]) -> None:
    (agg,) = aggregate(records)
    boto3_record = {"Data": agg.data, "PartitionKey": agg.partition_key, "SequenceNumber": "7",
                    "ApproximateArrivalTimestamp": ARRIVAL}
    decoded = list(ref_deaggregator.iter_deaggregate_records([boto3_record], data_format="Boto3"))
    assert [base64.b64decode(d["kinesis"]["data"]) for d in decoded] == [r.data for r in records]
    if all(r.explicit_hash_key for r in records):
        # (the reference misreports records without an EHK once the table is non-empty)
        assert [d["kinesis"]["explicitHashKey"] for d in decoded] == [r.explicit_hash_key for r in records]
    assert [d["kinesis"]["partitionKey"] for d in decoded] == [r.partition_key for r in records]
    assert [d["kinesis"]["subSequenceNumber"] for d in decoded] == list(range(len(records)))


@settings(max_examples=100, deadline=None)
@given(user_records)
def test_reference_library_aggregates_decode_with_ours(records: list[UserRecord]) -> None:
    agg = ref_aggregator.RecordAggregator()
    for r in records:
        assert agg.add_user_record(r.partition_key, r.data, r.explicit_hash_key) is None
    pk, _ehk, data = agg.clear_and_get().get_contents()
    got = records_from_response("s", "shard-1", [raw(data, pk=pk)])
    assert [(g.partition_key, g.data, g.explicit_hash_key) for g in got] == [
        (r.partition_key, r.data, r.explicit_hash_key) for r in records
    ]
    assert [g.sub_sequence_number for g in got] == list(range(len(records)))
    assert all(g.aggregated and g.sequence_number == "100" for g in got)


def test_aggregator_starts_a_new_aggregate_when_full_and_respects_the_limit() -> None:
    limit = 10_000
    records = [UserRecord(f"pk{i % 7}", bytes([i % 251]) * 900) for i in range(40)]
    aggs = aggregate(records, max_bytes=limit)
    assert len(aggs) > 1
    for agg in aggs:
        assert len(agg.data) + len(agg.partition_key.encode()) <= limit
    assert [u for a in aggs for u in deaggregate(a.data)] == records


def test_aggregator_max_records_caps_each_aggregate() -> None:
    agg = RecordAggregator(max_records=3)
    done = [agg.add(f"k{i}", b"x") for i in range(7)]
    finished = [d for d in done if d is not None]
    last = agg.flush()
    assert last is not None
    assert [a.count for a in finished] + [last.count] == [3, 3, 1]
    assert agg.flush() is None and len(agg) == 0


def test_a_user_record_too_large_for_one_kinesis_record_is_refused() -> None:
    agg = RecordAggregator()
    agg.add("small", b"ok")
    with pytest.raises(RecordTooLargeError, match="1 MiB") as err:
        agg.add("big", b"x" * MAX_RECORD_BYTES)
    assert isinstance(err.value, ValueError)
    # The refusal lost nothing: the earlier record is still in the (new) aggregate state.
    finished = agg.flush()
    assert finished is not None and deaggregate(finished.data) == [UserRecord("small", b"ok")]
    # The biggest payload that fits alone is accepted and stays within the limit.
    alone = RecordAggregator()
    alone.add("k", b"x" * (MAX_RECORD_BYTES - 64))
    out = alone.flush()
    assert out is not None and len(out.data) + 1 <= MAX_RECORD_BYTES


@pytest.mark.parametrize(
    ("pk", "data", "ehk", "match"),
    [
        ("", b"x", None, "partition_key"),
        ("k" * 257, b"x", None, "partition_key"),
        ("k", "text", None, "data must be bytes"),
        ("k", b"x", "12a", "explicit_hash_key"),
        ("k", b"x", str(2**128), "explicit_hash_key"),
    ],
)
def test_aggregator_rejects_bad_user_records(pk: str, data: object, ehk: str | None, match: str) -> None:
    with pytest.raises(AggregationError, match=match):
        RecordAggregator().add(pk, data, ehk)  # type: ignore[arg-type]


def test_deaggregate_rejects_corrupt_input_with_specific_errors() -> None:
    (agg,) = aggregate([("a", b"1"), ("b", b"2")])
    with pytest.raises(AggregationError, match="magic"):
        deaggregate(b"plain data")
    flipped = bytearray(agg.data)
    flipped[len(MAGIC) + 3] ^= 0xFF
    with pytest.raises(AggregationError, match="MD5"):
        deaggregate(bytes(flipped))
    bad_body = b"\x1a\x04\x08\x05\x1a\x00"  # one record pointing at partition key index 5
    with pytest.raises(AggregationError, match="partition_key_index 5"):
        deaggregate(MAGIC + bad_body + hashlib.md5(bad_body).digest())
    truncated = b"\x0a\x10ab"  # a string field claiming 16 bytes
    with pytest.raises(AggregationError, match="past the end"):
        deaggregate(MAGIC + truncated + hashlib.md5(truncated).digest())


def test_deaggregate_skips_unknown_fields_and_tags() -> None:
    # partition_key_table "k"; a record with pk index 0, data "v", a tag {key "t"}; field 9 (varint) unknown.
    record = b"\x08\x00\x1a\x01v\x22\x03\x0a\x01t"
    body = b"\x0a\x01k" + b"\x48\x07" + b"\x1a" + bytes([len(record)]) + record
    assert deaggregate(MAGIC + body + hashlib.md5(body).digest()) == [UserRecord("k", b"v")]


# --- records_from_response ----------------------------------------------------------------


def test_plain_records_pass_through() -> None:
    (rec,) = records_from_response("s", "shard-1", [raw(b"hello", seq="5", pk="p")])
    assert rec == Record("s", "shard-1", "5", 0, "p", b"hello", ARRIVAL, None, False)
    assert rec.position == Position("5", 0)


def test_mixed_batch_keeps_order_and_numbers_sub_records() -> None:
    (agg,) = aggregate([("a", b"1"), ("b", b"2"), ("a", b"3")])
    got = records_from_response("s", "sh", [raw(b"p1", "1"), raw(agg.data, "2"), raw(b"p2", "3")])
    assert [(r.sequence_number, r.sub_sequence_number, r.partition_key, r.data, r.aggregated) for r in got] == [
        ("1", 0, "outer", b"p1", False),
        ("2", 0, "a", b"1", True),
        ("2", 1, "b", b"2", True),
        ("2", 2, "a", b"3", True),
        ("3", 0, "outer", b"p2", False),
    ]
    assert [r.position for r in got] == sorted(r.position for r in got)
    assert all(r.approximate_arrival_timestamp == ARRIVAL for r in got)


def test_bad_md5_aggregate_is_passed_through_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    (agg,) = aggregate([("a", b"1"), ("b", b"2")])
    corrupt = agg.data[:-1] + bytes([agg.data[-1] ^ 1])
    with caplog.at_level(logging.WARNING, logger="kinesis.consumer.retrieval.records"):
        (rec,) = records_from_response("s", "sh", [raw(corrupt, "9")])
    assert rec.data == corrupt and not rec.aggregated and rec.sub_sequence_number == 0
    assert "MD5" in caplog.text and "9" in caplog.text


def test_valid_digest_but_malformed_body_is_passed_through_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    body = b"\x1a\x04\x08\x05\x1a\x00"
    data = MAGIC + body + hashlib.md5(body).digest()
    with caplog.at_level(logging.WARNING, logger="kinesis.consumer.retrieval.records"):
        (rec,) = records_from_response("s", "sh", [raw(data, "4")])
    assert rec.data == data and not rec.aggregated
    assert "malformed" in caplog.text


def test_magic_without_room_for_a_digest_is_plain_data() -> None:
    short = MAGIC + b"x" * (DIGEST_SIZE - 1)
    (rec,) = records_from_response("s", "sh", [raw(short)])
    assert rec.data == short and not rec.aggregated


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"\x02\x00", "field number 0"),  # field 0, length-delimited
        (b"\x0a\x01k\x1a\x03\x08\x00\x1a", "past"),  # record's data field runs past its length
        (b"\x0a\x01k\x1a\x02\x08\x00", "lacks"),  # record without data
        (b"\x0b", "wire type 3"),  # groups are not supported
        (b"\x0a\x02\xff\xfe", "UTF-8"),
    ],
)
def test_deaggregate_rejects_malformed_protobuf(body: bytes, match: str) -> None:
    with pytest.raises(AggregationError, match=match):
        deaggregate(MAGIC + body + hashlib.md5(body).digest())


@settings(max_examples=100, deadline=None)
@given(st.tuples(st.text(max_size=8), st.text(max_size=8), st.integers(0, 10**30).map(str), st.integers(0, 2**20),
                 st.text(max_size=8), st.binary(max_size=16), st.none() | st.just(ARRIVAL),
                 st.none() | st.integers(0, 2**128 - 1).map(str), st.booleans()))
def test_a_record_is_an_immutable_value_the_garbage_collector_does_not_track(values: tuple[Any, ...]) -> None:
    record, by_keyword = Record(*values), Record(**dict(zip(FIELDS, values, strict=True)))
    assert record == by_keyword and hash(record) == hash(by_keyword) and repr(record) == repr(by_keyword)
    assert type(record) is Record and msgspec.structs.astuple(record) == values
    assert pickle.loads(pickle.dumps(record)) == record and copy.copy(record) == record
    assert not gc.is_tracked(record)  # a batch of them is never promoted nor walked by a full collection
    changed = msgspec.structs.replace(record, data=b"changed")
    assert changed.data == b"changed" and record.data == values[5]
    with pytest.raises(AttributeError):
        record.data = b"changed"  # type: ignore[misc]
