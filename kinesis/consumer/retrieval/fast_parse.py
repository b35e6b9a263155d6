"""A faster parse of GetRecords responses and SubscribeToShard events, installed on botocore.

botocore turns a GetRecords body into Python objects by walking the response's shape in
Python, record by record; most of that time is its timestamp parser, which builds every
``ApproximateArrivalTimestamp`` in the local time zone through ``dateutil`` (about 17 us a
record here), and the rest the walk itself. :func:`install` registers a ``before-parse``
handler for GetRecords that parses a 200 response's body itself (``orjson`` when installed,
else the standard library), checks it against the output shape strictly, and hands botocore
the result with an empty body to parse, so botocore still does everything else: signing,
credentials, endpoints, retries and their classifier, timeouts, error responses (never
touched here), and the ``ResponseMetadata``. Enhanced Fan-Out's events are the same records in
another frame: :func:`install_on_event_stream` wraps the parser of one SubscribeToShard event
stream so its ``SubscribeToShardEvent`` payloads are parsed the same way (botocore has no hook
for event-stream messages; exceptions and other messages stay botocore's).

The result equals botocore's for every body it accepts, member by member (a property test
holds it to that: ``tests/kinesis/consumer/test_fast_parse.py``): the same keys (a member
that is absent or ``null`` is left out, as botocore does), the same strings and ints, ``Data``
decoded by ``pybase64`` (SIMD) when it is strict base64, as AWS sends it, which is where
botocore's lenient ``base64.b64decode`` gives the same bytes (anything else is botocore's to
decode: the whole body goes to its parser). One difference, on purpose:
``ApproximateArrivalTimestamp`` is a UTC datetime (the same instant as botocore's, which is in
the host's local zone, equal under ``==`` and identical in form on a host set to UTC).
Anything it does not recognise (a member not in the shape, a value of another type, a body
that is not JSON) is left to botocore's own parser.

The SDK's own reads go one step further (:func:`reading`, around a GetRecords call in one
thread): the body is decoded by ``msgspec`` straight into structs against the output shape
(unknown members, other types, non-strict base64 refused), turned into the SDK's records
(:class:`~kinesis.consumer.retrieval.records.Record`) without a dict per record, and handed over
as ``Records``, a :class:`DecodedRecords` list. Anything that path does not recognise,
or a body with ``ChildShards``, takes the path above; a property test holds the records of
both paths equal to those made from botocore's parse.
"""

from __future__ import annotations

import json
import logging
from binascii import crc32 as _crc32
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import msgspec
from pybase64 import b64decode as _strict_b64decode

from kinesis.consumer.retrieval.records import Record, records_from_decoded

log = logging.getLogger(__name__)
_fromtimestamp = datetime.fromtimestamp

_loads: Callable[[bytes], Any]
try:  # orjson parses about twice as fast; the standard library's parser is the fallback
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads

HANDLER_ID = "kinesis-hashring-fast-get-records"
"""The ``unique_id`` of the handler: installing twice registers it once."""

_TOP = frozenset({"Records", "NextShardIterator", "MillisBehindLatest", "ChildShards"})
_RECORD = frozenset({"SequenceNumber", "ApproximateArrivalTimestamp", "Data", "PartitionKey", "EncryptionType"})
_EVENT = frozenset({"Records", "ContinuationSequenceNumber", "MillisBehindLatest", "ChildShards"})
_EVENT_TYPE = "SubscribeToShardEvent"
_CHILD = frozenset({"ShardId", "ParentShards", "HashKeyRange"})
_RANGE = frozenset({"StartingHashKey", "EndingHashKey"})


class _Unrecognised(Exception):
    """The body is not one this parser knows: botocore parses it."""


def install(client: Any) -> None:
    """Parse ``client``'s GetRecords responses with :func:`parse_get_records`, and hand its
    SubscribeToShard event streams to botocore a whole message at a time (idempotent). A
    client without botocore's event system (a test double, a wrapper) is left as it is."""
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is not None:
        events.register("before-parse.kinesis.GetRecords", _before_parse, unique_id=HANDLER_ID)
        events.register("before-parse.kinesis.SubscribeToShard", _whole_messages,
                        unique_id=f"{HANDLER_ID}-whole-messages")


try:  # botocore's own limits: a length it refuses is handed over at once, for its own error
    from botocore.eventstream import _MAX_HEADERS_LENGTH, _MAX_PAYLOAD_LENGTH, _PRELUDE_LENGTH
