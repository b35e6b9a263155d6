"""The records a consumer sees: one per user record, KPL aggregates already unpacked.

KPL record aggregation: decode (for consumers) and encode (for tests and benchmarks).

The Kinesis Producer Library packs many *user records* into one Kinesis record::

    magic F3 89 9A C2 | protobuf AggregatedRecord | MD5(protobuf bytes), 16 bytes

    message AggregatedRecord {
      repeated string partition_key_table     = 1;
      repeated string explicit_hash_key_table = 2;
      repeated Record records                 = 3;
    }
    message Record {
      required uint64 partition_key_index     = 1;
      optional uint64 explicit_hash_key_index = 2;
      required bytes  data                    = 3;
      repeated Tag    tags                    = 4;   // ignored
    }

This module holds a small decoder and encoder of exactly that format (protobuf wire format:
varints and length-delimited fields; unknown fields are skipped). We do not use the
``aws-kinesis-agg`` package at run time: it pulls in ``protobuf`` for three fields, works on
Lambda-event-shaped dicts, prints to stdout on bad input, and is unmaintained since 2022. The
test suite checks byte-level compatibility against it in both directions.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec

from kinesis.consumer.retrieval.positions import Position
from kinesis.errors import AggregationError, RecordTooLargeError

MAGIC = b"\xf3\x89\x9a\xc2"
DIGEST_SIZE = 16
MAX_RECORD_BYTES = 1024 * 1024
"""Kinesis' limit for one record: data plus partition key (UTF-8), 1 MiB."""
MAX_PARTITION_KEY_CHARS = 256

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


@dataclass(frozen=True)
class UserRecord:
    """One record inside an aggregate."""

    partition_key: str
    data: bytes
    explicit_hash_key: str | None = None


@dataclass(frozen=True)
class AggregatedRecord:
    """A finished aggregate, ready for PutRecord(s): ``Data``, ``PartitionKey``, ``ExplicitHashKey``."""

    data: bytes
    partition_key: str
    explicit_hash_key: str
    count: int

    def put_records_entry(self) -> dict[str, object]:
        """The entry for ``PutRecords(Records=[...])``."""
        return {
            "Data": self.data,
            "PartitionKey": self.partition_key,
            "ExplicitHashKey": self.explicit_hash_key,
        }


def has_magic(data: bytes) -> bool:
    """True when ``data`` starts with the KPL magic and is long enough to be an aggregate."""
    return len(data) > len(MAGIC) + DIGEST_SIZE and data[: len(MAGIC)] == MAGIC


def digest_matches(data: bytes) -> bool:
    """True when ``data`` has the magic and its MD5 trailer matches the protobuf body."""
    if not has_magic(data):
        return False
    body, digest = data[len(MAGIC) : -DIGEST_SIZE], data[-DIGEST_SIZE:]
    return hashlib.md5(body, usedforsecurity=False).digest() == digest


# --- protobuf wire format ------------------------------------------------------------------


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise AggregationError("truncated varint in KPL aggregated record")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise AggregationError("varint longer than 64 bits in KPL aggregated record")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _len_field(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | _LEN) + _varint(len(payload)) + payload


def _varint_field(field: int, value: int) -> bytes:
    return _varint(field << 3 | _VARINT) + _varint(value)


# --- decode --------------------------------------------------------------------------------


def _skip(buf: bytes, pos: int, end: int, wire: int, field: int) -> int:
    """Skip one field value of ``wire`` type; return the position after it."""
    if field == 0:
        raise AggregationError("protobuf field number 0 is invalid")
    if wire == _VARINT:
        return _read_varint(buf, pos)[1]
    if wire == _LEN:
        size, pos = _read_varint(buf, pos)
        nxt = pos + size
    elif wire == _I64:
        nxt = pos + 8
    elif wire == _I32:
        nxt = pos + 4
    else:
        raise AggregationError(f"unsupported protobuf wire type {wire} in field {field}")
    if nxt > end:
        raise AggregationError(f"field {field} runs past the end of the record")
    return nxt


