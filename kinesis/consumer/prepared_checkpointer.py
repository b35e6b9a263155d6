"""The second phase of a two-phase checkpoint (KCL's ``PreparedCheckpointer``).

``checkpointer.prepare_checkpoint(...)`` records a *pending* checkpoint in the lease row
(durable and fenced like a checkpoint, never behind the stored checkpoint) and returns a
:class:`PreparedCheckpointer`; its :meth:`~PreparedCheckpointer.checkpoint` commits it, which
also clears the pending checkpoint. A member that takes the lease over before the commit (the
first one crashed) sees the pending checkpoint in
:attr:`InitializationInput.pending_checkpoint <kinesis.consumer.processor.InitializationInput.pending_checkpoint>`
and decides what to do with it (for example, check whether the side effect it guarded
happened); the records after the *checkpoint* are delivered again either way.
"""

from __future__ import annotations

from typing import Protocol

from kinesis.consumer.positions import Position


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
