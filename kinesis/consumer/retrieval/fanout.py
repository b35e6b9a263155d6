r"""Read one shard with Enhanced Fan-Out: SubscribeToShard, renewed, behind the ShardReader interface.

:class:`FanOutReader` offers what :class:`~kinesis.consumer.retrieval.polling.ShardReader` offers the shard
consumer (:meth:`read_batch` returning a :class:`~kinesis.consumer.retrieval.polling.ReadResult`,
:meth:`wait`, :attr:`last_position`), so the consumer loop, checkpoints and hand-offs are the
same code for both retrievals.

How it reads:

* a subscription (one SubscribeToShard call) streams ``SubscribeToShardEvent``\ s; a pump
  thread per subscription parses them (botocore's event-stream decoder) into a small queue,
  which bounds read-ahead: a slow processor back-pressures the connection;
* the first subscription starts at the reader's start (a checkpoint ``Position``: at that
  sequence number, records up to the position dropped, as the polling reader does; or the
  initial position); every later one starts ``AFTER_SEQUENCE_NUMBER`` the last
  ``ContinuationSequenceNumber`` received, so a renewal neither skips nor repeats a record;
* a subscription is renewed when the service ends it (after 5 minutes), when it fails (a
  dropped connection, ``ResourceInUseException`` because a newer call took it over, a server
  error), and proactively after ``renew_after`` seconds (the new call takes the subscription
  over, then the old one is closed); queued events of an old subscription are dropped (the new
  one starts after the last event *delivered*);
* SubscribeToShard is called at most once per ``min_subscribe_interval`` (Kinesis allows one
  call per second per shard and consumer); ``ResourceInUseException`` (another subscription
  of this consumer to this shard is live, e.g. the previous owner's during a hand-off) and
  ``LimitExceededException`` back off exponentially up to ``max_backoff``;
* an event without ``ContinuationSequenceNumber`` ends the shard: its ``ChildShards`` become
  the result's ``child_shard_ids`` once every record was delivered (SHARD_END).

:meth:`read_batch` blocks at most ``max_block`` seconds for an event, so the caller checks its
lease and stop requests at least that often; the stop event interrupts it at once. Call
:meth:`close` when done (it ends the subscription and its thread).

Register (or reuse) a stream's Enhanced Fan-Out consumer and wait until it is ACTIVE.

:class:`ConsumerRegistration` is what a fan-out reader needs before SubscribeToShard: the
consumer's ARN. :meth:`~ConsumerRegistration.ensure` describes the consumer by name and
registers it only if it does not exist (every member of a fleet calls it; the first one
registers, the others reuse it, and a registration race ends in a reuse), then waits until
DescribeStreamConsumer says ACTIVE. :meth:`~ConsumerRegistration.refresh` does it again after
the consumer was deleted under a running worker; :meth:`~ConsumerRegistration.deregister`
removes it (by ARN).

Errors name the fix: :class:`~kinesis.errors.FanOutConsumerLimitError` when the stream already
has the most consumers Kinesis allows (20 by default), :class:`~kinesis.errors.KinesisAccessDeniedError`
naming the IAM action, :class:`~kinesis.errors.FanOutConsumerNotActiveError` when the consumer
stays CREATING (or DELETING) past ``active_timeout``.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import random
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from kinesis.aws_errors import error_code
from kinesis.consumer.discovery.shards import named_client_error
from kinesis.consumer.retrieval import fast_parse
from kinesis.consumer.retrieval.failures import call_with_retries, is_retryable
from kinesis.consumer.retrieval.polling import (
    MAX_GET_RECORDS_LIMIT,
    BatchCursor,
    ReadResult,
    check_reader_args,
)
from kinesis.consumer.retrieval.positions import Checkpoint, InitialPosition, Position
from kinesis.durations import check_seconds
from kinesis.errors import (
    ConfigurationError,
    FanOutConsumerLimitError,
    FanOutConsumerNotActiveError,
    KinesisAccessDeniedError,
    KinesisHashRingError,
    KinesisRetriesExhaustedError,
    ShardNotFoundError,
    StartingPositionRejectedError,
    access_denied_message,
    is_access_denied,
)

if TYPE_CHECKING:
    from kinesis.consumer.worker.config import StreamConfig


log = logging.getLogger(__name__)

CONSUMER_LIMIT = 20
"""Registered consumers per stream (the Kinesis default quota)."""


class ConsumerRegistration:
    """One stream consumer (``consumer_name`` on ``stream_name``); thread-safe."""

    def __init__(
        self,
        kinesis_client: Any,
        stream_name: str,
        consumer_name: str,
        *,
        active_timeout: float = 120.0,
        poll_interval: float = 1.0,
        max_attempts: int = 8,
        retry_option: str = "WorkerConfig.kinesis_retry_attempts",
    ):
        self.client = kinesis_client
        self.stream_name = stream_name
        self.consumer_name = consumer_name
        self.active_timeout = active_timeout
        self.poll_interval = poll_interval
        self.max_attempts = max_attempts
        self.retry_option = retry_option
        self.registered_here = False
        """True if this object registered the consumer (it did not exist)."""
        self._stream_arn: str | None = None
        self._arn: str | None = None
        self._lock = threading.Lock()

    @property
    def arn(self) -> str:
        """The consumer's ARN (:meth:`ensure` first)."""
        with self._lock:
            if self._arn is None:
                raise FanOutConsumerNotActiveError(
                    f"stream consumer {self.consumer_name!r} of stream {self.stream_name!r} is not "
                    "registered yet: call ensure() (Worker.start() does)"
                )
            return self._arn

    def ensure(self) -> str:
        """Describe or register the consumer, wait until it is ACTIVE; return its ARN."""
        with self._lock:
            if self._arn is None:
                self._arn = self._ensure()
            return self._arn

    def refresh(self) -> str:
        """Forget the ARN and :meth:`ensure` again (the consumer was deleted or replaced)."""
        with self._lock:
            self._arn = None
            self._arn = self._ensure()
            return self._arn

    def deregister(self) -> bool:
        """Deregister the consumer (by ARN); False if it was not registered."""
        with self._lock:
            arn, self._arn = self._arn, None
        if arn is None:
            return False
        try:
            self._call("DeregisterStreamConsumer", lambda: self.client.deregister_stream_consumer(
                StreamARN=self._stream(), ConsumerARN=arn))
        except ClientError as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return False
            raise self._named(exc, "DeregisterStreamConsumer") from exc
        log.info("deregistered stream consumer %s", arn)
        return True

    # --- internals ------------------------------------------------------------------------

    def _ensure(self) -> str:
        deadline = time.monotonic() + self.active_timeout
        while True:
            description = self._describe()
            if description is None:
                description = self._register()
            status = description.get("ConsumerStatus")
            arn = str(description["ConsumerARN"])
            if status == "ACTIVE":
                return arn
            if time.monotonic() > deadline:
                raise FanOutConsumerNotActiveError(
                    f"stream consumer {self.consumer_name!r} of stream {self.stream_name!r} is still "
                    f"{status} after {self.active_timeout:g} s ({arn}). A new consumer takes seconds to "
                    "become ACTIVE; one being deleted must finish first. Check it with "
                    "`aws kinesis describe-stream-consumer --consumer-arn ...` and start again."
                )
            log.info("stream consumer %s is %s; waiting until it is ACTIVE", arn, status)
            threading.Event().wait(self.poll_interval)

    def _stream(self) -> str:
        if self._stream_arn is None:
            try:
                summary = self._call("DescribeStreamSummary", lambda: self.client.describe_stream_summary(
                    StreamName=self.stream_name))
            except ClientError as exc:
                raise self._named(exc, "DescribeStreamSummary") from exc
            self._stream_arn = str(summary["StreamDescriptionSummary"]["StreamARN"])
        return self._stream_arn

    def _describe(self) -> dict[str, Any] | None:
        stream_arn = self._stream()
        try:
            answer = self._call("DescribeStreamConsumer", lambda: self.client.describe_stream_consumer(
                StreamARN=stream_arn, ConsumerName=self.consumer_name))
        except ClientError as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return None
            raise self._named(exc, "DescribeStreamConsumer") from exc
        description: dict[str, Any] = answer["ConsumerDescription"]
        return description

    def _register(self) -> dict[str, Any]:
        stream_arn = self._stream()
        for _ in range(self.max_attempts):
            try:
                answer = self.client.register_stream_consumer(StreamARN=stream_arn, ConsumerName=self.consumer_name)
            except ClientError as exc:
                code = error_code(exc) or ""
                if code == "ResourceInUseException":  # registered meanwhile by another member
                    described = self._describe()
                    if described is not None:
                        return described
                elif code == "LimitExceededException":
                    self._check_limit(stream_arn, exc)  # raises at the quota; else it was a rate limit
                else:
                    raise self._named(exc, "RegisterStreamConsumer") from exc
                threading.Event().wait(self.poll_interval)
                continue
            self.registered_here = True
            consumer: dict[str, Any] = answer["Consumer"]
            log.info("registered stream consumer %s", consumer["ConsumerARN"])
            return consumer
        raise FanOutConsumerNotActiveError(
            f"RegisterStreamConsumer for {self.consumer_name!r} on stream {self.stream_name!r} kept "
            f"failing ({self.max_attempts} attempts, rate limited or racing a deletion); raise "
            f"{self.retry_option} or start again"
        )

    def _check_limit(self, stream_arn: str, exc: ClientError) -> None:
        consumers = self._list(stream_arn)
        if len(consumers) < CONSUMER_LIMIT:
            log.info("RegisterStreamConsumer rate limited (%d consumers registered); retrying", len(consumers))
            return
        names = ", ".join(sorted(consumers))
        raise FanOutConsumerLimitError(
            f"stream {self.stream_name!r} already has {len(consumers)} registered consumers, the Kinesis "
            f"limit is {CONSUMER_LIMIT} per stream, so {self.consumer_name!r} cannot be registered ({exc}). "
            f"Registered: {names}. Deregister unused ones (aws kinesis deregister-stream-consumer "
            f"--stream-arn {stream_arn} --consumer-name NAME), reuse one of them as consumer_name, or "
            "read this stream with retrieval='polling'."
        ) from exc

    def _list(self, stream_arn: str) -> list[str]:
        names: list[str] = []
        kwargs: dict[str, Any] = {"StreamARN": stream_arn}
        while True:
            try:
                page = self._call("ListStreamConsumers", lambda kw=dict(kwargs): self.client.list_stream_consumers(**kw))
            except ClientError as exc:
                raise self._named(exc, "ListStreamConsumers") from exc
            names += [str(c["ConsumerName"]) for c in page.get("Consumers", ())]
            token = page.get("NextToken")
            if not token:
                return names
            kwargs = {"StreamARN": stream_arn, "NextToken": token}

    def _call(self, operation: str, fn: Any) -> dict[str, Any]:
        result: dict[str, Any] = call_with_retries(
            fn,
            what=f"{operation} for consumer {self.consumer_name!r} of stream {self.stream_name!r}",
            max_attempts=self.max_attempts,
            budget_option=self.retry_option,
        )
        return result

    def _named(self, exc: ClientError, operation: str) -> Exception:
        if is_access_denied(exc):
            action = f"kinesis:{operation}"
            target = f"Kinesis stream {self.stream_name!r} (stream consumer {self.consumer_name!r})"
            return KinesisAccessDeniedError(access_denied_message(operation, target, action, exc), action)
        named: KinesisHashRingError | None = named_client_error(self.client, self.stream_name, operation, exc)
        return named if named is not None else exc