def _span(buf: bytes, pos: int, end: int, field: int) -> tuple[int, int]:
    """The (start, end) of a length-delimited value at ``pos``."""
    size = buf[pos] if pos < end else 0x80
    if size < 0x80:
        pos += 1
    else:
        size, pos = _read_varint(buf, pos)
    stop = pos + size
    if stop > end:
        raise AggregationError(f"length-delimited field {field} runs past the end of the record")
    return pos, stop


def _utf8(buf: bytes, start: int, stop: int, what: str) -> str:
    try:
        return buf[start:stop].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AggregationError(f"{what} is not valid UTF-8") from exc


def _tag(buf: bytes, pos: int) -> tuple[int, int, int]:
    """(field, wire type, position after the tag); single-byte tags take the fast path."""
    tag = buf[pos]
    if tag < 0x80:
        pos += 1
    else:
        tag, pos = _read_varint(buf, pos)
    field = tag >> 3
    if field == 0:
        raise AggregationError("protobuf field number 0 is invalid")
    return field, tag & 7, pos


def deaggregate(data: bytes) -> list[UserRecord]:
    """Decode a KPL aggregate into its user records, in order (sub-sequence 0, 1, ...).

    Raises :class:`AggregationError` when ``data`` is not a well-formed aggregate (no magic,
    MD5 mismatch, malformed protobuf, index out of range). Callers that want KCL's lenient
    behaviour (pass the bytes through as a plain record) use :func:`kinesis.consumer.retrieval.records.records_from_response`.
    """
    if not has_magic(data):
        raise AggregationError("not a KPL aggregated record: the magic prefix F3 89 9A C2 is missing")
    if not digest_matches(data):
        raise AggregationError("KPL aggregated record is corrupt: the MD5 trailer does not match")
    return [UserRecord(pk, payload, ehk) for pk, payload, ehk in decode_unchecked(data)]


def decode_unchecked(data: bytes) -> list[tuple[str, bytes, str | None]]:
    """(partition key, data, explicit hash key) of each user record of an aggregate whose magic
    and MD5 were already checked (see :func:`digest_matches`); raises on a malformed body."""
    buf = data
    pos, end = len(MAGIC), len(data) - DIGEST_SIZE
    pk_table: list[str] = []
    ehk_table: list[str] = []
    spans: list[tuple[int, int]] = []
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:  # every tag the KPL writes is one byte; the general case is _tag()
            pos += 1
            field, wire = tag >> 3, tag & 7
        else:
            field, wire, pos = _tag(buf, pos)
        if wire == _LEN and field in (1, 2, 3):
            start, pos = _span(buf, pos, end, field)
            if field == 3:
                spans.append((start, pos))
            elif field == 1:
                pk_table.append(_utf8(buf, start, pos, "partition_key_table entry"))
            else:
                ehk_table.append(_utf8(buf, start, pos, "explicit_hash_key_table entry"))
        else:
            pos = _skip(buf, pos, end, wire, field)
    if pos != end:
        raise AggregationError("the last field runs into the MD5 trailer")
    out: list[tuple[str, bytes, str | None]] = []
    n_pk, n_ehk = len(pk_table), len(ehk_table)
    for index, (pos, stop) in enumerate(spans):
        pk_index = ehk_index = -1
        payload: bytes | None = None
        while pos < stop:
            tag = buf[pos]
            if tag < 0x80:
                pos += 1
                field, wire = tag >> 3, tag & 7
            else:
                field, wire, pos = _tag(buf, pos)
            if wire == _VARINT and field in (1, 2):
                value = buf[pos] if pos < stop else 0x80
                if value < 0x80:
                    pos += 1
                else:
                    value, pos = _read_varint(buf, pos)
                if field == 1:
                    pk_index = value
                else:
                    ehk_index = value
            elif wire == _LEN and field == 3:
                start, pos = _span(buf, pos, stop, field)
                payload = buf[start:pos]
            else:
                pos = _skip(buf, pos, stop, wire, field)
        if pos != stop:
            raise AggregationError(f"user record {index} runs past its length")
        if pk_index < 0 or payload is None:
            raise AggregationError(f"user record {index} lacks partition_key_index or data")
        if pk_index >= n_pk:
            raise AggregationError(
                f"user record {index} has partition_key_index {pk_index} but the table has "
                f"{n_pk} entries"
            )
        if ehk_index >= n_ehk:
            raise AggregationError(
                f"user record {index} has explicit_hash_key_index {ehk_index} but the table "
                f"has {n_ehk} entries"
            )
        out.append((pk_table[pk_index], payload, ehk_table[ehk_index] if ehk_index >= 0 else None))
    return out


