"""KPL record aggregation: decode (for consumers) and encode (for tests and benchmarks).

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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

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


def _fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield (field number, wire type, value) for every field of one message."""
    pos = 0
    while pos < len(buf):
        tag, pos = _read_varint(buf, pos)
        field, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == _VARINT:
            value, pos = _read_varint(buf, pos)
        elif wire == _LEN:
            size, pos = _read_varint(buf, pos)
            if pos + size > len(buf):
                raise AggregationError("length-delimited field runs past the end of the record")
            value, pos = buf[pos : pos + size], pos + size
        elif wire in (_I64, _I32):
            width = 8 if wire == _I64 else 4
            if pos + width > len(buf):
                raise AggregationError("fixed-width field runs past the end of the record")
            value, pos = int.from_bytes(buf[pos : pos + width], "little"), pos + width
        else:
            raise AggregationError(f"unsupported protobuf wire type {wire} in field {field}")
        if field == 0:
            raise AggregationError("protobuf field number 0 is invalid")
        yield field, wire, value


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


def _text(value: int | bytes, what: str) -> str:
    if not isinstance(value, bytes):
        raise AggregationError(f"{what} must be a length-delimited string")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AggregationError(f"{what} is not valid UTF-8") from exc


def deaggregate(data: bytes) -> list[UserRecord]:
    """Decode a KPL aggregate into its user records, in order (sub-sequence 0, 1, ...).

    Raises :class:`AggregationError` when ``data`` is not a well-formed aggregate (no magic,
    MD5 mismatch, malformed protobuf, index out of range). Callers that want KCL's lenient
    behaviour (pass the bytes through as a plain record) use :func:`kinesis.records.records_from_response`.
    """
    if not has_magic(data):
        raise AggregationError("not a KPL aggregated record: the magic prefix F3 89 9A C2 is missing")
    if not digest_matches(data):
        raise AggregationError("KPL aggregated record is corrupt: the MD5 trailer does not match")
    body = data[len(MAGIC) : -DIGEST_SIZE]
    pk_table: list[str] = []
    ehk_table: list[str] = []
    raw_records: list[bytes] = []
    for field, _wire, value in _fields(body):
        if field == 1:
            pk_table.append(_text(value, "partition_key_table entry"))
        elif field == 2:
            ehk_table.append(_text(value, "explicit_hash_key_table entry"))
        elif field == 3:
            if not isinstance(value, bytes):
                raise AggregationError("records entry must be a length-delimited message")
            raw_records.append(value)
    out: list[UserRecord] = []
    for index, raw in enumerate(raw_records):
        pk_index: int | None = None
        ehk_index: int | None = None
        payload: bytes | None = None
        for field, wire, value in _fields(raw):
            if field == 1 and wire == _VARINT:
                pk_index = int(value)
            elif field == 2 and wire == _VARINT:
                ehk_index = int(value)
            elif field == 3 and isinstance(value, bytes):
                payload = value
        if pk_index is None or payload is None:
            raise AggregationError(f"user record {index} lacks partition_key_index or data")
        if pk_index >= len(pk_table):
            raise AggregationError(
                f"user record {index} has partition_key_index {pk_index} but the table has "
                f"{len(pk_table)} entries"
            )
        if ehk_index is not None and ehk_index >= len(ehk_table):
            raise AggregationError(
                f"user record {index} has explicit_hash_key_index {ehk_index} but the table "
                f"has {len(ehk_table)} entries"
            )
        out.append(
            UserRecord(
                partition_key=pk_table[pk_index],
                data=payload,
                explicit_hash_key=ehk_table[ehk_index] if ehk_index is not None else None,
            )
        )
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
