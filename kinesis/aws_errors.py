"""The one classifier of AWS errors worth retrying, for every DynamoDB and Kinesis call.

Throttling, server-side (5xx) and connection errors are retried (with jittered exponential
backoff by the caller); everything else (validation, access denied, missing resources, a failed
write condition) is not: retrying cannot change its outcome.
"""

from __future__ import annotations

from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

RETRYABLE_CODES = frozenset(
    {
        # throttling (DynamoDB, Kinesis, STS, KMS behind an encrypted stream)
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "LimitExceededException",
        "KMSThrottlingException",
        # server side
        "InternalServerError",
        "InternalFailure",
        "InternalFailureException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        # DynamoDB: a concurrent transaction touched the item; the next attempt may pass
        "TransactionConflictException",
    }
)


def error_code(exc: BaseException) -> str | None:
    """The AWS error code of a ``ClientError`` (``None`` for anything else)."""
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None


def is_retryable(exc: BaseException) -> bool:
    """True for throttling, server-side (5xx) and connection errors (timeouts, resets)."""
    if isinstance(exc, ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        return error_code(exc) in RETRYABLE_CODES or status >= 500
    return isinstance(exc, ConnectionError | HTTPClientError)
