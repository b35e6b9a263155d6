"""Where a shard reader starts: an initial position, or just after a checkpointed record.

A *position* in a shard is a pair (sequence number, sub-sequence number). Sequence numbers are
decimal strings of up to 128 bits and are compared as integers (never as strings). The
sub-sequence number is the index of a user record inside a KPL aggregated record, and 0 for a
plain record. ``Position`` always means "the record at this position and everything before it
is done": a reader started from a ``Position`` delivers only records strictly after it. That is
how a checkpoint is resumed, also in the middle of an aggregated record (KCL semantics: the
Kinesis record is fetched again with ``AT_SEQUENCE_NUMBER`` and its sub-records up to and
including the checkpointed sub-sequence number are skipped).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar, Literal

from kinesis.errors import ConfigurationError

InitialPositionKind = Literal["LATEST", "TRIM_HORIZON", "AT_TIMESTAMP"]


@functools.total_ordering
@dataclass(frozen=True)
class Position:
    """A record's position in a shard; as a start point it means "strictly after this"."""

    sequence_number: str
    sub_sequence_number: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.sequence_number, str) or not self.sequence_number.isdigit():
            raise ConfigurationError(
                f"sequence_number must be a decimal string such as '4959...', got "
                f"{self.sequence_number!r}"
            )
        if not isinstance(self.sub_sequence_number, int) or self.sub_sequence_number < 0:
            raise ConfigurationError(
                f"sub_sequence_number must be an int >= 0, got {self.sub_sequence_number!r}"
            )

    @property
    def key(self) -> tuple[int, int]:
        """The sort key: (int(sequence_number), sub_sequence_number)."""
        return int(self.sequence_number), self.sub_sequence_number

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return self.key < other.key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def to_dict(self) -> dict[str, str | int]:
        """A JSON-friendly form: ``{"sequence_number": "...", "sub_sequence_number": 0}``."""
        return {"sequence_number": self.sequence_number, "sub_sequence_number": self.sub_sequence_number}

    @classmethod
    def from_dict(cls, value: dict[str, str | int]) -> Position:
        """The inverse of :meth:`to_dict`."""
        try:
            return cls(str(value["sequence_number"]), int(value.get("sub_sequence_number", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"a position needs 'sequence_number' (and optionally 'sub_sequence_number'), "
                f"got {value!r}"
            ) from exc


@dataclass(frozen=True)
class InitialPosition:
    """Where to start a shard that has no checkpoint: LATEST, TRIM_HORIZON or AT_TIMESTAMP."""

    kind: InitialPositionKind
    timestamp: datetime | None = None

    LATEST: ClassVar[InitialPosition]
    TRIM_HORIZON: ClassVar[InitialPosition]

    def __post_init__(self) -> None:
        if self.kind not in ("LATEST", "TRIM_HORIZON", "AT_TIMESTAMP"):
            raise ConfigurationError(
                f"initial position must be LATEST, TRIM_HORIZON or AT_TIMESTAMP, got {self.kind!r}"
            )
        if (self.kind == "AT_TIMESTAMP") != (self.timestamp is not None):
            raise ConfigurationError(
                "AT_TIMESTAMP needs a timestamp (InitialPosition.at_timestamp(dt)); "
                "LATEST and TRIM_HORIZON take none"
            )
        if self.timestamp is not None and self.timestamp.tzinfo is None:
            raise ConfigurationError(
                f"AT_TIMESTAMP needs a timezone-aware datetime, got naive {self.timestamp!r}; "
                "use datetime(..., tzinfo=UTC)"
            )

    @classmethod
    def at_timestamp(cls, timestamp: datetime) -> InitialPosition:
        """Start at the first record that arrived at or after ``timestamp`` (timezone-aware)."""
        return cls("AT_TIMESTAMP", timestamp)

    @classmethod
    def parse(cls, text: str) -> InitialPosition:
        """``"LATEST"``, ``"TRIM_HORIZON"`` or ``"AT_TIMESTAMP:<ISO 8601>"`` (naive = UTC)."""
        head, _, tail = text.strip().partition(":")
        head = head.upper()
        if head in ("LATEST", "TRIM_HORIZON") and not tail:
            return cls(head)  # type: ignore[arg-type]
        if head == "AT_TIMESTAMP" and tail:
            try:
                ts = datetime.fromisoformat(tail.strip())
            except ValueError as exc:
                raise ConfigurationError(
                    f"cannot parse the timestamp in {text!r}: use ISO 8601, e.g. "
                    "AT_TIMESTAMP:2024-05-01T12:00:00+00:00"
                ) from exc
            return cls.at_timestamp(ts if ts.tzinfo else ts.replace(tzinfo=UTC))
        raise ConfigurationError(
            f"cannot parse initial position {text!r}: use LATEST, TRIM_HORIZON or "
            "AT_TIMESTAMP:<ISO 8601 timestamp>"
        )

    def __str__(self) -> str:
        return f"AT_TIMESTAMP:{self.timestamp.isoformat()}" if self.timestamp else self.kind


InitialPosition.LATEST = InitialPosition("LATEST")
InitialPosition.TRIM_HORIZON = InitialPosition("TRIM_HORIZON")

StartPosition = Position | InitialPosition
"""Where a reader starts: just after a checkpointed :class:`Position`, or an initial position."""


def iterator_args(start: StartPosition) -> dict[str, object]:
    """The GetShardIterator arguments for ``start`` (``Position`` -> AT_SEQUENCE_NUMBER + filter)."""
    if isinstance(start, Position):
        # AT, not AFTER: the checkpoint may sit in the middle of an aggregated record; the
        # reader drops every sub-record <= the checkpoint, so the record itself is skipped too.
        return {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": start.sequence_number}
    if start.kind == "AT_TIMESTAMP":
        return {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": start.timestamp}
    return {"ShardIteratorType": start.kind}
