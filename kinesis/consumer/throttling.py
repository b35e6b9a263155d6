"""Retry Kinesis calls that failed for a transient reason: throttling, 5xx, dropped connections.

Backoff is exponential with full jitter (tenacity). Sleeps go through ``threading.Event.wait``
when a stop event is given, so a shutdown interrupts them at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from botocore.exceptions import ClientError, ConnectionError, HTTPClientError
from tenacity import (
    RetryCallState,
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from kinesis.aws_errors import is_retryable
from kinesis.errors import KinesisRetriesExhaustedError

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