# --- encode --------------------------------------------------------------------------------


def partition_key_hash(partition_key: str) -> int:
    """The 128-bit hash key Kinesis derives from a partition key (MD5, big-endian)."""
    return int.from_bytes(hashlib.md5(partition_key.encode("utf-8"), usedforsecurity=False).digest(), "big")


def _check_user_record(partition_key: str, data: bytes, explicit_hash_key: str | None) -> None:
    if not isinstance(partition_key, str) or not 1 <= len(partition_key) <= MAX_PARTITION_KEY_CHARS:
        raise AggregationError(
            f"partition_key must be a str of 1..{MAX_PARTITION_KEY_CHARS} characters, "
            f"got {partition_key!r:.80}"
        )
    if not isinstance(data, bytes | bytearray | memoryview):
        raise AggregationError(f"data must be bytes, got {type(data).__name__}")
    if explicit_hash_key is not None and (
        not explicit_hash_key.isdigit() or int(explicit_hash_key) >= 2**128
    ):
        raise AggregationError(
            f"explicit_hash_key must be a decimal string below 2**128, got {explicit_hash_key!r}"
        )


def _entry(
    partition_key: str,
    data: bytes,
    ehk: str | None,
    pk_index: dict[str, int],
    ehk_index: dict[str, int],
) -> tuple[bytes, bool, bool]:
    """The bytes one user record adds to an aggregate with these tables, and which tables grow."""
    new_pk = partition_key not in pk_index
    new_ehk = ehk is not None and ehk not in ehk_index
    rec = _varint_field(1, pk_index.get(partition_key, len(pk_index)))
    if ehk is not None:
        rec += _varint_field(2, ehk_index.get(ehk, len(ehk_index)))
    rec += _len_field(3, bytes(data))
    extra = _len_field(3, rec)
    if new_pk:
        extra = _len_field(1, partition_key.encode("utf-8")) + extra
    if ehk is not None and new_ehk:
        extra = _len_field(2, ehk.encode("utf-8")) + extra
    return extra, new_pk, new_ehk


