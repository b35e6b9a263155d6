"""The keyed-parallel processor API: one record at a time per partition key, many keys at once.

Subclass :class:`KeyedProcessor`, implement :meth:`~KeyedProcessor.process` (a plain method,
or ``async def``), set :attr:`~KeyedProcessor.max_in_flight`, and pass the class to
``Worker(config, MyProcessor)`` like any processor::

    class Enrich(KeyedProcessor):
        max_in_flight = 64                     # records of one shard processed at once

        async def process(self, record: Record) -> None:
            async with session.post(URL, data=record.data) as answer:
                answer.raise_for_status()

Records with the same partition key are processed in shard order, one at a time; records of
different keys run concurrently, up to :attr:`max_in_flight` per shard. ``async def process``
runs on the Worker's event loop (one thread for every shard of the Worker: coroutines waiting
on I/O cost no thread); a plain ``process`` runs on the Worker's bounded thread pool. The SDK
checkpoints by itself, exactly (:mod:`kinesis.consumer.keyed.progress`): a record is done when
``process`` returns, and after a crash or a hand-off the next owner skips the records that
completed and delivers again only those that had not. A processor never writes a lock and never
checkpoints.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from kinesis.consumer.retrieval.records import Record
from kinesis.consumer.shard.failures import FailureAction
from kinesis.consumer.shard.processor import InitializationInput

Ordering = Literal["key", "shard", "none"]
ORDERINGS: tuple[str, ...] = ("key", "shard", "none")


class KeyedProcessor:
    """Processes the records of one shard lease, one partition key at a time (see module docs).

    One instance serves one shard lease, like a :class:`~kinesis.RecordProcessor`; its
    ``process`` calls for different keys overlap (on the event loop, or on pool threads for
    a plain method), so state shared across keys must be safe for that. The limits are class
    attributes.
    """

    max_in_flight: ClassVar[int] = 8
    """Records of one shard being processed at once (different keys). 1 is sequential."""
    ordering: ClassVar[Ordering] = "key"
    """``"key"``: per partition key, in shard order; ``"shard"``: one record at a time, in
    shard order (a plain processor's behaviour); ``"none"``: any order, up to
    :attr:`max_in_flight` at once."""
    max_pending_records: ClassVar[int] = 10_000
    """Records of one shard delivered and not yet below the checkpoint (in flight, queued
    behind their key, or completed after a record still running), at most 100,000. Reading
    pauses at the cap; it also bounds the completed set written with each checkpoint
    (``ceil(n/8)`` bytes before compression)."""
    max_pending_bytes: ClassVar[int] = 64 * 1024 * 1024
    """Payload bytes of one shard's records queued or running; reading pauses at the cap."""
    checkpoint_interval: ClassVar[float] = 5.0
    """Seconds between progress checkpoints while records complete (hand-offs, shard ends and
    :meth:`request_checkpoint` write at once)."""
    drain_timeout: ClassVar[float] = 10.0
    """A graceful hand-off waits this long for the records in flight; records still running
    then are delivered again by the next owner (queued ones were never started, and are
    delivered again without duplicate)."""

    def __init__(self) -> None:
        self._checkpoint_requested = False

    def initialize(self, init: InitializationInput) -> None:
        """Called once, before the first record of the shard."""

    def process(self, record: Record) -> Any:
        """Process one record (override; may be ``async def``). Raising retries the record
        with backoff, per the Worker's ``processor_retry`` policy, without holding up other
        keys (see :meth:`on_exhausted`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement process(record)")

    def on_exhausted(self, record: Record, error: BaseException, attempts: int) -> FailureAction | str | None:
        """A record failed ``processor_retry.max_attempts`` times: return
        :data:`FailureAction.SKIP` (it counts as completed: send it to a dead-letter queue
        first), :data:`FailureAction.RETRY` (go on retrying at the maximum backoff; its key
        waits, others go on), or None (default) to ask the Worker's ``processor_retry.on_exhausted``."""
        return None

    def shutdown(self, reason: str) -> None:
        """Called once when the lease ends: ``"handoff"`` (after the running records completed
        or ``drain_timeout``), ``"lost"`` (after the running calls were cancelled) or
        ``"shard_end"`` (after every record completed)."""

    def request_checkpoint(self) -> None:
        """Checkpoint the progress at the next opportunity (within a read), not at the interval."""
        self._checkpoint_requested = True

    def take_checkpoint_request(self) -> bool:
        """True once after :meth:`request_checkpoint` (the runner calls this)."""
        requested = getattr(self, "_checkpoint_requested", False)  # an __init__ without super()
        self._checkpoint_requested = False
        return bool(requested)


__all__ = ["ORDERINGS", "FailureAction", "KeyedProcessor", "Ordering"]
