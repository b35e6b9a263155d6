"""An HTTP proxy in front of the moto server that injects AWS faults on the wire.

The client under test is an unmodified boto3 client (default retries included) whose
``endpoint_url`` is the proxy: faults reach it through real sockets, so botocore's own
retry logic runs exactly as against AWS. Faults are queued per operation (the
``X-Amz-Target`` suffix, e.g. ``"UpdateItem"``) or drawn at random with a seed:

* ``error``: answer with an AWS error (status + ``__type``) without forwarding;
* ``applied_then_error``: forward, let the server apply the request, discard its answer and
  answer 500 ``InternalServerError`` (DynamoDB applied a write and still reported an error);
* ``applied_then_reset``: forward, then close the connection without an answer;
* ``reset``: close the connection without forwarding;
* ``delay``: wait ``seconds`` before forwarding (a slow answer).

It also counts every request by service and operation (:attr:`FaultProxy.calls`, see
:func:`classify`), so with no fault queued it is a counting proxy: one per client (member)
gives per-member request counts of any client, boto3 or not.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

KINDS = ("error", "applied_then_error", "applied_then_reset", "reset", "delay")
_SERVICES = (("dynamodbstreams", "dynamodbstreams"), ("dynamodb", "dynamodb"), ("kinesis", "kinesis"),
             ("graniteservice", "cloudwatch"))


def classify(target: str | None, path: str, body: bytes = b"") -> tuple[str, str]:
    """(service, operation) of one AWS request.

    JSON protocols name both in ``X-Amz-Target`` (``DynamoDB_20120810.GetItem``,
    ``Kinesis_20131202.GetRecords``); the RPC v2 CBOR protocol in the path
    (``/service/GraniteServiceVersion20100801/operation/PutMetricData``); the query protocol
    in the form body (``Action=PutMetricData``, service unknown: ``"query"``)."""
    prefix, operation = "", ""
    if target:
        prefix, _, operation = target.rpartition(".")
    elif "/service/" in path and "/operation/" in path:
        prefix = path.split("/service/", 1)[1].split("/", 1)[0]
        operation = path.rsplit("/operation/", 1)[1].split("?", 1)[0]
    elif body.startswith(b"Action=") or b"&Action=" in body:
        action = body.split(b"Action=", 1)[1].split(b"&", 1)[0].decode(errors="replace")
        return "query", action
    else:
        return "other", path
    low = prefix.lower()
    service = next((name for start, name in _SERVICES if low.startswith(start)), low or "other")
    return service, operation or path


@dataclass(frozen=True)
class Fault:
    kind: str
    code: str = "InternalServerError"
    status: int = 500
    seconds: float = 0.0


class FaultProxy:
    """A threaded proxy on 127.0.0.1; ``endpoint_url`` is what clients should use."""

    def __init__(self, upstream: str, *, json_version: str = "1.0",
                 relabel: Callable[[str, str, bytes], str] | None = None):
        target = urlsplit(upstream)
        self._host, self._port = target.hostname or "127.0.0.1", target.port or 80
        self._json_version = json_version
        self._relabel = relabel
        """Optional (service, operation, body) -> the operation name to count (e.g. to count
        checkpoint writes apart from other UpdateItems); faults still match the real name."""
        self._lock = threading.Lock()
        self._queues: dict[str, deque[Fault]] = {}
        self._random: tuple[random.Random, float, tuple[str, ...], frozenset[str]] | None = None
        self.requests: Counter[str] = Counter()
        self.calls: Counter[tuple[str, str]] = Counter()
        """Requests by (service, operation), faults included."""
        self.injected: Counter[tuple[str, str]] = Counter()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                proxy._handle(self)

            do_GET = do_POST

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)

    # --- control ------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def queue(self, operation: str, fault: Fault, times: int = 1) -> None:
        """Apply ``fault`` to the next ``times`` calls of ``operation``."""
        with self._lock:
            self._queues.setdefault(operation, deque()).extend([fault] * times)

    def randomly(self, seed: int, rate: float, kinds: tuple[str, ...] = KINDS,
                 operations: frozenset[str] = frozenset()) -> None:
        """Inject a fault of a random kind into a fraction ``rate`` of calls (all operations
        when ``operations`` is empty); ``rate=0`` turns it off."""
        with self._lock:
            self._random = (random.Random(seed), rate, kinds, operations) if rate > 0 else None

    def counts(self) -> dict[tuple[str, str], int]:
        """A copy of :attr:`calls`."""
        with self._lock:
            return dict(self.calls)

    def pending(self, operation: str) -> int:
        with self._lock:
            return len(self._queues.get(operation, ()))

    # --- serving ------------------------------------------------------------------------

    def _pick(self, operation: str, service: str = "", label: str | None = None) -> Fault | None:
        with self._lock:
            self.requests[operation] += 1
            self.calls[(service, label or operation)] += 1
            queue = self._queues.get(operation)
            if queue:
                return queue.popleft()
            if self._random is not None:
                rng, rate, kinds, ops = self._random
                if (not ops or operation in ops) and rng.random() < rate:
                    kind = rng.choice(kinds)
                    code = rng.choice(("InternalServerError", "ThrottlingException"))
                    status = 500 if code == "InternalServerError" else 400
                    return Fault(kind, code, status, seconds=rng.uniform(0.05, 0.5))
        return None

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        service, operation = classify(handler.headers.get("X-Amz-Target"), handler.path, body)
        label = self._relabel(service, operation, body) if self._relabel is not None else None
        fault = self._pick(operation, service, label)
        if fault is not None:
            with self._lock:
                self.injected[(operation, fault.kind)] += 1
            if fault.kind == "error":
                return self._answer_error(handler, fault)
            if fault.kind == "reset":
                return self._reset(handler)
            if fault.kind == "delay":
                threading.Event().wait(fault.seconds)
        status, headers, payload = self._forward(handler, body)
        if fault is not None and fault.kind == "applied_then_error":
            return self._answer_error(handler, fault)
        if fault is not None and fault.kind == "applied_then_reset":
            return self._reset(handler)
        handler.send_response(status)
        for name, value in headers:
            if name.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def _forward(self, handler: BaseHTTPRequestHandler, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(self._host, self._port, timeout=60)
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in ("host", "connection")}
            conn.request(handler.command, handler.path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            conn.close()

    def _answer_error(self, handler: BaseHTTPRequestHandler, fault: Fault) -> None:
        prefix = "com.amazonaws.dynamodb.v20120810#" if self._json_version == "1.0" else ""
        payload = json.dumps({"__type": prefix + fault.code, "message": "injected by the fault proxy"}).encode()
        handler.send_response(fault.status)
        handler.send_header("Content-Type", f"application/x-amz-json-{self._json_version}")
        handler.send_header("x-amzn-RequestId", "fault-proxy")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    @staticmethod
    def _reset(handler: BaseHTTPRequestHandler) -> None:
        handler.close_connection = True
        sock = handler.connection
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


@contextmanager
def fault_proxy(upstream: str, **kwargs: Any) -> Iterator[FaultProxy]:
    """A started :class:`FaultProxy` in front of ``upstream``, stopped on exit."""
    proxy = FaultProxy(upstream, **kwargs).start()
    try:
        yield proxy
    finally:
        proxy.stop()
