"""A test-only Kinesis endpoint with SubscribeToShard, in front of the moto server.

moto implements the stream-consumer calls (Register/Describe/List/DeregisterStreamConsumer)
but not SubscribeToShard. This endpoint serves SubscribeToShard itself and proxies every other
request to moto unchanged, so a real boto3 client pointed at ``endpoint_url`` sees one Kinesis:

* SubscribeToShard is answered over HTTP/1.1 with a chunked ``application/vnd.amazon.eventstream``
  body: an ``initial-response`` event, then ``SubscribeToShardEvent`` messages read from moto's
  shard with GetShardIterator/GetRecords (``Records``, ``MillisBehindLatest``,
  ``ContinuationSequenceNumber``; at the end of a closed shard ``ChildShards`` and no
  continuation, as AWS does). Events carry records as soon as GetRecords returns some (moto is
  polled every ``poll_interval``) and an empty event every ``heartbeat`` otherwise.
* A subscription ends after ``subscription_lifetime`` seconds (AWS: 5 minutes), so tests can
  exercise renewal in a second.
* One subscription per (consumer, shard): a second call within ``takeover_guard`` seconds of a
  live subscription is refused with ``ResourceInUseException``; a later call takes over and the
  old stream ends with a ``ResourceInUseException`` event (the AWS rules).
* The consumer must exist (moto's DescribeStreamConsumer) and be ACTIVE.

Test controls: :meth:`fail` answers the next calls of an operation with an AWS error (e.g.
``LimitExceededException`` for RegisterStreamConsumer, ``AccessDeniedException``);
:meth:`report_creating` makes Register/DescribeStreamConsumer say CREATING a few times; ``subscribes``
records every SubscribeToShard call; :meth:`silence` makes every live subscription send
nothing more while its connection stays open (a subscription lost without an error). The continuation is moto's iterator position (the last
sequence number read), taken from the iterator moto returns: this module knows moto's
iterator format (``moto.kinesis.utils``).
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from moto.kinesis.utils import decompose_shard_iterator

from tests.support import eventstream

TARGET = "Kinesis_20131202."


@dataclass
class Subscription:
    consumer_arn: str
    shard_id: str
    started: float
    superseded: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class SubscribeCall:
    at: float
    consumer_arn: str
    shard_id: str
    starting_position: dict[str, Any]
    outcome: str
    """"subscribed", or the error code it was refused with."""


class FanOutEndpoint:
    """A threaded HTTP server on 127.0.0.1 (see module docs); ``endpoint_url`` is for clients."""

    def __init__(
        self,
        upstream: str,
        *,
        subscription_lifetime: float = 300.0,
        takeover_guard: float = 5.0,
        poll_interval: float = 0.02,
        heartbeat: float = 0.5,
    ):
        target = urlsplit(upstream)
        self._host, self._port = target.hostname or "127.0.0.1", target.port or 80
        self.subscription_lifetime = subscription_lifetime
        self.takeover_guard = takeover_guard
        self.poll_interval = poll_interval
        self.heartbeat = heartbeat
        self.subscribes: list[SubscribeCall] = []
        self.events_sent = 0
        self._faults: dict[str, deque[tuple[str, int]]] = {}
        self._creating = 0
        self._silenced_before = -1.0  # subscriptions started before this send nothing more
        self._live: dict[tuple[str, str], Subscription] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                endpoint._handle(self)

            do_GET = do_POST

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fanout-endpoint", daemon=True)

    # --- control ------------------------------------------------------------------------

    def start(self) -> FanOutEndpoint:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()

    def fail(self, operation: str, code: str, *, times: int = 1, status: int = 400) -> None:
        """Answer the next ``times`` calls of ``operation`` (e.g. "SubscribeToShard") with ``code``."""
        with self._lock:
            self._faults.setdefault(operation, deque()).extend([(code, status)] * times)

    def report_creating(self, times: int) -> None:
        """The next ``times`` RegisterStreamConsumer/DescribeStreamConsumer answers say CREATING
        (moto registers consumers ACTIVE at once; AWS takes seconds)."""
        with self._lock:
            self._creating = times

    def silence(self) -> None:
        """Every subscription live now sends no event from now on (its connection stays open,
        as one lost without an error would); later subscriptions are served as usual."""
        with self._lock:
            self._silenced_before = time.monotonic()

    def live_subscriptions(self) -> int:
        with self._lock:
            return sum(not s.done.is_set() for s in self._live.values())

    def calls(self, outcome: str | None = None) -> list[SubscribeCall]:
        with self._lock:
            return [c for c in self.subscribes if outcome is None or c.outcome == outcome]

    # --- serving ------------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        operation = (handler.headers.get("X-Amz-Target") or "").removeprefix(TARGET)
        with self._lock:
            queue = self._faults.get(operation)
            fault = queue.popleft() if queue else None
        if fault is not None:
            if operation == "SubscribeToShard":
                self._record_call(json.loads(body or b"{}"), fault[0])
            return self._error(handler, fault[0], "injected by the test endpoint", fault[1])
        if operation == "SubscribeToShard":
            return self._subscribe(handler, json.loads(body or b"{}"))
        status, headers, payload = self._forward(handler.command, handler.path, dict(handler.headers.items()), body)
        if operation in ("DescribeStreamConsumer", "RegisterStreamConsumer") and status == 200:
            payload = self._maybe_creating(payload)
        handler.send_response(status)
        for name, value in headers:
            if name.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def _maybe_creating(self, payload: bytes) -> bytes:
        with self._lock:
            if self._creating <= 0:
                return payload
            self._creating -= 1
        doc = json.loads(payload)
        doc.get("ConsumerDescription", doc.get("Consumer"))["ConsumerStatus"] = "CREATING"
        return json.dumps(doc).encode()

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(self._host, self._port, timeout=60)
        try:
            sent = {k: v for k, v in headers.items() if k.lower() not in ("host", "connection")}
            conn.request(method, path, body=body, headers=sent)
            response = conn.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            conn.close()

    def _call(self, operation: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """One Kinesis call to moto (JSON in, JSON out)."""
        headers = {"X-Amz-Target": TARGET + operation, "Content-Type": "application/x-amz-json-1.1",
                   "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20240101/us-east-1/kinesis/aws4_request"}
        status, _, payload = self._forward("POST", "/", headers, json.dumps(params).encode())
        return status, json.loads(payload or b"{}")

    @staticmethod
    def _error(handler: BaseHTTPRequestHandler, code: str, message: str, status: int = 400) -> None:
        payload = json.dumps({"__type": code, "message": message}).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/x-amz-json-1.1")
        handler.send_header("x-amzn-RequestId", "fanout-endpoint")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def _record_call(self, request: dict[str, Any], outcome: str) -> None:
        with self._lock:
            self.subscribes.append(SubscribeCall(
                time.monotonic(), str(request.get("ConsumerARN")), str(request.get("ShardId")),
                dict(request.get("StartingPosition") or {}), outcome,
            ))

    def _refuse(self, handler: BaseHTTPRequestHandler, request: dict[str, Any], status: int,
                error: dict[str, Any]) -> None:
        code = str(error.get("__type", "InternalFailure")).rsplit("#", 1)[-1]
        self._record_call(request, code)
        self._error(handler, code, str(error.get("message") or error.get("Message") or code), status)

    def _subscribe(self, handler: BaseHTTPRequestHandler, request: dict[str, Any]) -> None:
        consumer_arn, shard_id = str(request.get("ConsumerARN")), str(request.get("ShardId"))
        status, described = self._call("DescribeStreamConsumer", {"ConsumerARN": consumer_arn})
        if status != 200:
            return self._refuse(handler, request, status, described)
        if described["ConsumerDescription"]["ConsumerStatus"] != "ACTIVE":
            return self._refuse(handler, request, 400, {
                "__type": "ResourceInUseException", "message": f"consumer {consumer_arn} is not ACTIVE"})
        stream = consumer_arn.split(":stream/", 1)[1].split("/", 1)[0]
        position = request.get("StartingPosition") or {}
        args: dict[str, Any] = {"StreamName": stream, "ShardId": shard_id, "ShardIteratorType": position.get("Type")}
        if "SequenceNumber" in position:
            args["StartingSequenceNumber"] = position["SequenceNumber"]
        if "Timestamp" in position:
            args["Timestamp"] = position["Timestamp"]
        status, answer = self._call("GetShardIterator", args)
        if status != 200:
            return self._refuse(handler, request, status, answer)
        now = time.monotonic()
        key = (consumer_arn, shard_id)
        with self._lock:
            old = self._live.get(key)
            if old is not None and not old.done.is_set() and now - old.started < self.takeover_guard:
                busy = True
            else:
                busy = False
                if old is not None:
                    old.superseded.set()
                subscription = Subscription(consumer_arn, shard_id, now)
                self._live[key] = subscription
        if busy:
            return self._refuse(handler, request, 400, {
                "__type": "ResourceInUseException",
                "message": f"Another active subscription exists for consumer {consumer_arn} and shard {shard_id}"})
        self._record_call(request, "subscribed")
        try:
            self._stream(handler, subscription, answer["ShardIterator"])
        finally:
            subscription.done.set()

    def _stream(self, handler: BaseHTTPRequestHandler, subscription: Subscription, iterator: str) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/vnd.amazon.eventstream")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.send_header("x-amzn-RequestId", "fanout-endpoint")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True

        def send(message: bytes) -> bool:
            try:
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(message), message))
                handler.wfile.flush()
                return True
            except OSError:  # the client closed the subscription
                return False

        if not send(eventstream.initial_response()):
            return
        deadline = subscription.started + self.subscription_lifetime
        last_sent = 0.0
        pause = threading.Event()
        while time.monotonic() < deadline and not self._closing.is_set():
            if _client_closed(handler):  # like an HTTP/2 stream reset: the subscription ends now
                return
            if subscription.started <= self._silenced_before:
                pause.wait(self.poll_interval)  # lost: nothing more, the connection left open
                continue
            if subscription.superseded.is_set():
                send(eventstream.exception(
                    "ResourceInUseException", "a newer SubscribeToShard call took over this subscription"))
                break
            status, answer = self._call("GetRecords", {"ShardIterator": iterator, "Limit": 10000})
            if status != 200:
                code = str(answer.get("__type", "InternalFailureException")).rsplit("#", 1)[-1]
                send(eventstream.exception(code, str(answer.get("message", code))))
                break
            if subscription.started <= self._silenced_before:
                continue  # silenced while GetRecords ran: its records are never sent
            records = answer.get("Records") or []
            nxt = answer.get("NextShardIterator")
            now = time.monotonic()
            if records or nxt is None or now - last_sent >= self.heartbeat:
                body: dict[str, Any] = {"Records": records, "MillisBehindLatest": answer.get("MillisBehindLatest", 0)}
                if nxt is None:
                    body["ChildShards"] = answer.get("ChildShards") or []
                else:
                    body["ContinuationSequenceNumber"] = decompose_shard_iterator(nxt)[-1]
                if not send(eventstream.event("SubscribeToShardEvent", body)):
                    return
                with self._lock:
                    self.events_sent += 1
                last_sent = now
                if nxt is None:
                    break
            iterator = nxt
            if not records:
                pause.wait(self.poll_interval)
        try:
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
        except OSError:
            pass


def _client_closed(handler: BaseHTTPRequestHandler) -> bool:
    """True once the client closed its end (the socket reads EOF)."""
    sock = handler.connection
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


@contextmanager
def fanout_endpoint(upstream: str, **kwargs: Any) -> Iterator[FanOutEndpoint]:
    """A started :class:`FanOutEndpoint` in front of ``upstream``, stopped on exit."""
    endpoint = FanOutEndpoint(upstream, **kwargs).start()
    try:
        yield endpoint
    finally:
        endpoint.stop()
