"""A position in a shard: :class:`Checkpoint`, the one type for lease checkpoints, reader starts,
processor checkpoints and Spark offsets.

A checkpoint is a record's (sequence number, sub-sequence number) or a sentinel:

* :data:`TRIM_HORIZON`, :data:`LATEST` and ``Checkpoint.at_timestamp(dt)``: nothing was read
  yet; a reader starts at that initial position.
* a record position: "this record and everything before it is done"; a reader started from it
  delivers only records strictly after it, also in the middle of a KPL aggregate (KCL
  semantics: the Kinesis record is fetched again with ``AT_SEQUENCE_NUMBER`` and its
  sub-records up to and including the checkpointed sub-sequence number are skipped).
* :data:`SHARD_END`: the shard was read to its end and fully processed.

Sequence numbers are decimal strings compared as integers (never as strings), then by
sub-sequence number; the initial sentinels sort before every record and tie with each other,
SHARD_END sorts after every record. A lease checkpoint is therefore itself a reader's start.
The consumer's names for its kinds, ``Position`` and ``InitialPosition``, are in
:mod:`kinesis.consumer.retrieval.positions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from kinesis.errors import InvalidCheckpointError
from kinesis.sequence_numbers import (
    SEQUENCE_DIGITS,
    SUB_SEQUENCE_DIGITS,
    check_sequence_number,
    check_sub_sequence_number,
)

InitialPositionKind = Literal["LATEST", "TRIM_HORIZON", "AT_TIMESTAMP"]
INITIAL: tuple[InitialPositionKind, ...] = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
SENTINELS = (*INITIAL, "SHARD_END")
AFTER_SEQUENCE_NUMBER = "AFTER_SEQUENCE_NUMBER"
"""The :attr:`Checkpoint.kind` of a record position (where a reader resumes from it)."""


@dataclass(frozen=True, eq=False)
class Checkpoint:
    """A position in a shard: a record's sequence number (+ sub-sequence) or a sentinel.

    ``sequence_number`` is canonicalised (no leading zeros); a bad one raises
    :class:`~kinesis.errors.InvalidSequenceNumberError`. Only AT_TIMESTAMP carries a
    (timezone-aware) ``timestamp``.
    """

    sequence_number: str
    sub_sequence_number: int = 0
    timestamp: datetime | None = None
    arrival: datetime | None = field(default=None, repr=False)
    """A record position's ``ApproximateArrivalTimestamp`` when known (not part of its
    identity): stored with the checkpoint, so a later data loss can say which time span it
    lost (:class:`~kinesis.consumer.retrieval.polling.DataGap`)."""

    def __post_init__(self) -> None:
        seq = self.sequence_number
        if not (isinstance(seq, str) and seq in SENTINELS):
            object.__setattr__(self, "sequence_number", check_sequence_number(seq))
        check_sub_sequence_number(self.sub_sequence_number)
        if seq in SENTINELS:
            if self.sub_sequence_number:
                raise InvalidCheckpointError(f"the {seq} sentinel takes no sub-sequence number")
            if (seq == "AT_TIMESTAMP") != (self.timestamp is not None):
                raise InvalidCheckpointError(
                    "AT_TIMESTAMP needs a timezone-aware timestamp (Checkpoint.at_timestamp(dt)); "
                    "other checkpoints take none"
                )
            ts = self.timestamp
            if ts is not None and (not isinstance(ts, datetime) or ts.tzinfo is None):
                raise InvalidCheckpointError(
                    f"AT_TIMESTAMP needs a timezone-aware datetime, got {ts!r}; "
                    "use datetime(..., tzinfo=UTC)"
                )
        elif self.timestamp is not None:
            raise InvalidCheckpointError("only the AT_TIMESTAMP sentinel carries a timestamp")
        if self.arrival is not None and (seq in SENTINELS or not isinstance(self.arrival, datetime)
                                         or self.arrival.tzinfo is None):
            raise InvalidCheckpointError(
                f"only a record position carries an arrival time, as a timezone-aware datetime; got {self.arrival!r} "
                f"for {seq!r}")

    @classmethod
    def at_timestamp(cls, timestamp: datetime) -> Checkpoint:
        """The AT_TIMESTAMP initial position: the first record that arrived at or after
        ``timestamp`` (timezone-aware)."""
        return Checkpoint("AT_TIMESTAMP", 0, timestamp)

    @classmethod
    def of(cls, value: object) -> Checkpoint:
        """A checkpoint argument of the lease API: a checkpoint, its string (a sequence number
        or a sentinel name), or a record (its ``position``)."""
        if isinstance(value, Checkpoint):
            return value
        position = getattr(value, "position", None)
        return position if isinstance(position, Checkpoint) else Checkpoint(value)  # type: ignore[arg-type]

    @property
    def kind(self) -> str:
        """The sentinel's name, or :data:`AFTER_SEQUENCE_NUMBER` for a record position."""
        return self.sequence_number if self.sequence_number in SENTINELS else AFTER_SEQUENCE_NUMBER

    @property
    def is_initial(self) -> bool:
        """True for TRIM_HORIZON, LATEST and AT_TIMESTAMP (never checkpointed)."""
        return self.sequence_number in INITIAL

    @property
    def is_shard_end(self) -> bool:
        """True for the SHARD_END sentinel."""
        return self.sequence_number == "SHARD_END"

    @property
    def is_record(self) -> bool:
        """True for a record position (a sequence number)."""
        return self.sequence_number not in SENTINELS

    @property
    def key(self) -> tuple[int, int]:
        """A record position's (int(sequence_number), sub_sequence_number)."""
        if not self.is_record:
            raise InvalidCheckpointError(f"{self} is not a record position: it has no key")
        return int(self.sequence_number), self.sub_sequence_number

    @property
    def order_key(self) -> tuple[int, int, int]:
        """(rank, sequence as int, sub-sequence): initial < any sequence < SHARD_END."""
        if self.is_initial:
            return (0, 0, 0)
        if self.is_shard_end:
            return (2, 0, 0)
        return (1, int(self.sequence_number), self.sub_sequence_number)

    @property
    def order_string(self) -> str:
        """A fixed-width string whose byte order is :attr:`order_key` order (for conditions)."""
        rank, seq, sub = self.order_key
        return f"{rank}:{seq:0{SEQUENCE_DIGITS}d}:{sub:0{SUB_SEQUENCE_DIGITS}d}"

    def to_dict(self) -> dict[str, str | int]:
        """A record position as ``{"sequence_number": "...", "sub_sequence_number": 0}``."""
        seq, sub = self.key
        return {"sequence_number": str(seq), "sub_sequence_number": sub}

    def _fields(self) -> tuple[str, int, datetime | None]:
        return self.sequence_number, self.sub_sequence_number, self.timestamp

    def __eq__(self, other: object) -> bool:
        return self._fields() == other._fields() if isinstance(other, Checkpoint) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._fields())

    def __lt__(self, other: object) -> bool:
        return self.order_key < other.order_key if isinstance(other, Checkpoint) else NotImplemented

    def __le__(self, other: object) -> bool:
        return self.order_key <= other.order_key if isinstance(other, Checkpoint) else NotImplemented

    def __gt__(self, other: object) -> bool:
        return self.order_key > other.order_key if isinstance(other, Checkpoint) else NotImplemented

    def __ge__(self, other: object) -> bool:
        return self.order_key >= other.order_key if isinstance(other, Checkpoint) else NotImplemented

    def __str__(self) -> str:
        if self.timestamp is not None:
            return f"AT_TIMESTAMP:{self.timestamp.isoformat()}"
        if self.sub_sequence_number:
            return f"{self.sequence_number}/{self.sub_sequence_number}"
        return self.sequence_number


TRIM_HORIZON = Checkpoint("TRIM_HORIZON")
"""Initial position: start at the oldest record still in the shard."""
LATEST = Checkpoint("LATEST")
"""Initial position: start with records that arrive after the reader starts."""
SHARD_END = Checkpoint("SHARD_END")
"""The shard is closed and every record in it was processed: its children may start."""