except ImportError:  # pragma: no cover - another botocore: the limits of botocore 1.44
    _PRELUDE_LENGTH, _MAX_HEADERS_LENGTH, _MAX_PAYLOAD_LENGTH = 12, 128 * 1024, 24 * 1024 * 1024
_PRELUDE = _PRELUDE_LENGTH  # total length (4 bytes), headers length (4), prelude CRC (4)
_SMALLEST = _PRELUDE + 4  # and a CRC of the whole message


def _whole_messages(response_dict: dict[str, Any], **_: Any) -> None:
    body = response_dict.get("body")
    if response_dict.get("status_code") == 200 and callable(getattr(body, "stream", None)):
        response_dict["body"] = WholeMessages(body)


def _refused(pending: bytearray, total: int) -> bool:
    """Whether no message can be cut by the prelude ``pending`` starts with: botocore refuses
    it as soon as it sees it (its CRC does not match, or its headers or its payload are over
    botocore's limits), or its lengths cannot frame a message (a total shorter than its
    headers and the 16 bytes around them: botocore fails on it later, the same way)."""
    headers = int.from_bytes(pending[4:8], "big")
    return (_crc32(pending[:8]) != int.from_bytes(pending[8:12], "big")
            or headers > _MAX_HEADERS_LENGTH or not 0 <= total - headers - _SMALLEST <= _MAX_PAYLOAD_LENGTH)


class WholeMessages:
    """A SubscribeToShard body whose :meth:`stream` yields whole event-stream messages.

    botocore's ``EventStreamBuffer`` appends each piece it is given to an immutable ``bytes``,
    so a message that arrives in n pieces of 64 KiB costs O(n^2) copying (a 10 MB event: about
    1.5 GB). Pieces are gathered here in a ``bytearray`` until the message is whole (its length
    is in its first 4 bytes, trusted once the prelude's CRC matches), then handed over at once;
    botocore still checks every prelude, header and CRC. Everything else is the wrapped
    response's."""

    def __init__(self, raw: Any):
        self.raw = raw

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped ``stream()``'s bytes, cut at message boundaries."""
        pending = bytearray()
        pieces = iter(self.raw.stream(*args, **kwargs))
        for piece in pieces:
            pending += piece
            while len(pending) >= _PRELUDE:
                total = int.from_bytes(pending[:4], "big")
                if _refused(pending, total):
                    # no message can be cut here: out of step with the messages from here on,
                    # so everything goes over as it comes, for botocore to judge (at once: not
                    # after a length nobody can trust)
                    yield bytes(pending)
                    yield from pieces
                    return
                if len(pending) < total:
                    break
                yield bytes(pending[:total])
                del pending[:total]
        if pending:
            yield bytes(pending)  # a cut-off message: botocore reports it as it would have

    def __getattr__(self, name: str) -> Any:
        if name == "raw":  # not set (never constructed): no recursion through this method
            raise AttributeError(name)
        return getattr(self.raw, name)


class _Decoded(msgspec.Struct, gc=False, forbid_unknown_fields=True, rename="pascal"):
    """One record of a GetRecords body, as the output shape has it (``Data`` strict base64)."""

    sequence_number: str
    data: bytes
    partition_key: str
    approximate_arrival_timestamp: float | None = None
    encryption_type: str | None = None


class _Body(msgspec.Struct, forbid_unknown_fields=True, rename="pascal"):
    """A GetRecords body: ``position`` is its ``NextShardIterator``."""

    records: list[_Decoded] | None = None
    position: str | None = msgspec.field(default=None, name="NextShardIterator")
    millis_behind_latest: int | None = None
    child_shards: list[Any] | None = None


class _Event(_Body, forbid_unknown_fields=True, rename="pascal"):
    """A ``SubscribeToShardEvent`` payload: ``position`` is its ``ContinuationSequenceNumber``."""

    position: str | None = msgspec.field(default=None, name="ContinuationSequenceNumber")


_decode_body = msgspec.json.Decoder(_Body).decode
_decode_event = msgspec.json.Decoder(_Event).decode
_reading: ContextVar[tuple[str, str] | None] = ContextVar("kinesis_fast_parse_reading", default=None)


class DecodedRecords(list[Record]):
    """``Records`` of a response read under :func:`reading` (or of an event stream set up with a
    shard): the SDK's records (aggregates unpacked). ``first`` is the first Kinesis record's
    (sequence number, arrival time), None for an empty batch; ``kinesis_records`` how many
    Kinesis records the response held (what GetRecords' ``Limit`` counts)."""

    first: tuple[str, datetime | None] | None = None
    kinesis_records: int = 0


