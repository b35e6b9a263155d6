"""The record processor API, shaped like KCL's ``ShardRecordProcessor`` and amazon-kclpy.

One :class:`RecordProcessor` instance serves one shard lease at a time. The worker calls, in
order: :meth:`~RecordProcessor.initialize` once, :meth:`~RecordProcessor.process_records` for
every batch, then exactly one of

* :meth:`~RecordProcessor.shard_ended` - the shard was split or merged and every record was
  delivered; call ``checkpointer.checkpoint()`` to finish it, otherwise its children never start
  and the shard is delivered again to the next owner;
* :meth:`~RecordProcessor.shutdown_requested` - graceful hand-off (a deploy, a rebalance,
  SIGTERM): checkpoint what you processed, and the next owner starts right after it;
* :meth:`~RecordProcessor.lease_lost` - another member took the lease: stop, do not checkpoint
  (it would raise :class:`~kinesis.errors.LeaseLostError`).

Delivery is at-least-once: records after the last checkpoint are delivered again after a crash
or a lost lease. Checkpoints never go backwards: checkpointing a position lower than the last
checkpoint raises :class:`~kinesis.errors.CheckpointError`, and so does a position beyond the
last record delivered to this processor.

Two-phase checkpoints (KCL's ``prepareCheckpoint``): ``checkpointer.prepare_checkpoint(...)``
records a pending checkpoint in the lease row and returns a
:class:`~kinesis.consumer.shard.processor.PreparedCheckpointer` whose ``checkpoint()``
commits it; a later owner sees an uncommitted one in
:attr:`InitializationInput.pending_checkpoint`.

Example (see also ``examples/processor_example.py``)::

    class PrintProcessor(RecordProcessor):
        def initialize(self, init: InitializationInput) -> None:
            self.shard = init.shard_id

        def process_records(self, records, checkpointer, millis_behind_latest=None):
            for record in records:
                print(self.shard, record.sequence_number, record.data)
            checkpointer.checkpoint()          # everything delivered so far is done

The second phase of a two-phase checkpoint (KCL's ``PreparedCheckpointer``).

``checkpointer.prepare_checkpoint(...)`` records a *pending* checkpoint in the lease row
(durable and fenced like a checkpoint, never behind the stored checkpoint) and returns a
:class:`PreparedCheckpointer`; its :meth:`~PreparedCheckpointer.checkpoint` commits it, which
also clears the pending checkpoint. A member that takes the lease over before the commit (the
first one crashed) sees the pending checkpoint in
:attr:`InitializationInput.pending_checkpoint <kinesis.consumer.shard.processor.InitializationInput.pending_checkpoint>`
and decides what to do with it (for example, check whether the side effect it guarded
happened); the records after the *checkpoint* are delivered again either way.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kinesis.consumer.retrieval.positions import Checkpoint, InitialPosition, Position
from kinesis.consumer.retrieval.records import Record
from kinesis.errors import CheckpointError, LeaseLostError


class _Committer(Protocol):
    def checkpoint(self, target: Position) -> None: ...


class PreparedCheckpointer:
    """A prepared checkpoint: :meth:`checkpoint` commits it (KCL ``PreparedCheckpointer``)."""

    def __init__(self, checkpointer: _Committer, pending_checkpoint: Position):
        self._checkpointer = checkpointer
        self.pending_checkpoint = pending_checkpoint
        """The prepared position (the last record the pending work covers)."""

    def checkpoint(self) -> None:
        """Commit the pending checkpoint (the lease row's pending checkpoint is cleared).

        Raises like ``Checkpointer.checkpoint``: :class:`~kinesis.errors.LeaseLostError`
        once the lease is lost, :class:`~kinesis.errors.CheckpointError` if a later checkpoint
        was written meanwhile. Committing a checkpoint that was already written does nothing.
        """
        self._checkpointer.checkpoint(self.pending_checkpoint)

    def __repr__(self) -> str:
        p = self.pending_checkpoint
        return f"PreparedCheckpointer({p.sequence_number}/{p.sub_sequence_number})"


CheckpointTarget = Record | Position | str | None
"""What ``checkpoint()`` accepts: a record, a position, a sequence number, or None (last delivered)."""


@dataclass(frozen=True)
class InitializationInput:
    """What :meth:`RecordProcessor.initialize` is told about the shard it now owns."""

    stream_name: str
    shard_id: str
    checkpoint: Position | None
    """The last checkpoint (the reader starts just after it), or None for a fresh shard."""
    initial_position: InitialPosition = InitialPosition.LATEST
    """Where a shard without checkpoint starts."""
    pending_checkpoint: Position | None = None
    """A checkpoint a previous owner prepared but did not commit (two-phase checkpoints), or
    None. Reading still starts after :attr:`checkpoint`; this says how far the prepared
    work went, so the processor can check whether it completed."""


@runtime_checkable
class Checkpointer(Protocol):
    """Records progress for one shard lease. Built by the worker; fenced by the lease.

    ``checkpoint()`` with no argument checkpoints the last record delivered to the processor
    (inside :meth:`RecordProcessor.shard_ended` it marks the shard finished, SHARD_END).
    ``checkpoint(record)``, ``checkpoint(position)`` and ``checkpoint("seq", sub)`` checkpoint
    that record. Raises :class:`LeaseLostError` once the lease is lost, and
    :class:`CheckpointError` for a position that is lower than the last checkpoint or was not
    delivered yet. ``prepare_checkpoint`` takes the same targets and rules and records a
    pending checkpoint instead (two-phase checkpoints).
    """

    def checkpoint(self, target: CheckpointTarget = None, sub_sequence_number: int = 0) -> None:
        """Persist progress up to and including ``target`` (default: the last record delivered)."""
        ...

    def prepare_checkpoint(
        self, target: CheckpointTarget = None, sub_sequence_number: int = 0
    ) -> PreparedCheckpointer:
        """Record ``target`` as the pending checkpoint; the result's ``checkpoint()`` commits it."""
        ...

    async def acheckpoint(self, target: CheckpointTarget = None, sub_sequence_number: int = 0) -> None:
        """:meth:`checkpoint` from a coroutine (the write runs on a worker thread)."""
        ...


class RecordProcessor(ABC):
    """Processes the records of one shard. Override :meth:`process_records`; the rest is optional.

    The defaults of :meth:`shard_ended` and :meth:`shutdown_requested` checkpoint the last
    record delivered, which is right for a processor that has finished each batch when
    :meth:`process_records` returns. A processor that buffers or works asynchronously must
    override them and checkpoint only what it has really finished.
    """

    def initialize(self, init: InitializationInput) -> None:  # noqa: B027 - optional hook
        """Called once before the first batch."""

    @abstractmethod
    def process_records(
        self,
        records: list[Record],
        checkpointer: Checkpointer,
        millis_behind_latest: int | None = None,
    ) -> None:
        """Handle one batch (never empty). ``millis_behind_latest`` is the shard's lag, if known.

        The worker passes ``millis_behind_latest`` by keyword; overrides must accept it.
        """

    def lease_lost(self) -> None:  # noqa: B027 - optional hook
        """Another member owns the shard now: stop; checkpointing would raise LeaseLostError."""

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        """Every record of a closed shard was delivered: checkpoint to finish the shard."""
        checkpointer.checkpoint()

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        """The lease is being handed off (or the worker stops): checkpoint what is processed."""
        checkpointer.checkpoint()


class CheckpointerBase(ABC):
    """The checkpoint rules, for concrete checkpointers: subclasses implement :meth:`_persist`.

    The worker calls :meth:`record_delivered` with each batch before handing it to the processor,
    :meth:`mark_shard_end` before :meth:`RecordProcessor.shard_ended`, and :meth:`mark_lease_lost`
    when the lease is gone. Thread-safe.
    """

    def __init__(
        self,
        stream_name: str,
        shard_id: str,
        last_checkpoint: Position | None = None,
        pending_checkpoint: Position | None = None,
    ):
        self.stream_name = stream_name
        self.shard_id = shard_id
        self.last_checkpoint = last_checkpoint
        self.pending_checkpoint = pending_checkpoint
        """The pending (prepared, uncommitted) checkpoint in the lease row, as far as known."""
        self.largest_delivered: Position | None = last_checkpoint
        self.shard_end_checkpointed = False
        self._at_shard_end = False
        self._lease_lost = False
        self._lock = threading.Lock()

    # -- called by the worker ------------------------------------------------------------
    def record_delivered(self, records: list[Record]) -> None:
        """Note the records about to be handed to the processor (the checkpoint upper bound)."""
        if records:
            top = max(r.position for r in records)
            with self._lock:
                if self.largest_delivered is None or top > self.largest_delivered:
                    self.largest_delivered = top

    def mark_shard_end(self) -> None:
        """From now on, ``checkpoint()`` with no argument records SHARD_END."""
        self._at_shard_end = True

    def mark_lease_lost(self) -> None:
        """From now on every checkpoint raises :class:`LeaseLostError`."""
        self._lease_lost = True

    # -- called by the processor ---------------------------------------------------------
    def checkpoint(self, target: CheckpointTarget = None, sub_sequence_number: int = 0) -> None:
        """See :class:`Checkpointer`."""
        with self._lock:
            self._check_held()
            shard_end = target is None and self._at_shard_end
            position = self._resolve(target, sub_sequence_number)
            if position is None and not shard_end:
                return  # nothing delivered yet: nothing to checkpoint
            if position is not None:
                self._check_bounds(position)
            if not shard_end and position == self.last_checkpoint:
                return
            self._persist(position, shard_end=shard_end)
            if position is not None:
                self.last_checkpoint = position
            self.pending_checkpoint = None  # every checkpoint write clears it
            self.shard_end_checkpointed = self.shard_end_checkpointed or shard_end

    def prepare_checkpoint(
        self, target: CheckpointTarget = None, sub_sequence_number: int = 0
    ) -> PreparedCheckpointer:
        """See :class:`Checkpointer`. Preparing the last checkpoint itself writes nothing."""
        with self._lock:
            self._check_held()
            if target is None and self._at_shard_end:
                raise CheckpointError(
                    f"shard {self.shard_id} ended: call checkpoint() to finish it (SHARD_END "
                    "cannot be prepared), or prepare a record's position"
                )
            position = self._resolve(target, sub_sequence_number)
            if position is None:
                raise CheckpointError(
                    f"nothing was delivered from shard {self.shard_id} yet: there is no position "
                    "to prepare a checkpoint at"
                )
            self._check_bounds(position)
            if position != self.last_checkpoint:
                self._persist_pending(position)
                self.pending_checkpoint = position
            return PreparedCheckpointer(self, position)

    def _check_held(self) -> None:
        if self._lease_lost:
            raise LeaseLostError(
                f"lease on shard {self.shard_id} of stream {self.stream_name} was lost; "
                "another member processes it now. Stop processing and do not checkpoint."
            )

    def _resolve(self, target: CheckpointTarget, sub: int) -> Position | None:
        if target is None:
            return self.largest_delivered
        if isinstance(target, Record):
            return target.position
        if isinstance(target, Position):
            return target
        if isinstance(target, Checkpoint):
            raise CheckpointError(
                f"checkpoint() takes a Record, a Position, a sequence number string or nothing, "
                f"got the {target.kind} sentinel"
            )
        return Position(target, sub)  # the validator refuses anything but a sequence number

    def _check_bounds(self, position: Position) -> None:
        if self.last_checkpoint is not None and position < self.last_checkpoint:
            raise CheckpointError(
                f"cannot checkpoint shard {self.shard_id} at {position.key}: it is before the "
                f"last checkpoint {self.last_checkpoint.key}; checkpoints never go backwards"
            )
        if self.largest_delivered is None or position > self.largest_delivered:
            raise CheckpointError(
                f"cannot checkpoint shard {self.shard_id} at {position.key}: the largest position "
                f"delivered to this processor is "
                f"{self.largest_delivered.key if self.largest_delivered else None}"
            )

    async def acheckpoint(self, target: CheckpointTarget = None, sub_sequence_number: int = 0) -> None:
        """:meth:`checkpoint` from a coroutine: the write runs on a worker thread, so the event
        loop goes on meanwhile (async processors, :mod:`kinesis.consumer.keyed.async_batch`)."""
        import asyncio  # here: a Worker without async processors never loads it

        await asyncio.to_thread(self.checkpoint, target, sub_sequence_number)

    @abstractmethod
    def _persist(self, position: Position | None, *, shard_end: bool) -> None:
        """Write the checkpoint (fenced by the lease); raise LeaseLostError if it is gone.

        ``position`` is the last processed record (None only at the end of an empty shard);
        ``shard_end`` marks the shard finished. The write also clears a pending checkpoint.
        """

    def _persist_pending(self, position: Position) -> None:
        """Write the pending checkpoint (fenced by the lease); raise LeaseLostError if it is gone."""
        raise CheckpointError(f"{type(self).__name__} cannot prepare checkpoints")


class InMemoryCheckpointer(CheckpointerBase):
    """A checkpointer that keeps its checkpoints in memory (tests, examples, single runs)."""

    def __init__(
        self,
        stream_name: str,
        shard_id: str,
        last_checkpoint: Position | None = None,
        pending_checkpoint: Position | None = None,
    ):
        super().__init__(stream_name, shard_id, last_checkpoint, pending_checkpoint)
        self.history: list[tuple[Position | None, bool]] = []
        self.prepared: list[Position] = []
        """Every pending checkpoint written, in order."""

    def _persist(self, position: Position | None, *, shard_end: bool) -> None:
        self.history.append((position, shard_end))

    def _persist_pending(self, position: Position) -> None:
        self.prepared.append(position)