class RecordAggregator:
    """Pack user records into KPL aggregates of at most ``max_bytes`` (data + partition key).

    ``add()`` returns the finished aggregate when the new record does not fit any more (the new
    record then starts the next one); ``flush()`` returns the last one. A single user record too
    large to fit even alone raises :class:`RecordTooLargeError`. All user records of one
    aggregate land on the shard of the aggregate's explicit hash key (the first record's), as
    with the KPL: aggregate per shard when the stream has several.
    """

    def __init__(self, max_bytes: int = MAX_RECORD_BYTES, max_records: int | None = None):
        overhead = len(MAGIC) + DIGEST_SIZE + 1 + MAX_PARTITION_KEY_CHARS * 4
        if max_bytes <= overhead or max_bytes > MAX_RECORD_BYTES:
            raise AggregationError(
                f"max_bytes must be in ({overhead}, {MAX_RECORD_BYTES}], got {max_bytes}"
            )
        if max_records is not None and max_records < 1:
            raise AggregationError(f"max_records must be >= 1 or None, got {max_records}")
        self.max_bytes = max_bytes
        self.max_records = max_records
        self._reset()

    def _reset(self) -> None:
        self._pk_index: dict[str, int] = {}
        self._ehk_index: dict[str, int] = {}
        self._body = bytearray()
        self._count = 0
        self._first_pk = ""
        self._first_ehk = ""

    def __len__(self) -> int:
        return self._count

    def _encoded(self, partition_key: str, data: bytes, ehk: str | None) -> tuple[bytes, bool, bool]:
        return _entry(partition_key, data, ehk, self._pk_index, self._ehk_index)

    def _size_with(self, extra: bytes, partition_key: str) -> int:
        """Bytes Kinesis counts for the aggregate with ``extra`` added: data + partition key."""
        first_pk = self._first_pk if self._count else partition_key
        return len(MAGIC) + len(self._body) + len(extra) + DIGEST_SIZE + len(first_pk.encode("utf-8"))

    def add(
        self, partition_key: str, data: bytes, explicit_hash_key: str | None = None
    ) -> AggregatedRecord | None:
        """Add one user record; returns the previous aggregate if this record did not fit."""
        _check_user_record(partition_key, data, explicit_hash_key)
        alone, _, _ = _entry(partition_key, data, explicit_hash_key, {}, {})
        alone_size = len(MAGIC) + len(alone) + DIGEST_SIZE + len(partition_key.encode("utf-8"))
        if alone_size > self.max_bytes:
            raise RecordTooLargeError(
                f"user record with partition key {partition_key!r:.80} is {len(data)} bytes; "
                f"aggregated it would take {alone_size} bytes, over the {self.max_bytes}-byte "
                "limit (Kinesis: 1 MiB per record incl. partition key): split the payload"
            )
        finished: AggregatedRecord | None = None
        full = self.max_records is not None and self._count >= self.max_records
        extra, new_pk, new_ehk = self._encoded(partition_key, data, explicit_hash_key)
        if self._count and (full or self._size_with(extra, partition_key) > self.max_bytes):
            finished = self.flush()
            extra, new_pk, new_ehk = self._encoded(partition_key, data, explicit_hash_key)
        if not self._count:
            self._first_pk = partition_key
            self._first_ehk = explicit_hash_key or str(partition_key_hash(partition_key))
        # Protobuf lets repeated fields interleave, so a record's new table entries are written
        # just before it: one pass, O(1) per record; conforming decoders collect each list.
        if new_pk:
            self._pk_index[partition_key] = len(self._pk_index)
        if new_ehk:
            assert explicit_hash_key is not None
            self._ehk_index[explicit_hash_key] = len(self._ehk_index)
        self._body += extra
        self._count += 1
        return finished

    def flush(self) -> AggregatedRecord | None:
        """Finish and return the current aggregate (None when empty); start a new one."""
        if not self._count:
            return None
        body = bytes(self._body)
        data = MAGIC + body + hashlib.md5(body, usedforsecurity=False).digest()
        out = AggregatedRecord(data, self._first_pk, self._first_ehk, self._count)
        self._reset()
        return out


def aggregate(records: Iterable[UserRecord | tuple[str, bytes]], max_bytes: int = MAX_RECORD_BYTES) -> list[AggregatedRecord]:
    """Pack ``records`` (``UserRecord`` or ``(partition_key, data)``) into as few aggregates as fit."""
    agg = RecordAggregator(max_bytes=max_bytes)
    out: list[AggregatedRecord] = []
    for item in records:
        rec = item if isinstance(item, UserRecord) else UserRecord(item[0], item[1])
        done = agg.add(rec.partition_key, rec.data, rec.explicit_hash_key)
        if done is not None:
            out.append(done)
    last = agg.flush()
    if last is not None:
        out.append(last)
    return out


log = logging.getLogger(__name__)


class Record(msgspec.Struct, frozen=True, gc=False):
    """One user record of a shard.

    ``sub_sequence_number`` is the record's index inside a KPL aggregate (``aggregated=True``)
    and 0 for a plain record; (``sequence_number``, ``sub_sequence_number``) is unique in a
    shard and is what a checkpoint stores (see :attr:`position`).

    Immutable, compared and hashed by value, built positionally or by keyword in the order
    below. A ``msgspec.Struct`` untracked by Python's cyclic garbage collector: its fields are
    strings, bytes, numbers and a datetime, which cannot form a cycle, and a batch of records
    that outlives a young collection would otherwise be promoted and walked by every full
    collection (docs/benchmarks.md, "CPU per record"). A subclass is untracked too: give it
    no field that can hold a cycle. Not a dataclass: ``msgspec.structs.replace(record,
    data=...)`` makes a changed copy, ``msgspec.structs.asdict(record)`` a dict, and setting a
    field raises AttributeError.
    """

    stream_name: str
    shard_id: str
    sequence_number: str
    sub_sequence_number: int
    partition_key: str
    data: bytes
    approximate_arrival_timestamp: datetime | None
    explicit_hash_key: str | None
    aggregated: bool

    @property
    def position(self) -> Position:
        """This record's position, the value to checkpoint once it is processed (with its
        arrival time, stored with a checkpoint: :attr:`Checkpoint.arrival`)."""
        return Position(self.sequence_number, self.sub_sequence_number, self.approximate_arrival_timestamp)


