"""The concrete :class:`~kinesis.consumer.shard.processor.Checkpointer` of a worker: checkpoints go to the lease.

Every checkpoint is one conditional write through
:meth:`LeaseCoordinator.checkpoint <kinesis.lease_loop.coordinator.LeaseCoordinator.checkpoint>`, fenced
by the lease's owner and counter and by ``checkpointOrder <= new`` in DynamoDB, so

* a member that lost the lease cannot write (:class:`~kinesis.errors.LeaseLostError`, and
  every later call raises it too);
* a checkpoint never moves backwards, locally (:class:`~kinesis.errors.CheckpointError`
  from :class:`~kinesis.consumer.shard.processor.CheckpointerBase`) nor in the table;
* ``checkpoint()`` inside ``shard_ended`` writes ``SHARD_END``, which lets the children start;
* ``prepare_checkpoint()`` writes the lease row's pending checkpoint through
  :meth:`LeaseCoordinator.prepare_checkpoint <kinesis.lease_loop.coordinator.LeaseCoordinator.prepare_checkpoint>`,
  fenced the same way; every checkpoint write clears it.
"""

from __future__ import annotations

from typing import Protocol

from kinesis.consumer.retrieval.positions import SHARD_END, Checkpoint, Position
from kinesis.consumer.shard.processor import CheckpointerBase
from kinesis.errors import LeaseLostError
from kinesis.lease_loop.table.model import Lease


class CheckpointSink(Protocol):
    """What the checkpointer writes through (a :class:`~kinesis.lease_loop.coordinator.LeaseCoordinator`)."""

    def checkpoint(self, key: str, checkpoint: Checkpoint | str | object, *, completed: str | None = None) -> Lease:
        """Write ``checkpoint`` (with ``completed``, the records completed beyond it, encoded)
        to the held lease ``key``; raise LeaseLostError if not held."""
        ...

    def prepare_checkpoint(self, key: str, checkpoint: Checkpoint | str | object) -> Lease:
        """Write the pending checkpoint of the held lease ``key``; raise LeaseLostError if not held."""
        ...


class LeaseCheckpointer(CheckpointerBase):
    """Checkpoints one shard lease through the coordinator (thread-safe)."""

    def __init__(
        self,
        sink: CheckpointSink,
        key: str,
        stream_name: str,
        shard_id: str,
        last_checkpoint: Position | None = None,
        pending_checkpoint: Position | None = None,
    ):
        super().__init__(stream_name, shard_id, last_checkpoint, pending_checkpoint)
        self.sink = sink
        self.key = key
        self.writes = 0
        """Checkpoints persisted by this checkpointer."""
        self._progress_written: tuple[Checkpoint, str | None] | None = None

    def _persist(self, position: Position | None, *, shard_end: bool) -> None:
        checkpoint = SHARD_END if shard_end else position
        assert checkpoint is not None
        try:
            # also written when the last renewal is late: fenced by the counter, it succeeds
            # only if nobody took the lease meanwhile (and then it renews the lease)
            self.sink.checkpoint(self.key, checkpoint)
        except LeaseLostError:
            self.mark_lease_lost()
            raise
        self.writes += 1

    def write_progress(self, checkpoint: Checkpoint, completed: str | None) -> bool:
        """Checkpoint ``checkpoint`` (a record's position, or the lease's own start while
        nothing completed) with ``completed`` (:mod:`kinesis.consumer.keyed.progress`), the
        keyed runner's exact progress; False if it is what was last written (no write).
        Never behind the last checkpoint (CheckpointError); LeaseLostError once lost."""
        with self._lock:
            self._check_held()
            if (checkpoint, completed) == self._progress_written:
                return False
            if isinstance(checkpoint, Position):
                self._check_bounds(checkpoint)
            try:
                self.sink.checkpoint(self.key, checkpoint, completed=completed)
            except LeaseLostError:
                self._lease_lost = True
                raise
            self.writes += 1
            self._progress_written = (checkpoint, completed)
            if isinstance(checkpoint, Position):
                self.last_checkpoint = checkpoint
            self.pending_checkpoint = None
            return True

    def _persist_pending(self, position: Position) -> None:
        try:
            self.sink.prepare_checkpoint(self.key, position)
        except LeaseLostError:
            self.mark_lease_lost()
            raise
