"""The fast parser of GetRecords bodies and SubscribeToShard events equals botocore's on every
body it accepts, and leaves the rest (and every error response or exception message) to
botocore. Property tests over random responses and events, adversarial bodies, and real
responses and subscriptions of the moto server through boto3 clients with and without it."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, cast

import boto3
import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer, ParserError
from botocore.exceptions import ClientError
from botocore.parsers import EventStreamJSONParser, create_parser
from hypothesis import given, settings
from hypothesis import strategies as st

from kinesis.consumer.retrieval import fast_parse
from kinesis.consumer.retrieval.fanout import FanOutReader
from kinesis.consumer.retrieval.polling import ShardReader
from kinesis.consumer.retrieval.positions import InitialPosition, Position
from kinesis.consumer.retrieval.records import MAGIC, aggregate, records_from_response
from kinesis.testing import LocalAWS, client_for
from tests.support import eventstream
from tests.support.fanout_endpoint import fanout_endpoint

_SHAPE = boto3.client("kinesis", region_name="us-east-1", aws_access_key_id="x",
                      aws_secret_access_key="y").meta.service_model.operation_model("GetRecords").output_shape
_BOTOCORE = create_parser("json")


def botocore_parse(body: bytes) -> dict[str, Any]:
    parsed = _BOTOCORE.parse({"status_code": 200, "headers": {}, "body": body}, _SHAPE)
    parsed.pop("ResponseMetadata", None)
    return dict(parsed)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A member that is there, null, or absent (``...``)."""
    return st.one_of(strategy, st.none(), st.just(...))


text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)  # any unicode but lone surrogates
records = st.fixed_dictionaries({}, optional={
    "SequenceNumber": st.integers(0, 10**56).map(str),
    "ApproximateArrivalTimestamp": st.one_of(st.floats(0, 4e9, allow_nan=False), st.integers(0, 4 * 10**9)),
    "Data": st.binary(max_size=2048).map(lambda b: base64.b64encode(b).decode()),
    "PartitionKey": text,
    "EncryptionType": st.sampled_from(["NONE", "KMS"]),
})
children = st.fixed_dictionaries({}, optional={
    "ShardId": text,
    "ParentShards": st.lists(text, max_size=2),
    "HashKeyRange": st.fixed_dictionaries({}, optional={"StartingHashKey": text, "EndingHashKey": text}),
})
responses = st.fixed_dictionaries({}, optional={
    "Records": st.lists(records, max_size=8),
    "NextShardIterator": maybe(text),
    "MillisBehindLatest": maybe(st.integers(0, 2**40)),
    "ChildShards": maybe(st.lists(children, max_size=2)),
})


def encode(response: dict[str, Any]) -> bytes:
    return json.dumps({k: v for k, v in response.items() if v is not ...}).encode()


@settings(max_examples=300, deadline=None)
@given(responses)
def test_every_response_is_parsed_as_botocore_parses_it(response: dict[str, Any]) -> None:
    body = encode(response)
    ours = fast_parse.parse_get_records(body)
    assert ours is not None, body  # a well-formed response is always its to parse
    assert ours == botocore_parse(body)  # datetimes compare as instants
    assert all(r["ApproximateArrivalTimestamp"].tzinfo is UTC for r in ours.get("Records", [])
               if "ApproximateArrivalTimestamp" in r)
    theirs = botocore_parse(body).get("Records", [])
    full = [r for r in ours.get("Records", []) if {"SequenceNumber", "Data", "PartitionKey"} <= r.keys()]
    if len(full) == len(theirs):  # the SDK's records from either parse are the same records
        assert records_from_response("s", "shardId-0", full) == records_from_response("s", "shardId-0", theirs)


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.binary(max_size=64),
    st.recursive(st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False), st.integers(), text),
                 lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(
                     st.sampled_from(["Records", "Data", "SequenceNumber", "MillisBehindLatest", "ChildShards",
                                      "NextShardIterator", "ApproximateArrivalTimestamp", "PartitionKey", "x"]),
                     inner, max_size=4)), max_leaves=12).map(lambda v: json.dumps(v).encode()),
))
def test_what_it_accepts_from_any_body_equals_botocore_and_the_rest_is_left_to_botocore(body: bytes) -> None:
    ours = fast_parse.parse_get_records(body)
    if ours is not None:
        assert ours == botocore_parse(body)