@contextmanager
def reading(stream_name: str, shard_id: str) -> Iterator[None]:
    """Within this block, in this thread, a GetRecords response of a client :func:`install`
    set up carries its records as :class:`DecodedRecords` when the fast decoder recognises
    its body (the caller checks ``Records``' type), else as botocore's dicts."""
    token = _reading.set((stream_name, shard_id))
    try:
        yield
    finally:
        _reading.reset(token)


def decode_get_records(body: bytes, stream_name: str, shard_id: str) -> dict[str, Any] | None:
    """The members of a GetRecords response ``body`` with ``Records`` as :class:`DecodedRecords`,
    or None if the body is not one this decoder recognises (or has ``ChildShards``)."""
    return _decode(body, _decode_body, "NextShardIterator", stream_name, shard_id)


def decode_subscribe_event(body: bytes, stream_name: str, shard_id: str) -> dict[str, Any] | None:
    """:func:`decode_get_records` for a ``SubscribeToShardEvent`` payload."""
    return _decode(body, _decode_event, "ContinuationSequenceNumber", stream_name, shard_id)


def _decode(body: bytes, decode: Callable[[bytes], _Body], position: str, stream_name: str,
            shard_id: str) -> dict[str, Any] | None:
    try:
        doc = decode(body)
        if doc.child_shards is not None:
            return None  # a shard's last batch: the dict path parses the children
        decoded = doc.records or []
        records = DecodedRecords(records_from_decoded(stream_name, shard_id, decoded))
        records.kinesis_records = len(decoded)
        if decoded:
            first = decoded[0]
            epoch = first.approximate_arrival_timestamp
            records.first = (first.sequence_number, None if epoch is None else _fromtimestamp(epoch, UTC))
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, OverflowError, OSError):
        return None
    out: dict[str, Any] = {"Records": records}
    if doc.position is not None:
        out[position] = doc.position
    if doc.millis_behind_latest is not None:
        out["MillisBehindLatest"] = doc.millis_behind_latest
    return out


def _before_parse(response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any) -> None:
    if response_dict.get("status_code") != 200:
        return  # errors are botocore's to parse and classify
    body = response_dict.get("body")
    if not isinstance(body, bytes | bytearray) or not body:
        return
    shard = _reading.get()
    parsed = decode_get_records(bytes(body), *shard) if shard is not None else None
    if parsed is None:
        parsed = parse_get_records(bytes(body))
    if parsed is None:
        return
    customized_response_dict.update(parsed)
    response_dict["body"] = b"{}"  # botocore parses nothing more, and adds its ResponseMetadata


def parse_get_records(body: bytes) -> dict[str, Any] | None:
    """The members of a GetRecords response ``body`` as botocore parses them (arrival times
    in UTC), or None if the body is not one this parser recognises."""
    return _parse(body, _TOP, "NextShardIterator")


def parse_subscribe_event(body: bytes) -> dict[str, Any] | None:
    """The members of a ``SubscribeToShardEvent`` payload as botocore parses them (arrival
    times in UTC), or None if the payload is not one this parser recognises."""
    return _parse(body, _EVENT, "ContinuationSequenceNumber")


def _parse(body: bytes, members: frozenset[str], position: str) -> dict[str, Any] | None:
    try:
        doc = _loads(body)
        if not isinstance(doc, dict) or not doc.keys() <= members:
            raise _Unrecognised
        out: dict[str, Any] = {}
        records = doc.get("Records")
        if records is not None:
            out["Records"] = [_record(r) for r in _list(records)]
        _copy(doc, out, position, str)
        _copy(doc, out, "MillisBehindLatest", int)
        children = doc.get("ChildShards")
        if children is not None:
            out["ChildShards"] = [_child(c) for c in _list(children)]
        return out
    except (_Unrecognised, ValueError, TypeError, OverflowError, OSError):
        return None


