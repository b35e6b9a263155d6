"""What a shard consumer shows and what it sees of the lease coordinator.

:class:`ShardStatus` is one consumer's line in :meth:`Worker.status()
<kinesis.consumer.worker.Worker.status>`; :class:`ConsumerLeases` is the part of the
:class:`~kinesis.lease_loop.coordinator.LeaseCoordinator` a consumer calls, and
:class:`NoCoordinator` stands in for it until the worker wires its coordinator in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kinesis.errors import LeaseLostError
from kinesis.lease_loop.checkpoints import Checkpoint
from kinesis.lease_loop.lease_model import Lease


class ConsumerLeases(Protocol):
    """The part of :class:`~kinesis.lease_loop.coordinator.LeaseCoordinator` a consumer uses."""

    def holds(self, key: str) -> bool: ...

    def lease(self, key: str) -> Lease | None: ...

    def checkpoint(self, key: str, checkpoint: Checkpoint | str | object) -> Lease: ...

    def prepare_checkpoint(self, key: str, checkpoint: Checkpoint | str | object) -> Lease: ...

    def release(self, key: str) -> bool: ...


@dataclass(frozen=True)
class ShardStatus:
    """What one shard consumer is doing (part of :meth:`Worker.status`)."""

    key: str
    application: str
    stream: str
    shard_id: str
    state: str
    """starting, processing, retrying, stuck, shutting-down, ended, lost, failed or stopped."""
    records_processed: int
    batches: int
    millis_behind_latest: int | None
    last_checkpoint: str | None
    failed_attempts: int = 0
    """Failed attempts at the current batch (0 while it goes well)."""
    last_error: str | None = None


class NoCoordinator:
    """Placeholder until the worker wires its coordinator in."""

    def holds(self, key: str) -> bool:
        return False

    def lease(self, key: str) -> Lease | None:
        return None

    def checkpoint(self, key: str, checkpoint: Checkpoint | str | object) -> Lease:
        raise LeaseLostError("the worker has no lease coordinator yet")

    def prepare_checkpoint(self, key: str, checkpoint: Checkpoint | str | object) -> Lease:
        raise LeaseLostError("the worker has no lease coordinator yet")

    def release(self, key: str) -> bool:
        return False
