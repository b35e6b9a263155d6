"""``failOnDataLoss``: what the source does when records it had not read yet are gone.

Kinesis drops records older than the stream's retention period (24 hours by default), and a
shard whose records all expired leaves ListShards. A query stopped for longer than that (or
that fell that far behind) finds the start of its next range trimmed. The source notices it
wherever a read starts from a logged position, on the driver (fixing a batch's end) and on the
executors (reading a logged range):

* GetShardIterator or SubscribeToShard refuses the start's sequence number
  (``InvalidArgumentException``: :class:`~kinesis.errors.StartingPositionRejectedError`);
* the first record Kinesis returns at the start's sequence number is not that record
  (:func:`start_is_gone`: a reader started ``AT_SEQUENCE_NUMBER`` gets the record itself first
  unless it was trimmed; nothing at all means it is gone too);
* the shard itself is gone (``ResourceNotFoundException``, or no longer listed before it was
  read to its end);
* a logged range ends before its planned end.

With ``failOnDataLoss=true`` (the default) :func:`data_lost` raises
:class:`~spark_integration.errors.DataLossError` naming the shard, the range and the option, which fails
the query. With ``false`` the read goes on from the trim horizon (the oldest record Kinesis
still has), and each loss is logged as a WARNING and added to :data:`LOSSES` (per process: the
driver's losses in the driver's source process, each executor's in its Python worker).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from kinesis.consumer.retrieval import Checkpoint, Position
from spark_integration.errors import DataLossError
from spark_integration.offsets import timestamp_ms

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Loss:
    """One loss that was skipped (``failOnDataLoss=false``)."""

    stream: str
    shard_id: str
    what: str
    """What was lost, e.g. "the records after ... up to 4959... (exclusive)"."""


@dataclass
class LossLog:
    """The losses skipped in this process (thread-safe)."""

    _losses: list[Loss] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, loss: Loss) -> int:
        """Record ``loss``; the number recorded so far."""
        with self._lock:
            self._losses.append(loss)
            return len(self._losses)

    def snapshot(self) -> list[Loss]:
        with self._lock:
            return list(self._losses)

    def count(self, stream: str | None = None, shard_id: str | None = None) -> int:
        """Losses recorded, optionally of one stream and shard."""
        with self._lock:
            return sum((stream is None or x.stream == stream)
                       and (shard_id is None or x.shard_id == shard_id) for x in self._losses)


LOSSES = LossLog()
"""Every loss skipped in this process since it started."""


def describe(pos: Checkpoint | None) -> str:
    """A position for messages: "sequence number 4959..." (with the sub-record if any)."""
    if pos is None:
        return "nothing"
    if isinstance(pos, Position):
        sub = f" (sub-record {pos.sub_sequence_number})" if pos.sub_sequence_number else ""
        return f"sequence number {pos.sequence_number}{sub}"
    return pos.kind if pos.timestamp is None else f"{pos.kind} {timestamp_ms(pos)} ms"


def start_is_gone(begin: Checkpoint, first_sequence_number: str | None) -> bool:
    """True when a reader started ``AT_SEQUENCE_NUMBER`` of ``begin`` did not get ``begin``'s
    own record first (``first_sequence_number``: the first record it got, None for none)."""
    return isinstance(begin, Position) and first_sequence_number != begin.sequence_number


def data_lost(stream: str, shard_id: str, what: str, *, fail: bool, side: str) -> None:
    """Raise :class:`DataLossError` (``fail``), or log a WARNING and count the loss.

    ``what`` says which records are gone; ``side`` ("driver" or "executor") says who noticed.
    """
    where = f"shard {shard_id} of stream {stream!r}"
    if fail:
        raise DataLossError(
            f"data loss in {where}: {what}. Kinesis trims records after the stream's retention "
            "period (or the stream was re-created), and the query had not read them. The query "
            "fails because failOnDataLoss=true (the default): set .option('failOnDataLoss', "
            "'false') to skip to the oldest records still there and go on (each loss is logged "
            "and counted), or start from a new checkpoint location."
        )
    total = LOSSES.add(Loss(stream, shard_id, what))
    log.warning("data loss in %s (%s): %s; skipped to the oldest records still there "
                "(failOnDataLoss=false). Losses skipped in this process: %d",
                where, side, what, total)
