"""One classifier of retryable AWS errors for the lease table, the Kinesis readers and fan-out."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from kinesis import aws_errors
from kinesis.consumer.retrieval import failures as throttling
from kinesis.consumer.retrieval import fanout as fanout_reader
from kinesis.consumer.retrieval import polling as reader
from kinesis.lease_loop.table import calls as table_calls


def client_error(code: str, status: int = 400) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "Op")


def test_every_caller_uses_the_same_classifier() -> None:
    assert table_calls.is_retryable is aws_errors.is_retryable
    assert throttling.is_retryable is aws_errors.is_retryable
    assert reader.is_retryable is aws_errors.is_retryable
    assert fanout_reader.is_retryable is aws_errors.is_retryable


@pytest.mark.parametrize(
    ("exc", "retryable"),
    [
        (client_error("ProvisionedThroughputExceededException"), True),
        (client_error("ThrottlingException"), True),
        (client_error("LimitExceededException"), True),
        (client_error("KMSThrottlingException"), True),
        (client_error("TransactionConflictException"), True),
        (client_error("InternalFailure", 500), True),
        (client_error("Whatever", 503), True),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), True),
        (ReadTimeoutError(endpoint_url="http://127.0.0.1:1"), True),
        (client_error("ConditionalCheckFailedException"), False),
        (client_error("AccessDeniedException"), False),
        (client_error("ResourceNotFoundException"), False),
        (client_error("ValidationException"), False),
        (client_error("ExpiredIteratorException"), False),
        (ValueError("not an AWS error"), False),
    ],
)
def test_throttling_5xx_and_connections_are_retried_nothing_else(exc: BaseException, retryable: bool) -> None:
    assert aws_errors.is_retryable(exc) is retryable