def deregister_on_stop(
    streams: Iterable[StreamConfig], registrations: Mapping[str, ConsumerRegistration]
) -> list[tuple[StreamConfig, Exception]]:
    """After a clean stop: deregister the fan-out consumers of the streams that ask for it
    (``deregister_consumer_on_stop``). Returns the failures: those consumers stay registered."""
    failed: list[tuple[StreamConfig, Exception]] = []
    for spec in streams:
        registration = registrations.get(spec.key_prefix)
        if registration is None or not spec.deregister_consumer_on_stop:
            continue
        try:
            registration.deregister()
        except Exception as exc:  # the stop is clean either way
            failed.append((spec, exc))
    return failed


SUBSCRIPTION_LIFETIME = 300.0
"""Kinesis ends every subscription after 5 minutes."""
BACKOFF_CODES = frozenset({"ResourceInUseException", "LimitExceededException"})


@dataclass
class FanOutStats:
    """Counters for tests and metrics."""

    subscribe_calls: int = 0
    subscriptions: int = 0
    renewals: int = 0
    resource_in_use: int = 0
    transient_errors: int = 0
    events: int = 0
    records_delivered: int = 0


class _Subscription:
    """One SubscribeToShard event stream, pumped into the reader's queue by a daemon thread."""

    def __init__(self, generation: int, stream: Any, out: queue.Queue[tuple[int, str, Any]], name: str):
        self.generation = generation
        self.stream = stream
        self.started = time.monotonic()
        self.closed = threading.Event()
        self._out = out
        self.thread = threading.Thread(target=self._pump, name=name, daemon=True)
        self.thread.start()

    def _put(self, kind: str, payload: Any) -> None:
        while not self.closed.is_set():
            try:
                self._out.put((self.generation, kind, payload), timeout=0.1)
                return
            except queue.Full:
                continue

    def _pump(self) -> None:
        try:
            for event in self.stream:
                if self.closed.is_set():
                    return
                if "SubscribeToShardEvent" in event:
                    self._put("event", event["SubscribeToShardEvent"])
            self._put("end", None)
        except Exception as exc:  # EventStreamError (a ClientError), dropped connections, ...
            if not self.closed.is_set():
                self._put("error", exc)
        finally:
            self._close_stream()

    def close(self) -> None:
        self.closed.set()
        # urllib3's HTTPResponse.shutdown() unblocks the pump thread's read at once (closing
        # alone would leave it blocked until the next event arrives)
        raw: Any = getattr(self.stream, "_raw_stream", None)
        with contextlib.suppress(Exception):
            raw.shutdown()
        self._close_stream()

    def _close_stream(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken connection may raise; it is closed
            self.stream.close()


class FanOutReader:
    """Reads one shard over Enhanced Fan-Out for the consumer ``registration`` (see module docs).

    Not thread-safe: one reader is driven by one thread (plus its own pump thread).
    """

    def __init__(
        self,
        kinesis_client: Any,
        stream_name: str,
        shard_id: str,
        registration: ConsumerRegistration,
        start: Checkpoint = InitialPosition.LATEST,
        *,
        max_records: int = MAX_GET_RECORDS_LIMIT,
        stop_event: threading.Event | None = None,
        max_block: float = 1.0,
        renew_after: float = SUBSCRIPTION_LIFETIME - 15.0,
        min_subscribe_interval: float = 1.0,
        max_backoff: float = 10.0,
        max_attempts: int = 8,
        retry_option: str = "FanOutReader(max_attempts=...)",
        queue_size: int = 4,
        refused_resume: Literal["raise", "trim_horizon"] = "raise",
    ):
        check_reader_args(max_records, start)
        for name, value in (("max_block", max_block), ("renew_after", renew_after), ("max_backoff", max_backoff)):
            check_seconds(name, value)
        fast_parse.install(kinesis_client)  # events handed to botocore a whole message at a time
        self.client = kinesis_client
        self.stream_name = stream_name
        self.shard_id = shard_id
        self.registration = registration
        self.start = start
        self.max_records = max_records
        self.stop_event = stop_event if stop_event is not None else threading.Event()
        self.max_block = max_block
        self.renew_after = renew_after
        self.min_subscribe_interval = min_subscribe_interval
        self.max_backoff = max_backoff
        self.max_attempts = max_attempts
        self.retry_option = retry_option
        if refused_resume not in ("raise", "trim_horizon"):
            raise ConfigurationError(f"refused_resume must be 'raise' or 'trim_horizon', got {refused_resume!r}")
        self.refused_resume = refused_resume
        """What a refused resume position does (see :class:`~.polling.ShardReader`)."""
        self.stats = FanOutStats()
        self._queue: queue.Queue[tuple[int, str, Any]] = queue.Queue(maxsize=queue_size)
        self._subscription: _Subscription | None = None
        self._generation = 0
        self._cursor = BatchCursor(stream_name, shard_id, start, max_records, self.stats)
        self._continuation: str | None = None
        self._latest_at: datetime | None = None
        self._last_call = float("-inf")
        self._not_before = 0.0
        self._failures = 0  # consecutive failed subscriptions (backoff)
        self._transient = 0  # consecutive transient errors (retry budget)

    # -- state ---------------------------------------------------------------------------
    @property
    def last_position(self) -> Position | None:
        """The last record delivered (or the start checkpoint): where a resume would start."""
        return self._cursor.resume

    @property
    def shard_ended(self) -> bool:
        """True once the shard's last event was received and every record was delivered."""
        return self._cursor.shard_ended

    @property
    def first_sequence_number(self) -> str | None:
        """The sequence number of the first Kinesis record any event carried, before records
        up to the start position were dropped; None until one arrived. Started from a
        :class:`Position`, it is that position's own record unless it is gone."""
        return self._cursor.first_sequence_number

    @property
    def continuation(self) -> str | None:
        """The last ContinuationSequenceNumber received (where a renewal starts after)."""
        return self._continuation

    def stop(self) -> None:
        """Set the stop event: a blocked :meth:`read_batch` and every backoff return at once."""
        self.stop_event.set()

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` on the stop event; True if the reader was stopped."""
        return self.stop_event.wait(seconds) if seconds > 0 else self.stop_event.is_set()

    def close(self) -> None:
        """End the current subscription (its connection and pump thread)."""
        self._drop_subscription()

    # -- reading -------------------------------------------------------------------------
    def read_batch(self) -> ReadResult:
        """The records of the next event (up to ``max_records``), or an empty batch after
        ``max_block`` seconds without one."""
        held = self._cursor.held()
        if held is not None:
            return held
        if self.stop_event.is_set():
            return self._stopped()
        sub = self._subscription
        if sub is not None and time.monotonic() - sub.started >= self.renew_after and self._may_call():
            # a call 5 s or more after the last one takes the subscription over; the old one is
            # closed once the new one is live (and read on if the renewal has to back off)
            log.debug("%s: renewing the subscription before the service ends it", self.shard_id)
            renewed = self._subscribe()
            if renewed is not None:
                self.stats.renewals += 1
                sub = renewed
            elif self.stop_event.is_set():
                return self._stopped()
        if sub is None:
            sub = self._subscribe()
            if sub is None:
                return self._stopped() if self.stop_event.is_set() else self._empty()
        deadline = time.monotonic() + self.max_block
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._empty()
            try:
                generation, kind, payload = self._queue.get(timeout=min(0.05, remaining))
            except queue.Empty:
                if self.stop_event.is_set():
                    return self._stopped()
                continue
            if generation != sub.generation:
                continue  # an event of a subscription already replaced
            if kind == "event":
                return self._on_event(payload)
            self._drop_subscription()
            if kind == "end":  # the service ended it (5 minutes): renew from the continuation
                self.stats.renewals += 1
                return self._empty()
            self._on_stream_error(payload)
            return self._empty()

    def _on_event(self, event: dict[str, Any]) -> ReadResult:
        self.stats.events += 1
        self._failures = self._transient = 0
        # an empty DecodedRecords still carries its first Kinesis record (an aggregate of no
        # user records): only an absent member is "no records"
        raw = event.get("Records")
        records = self._cursor.fetched(raw if raw is not None else (), event.get("MillisBehindLatest"))
        continuation = event.get("ContinuationSequenceNumber")
        if continuation is None:  # the shard is closed and this was its last event
            self._cursor.end(event.get("ChildShards"))
            self._drop_subscription()
        else:
            self._continuation = str(continuation)
        return self._cursor.deliver(records, split=True)

    def _empty(self) -> ReadResult:
        return self._cursor.empty()

    def _stopped(self) -> ReadResult:
        return self._cursor.empty(stopped=True)

    # -- subscriptions -------------------------------------------------------------------
    def _starting_position(self) -> dict[str, Any]:
        if self._continuation is not None:
            return {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": self._continuation}
        if self._cursor.resume is not None:
            # AT, not AFTER: the checkpoint may sit inside an aggregated record; records up to
            # it are dropped in _on_event (the polling reader does the same)
            return {"Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": self._cursor.resume.sequence_number}
        start = self.start
        assert isinstance(start, InitialPosition)
        if start.kind == "LATEST":
            if self._latest_at is None:
                self._latest_at = datetime.now(UTC)  # a renewal before any event loses nothing
                return {"Type": "LATEST"}
            return {"Type": "AT_TIMESTAMP", "Timestamp": self._latest_at}
        if start.kind == "AT_TIMESTAMP":
            return {"Type": "AT_TIMESTAMP", "Timestamp": start.timestamp}
        return {"Type": "TRIM_HORIZON"}

    def _may_call(self) -> bool:
        """True once the rate limit and any backoff allow the next SubscribeToShard."""
        return time.monotonic() >= max(self._not_before, self._last_call + self.min_subscribe_interval)

    def _subscribe(self) -> _Subscription | None:
        """One SubscribeToShard call, after the rate limit and any backoff; None if it failed
        with an error worth retrying later (the next read_batch tries again) or stopped."""
        wait = max(self._not_before, self._last_call + self.min_subscribe_interval) - time.monotonic()
        if wait > 0 and self.stop_event.wait(min(wait, self.max_block)):
            return None
        if not self._may_call():
            return None  # still waiting (in slices of max_block, so the caller checks its lease)
        position = self._starting_position()
        if position["Type"] == "AT_SEQUENCE_NUMBER":
            self._cursor.expect_resume()  # its first record must be that one (DataGap otherwise)
        arn = self.registration.arn
        self._last_call = time.monotonic()
        self.stats.subscribe_calls += 1
        try:
            response = self.client.subscribe_to_shard(ConsumerARN=arn, ShardId=self.shard_id, StartingPosition=position)
        except ClientError as exc:
            self._on_subscribe_error(exc, arn)
            return None
        except BotoCoreError as exc:
            self._transient_failure(exc)
            return None
        self._generation += 1
        self.stats.subscriptions += 1
        self._drop_subscription()  # a renewal: events of the old one still queued are dropped
        fast_parse.install_on_event_stream(response["EventStream"], (self.stream_name, self.shard_id))
        self._subscription = _Subscription(
            self._generation, response["EventStream"], self._queue, f"fanout-{self.shard_id}-{self._generation}"
        )
        log.debug("%s: subscribed (%s) from %s", self.shard_id, arn, position)
        return self._subscription

    def _drop_subscription(self) -> None:
        sub, self._subscription = self._subscription, None
        if sub is not None:
            sub.close()

    def _back_off(self) -> None:
        self._failures += 1
        delay = min(self.max_backoff, self.min_subscribe_interval * 2 ** (self._failures - 1))
        self._not_before = time.monotonic() + delay * random.uniform(1.0, 1.25)

    def _on_subscribe_error(self, exc: ClientError, arn: str) -> None:
        code = error_code(exc) or ""
        if code in BACKOFF_CODES:
            self._count_in_use(code, exc)
            self._back_off()
            return
        if code == "ResourceNotFoundException" and "consumer" in str(exc).lower():
            log.warning("%s: stream consumer %s is gone (%s); registering it again", self.shard_id, arn, exc)
            self.registration.refresh()
            return
        if is_retryable(exc):
            self._transient_failure(exc)
            return
        if (code == "InvalidArgumentException" and self.refused_resume == "trim_horizon"
                and self._continuation is None and self._cursor.resume is not None):
            # the resume position is gone (or never was this shard's): a DataGap, then the oldest record
            self._cursor.refused(str(exc))
            self.start = InitialPosition.TRIM_HORIZON
            return
        raise self._named(exc, arn) from exc

    def _on_stream_error(self, exc: BaseException) -> None:
        code = error_code(exc) or ""
        if code in BACKOFF_CODES:  # a newer subscription took over (or a rate limit)
            self._count_in_use(code, exc)
            self._back_off()
            return
        if isinstance(exc, ClientError) and not is_retryable(exc) and code != "InternalFailureException":
            raise self._named(exc, self.registration.arn) from exc
        self._transient_failure(exc)

    def _count_in_use(self, code: str, exc: BaseException) -> None:
        self.stats.resource_in_use += code == "ResourceInUseException"
        level = logging.WARNING if self._failures and self._failures % 10 == 0 else logging.DEBUG
        log.log(level, "%s: SubscribeToShard %s (%d in a row), backing off: %s", self.shard_id, code,
                self._failures + 1, exc)

    def _transient_failure(self, exc: BaseException) -> None:
        """A dropped connection or a server error: resubscribe from the continuation, with backoff,
        up to ``max_attempts`` in a row."""
        self.stats.transient_errors += 1
        self._transient += 1
        self._back_off()
        log.info("%s: subscription failed (%s), resubscribing", self.shard_id, exc)
        if self._transient >= self.max_attempts:
            self._transient = 0
            raise KinesisRetriesExhaustedError(
                f"SubscribeToShard on shard {self.shard_id} of stream {self.stream_name!r} failed "
                f"{self.max_attempts} times in a row: {exc}. Check the endpoint and the service's "
                f"health (the retry budget is {self.retry_option})."
            ) from exc

    def _named(self, exc: ClientError, arn: str) -> KinesisHashRingError | ClientError:
        code = error_code(exc) or ""
        if is_access_denied(exc):
            action = "kinesis:SubscribeToShard"
            target = f"stream consumer {arn} (stream {self.stream_name!r}; the IAM resource is the consumer ARN)"
            return KinesisAccessDeniedError(access_denied_message("SubscribeToShard", target, action, exc), action)
        if code == "ResourceNotFoundException" and self.shard_id in str(exc):
            return ShardNotFoundError(
                f"shard {self.shard_id!r} does not exist in Kinesis stream {self.stream_name!r} ({exc}). "
                "A shard older than the retention period is trimmed."
            )
        if code == "InvalidArgumentException":
            return StartingPositionRejectedError(
                f"SubscribeToShard refused to start shard {self.shard_id} of stream {self.stream_name!r} "
                f"at {self._starting_position()}: {exc}"
            )
        named = named_client_error(self.client, self.stream_name, "SubscribeToShard", exc)
        return named if named is not None else exc
