"""Where a shard consumer starts: the lease's checkpoint, pinned first if it is ``LATEST``.

A shard without a checkpoint at ``LATEST`` is *pinned* on first acquisition: the checkpoint
becomes ``AT_TIMESTAMP`` of that moment, so a later owner (hand-off or crash) continues from
the same point instead of skipping what arrived in between. Pure: the consumer writes the
pinned checkpoint and builds its checkpointer and processor from :class:`StartPoint`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kinesis.consumer.positions import Checkpoint, InitialPosition, Position


def pinned_start(checkpoint: Checkpoint, now: datetime) -> Checkpoint | None:
    """The ``AT_TIMESTAMP`` checkpoint to write before reading from ``LATEST`` (None otherwise)."""
    return Checkpoint.at_timestamp(now) if checkpoint.sequence_number == "LATEST" else None


@dataclass(frozen=True)
class StartPoint:
    """What the processor's ``initialize`` and the lease checkpointer are told."""

    last: Position | None
    """The last checkpointed record (the reader starts just after it), or None."""
    pending: Position | None
    """A prepared checkpoint still ahead of :attr:`last`, or None."""
    initial: InitialPosition
    """The lease's initial position, or the stream's when it has a record checkpoint."""


def start_point(checkpoint: Checkpoint, pending: Checkpoint | None, stream_start: InitialPosition) -> StartPoint:
    """The start of a shard whose lease holds ``checkpoint`` (already pinned) and ``pending``."""
    return StartPoint(
        last=checkpoint if isinstance(checkpoint, Position) else None,
        pending=pending_position(pending, checkpoint),
        initial=checkpoint if isinstance(checkpoint, InitialPosition) else stream_start,
    )


def pending_position(pending: Checkpoint | None, checkpoint: Checkpoint) -> Position | None:
    """The lease's pending checkpoint, if it is still ahead of the checkpoint (a member of an
    older release may have checkpointed past it without clearing it)."""
    if not isinstance(pending, Position) or not checkpoint < pending:
        return None
    return pending
