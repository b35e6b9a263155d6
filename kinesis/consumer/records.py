"""The records a consumer sees: one per user record, KPL aggregates already unpacked."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kinesis.consumer.aggregation import decode_unchecked, digest_matches, has_magic
from kinesis.consumer.positions import Position
from kinesis.errors import AggregationError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Record:
    """One user record of a shard.

    ``sub_sequence_number`` is the record's index inside a KPL aggregate (``aggregated=True``)
    and 0 for a plain record; (``sequence_number``, ``sub_sequence_number``) is unique in a
    shard and is what a checkpoint stores (see :attr:`position`).
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
        """This record's position, the value to checkpoint once it is processed."""
        return Position(self.sequence_number, self.sub_sequence_number)


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
        pk: str = raw["PartitionKey"]
        arrival: datetime | None = raw.get("ApproximateArrivalTimestamp")
        ehk: str | None = raw.get("ExplicitHashKey")
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
                    continue
            else:
                log.warning(
                    "record %s in shard %s of stream %s starts with the KPL magic but its MD5 does "
                    "not match; passing it through as a plain record",
                    seq, shard_id, stream_name,
                )
        out.append(Record(stream_name, shard_id, seq, 0, pk, data, arrival, ehk, False))
    return out