@pytest.mark.parametrize("body", [
    b'{"Records": [], "MillisBehindLatest": 5.0}',  # a float where botocore keeps the float
    b'{"Records": [{"Data": 5}]}',  # a blob that is not a string
    b'{"Records": [null]}',  # botocore keeps the null in the list
    b'{"Records": [{"ApproximateArrivalTimestamp": "2026-11-28T00:00:00Z"}]}',  # an ISO string: botocore's
    b'{"Records": [], "SomethingNew": 1}',  # a member this parser does not know
    b'{"MillisBehindLatest": true}',
    b'{"MillisBehindLatest": 1e400}',
    b'{"Records": [{"PartitionKey": "\\ud800"}]}',  # a lone surrogate: orjson refuses it
    b'not json', b'[]', b'{"MillisBehindLatest": 99999999999999999999999}',
    # base64 that botocore's lenient decode accepts but AWS never sends: botocore decodes it
    b'{"Records": [{"SequenceNumber": "1", "ApproximateArrivalTimestamp": 1.5, "Data": "QUJD\\nREVG", '
    b'"PartitionKey": "k"}]}',
    b'{"Records": [{"Data": "QU*JD"}]}',  # a character outside the alphabet, discarded by botocore
    b'{"Records": [{"Data": "QUJD===="}]}',  # excess padding
    b'{"Records": [{"Data": "-_-_"}]}',  # the URL-safe alphabet
])
def test_unrecognised_bodies_are_left_to_botocore(body: bytes) -> None:
    assert fast_parse.parse_get_records(body) is None


BIG = bytes(range(256)) * 4096  # 1 MiB, the largest record Kinesis takes


def big_and_aggregate_body(**second: str) -> bytes:
    """A body of a 1 MiB record and a KPL aggregate of two user records (``second``: more
    members of the aggregate's Kinesis record)."""
    agg = aggregate([("pk-ü", b"one"), ("pk-2", b"two")])[0]
    return json.dumps({"Records": [
        {"SequenceNumber": "1", "ApproximateArrivalTimestamp": 1764288000.123, "PartitionKey": "k",
         "Data": base64.b64encode(BIG).decode()},
        {"SequenceNumber": "2", "ApproximateArrivalTimestamp": 1764288001, "PartitionKey": agg.partition_key,
         "Data": base64.b64encode(agg.data).decode(), **second},
    ], "NextShardIterator": "it", "MillisBehindLatest": 0}).encode()


def test_a_one_mebibyte_record_and_a_kpl_aggregate_decode_the_same() -> None:
    big, body = BIG, big_and_aggregate_body()
    ours = fast_parse.parse_get_records(body)
    assert ours is not None and ours == botocore_parse(body) and ours["Records"][0]["Data"] == big
    users = records_from_response("s", "shardId-0", ours["Records"])
    assert [(r.partition_key, r.data, r.sub_sequence_number) for r in users[1:]] == [("pk-ü", b"one", 0),
                                                                                    ("pk-2", b"two", 1)]


@pytest.mark.parametrize("reading", [False, True])
def test_error_responses_and_empty_bodies_are_not_touched(reading: bool) -> None:
    for response in ({"status_code": 400, "headers": {}, "body": b'{"__type": "ExpiredIteratorException"}'},
                     {"status_code": 200, "headers": {}, "body": b""}):
        before = dict(response)
        customized: dict[str, Any] = {}
        with fast_parse.reading("s", "shardId-0") if reading else contextlib.nullcontext():
            fast_parse._before_parse(response_dict=response, customized_response_dict=customized)
        assert response == before and customized == {}


