"""What a worker does when a processor raises: retry the batch in place, with backoff.

A processor that raises on a record (a "poison" record) must not make its shard restart at
once forever, nor skip the record silently. The shard consumer keeps the lease and retries
the same batch, minus the records already checkpointed, with exponential backoff
(``initial_backoff`` doubling up to ``max_backoff``). Attempts are counted per (shard,
checkpoint): a checkpoint made by the processor between two failures starts the count again.

After ``max_attempts`` failed attempts the shard is *stuck*: visible in
:meth:`Worker.status() <kinesis.consumer.worker.worker.Worker.status>` (shard state ``stuck``, attempts,
error), in the ``kinesis_worker_shards_stuck`` metric and in one ERROR log line. Then:

* by default the batch is retried for ever at ``max_backoff`` (nothing is ever skipped);
* with ``on_exhausted``, the handler sees a :class:`FailedBatch` (records, error, attempts)
  and returns :data:`FailureAction.SKIP` (for example after writing the batch to a
  dead-letter queue: the records count as processed and the next checkpoint moves past them)
  or :data:`FailureAction.RETRY`. A handler that raises counts as ``RETRY``.

Probes stay green on purpose: a stuck shard is a data problem, and restarting the pod or
taking it out of the member list would only move the poison to another member.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass

from kinesis.consumer.retrieval.records import Record
from kinesis.errors import ConfigurationError


class FailureAction(enum.Enum):
    """What to do with a batch whose retries are exhausted."""

    RETRY = "retry"
    SKIP = "skip"


@dataclass(frozen=True)
class FailedBatch:
    """A batch the processor failed on ``attempts`` times in a row (given to ``on_exhausted``)."""

    key: str
    stream: str
    shard_id: str
    records: tuple[Record, ...]
    attempts: int
    error: BaseException

    @property
    def first_sequence_number(self) -> str:
        return self.records[0].sequence_number

    @property
    def last_sequence_number(self) -> str:
        return self.records[-1].sequence_number


ExhaustedHandler = Callable[[FailedBatch], "FailureAction | str"]


@dataclass(frozen=True)
class ProcessorRetryPolicy:
    """Backoff and limits for batches a processor raised on (see the module docs)."""

    initial_backoff: float = 0.5
    max_backoff: float = 30.0
    max_attempts: int = 10
    on_exhausted: ExhaustedHandler | None = None

    def __post_init__(self) -> None:
        for name in ("initial_backoff", "max_backoff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ConfigurationError(f"ProcessorRetryPolicy.{name} must be seconds > 0, got {value!r}")
        if self.max_backoff < self.initial_backoff:
            raise ConfigurationError(
                f"ProcessorRetryPolicy.max_backoff ({self.max_backoff:g} s) must be >= initial_backoff "
                f"({self.initial_backoff:g} s)"
            )
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ConfigurationError(f"ProcessorRetryPolicy.max_attempts must be an int >= 1, got {self.max_attempts!r}")
        if self.on_exhausted is not None and not callable(self.on_exhausted):
            raise ConfigurationError(
                f"ProcessorRetryPolicy.on_exhausted must be a callable(FailedBatch) -> FailureAction, "
                f"got {self.on_exhausted!r}"
            )

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return min(self.max_backoff, self.initial_backoff * 2.0 ** min(max(attempt - 1, 0), 60))

    def decide(self, batch: FailedBatch) -> FailureAction:
        """The action once ``max_attempts`` is reached (RETRY without a handler)."""
        if self.on_exhausted is None:
            return FailureAction.RETRY
        answer = self.on_exhausted(batch)
        try:
            return FailureAction(answer.value if isinstance(answer, FailureAction) else answer)
        except ValueError:
            raise ConfigurationError(
                f"on_exhausted returned {answer!r}: return FailureAction.SKIP or FailureAction.RETRY"
            ) from None


@dataclass
class FailureState:
    """The current run of failures of one shard consumer (for status and metrics)."""

    attempts: int = 0
    error: str | None = None
    stuck: bool = False
