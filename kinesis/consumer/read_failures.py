"""What a shard consumer does after a read failed: keep the lease, wait, read the same position again.

A failed read (retries exhausted, access denied, the stream or shard gone or not active, a
connection error) is waited out with the lease kept: nothing is skipped, and another member
with the same policy would fail the same way. The wait doubles from the larger of the poll
interval and ``idle_backoff`` up to :data:`MAX_READ_BACKOFF`. Pure: the consumer logs, counts
and waits; :class:`ReadFailures` only says how long and whether the error is new.
"""

from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import BotoCoreError

from kinesis.errors import (
    KinesisAccessDeniedError,
    KinesisRetriesExhaustedError,
    ShardNotFoundError,
    StreamNotActiveError,
    StreamNotFoundError,
)

READ_ERRORS = (KinesisRetriesExhaustedError, KinesisAccessDeniedError, StreamNotActiveError,
               StreamNotFoundError, ShardNotFoundError, BotoCoreError)
"""Read failures a consumer waits out with the lease kept (another member would fail alike)."""
MAX_READ_BACKOFF = 30.0
"""The longest wait between two reads that failed (the wait doubles from ``idle_backoff``)."""


def read_backoff(failures: int, poll: float, idle_backoff: float) -> float:
    """Seconds to wait after the ``failures``-th read in a row failed (1-based)."""
    return min(MAX_READ_BACKOFF, max(poll, idle_backoff) * 2 ** (failures - 1))


@dataclass(frozen=True)
class ReadFailure:
    """One failed read, as the consumer logs it."""

    attempt: int
    delay: float
    error: str
    """``"<type>: <message>"``."""
    repeated: bool
    """The same error as the failure before: log it short (no message, no traceback)."""
    unexpected: bool
    """Not one of ours (a botocore error): log its traceback once."""


@dataclass
class ReadFailures:
    """The current run of failed reads of one shard consumer."""

    failures: int = 0
    last_error: str = ""

    def failed(self, exc: BaseException, *, poll: float, idle_backoff: float) -> ReadFailure:
        """Count one failed read: how long to wait, and whether its error is new."""
        self.failures += 1
        error = f"{type(exc).__name__}: {exc}"
        failure = ReadFailure(self.failures, read_backoff(self.failures, poll, idle_backoff), error,
                              repeated=error == self.last_error,
                              unexpected=isinstance(exc, BotoCoreError))
        self.last_error = error
        return failure

    def resumed(self) -> int:
        """A read succeeded: the failures before it (0: none), and the run starts again."""
        failures, self.failures, self.last_error = self.failures, 0, ""
        return failures