def test_real_responses_through_boto3_equal_botocores(aws: LocalAWS) -> None:
    plain, fast = aws.client("kinesis"), aws.client("kinesis")
    fast_parse.install(fast)
    fast_parse.install(fast)  # once only
    plain.create_stream(StreamName="parse", ShardCount=1)
    plain.put_records(StreamName="parse", Records=[
        {"Data": bytes([i]) * (i * 10), "PartitionKey": f"ключ-{i}"} for i in range(50)])
    shard = plain.list_shards(StreamName="parse")["Shards"][0]["ShardId"]
    iterator = plain.get_shard_iterator(StreamName="parse", ShardId=shard,
                                        ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    a, b = plain.get_records(ShardIterator=iterator), fast.get_records(ShardIterator=iterator)
    assert len(b["Records"]) == 50 and a["Records"] == b["Records"]
    assert a["MillisBehindLatest"] == b["MillisBehindLatest"] and b["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert all(r["ApproximateArrivalTimestamp"].tzinfo is UTC for r in b["Records"])
    codes = []
    for client in (plain, fast):  # errors are botocore's, as before
        with pytest.raises(ClientError) as raised:
            client.get_records(ShardIterator="x" * 40)
        codes.append((raised.value.response["Error"]["Code"], raised.value.response["Error"]["Message"]))
    assert codes[0] == codes[1] and codes[0][0]


# -- the SDK's own reads: msgspec straight to Records (fast_parse.decode_get_records) ----------
REQUIRED = {"SequenceNumber", "Data", "PartitionKey"}


def utc(arrival: datetime | None) -> datetime | None:
    """botocore's local-time arrival in UTC: in a zone's repeated hour its ``fold=1`` datetime
    is never ``==`` an aware one, though it is the same instant."""
    return None if arrival is None else arrival.astimezone(UTC)


def via_botocore(body: bytes) -> dict[str, Any]:
    """What the SDK made of ``body`` before: botocore's parse, then records_from_response."""
    parsed = botocore_parse(body)
    raw = parsed.get("Records", [])
    parsed["Records"] = records_from_response("s", "shardId-0", raw)
    parsed["first"] = (raw[0]["SequenceNumber"], utc(raw[0].get("ApproximateArrivalTimestamp"))) if raw else None
    return parsed


def decoded_as_dict(body: bytes) -> dict[str, Any] | None:
    out = fast_parse.decode_get_records(body, "s", "shardId-0")
    if out is None:
        return None
    assert type(out["Records"]) is fast_parse.DecodedRecords
    return {**out, "first": out["Records"].first}


@settings(max_examples=300, deadline=None)
@given(responses)
def test_the_sdks_decoded_records_equal_those_made_from_botocores_parse(response: dict[str, Any]) -> None:
    body = encode(response)
    ours = decoded_as_dict(body)
    complete = all(r.keys() >= REQUIRED for r in response.get("Records", []))
    if complete and "ChildShards" not in json.loads(body):
        assert ours is not None, body  # a well-formed response without children is always its to decode
    if ours is not None:
        assert ours == via_botocore(body)  # the records, the iterator, the lag, the first record
        assert all(r.approximate_arrival_timestamp is None or r.approximate_arrival_timestamp.tzinfo is UTC
                   for r in ours["Records"])


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.binary(max_size=64),
    st.recursive(st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False), st.integers(), text,
                           st.sampled_from(["QUJD", "QUJD\n", "QU*JD", "QUJD====", "-_-_", "QQ", "QR=="])),
                 lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(
                     st.sampled_from(["Records", "Data", "SequenceNumber", "MillisBehindLatest", "ChildShards",
                                      "NextShardIterator", "ApproximateArrivalTimestamp", "PartitionKey",
                                      "EncryptionType", "x"]),
                     inner, max_size=5)), max_leaves=16).map(lambda v: json.dumps(v).encode()),
))
def test_what_the_decoder_accepts_from_any_body_equals_botocore_and_the_rest_goes_the_dict_path(body: bytes) -> None:
    ours = decoded_as_dict(body)
    if ours is not None:
        assert ours == via_botocore(body)


@pytest.mark.parametrize("body", [
    b'{"Records": [], "MillisBehindLatest": 5.0}',
    b'{"Records": [null]}',
    b'{"Records": [], "SomethingNew": 1}',
    b'{"MillisBehindLatest": true}', b'{"MillisBehindLatest": 1e400}',
    b'not json', b'[]',
    b'{"Records": [], "ChildShards": []}',  # a shard's last batch: its children are the dict path's
    *[b'{"Records": [{"SequenceNumber": "1", "ApproximateArrivalTimestamp": %s, "Data": "%s", "PartitionKey": "%s"}]}'
      % (arrival, data, key) for arrival, data, key in [
          (b"1.5", b"QUJD\\nREVG", b"k"), (b"1.5", b"QU*JD", b"k"), (b"1.5", b"QUJD====", b"k"),
          (b"1.5", b"-_-_", b"k"), (b"1.5", b"QQ", b"k"),  # base64 AWS never sends: botocore's lenient decode
          (b'"2026-11-28T00:00:00Z"', b"QUJD", b"k"), (b"true", b"QUJD", b"k"), (b"1e20", b"QUJD", b"k"),
          (b"1.5", b"QUJD", b"\\ud800")]],
    b'{"Records": [{"SequenceNumber": "1", "Data": "QUJD"}]}',  # no PartitionKey: botocore's KeyError, as before
])
def test_bodies_the_decoder_does_not_recognise_go_the_dict_path(body: bytes) -> None:
    assert fast_parse.decode_get_records(body, "s", "shardId-0") is None


