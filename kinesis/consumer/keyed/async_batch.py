"""Async batch processors: today's batch contract with ``async def`` methods.

Subclass :class:`AsyncRecordProcessor` and write ``async def process_records(records,
checkpointer, millis_behind_latest=None)`` (and, if wanted, ``async def`` ``initialize``,
``shutdown_requested``, ``shard_ended``, ``lease_lost``). Each call runs on the Worker's event
loop (:mod:`kinesis.consumer.keyed.executor`, shared with keyed processors), and the shard's
consumer thread waits for it, so a shard is processed one batch at a time, in order, exactly as
with a plain :class:`~kinesis.RecordProcessor`, while the batches of every shard await their I/O
on one thread. Checkpoint with ``await checkpointer.acheckpoint()`` inside a coroutine: the
write runs on a worker thread, so the loop (every shard's coroutines) does not wait for
DynamoDB; ``checkpoint()`` works too, blocking the loop for one write.
"""

from __future__ import annotations

import inspect
from typing import Any

from kinesis.consumer.keyed.executor import KeyedExecutor
from kinesis.consumer.retrieval.records import Record
from kinesis.consumer.shard.processor import Checkpointer, InitializationInput, RecordProcessor


class AsyncRecordProcessor(RecordProcessor):
    """A :class:`~kinesis.RecordProcessor` whose methods may be ``async def`` (see module docs)."""

    async def process_records(  # type: ignore[override]  # the async form of the same contract
        self, records: list[Record], checkpointer: Checkpointer, millis_behind_latest: int | None = None
    ) -> None:
        """Handle one batch (never empty), awaiting its I/O on the Worker's event loop."""
        raise NotImplementedError(f"{type(self).__name__} must implement async process_records")


def is_async(processor: RecordProcessor) -> bool:
    """Whether any of ``processor``'s lifecycle methods is a coroutine function."""
    cls = type(processor)
    return any(inspect.iscoroutinefunction(getattr(cls, name, None))
               for name in ("initialize", "process_records", "shutdown_requested", "shard_ended", "lease_lost"))


class AsyncBatchBridge(RecordProcessor):
    """What the shard consumer drives for an async processor: each call, awaited on the loop."""

    def __init__(self, processor: RecordProcessor, executor: KeyedExecutor):
        self.processor: Any = processor  # its methods may return coroutines
        self.executor = executor

    def _wait(self, result: Any) -> None:
        if inspect.isawaitable(result):
            self.executor.run_blocking(result)

    def initialize(self, init: InitializationInput) -> None:
        self._wait(self.processor.initialize(init))

    def process_records(self, records: list[Record], checkpointer: Checkpointer,
                        millis_behind_latest: int | None = None) -> None:
        self._wait(self.processor.process_records(records, checkpointer, millis_behind_latest=millis_behind_latest))

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        self._wait(self.processor.shutdown_requested(checkpointer))

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        self._wait(self.processor.shard_ended(checkpointer))

    def lease_lost(self) -> None:
        self._wait(self.processor.lease_lost())


__all__ = ["AsyncBatchBridge", "AsyncRecordProcessor", "is_async"]
