"""What a shard consumer does after a read failed: keep the lease, wait, read the same position again.

A failed read (retries exhausted, access denied, the stream or shard gone or not active, a
connection error) is waited out with the lease kept: nothing is skipped, and another member
with the same policy would fail the same way. The wait doubles from the larger of the poll
interval and ``idle_backoff`` up to :data:`MAX_READ_BACKOFF`. Pure: the consumer logs, counts
and waits; :class:`ReadFailures` only says how long and whether the error is new.

Retry Kinesis calls that failed for a transient reason: throttling, 5xx, dropped connections.

Backoff is exponential with full jitter (tenacity). Sleeps go through ``threading.Event.wait``
when a stop event is given, so a shutdown interrupts them at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError
from tenacity import (
    RetryCallState,
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from kinesis.aws_errors import is_retryable
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


T = TypeVar("T")

class ShutdownRequested(Exception):
    """Raised instead of sleeping when the stop event is already set."""


def call_with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    max_attempts: int = 8,
    initial_wait: float = 0.05,
    max_wait: float = 5.0,
    stop_event: threading.Event | None = None,
    budget_option: str = "max_attempts",
) -> T:
    """Call ``fn`` until it succeeds, retrying transient errors up to ``max_attempts`` times.

    Raises :class:`KinesisRetriesExhaustedError` (chained to the last error) when the budget is
    spent, naming the cause (unreachable endpoint, throttling or server errors) and
    ``budget_option``, the setting that raises the budget; :class:`ShutdownRequested` when
    ``stop_event`` is set during a backoff; any non-transient error at once.
    """

    def sleep(seconds: float) -> None:
        if stop_event is None:
            threading.Event().wait(seconds)
        elif stop_event.wait(seconds):
            raise ShutdownRequested(what)

    def before_sleep(state: RetryCallState) -> None:
        if stop_event is not None and stop_event.is_set():
            raise ShutdownRequested(what)

    retrying = Retrying(
        retry=retry_if_exception(is_retryable),
        stop=stop_after_attempt(max_attempts),
        wait=wait_random_exponential(multiplier=initial_wait, max=max_wait),
        sleep=sleep,
        before_sleep=before_sleep,
    )
    try:
        return retrying(fn)
    except RetryError as exc:
        last = exc.last_attempt.exception()
        assert last is not None
        raise KinesisRetriesExhaustedError(
            f"{what} failed {max_attempts} times: {last}. {explain_transient(last)} "
            f"(the retry budget is {budget_option})."
        ) from last


def explain_transient(exc: BaseException) -> str:
    """What a transient error means and what to do about it, by its cause."""
    if isinstance(exc, ConnectionError | HTTPClientError):
        return (
            "The Kinesis endpoint could not be reached or dropped the connection: check "
            "endpoint_url, the region, DNS, proxies and security groups or VPC endpoints"
        )
    code = str(exc.response.get("Error", {}).get("Code", "")) if isinstance(exc, ClientError) else ""
    if code in ("ProvisionedThroughputExceededException", "LimitExceededException", "ThrottlingException",
                "Throttling", "RequestLimitExceeded", "KMSThrottlingException"):
        return (
            f"Kinesis throttled the calls ({code}): the stream is under-provisioned for its "
            "readers; read less often, add shards, or give heavy readers Enhanced Fan-Out"
        )
    return "Kinesis answered with a server error: usually transient on the service side; retry later"
