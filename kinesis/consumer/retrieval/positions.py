"""Where a shard reader starts: the consumer's names for the kinds of a
:class:`~kinesis.lease_loop.checkpoints.Checkpoint`, the one position type.

``Position(seq, sub)`` is a record's checkpoint ("strictly after this" as a start: a reader
started from it delivers only records after it, also in the middle of a KPL aggregate), and
``InitialPosition`` the LATEST, TRIM_HORIZON or AT_TIMESTAMP checkpoint of a shard never read.
They are not separate types: they build checkpoints, and ``isinstance(cp, Position)`` tests a
checkpoint's kind, so a lease checkpoint is itself a reader's start.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar, cast

from kinesis.errors import ConfigurationError, InvalidCheckpointError
from kinesis.lease_loop.checkpoints import (
    INITIAL,
    LATEST,
    SHARD_END,
    TRIM_HORIZON,
    Checkpoint,
    InitialPositionKind,
)
from kinesis.sequence_numbers import check_sequence_number

__all__ = [
    "LATEST",
    "SHARD_END",
    "TRIM_HORIZON",
    "Checkpoint",
    "InitialPosition",
    "InitialPositionKind",
    "Position",
    "iterator_args",
]


class _KindTest(type):
    """``isinstance(cp, Position)`` asks whether the checkpoint ``cp`` is of that kind."""

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, Checkpoint) and cls._is_kind(instance)  # type: ignore[attr-defined]


class Position(Checkpoint, metaclass=_KindTest):
    """A record position, "strictly after this" as a start: ``Position(seq, sub)`` is
    ``Checkpoint(seq, sub)`` for a sequence number only (a sentinel is refused)."""

    def __new__(cls, sequence_number: str, sub_sequence_number: int = 0, arrival: datetime | None = None) -> Position:
        return Checkpoint(check_sequence_number(sequence_number), sub_sequence_number,  # type: ignore[return-value]
                          arrival=arrival)

    @staticmethod
    def _is_kind(cp: Checkpoint) -> bool:
        return cp.is_record

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> Position:
        """The inverse of :meth:`Checkpoint.to_dict`."""
        if not isinstance(value, dict) or "sequence_number" not in value:
            raise ConfigurationError(
                f"a position needs 'sequence_number' (and optionally 'sub_sequence_number'), "
                f"got {value!r}"
            )
        return cls(value["sequence_number"], value.get("sub_sequence_number", 0))


class InitialPosition(Checkpoint, metaclass=_KindTest):
    """Where a shard without checkpoint starts: ``InitialPosition(kind, timestamp=None)`` is
    the LATEST, TRIM_HORIZON or AT_TIMESTAMP checkpoint."""

    LATEST: ClassVar[InitialPosition]
    TRIM_HORIZON: ClassVar[InitialPosition]

    def __new__(cls, kind: InitialPositionKind, timestamp: datetime | None = None) -> InitialPosition:
        if kind not in INITIAL:
            raise ConfigurationError(
                f"initial position must be LATEST, TRIM_HORIZON or AT_TIMESTAMP, got {kind!r}"
            )
        return Checkpoint(kind, 0, timestamp)  # type: ignore[return-value]

    @staticmethod
    def _is_kind(cp: Checkpoint) -> bool:
        return cp.is_initial

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
            return cls("AT_TIMESTAMP", ts if ts.tzinfo else ts.replace(tzinfo=UTC))
        raise ConfigurationError(
            f"cannot parse initial position {text!r}: use LATEST, TRIM_HORIZON or "
            "AT_TIMESTAMP:<ISO 8601 timestamp>"
        )


InitialPosition.LATEST = cast(InitialPosition, LATEST)  # isinstance(LATEST, InitialPosition) holds
InitialPosition.TRIM_HORIZON = cast(InitialPosition, TRIM_HORIZON)


def iterator_args(start: Checkpoint) -> dict[str, object]:
    """The GetShardIterator arguments for a reader's ``start`` (a record -> AT_SEQUENCE_NUMBER)."""
    if start.is_record:
        # AT, not AFTER: the checkpoint may sit in the middle of an aggregated record; the
        # reader drops every sub-record <= the checkpoint, so the record itself is skipped too.
        return {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": start.sequence_number}
    if start.is_shard_end:
        raise InvalidCheckpointError("SHARD_END is not a start position: the shard is finished")
    if start.timestamp is not None:
        return {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": start.timestamp}
    return {"ShardIteratorType": start.sequence_number}