class _EventParser:
    """botocore's parser of one SubscribeToShard event stream, with ``SubscribeToShardEvent``
    messages parsed by :func:`parse_subscribe_event`, or decoded by :func:`decode_subscribe_event`
    for ``shard`` (stream name, shard id) when given (every other message, and any payload
    neither recognises, by botocore's parser, which it wraps)."""

    def __init__(self, inner: Any, shard: tuple[str, str] | None = None):
        self.inner = inner
        self.shard = shard

    def parse(self, response: dict[str, Any], shape: Any) -> Any:
        headers = response.get("headers") or {}
        body = response.get("body")
        if (response.get("status_code") == 200 and headers.get(":message-type") == "event"
                and headers.get(":event-type") == _EVENT_TYPE and isinstance(body, bytes | bytearray) and body
                and _EVENT_TYPE in (getattr(shape, "members", None) or {})):
            parsed = decode_subscribe_event(bytes(body), *self.shard) if self.shard is not None else None
            if parsed is None:
                parsed = parse_subscribe_event(bytes(body))
            if parsed is not None:
                return {_EVENT_TYPE: parsed}
        return self.inner.parse(response, shape)


def install_on_event_stream(stream: Any, shard: tuple[str, str] | None = None) -> None:
    r"""Parse the ``SubscribeToShardEvent``\ s of ``stream`` (the ``EventStream`` of a
    SubscribeToShard response) with :func:`parse_subscribe_event`, or, given ``shard`` (stream
    name, shard id: a stream only the SDK reads), decode them to :class:`DecodedRecords`.
    botocore has no hook for event-stream messages, so this wraps the stream's parser; a
    stream without one (another botocore, a test double) is left as it is."""
    inner = getattr(stream, "_parser", None)
    if inner is not None and not isinstance(inner, _EventParser) and callable(getattr(inner, "parse", None)):
        stream._parser = _EventParser(inner, shard)


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _Unrecognised
    return value


def _copy(src: dict[str, Any], dst: dict[str, Any], name: str, kind: type) -> None:
    value = src.get(name)
    if value is None:
        return
    if type(value) is not kind:  # bool is an int subclass; a float MillisBehindLatest is botocore's
        raise _Unrecognised
    dst[name] = value


def _b64decode(text: str) -> bytes:
    """``Data`` as botocore decodes it, or ValueError for anything but strict base64 (which
    AWS always sends; botocore's lenient decode of anything else is botocore's to do)."""
    return _strict_b64decode(text, validate=True)


_FAST_KEYS = 4


def _record(raw: Any) -> dict[str, Any]:
    # The shape AWS sends for nearly every record, in one step: four members of the right types.
    if type(raw) is dict and len(raw) == _FAST_KEYS:
        seq, arrival = raw.get("SequenceNumber"), raw.get("ApproximateArrivalTimestamp")
        data, pk = raw.get("Data"), raw.get("PartitionKey")
        if (type(seq) is str and type(data) is str and type(pk) is str
                and (type(arrival) is float or type(arrival) is int)):
            return {"SequenceNumber": seq, "ApproximateArrivalTimestamp": _fromtimestamp(arrival, UTC),
                    "Data": _b64decode(data), "PartitionKey": pk}
    return _any_record(raw)


def _any_record(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict) or not raw.keys() <= _RECORD:
        raise _Unrecognised
    out: dict[str, Any] = {}
    _copy(raw, out, "SequenceNumber", str)
    arrival = raw.get("ApproximateArrivalTimestamp")
    if arrival is not None:
        if type(arrival) is not float and type(arrival) is not int:
            raise _Unrecognised  # botocore parses other forms (ISO 8601 strings): leave them to it
        out["ApproximateArrivalTimestamp"] = _fromtimestamp(arrival, UTC)
    data = raw.get("Data")
    if data is not None:
        if type(data) is not str:
            raise _Unrecognised
        out["Data"] = _b64decode(data)
    _copy(raw, out, "PartitionKey", str)
    _copy(raw, out, "EncryptionType", str)
    return out


def _child(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict) or not raw.keys() <= _CHILD:
        raise _Unrecognised
    out: dict[str, Any] = {}
    _copy(raw, out, "ShardId", str)
    parents = raw.get("ParentShards")
    if parents is not None:
        if not all(type(p) is str for p in _list(parents)):
            raise _Unrecognised
        out["ParentShards"] = list(parents)
    hash_range = raw.get("HashKeyRange")
    if hash_range is not None:
        if not isinstance(hash_range, dict) or not hash_range.keys() <= _RANGE:
            raise _Unrecognised
        key_range: dict[str, Any] = {}
        _copy(hash_range, key_range, "StartingHashKey", str)
        _copy(hash_range, key_range, "EndingHashKey", str)
        out["HashKeyRange"] = key_range
    return out