def records_from_response(
    stream_name: str, shard_id: str, raw_records: Iterable[Mapping[str, Any]]
) -> list[Record]:
    """Turn GetRecords' ``Records`` into :class:`Record`\\ s, unpacking KPL aggregates.

    Sub-records get sub-sequence numbers 0, 1, ... in aggregate order and inherit the Kinesis
    record's sequence number and arrival time. A record that starts with the KPL magic but whose
    MD5 trailer does not match is passed through unchanged as a plain record, with a warning
    (KCL does the same: the magic can occur in ordinary data). A record whose MD5 matches but
    whose protobuf body is malformed is also passed through with a warning rather than raising,
    so one bad record never blocks a shard; its ``aggregated`` flag is False.
    """
    out: list[Record] = []
    for raw in raw_records:
        data: bytes = raw["Data"]
        seq: str = raw["SequenceNumber"]
        arrival: datetime | None = raw.get("ApproximateArrivalTimestamp")
        if arrival is not None and arrival.tzinfo is not UTC:  # botocore's own parse: local time
            arrival = arrival.astimezone(UTC)
        if data.startswith(MAGIC):
            _unpack(out, stream_name, shard_id, seq, raw["PartitionKey"], data, arrival, raw.get("ExplicitHashKey"))
        else:
            out.append(Record(stream_name, shard_id, seq, 0, raw["PartitionKey"], data, arrival,
                                  raw.get("ExplicitHashKey"), False))
    return out


class DecodedRecord(Protocol):
    """A record of a GetRecords body already decoded (``fast_parse``): ``Data`` decoded,
    the arrival time as seconds since the epoch."""

    sequence_number: str
    partition_key: str
    data: bytes
    approximate_arrival_timestamp: float | None


def records_from_decoded(stream_name: str, shard_id: str, decoded: Iterable[DecodedRecord]) -> list[Record]:
    """:func:`records_from_response` for records already decoded: the same records (arrival
    times in UTC), without a dict per record (``fast_parse``'s path for the SDK's own reads).
    Raises OverflowError, ValueError or OSError for an arrival time no datetime holds."""
    out: list[Record] = []
    append = out.append
    for raw in decoded:
        epoch, data = raw.approximate_arrival_timestamp, raw.data
        arrival = None if epoch is None else _fromtimestamp(epoch, UTC)
        if data.startswith(MAGIC):
            _unpack(out, stream_name, shard_id, raw.sequence_number, raw.partition_key, data, arrival, None)
        else:
            append(Record(stream_name, shard_id, raw.sequence_number, 0, raw.partition_key, data, arrival,
                              None, False))
    return out


_fromtimestamp = datetime.fromtimestamp


def _unpack(out: list[Record], stream_name: str, shard_id: str, seq: str, pk: str, data: bytes,
            arrival: datetime | None, ehk: str | None) -> None:
    """Append the records of a Kinesis record that starts with the KPL magic: its user records
    if it is a well-formed aggregate, else itself as a plain record (with a warning)."""
    if has_magic(data):
        if digest_matches(data):
            try:
                subs = decode_unchecked(data)
            except AggregationError as exc:
                log.warning(
                    "record %s in shard %s of stream %s has a valid KPL digest but a malformed "
                    "body (%s); passing it through as a plain record",
                    seq, shard_id, stream_name, exc,
                )
            else:
                out += [
                    Record(stream_name, shard_id, seq, i, sub_pk, sub_data, arrival, sub_ehk, True)
                    for i, (sub_pk, sub_data, sub_ehk) in enumerate(subs)
                ]
                return
        else:
            log.warning(
                "record %s in shard %s of stream %s starts with the KPL magic but its MD5 does "
                "not match; passing it through as a plain record",
                seq, shard_id, stream_name,
            )
    out.append(Record(stream_name, shard_id, seq, 0, pk, data, arrival, ehk, False))
