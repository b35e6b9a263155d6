"""Register (or reuse) a stream's Enhanced Fan-Out consumer and wait until it is ACTIVE.

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

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from kinesis.aws_errors import error_code
from kinesis.consumer.shards import named_client_error
from kinesis.consumer.throttling import call_with_retries
from kinesis.errors import (
    FanOutConsumerLimitError,
    FanOutConsumerNotActiveError,
    KinesisAccessDeniedError,
    KinesisHashRingError,
    access_denied_message,
    is_access_denied,
)

if TYPE_CHECKING:
    from kinesis.consumer.worker_config import StreamConfig

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

