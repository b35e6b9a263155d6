"""Inject AWS error responses into a boto3 client at the HTTP layer (botocore ``before-send``).

The request is answered locally with a real HTTP error response (status, JSON error body), so
botocore parses it exactly as one from AWS: the code under test sees a genuine ``ClientError``
and its own retry logic is exercised. Disable botocore's retries on the client
(``Config(retries={"total_max_attempts": 1})``) to test ours alone.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.awsrequest import AWSResponse


class _Raw:
    def __init__(self, body: bytes):
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


@dataclass
class Fault:
    code: str
    status: int = 400
    message: str = "injected by the test"
    on_inject: Callable[[], None] | None = None


class FaultInjector:
    """Queue faults per operation (``"GetRecords"``); each queued fault answers one request."""

    def __init__(self, client: Any):
        self._queues: dict[str, deque[Fault]] = {}
        self.injected: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()
        client.meta.events.register("before-send.kinesis", self._before_send)

    def fail(self, operation: str, code: str, *, times: int = 1, status: int = 400,
             on_inject: Callable[[], None] | None = None) -> None:
        """Answer the next ``times`` calls of ``operation`` with error ``code``."""
        queue = self._queues.setdefault(operation, deque())
        queue.extend(Fault(code, status, on_inject=on_inject) for _ in range(times))

    def pending(self, operation: str) -> int:
        return len(self._queues.get(operation, ()))

    def _before_send(self, request: Any, **_: Any) -> AWSResponse | None:
        target = request.headers.get("X-Amz-Target", b"")
        if isinstance(target, bytes):
            target = target.decode()
        operation = target.rsplit(".", 1)[-1]
        self.requests[operation] += 1
        queue = self._queues.get(operation)
        if not queue:
            return None
        fault = queue.popleft()
        self.injected[operation] += 1
        if fault.on_inject is not None:
            fault.on_inject()
        body = json.dumps({"__type": fault.code, "message": fault.message}).encode()
        headers = {"Content-Type": "application/x-amz-json-1.1", "x-amzn-RequestId": "injected"}
        return AWSResponse(request.url, fault.status, headers, _Raw(body))
