"""The concrete :class:`~kinesis.processor.Checkpointer` of a worker: checkpoints go to the lease.

Every checkpoint is one conditional write through
:meth:`LeaseCoordinator.checkpoint <kinesis.coordinator.LeaseCoordinator.checkpoint>`, fenced
by the lease's owner and counter and by ``checkpointOrder <= new`` in DynamoDB, so

* a member that lost the lease cannot write (:class:`~kinesis.errors.LeaseLostError`, and
  every later call raises it too);
* a checkpoint never moves backwards, locally (:class:`~kinesis.errors.CheckpointError`
  from :class:`~kinesis.processor.CheckpointerBase`) nor in the table;
* ``checkpoint()`` inside ``shard_ended`` writes ``SHARD_END``, which lets the children start.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from kinesis.errors import LeaseLostError
from kinesis.lease_model import SHARD_END, Checkpoint, Lease
from kinesis.positions import Position
from kinesis.processor import CheckpointerBase


class CheckpointSink(Protocol):
    """What the checkpointer writes through (a :class:`~kinesis.coordinator.LeaseCoordinator`)."""

    def checkpoint(self, key: str, checkpoint: Checkpoint | str | object) -> Lease:
        """Write ``checkpoint`` to the held lease ``key``; raise LeaseLostError if not held."""
        ...

    def holds(self, key: str) -> bool:
        """True while this member may process ``key`` (held and renewed in time)."""
        ...

    def lease(self, key: str) -> Lease | None:
        """The held lease, or None once it is lost, handed off or released."""
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
        *,
        renewal_wait: float = 10.0,
    ):
        super().__init__(stream_name, shard_id, last_checkpoint)
        self.sink = sink
        self.key = key
        self.renewal_wait = renewal_wait
        self.writes = 0
        """Checkpoints persisted by this checkpointer."""
        self.renewal_waits = 0
        """Checkpoints that waited for a late renewal before they could be written."""

    def _persist(self, position: Position | None, *, shard_end: bool) -> None:
        if shard_end:
            checkpoint = SHARD_END
        else:
            assert position is not None
            checkpoint = Checkpoint(position.sequence_number, position.sub_sequence_number)
        deadline: float | None = None
        while True:
            try:
                self.sink.checkpoint(self.key, checkpoint)
                break
            except LeaseLostError:
                # The coordinator refuses to write once its renewal is late (its local validity
                # ran out) but keeps the lease until its next renewal either succeeds
                # (conditional on the counter: nobody took the lease meanwhile) or fails (the
                # lease is dropped). Wait for that verdict and retry; give up only when the lease
                # is really gone, or after ``renewal_wait`` as a backstop.
                if deadline is None:
                    deadline = time.monotonic() + self.renewal_wait
                    self.renewal_waits += 1
                if not self._renewed(deadline):
                    self.mark_lease_lost()
                    raise
        self.writes += 1

    def _renewed(self, deadline: float) -> bool:
        pause = threading.Event()
        while self.sink.lease(self.key) is not None and time.monotonic() < deadline:
            if self.sink.holds(self.key):
                return True
            pause.wait(0.05)
        return False