def test_a_one_mebibyte_record_and_a_kpl_aggregate_are_decoded_to_the_same_records() -> None:
    body = big_and_aggregate_body(EncryptionType="KMS")
    ours = decoded_as_dict(body)
    assert ours is not None and ours == via_botocore(body) and ours["Records"][0].data == BIG
    assert ours["Records"].kinesis_records == 2 and len(ours["Records"]) == 3
    assert [(r.partition_key, r.data, r.sub_sequence_number, r.aggregated) for r in ours["Records"][1:]] == [
        ("pk-ü", b"one", 0, True), ("pk-2", b"two", 1, True)]


def test_only_a_call_made_while_reading_gets_decoded_records(aws: LocalAWS) -> None:
    plain, fast = aws.client("kinesis"), aws.client("kinesis")
    fast_parse.install(fast)
    plain.create_stream(StreamName="decode", ShardCount=1)
    plain.put_records(StreamName="decode", Records=[
        {"Data": bytes([i]) * (i * 10), "PartitionKey": f"ключ-{i}"} for i in range(50)])
    shard = plain.list_shards(StreamName="decode")["Shards"][0]["ShardId"]
    iterator = plain.get_shard_iterator(StreamName="decode", ShardId=shard,
                                        ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    with fast_parse.reading("decode", shard):
        decoded = fast.get_records(ShardIterator=iterator)
    after = fast.get_records(ShardIterator=iterator)  # outside the block: botocore's dicts again
    reference = plain.get_records(ShardIterator=iterator)
    assert type(decoded["Records"]) is fast_parse.DecodedRecords and len(decoded["Records"]) == 50
    assert decoded["Records"] == records_from_response("decode", shard, reference["Records"])
    assert type(after["Records"]) is list and after["Records"] == reference["Records"]
    assert decoded["NextShardIterator"] and decoded["MillisBehindLatest"] == reference["MillisBehindLatest"]


def test_a_shard_reader_reads_through_the_decoder_and_gets_the_same_records(
        aws: LocalAWS, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = aws.client("kinesis")
    plain.create_stream(StreamName="reader", ShardCount=1)
    agg = aggregate([("pk-ü", b"one"), ("pk-2", b"two"), ("pk-3", b"three")])[0]
    plain.put_records(StreamName="reader", Records=[
        *({"Data": bytes([i]) * (i + 1), "PartitionKey": f"ключ-{i}"} for i in range(20)),
        {"Data": agg.data, "PartitionKey": agg.partition_key}])
    shard = plain.list_shards(StreamName="reader")["Shards"][0]["ShardId"]
    iterator = plain.get_shard_iterator(StreamName="reader", ShardId=shard,
                                        ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    expected = records_from_response("reader", shard, plain.get_records(ShardIterator=iterator)["Records"])
    decoded: list[bool] = []
    real = fast_parse.decode_get_records

    def counted(body: bytes, stream_name: str, shard_id: str) -> dict[str, Any] | None:
        out = real(body, stream_name, shard_id)
        decoded.append(out is not None)
        return out

    monkeypatch.setattr(fast_parse, "decode_get_records", counted)
    reader = ShardReader(aws.client("kinesis"), "reader", shard, InitialPosition.TRIM_HORIZON, idle_backoff=0.0)
    got = reader.read_batch().records
    assert decoded and all(decoded)  # the body went the decoder's way, not the dicts'
    assert got == expected and len(got) == 23 and [r.sub_sequence_number for r in got[-3:]] == [0, 1, 2]


def test_a_batch_at_the_tip_waits_by_its_kinesis_records_not_its_unpacked_ones(aws: LocalAWS) -> None:
    # GetRecords' Limit counts Kinesis records: 2 aggregates of 10 user records under a Limit of
    # 10 is a batch at the tip, which waits idle_backoff, not a full one read again at once
    plain = aws.client("kinesis")
    plain.create_stream(StreamName="tip", ShardCount=1)
    plain.put_records(StreamName="tip", Records=[
        {"Data": agg.data, "PartitionKey": agg.partition_key}
        for agg in (aggregate([(f"k-{n}-{i}", b"x") for i in range(10)])[0] for n in range(2))])
    shard = plain.list_shards(StreamName="tip")["Shards"][0]["ShardId"]
    reader = ShardReader(aws.client("kinesis"), "tip", shard, InitialPosition.TRIM_HORIZON, max_records=10,
                         idle_backoff=1.0)
    batch = reader.read_batch()
    assert type(batch.records) is fast_parse.DecodedRecords and len(batch.records) == 20
    assert batch.millis_behind_latest == 0 and batch.suggested_wait == 1.0


def test_a_fanout_event_of_an_aggregate_of_no_user_records_is_not_a_data_gap(aws: LocalAWS) -> None:
    # a well-formed aggregate whose only member is a partition-key table: no user records, but
    # it is the record the reader resumes at, so the next event's first record is no gap
    body = b"\x0a\x01k"
    empty = MAGIC + body + hashlib.md5(body, usedforsecurity=False).digest()
    reader = FanOutReader(aws.client("kinesis"), "s", "shardId-0", cast(Any, None),
                          Position("100", 0, None))
    reader._cursor.expect_resume()

    def event(seq: str, data: bytes) -> dict[str, Any]:
        out = fast_parse.decode_subscribe_event(json.dumps({"Records": [
            {"SequenceNumber": seq, "ApproximateArrivalTimestamp": 1.5, "PartitionKey": "k",
             "Data": base64.b64encode(data).decode()}], "ContinuationSequenceNumber": seq,
            "MillisBehindLatest": 0}).encode(), "s", "shardId-0")
        assert out is not None
        return out

    first = reader._on_event(event("100", empty))
    second = reader._on_event(event("101", b"data"))
    assert first.records == [] and first.lost is None
    assert [r.sequence_number for r in second.records] == ["101"] and second.lost is None
    assert reader._cursor.first_sequence_number == "100"


_EVENTS = boto3.client("kinesis", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y").meta \
    .service_model.operation_model("SubscribeToShard").output_shape.members["EventStream"]
events = st.fixed_dictionaries({}, optional={
    "Records": st.lists(records, max_size=8),
    "ContinuationSequenceNumber": maybe(st.integers(0, 10**56).map(str)),
    "MillisBehindLatest": maybe(st.integers(0, 2**40)),
    "ChildShards": maybe(st.lists(children, max_size=2)),
})


def event_message(body: bytes, event_type: str = "SubscribeToShardEvent") -> dict[str, Any]:
    """An event-stream message as botocore's EventStream hands it to its parser."""
    return {"status_code": 200, "body": body,
            "headers": {":message-type": "event", ":event-type": event_type, ":content-type": "application/json"}}


@settings(max_examples=300, deadline=None)
@given(events)
def test_every_subscribe_to_shard_event_is_parsed_as_botocore_parses_it(event: dict[str, Any]) -> None:
    body = encode(event)
    assert fast_parse.parse_subscribe_event(body) is not None, body  # a well-formed event is its to parse
    ours = fast_parse._EventParser(EventStreamJSONParser()).parse(event_message(body), _EVENTS)
    theirs = EventStreamJSONParser().parse(event_message(body), _EVENTS)
    assert ours == theirs and list(ours) == ["SubscribeToShardEvent"]
    assert all(r["ApproximateArrivalTimestamp"].tzinfo is UTC for r in ours["SubscribeToShardEvent"].get("Records", [])
               if "ApproximateArrivalTimestamp" in r)


@settings(max_examples=300, deadline=None)
@given(events)
def test_an_sdk_streams_events_are_decoded_to_the_records_made_from_botocores_parse(event: dict[str, Any]) -> None:
    body = encode(event)
    ours = fast_parse._EventParser(EventStreamJSONParser(), ("s", "shardId-0")).parse(event_message(body), _EVENTS)
    theirs = dict(EventStreamJSONParser().parse(event_message(body), _EVENTS)["SubscribeToShardEvent"])
    raw = theirs.get("Records", [])
    got = ours["SubscribeToShardEvent"]
    complete = all(r.keys() >= REQUIRED for r in event.get("Records", []))
    if complete and "ChildShards" not in json.loads(body):
        assert type(got["Records"]) is fast_parse.DecodedRecords, body  # well-formed, no children: decoded
    if type(got.get("Records")) is fast_parse.DecodedRecords:
        theirs["Records"] = records_from_response("s", "shardId-0", raw)
        assert got == theirs
        assert got["Records"].first == ((raw[0]["SequenceNumber"], utc(raw[0].get("ApproximateArrivalTimestamp")))
                                        if raw else None)
    else:  # the dict path, as without a shard
        assert got == dict(fast_parse._EventParser(EventStreamJSONParser()).parse(event_message(body), _EVENTS)[
            "SubscribeToShardEvent"])


@pytest.mark.parametrize("message", [
    event_message(b'{"Records": [], "NextShardIterator": "x"}'),  # a GetRecords member: not an event's
    event_message(b'{"Records": [{"Data": "QU*JD"}]}'),  # lenient base64: botocore's to decode
    event_message(b""),
    event_message(b'{"Records": []}', event_type="SomethingNew"),
    {"status_code": 400, "body": b'{"message": "a newer subscription took over"}',
     "headers": {":message-type": "exception", ":exception-type": "ResourceInUseException"}},
])
def test_other_messages_and_unrecognised_events_are_botocores(message: dict[str, Any]) -> None:
    class Inner:
        def parse(self, response: dict[str, Any], shape: Any) -> Any:
            return "botocore's", EventStreamJSONParser().parse(response, shape)

    assert fast_parse._EventParser(Inner()).parse(message, _EVENTS) == Inner().parse(message, _EVENTS)


def test_real_subscriptions_through_boto3_equal_botocores(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="events", ShardCount=1)
    kinesis.put_records(StreamName="events", Records=[
        {"Data": bytes([i]) * (i * 10), "PartitionKey": f"ключ-{i}"} for i in range(50)])
    arn = kinesis.describe_stream_summary(StreamName="events")["StreamDescriptionSummary"]["StreamARN"]
    shard = kinesis.list_shards(StreamName="events")["Shards"][0]["ShardId"]
    with fanout_endpoint(aws.endpoint_url) as ep:
        client = client_for("kinesis", ep.endpoint_url)
        got = []
        for name, fast in (("plain", False), ("fast", True)):
            if fast:
                fast_parse.install(client)
            consumer = client.register_stream_consumer(StreamARN=arn, ConsumerName=name)["Consumer"]["ConsumerARN"]
            stream = client.subscribe_to_shard(ConsumerARN=consumer, ShardId=shard,
                                               StartingPosition={"Type": "TRIM_HORIZON"})["EventStream"]
            if fast:
                assert isinstance(stream._raw_stream, fast_parse.WholeMessages)
                fast_parse.install_on_event_stream(stream)
                fast_parse.install_on_event_stream(stream)  # once only
                assert isinstance(stream._parser, fast_parse._EventParser)
                assert not isinstance(stream._parser.inner, fast_parse._EventParser)
            event = next(e for e in stream if e["SubscribeToShardEvent"]["Records"])["SubscribeToShardEvent"]
            stream.close()
            got.append(event)
    plain, fast_event = got
    assert len(fast_event["Records"]) == 50 and fast_event == plain
    assert all(r["ApproximateArrivalTimestamp"].tzinfo is UTC for r in fast_event["Records"])


def test_a_stream_without_botocores_parser_is_left_alone() -> None:
    class Double:
        pass

    double = Double()
    fast_parse.install_on_event_stream(double)
    assert not hasattr(double, "_parser")


class Pieces:
    """A streaming body that yields ``wire`` in the given piece sizes (cycled), and counts closes."""

    def __init__(self, wire: bytes, sizes: list[int]):
        self.wire, self.sizes, self.closed = wire, sizes, 0

    def stream(self, amt: int = 2**16) -> Iterator[bytes]:
        at, i = 0, 0
        while at < len(self.wire):
            size = self.sizes[i % len(self.sizes)]
            yield self.wire[at : at + size]
            at, i = at + size, i + 1

    def close(self) -> None:
        self.closed += 1


def decoded(body: Any) -> list[tuple[dict[str, Any], bytes]] | str:
    """What botocore's decoder makes of ``body``'s stream: the messages, or the error it raises."""
    buffer, out = EventStreamBuffer(), []
    try:
        for piece in body.stream():
            buffer.add_data(piece)
            out += [(m.headers, m.payload) for m in buffer]
    except ParserError as exc:
        return type(exc).__name__
    return out


WIRE = [
    eventstream.initial_response(),
    eventstream.event("SubscribeToShardEvent", {"Records": [], "ContinuationSequenceNumber": "7"}),
    eventstream.event("SubscribeToShardEvent", {"Records": [{"Data": "QUJD", "SequenceNumber": "1"}] * 300}),
    eventstream.exception("ResourceInUseException", "taken over"),
    eventstream.encode_message({}, b""),
]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(WIRE), max_size=6), st.lists(st.integers(1, 5000), min_size=1, max_size=5),
       st.sampled_from(["whole", "cut", "bad length", "bad crc"]))
def test_whole_messages_give_botocore_what_the_raw_pieces_give_it(
    messages: list[bytes], sizes: list[int], damage: str
) -> None:
    wire = b"".join(messages)
    if damage == "cut" and wire:
        wire = wire[: len(wire) - 3]  # the last message never completes
    elif damage == "bad length":
        wire += (2**31).to_bytes(4, "big") + bytes(20)  # a length botocore refuses
    elif damage == "bad crc" and wire:
        wire = wire[:-1] + bytes([wire[-1] ^ 1])
    whole = fast_parse.WholeMessages(Pieces(wire, sizes))
    assert decoded(whole) == decoded(Pieces(wire, sizes))
    pieces = list(fast_parse.WholeMessages(Pieces(b"".join(messages), sizes)).stream())
    assert pieces == messages  # one piece a message: botocore's buffer never appends to a partial one
    whole.close()
    assert whole.raw.closed == 1  # everything else is the wrapped body's


def test_an_event_larger_than_16_mib_and_the_next_are_both_handed_over_whole() -> None:
    # botocore accepts payloads up to its own limit (24 MiB in 1.44): the cut follows its limits
    big = eventstream.encode_message({":message-type": "event"}, b"\x00\xf0\x00\x00" * (17 * 2**18))
    small = eventstream.event("SubscribeToShardEvent", {"Records": []})
    wire = big + small
    assert [len(p) for p in fast_parse.WholeMessages(Pieces(wire, [2**16])).stream()] == [len(big), len(small)]
    assert decoded(fast_parse.WholeMessages(Pieces(wire, [2**16]))) == decoded(Pieces(wire, [2**16]))


def test_a_damaged_prelude_is_handed_over_at_once_not_after_the_length_it_claims() -> None:
    # a prelude whose CRC does not match claims a length nobody can trust: botocore raises
    # ChecksumMismatch on it at once, so it goes over before another piece is awaited (not
    # after up to 24 MiB that may never come)
    good = eventstream.event("SubscribeToShardEvent", {"Records": []})
    claims = (2**20).to_bytes(4, "big") + good[4:12]  # a valid length, its prelude CRC now wrong

    def stream() -> Iterator[bytes]:
        yield claims + good[12:]
        raise AssertionError("read on past a damaged prelude")

    class Body:
        def stream(self) -> Iterator[bytes]:
            return stream()

    first = next(iter(fast_parse.WholeMessages(Body()).stream()))
    assert first == claims + good[12:]
    buffer = EventStreamBuffer()
    buffer.add_data(first)
    with pytest.raises(ChecksumMismatch):
        next(iter(buffer))


@pytest.mark.parametrize(("headers", "payload", "error"), [
    (10, 24 * 2**20 + 1, "InvalidPayloadLength"),  # the total is under headers + payload limits
    (128 * 2**10 + 1, 10, "InvalidHeadersLength"),
])
def test_a_prelude_over_one_of_botocores_limits_is_handed_over_at_once(headers: int, payload: int, error: str) -> None:
    # botocore checks the headers and the payload each against its own limit, not their sum
    import binascii

    start = (headers + payload + 16).to_bytes(4, "big") + headers.to_bytes(4, "big")
    prelude = start + binascii.crc32(start).to_bytes(4, "big")

    def stream() -> Iterator[bytes]:
        yield prelude + bytes(100)
        raise AssertionError("read on past a prelude botocore refuses")

    class Body:
        def stream(self) -> Iterator[bytes]:
            return stream()

    first = next(iter(fast_parse.WholeMessages(Body()).stream()))
    buffer = EventStreamBuffer()
    buffer.add_data(first)
    with pytest.raises(ParserError) as raised:
        next(iter(buffer))
    assert type(raised.value).__name__ == error


def test_a_whole_messages_body_without_its_raw_body_fails_plainly() -> None:
    body = fast_parse.WholeMessages.__new__(fast_parse.WholeMessages)
    with pytest.raises(AttributeError):
        body.close()  # not a RecursionError
