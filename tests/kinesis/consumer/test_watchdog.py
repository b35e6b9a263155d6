"""The stuck-processor watchdog (kinesis.consumer.worker.watchdog): unit level on a real blocked
thread, then through a Worker on moto whose processor hangs on its first batch."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from prometheus_client.parser import text_string_to_metric_families

from kinesis import StreamConfig, Worker, WorkerConfig
from kinesis.consumer.retrieval import Record
from kinesis.consumer.shard.processor import Checkpointer
from kinesis.consumer.worker.watchdog import Watchdog
from kinesis.errors import ConfigurationError
from kinesis.testing import FakeClock, LocalAWS
from tests.support.waiting import eventually
from tests.support.worker_journal import Journal, JournalProcessor, put_records


def wait_in_the_processor(release: threading.Event) -> None:
    release.wait(60)


@dataclass
class Watched:
    key: str
    thread: threading.Thread
    call_started: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def test_a_call_past_the_timeout_is_reported_once_with_its_threads_stack(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()
    thread = threading.Thread(target=wait_in_the_processor, args=(release,), daemon=True)
    thread.start()
    clock = FakeClock(100.0)
    watched = Watched("app/orders/s1", thread, call_started=100.0)
    dog = Watchdog(5.0, clock)
    caplog.set_level(logging.ERROR, logger="kinesis.consumer.worker.watchdog")
    try:
        clock.advance(4.9)
        assert dog.check([watched]) == () and not caplog.records
        clock.advance(0.2)
        assert [h.key for h in dog.check([watched])] == ["app/orders/s1"]
        clock.advance(30)
        assert dog.check([watched])[0].seconds == pytest.approx(35.1)
        assert len(caplog.records) == 1  # once per call, however long it hangs
        message = caplog.records[0].getMessage()
        assert "app/orders/s1: processor call STUCK for 5.1 s" in message
        assert "wait_in_the_processor" in message and "release.wait(60)" in message  # where it hangs
        watched.call_started = None  # the call returned
        assert dog.check([watched]) == () and dog.hung == ()
        watched.call_started = clock()  # the next call hangs too: a new report
        clock.advance(6)
        dog.check([watched])
        assert len(caplog.records) == 2
    finally:
        release.set()


def test_the_timeout_settings_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="processor_timeout must be"):
        WorkerConfig("leases", [StreamConfig("orders", "app")], processor_timeout=0)
    with pytest.raises(ConfigurationError, match="on_processor_timeout must be 'wait' or 'restart', got 'kill'"):
        WorkerConfig("leases", [StreamConfig("orders", "app")], processor_timeout=5,
                     on_processor_timeout="kill")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="on_processor_timeout='restart' needs processor_timeout"):
        WorkerConfig("leases", [StreamConfig("orders", "app")], on_processor_timeout="restart")


def test_a_hung_consumer_replaced_by_a_new_one_for_its_lease_is_still_watched() -> None:
    # the lease was lost and taken again while the old consumer hangs in its call: the pool
    # now holds the new consumer, which waits for the old one to stop; the hang stays visible
    @dataclass
    class Consumer:
        key: str
        previous: Any = None
        stopped: threading.Event = field(default_factory=threading.Event)

    hung = Consumer("app/orders/s1")
    done = Consumer("app/orders/s2")
    done.stopped.set()
    newer = Consumer("app/orders/s1", previous=hung)
    other = Consumer("app/orders/s2", previous=done)

    class Pool:
        def consumers(self) -> list[Consumer]:
            return [newer, other]

    worker = object.__new__(Worker)
    worker.pool = Pool()  # type: ignore[assignment]
    assert worker._watched() == [newer, hung, other]  # type: ignore[comparison-overlap]


class HangsOnce(JournalProcessor):
    """Hangs in its first process_records until ``release`` is set."""

    hung = threading.Event()

    def __init__(self, journal: Journal, worker: str, release: threading.Event):
        super().__init__(journal, worker)
        self.release = release

    def process_records(self, records: list[Record], checkpointer: Checkpointer,
                        millis_behind_latest: int | None = None) -> None:
        if not HangsOnce.hung.is_set():
            HangsOnce.hung.set()
            wait_in_the_processor(self.release)
        super().process_records(records, checkpointer, millis_behind_latest)


def livez(url: str) -> int:
    try:
        return int(urllib.request.urlopen(url + "/livez").status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_a_hung_processor_is_reported_counted_and_fails_livez_with_restart(
        aws: LocalAWS, caplog: pytest.LogCaptureFixture) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    written = put_records(kinesis, "orders", 20)
    journal, release = Journal(), threading.Event()
    HangsOnce.hung.clear()
    config = WorkerConfig("watchdog-leases", [StreamConfig("orders", "app", "TRIM_HORIZON")], worker_id="w1",
                          lease_duration=10.0, tick_interval=2.0 / 3, idle_backoff=0.1, health_port=0,
                          processor_timeout=1.0, on_processor_timeout="restart")
    worker = Worker(config, lambda: HangsOnce(journal, "w1", release),
                    kinesis_client=aws.client("kinesis"), dynamodb_client=aws.client("dynamodb"))
    caplog.set_level(logging.ERROR, logger="kinesis.consumer.worker.watchdog")
    worker.start()
    try:
        url = worker.health_url
        assert url is not None
        assert eventually(lambda: worker.status().processors_hung == 1, 30), worker.status()
        shard = worker.status().shards[0]
        assert shard.processor_call_seconds is not None and shard.processor_call_seconds >= 1.0
        assert livez(url) == 503 and not worker.is_live()
        samples = {s.name: s.value for f in text_string_to_metric_families(
            urllib.request.urlopen(url + "/metrics").read().decode()) for s in f.samples}
        assert samples["kinesis_worker_processors_hung"] == 1
        # checked again and again while it hangs (twice per timeout), reported once
        assert eventually(lambda: (worker.status().shards[0].processor_call_seconds or 0) > 3.0, 30)
        reports = [r for r in caplog.records if "processor call STUCK" in r.getMessage()]
        assert len(reports) == 1 and "wait_in_the_processor" in reports[0].getMessage()
        release.set()  # the call returns: nothing hung, live again, every record processed
        assert eventually(lambda: worker.status().processors_hung == 0 and worker.is_live(), 30)
        assert livez(url) == 200
        assert journal.wait_for(lambda _: set(written) <= journal.processed(), 30)
    finally:
        release.set()
        worker.stop()


class StuckIterators:
    """A botocore ``before-send`` hook on a Kinesis client: while ``on``, every GetRecords is
    answered (HTTP 200, a real response body) with no records, the same iterator and data
    waiting (``MillisBehindLatest`` 5000): a reader that no longer advances. Any
    GetShardIterator call (a new reader) turns it off."""

    def __init__(self, client: Any):
        self.on = False
        self.answered = 0
        self.reads = 0  # GetRecords calls, answered here or not
        self.lag = 5000  # MillisBehindLatest of the answers
        self.step = 0  # added to it after each answer (negative: a sparse shard walked towards the tip)
        self.throttle = False  # answer ProvisionedThroughputExceededException instead
        client.meta.events.register("before-send.kinesis", self._before_send)

    def _before_send(self, request: Any, **_: Any) -> AWSResponse | None:
        target = request.headers.get("X-Amz-Target", b"")
        operation = (target.decode() if isinstance(target, bytes) else target).rsplit(".", 1)[-1]
        if operation == "GetShardIterator":
            self.on = False
        self.reads += operation == "GetRecords"
        if not self.on or operation != "GetRecords":
            return None
        self.answered += 1
        headers = {"Content-Type": "application/x-amz-json-1.1", "x-amzn-RequestId": "stuck"}
        if self.throttle:
            error = {"__type": "ProvisionedThroughputExceededException", "message": "Rate exceeded for shard"}
            return AWSResponse(request.url, 400, headers, _Body(json.dumps(error).encode()))
        iterator = json.loads(request.body)["ShardIterator"]
        body = json.dumps({"Records": [], "NextShardIterator": iterator, "MillisBehindLatest": self.lag}).encode()
        self.lag = max(1, self.lag + self.step)
        return AWSResponse(request.url, 200, headers, _Body(body))


class _Body:
    def __init__(self, body: bytes):
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


def test_a_reader_that_stops_advancing_while_data_waits_is_restarted(
        aws: LocalAWS, caplog: pytest.LogCaptureFixture) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="stuck", ShardCount=1)
    first = put_records(kinesis, "stuck", 10)
    client = aws.client("kinesis")
    stuck = StuckIterators(client)
    journal = Journal()
    config = WorkerConfig("stuck-leases", [StreamConfig("stuck", "app", "TRIM_HORIZON")], worker_id="w1",
                          lease_duration=10.0, tick_interval=2.0 / 3, idle_backoff=0.1, health_port=0,
                          processor_timeout=1.0)
    worker = Worker(config, lambda: JournalProcessor(journal, "w1"), kinesis_client=client,
                    dynamodb_client=aws.client("dynamodb"))
    caplog.set_level(logging.WARNING, logger="kinesis")
    worker.start()
    try:
        assert journal.wait_for(lambda _: set(first) <= journal.processed(), 30)
        stuck.on = True
        later = put_records(kinesis, "stuck", 10, prefix="later")
        # the iterator stops advancing; the watchdog restarts the reader from the last record
        # delivered (a new iterator), and the records written meanwhile are processed once each
        assert journal.wait_for(lambda _: set(later) <= journal.processed(), 30), worker.status()
        assert stuck.answered > 0
        assert journal.duplicates() == 0 and len(journal.records()) == 20
        assert worker.status().worker_counters["reader_restarts"] == 1
        reports = [r.getMessage() for r in caplog.records if "reads STALLED" in r.getMessage()]
        assert len(reports) == 1 and reports[0].startswith("app/stuck/shardId-000000000000: reads STALLED for")
        url = worker.health_url
        assert url is not None and livez(url) == 200  # a reader is replaced in process: no pod restart
        samples = {s.name: s.value for f in text_string_to_metric_families(
            urllib.request.urlopen(url + "/metrics").read().decode()) for s in f.samples}
        assert samples["kinesis_worker_reader_restarts_total"] == 1
    finally:
        worker.stop()


def test_an_idle_shard_or_a_long_processor_call_is_not_a_stalled_reader(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="idle", ShardCount=1)
    written = put_records(kinesis, "idle", 3)
    journal, release = Journal(), threading.Event()
    HangsOnce.hung.clear()
    config = WorkerConfig("idle-leases", [StreamConfig("idle", "app", "TRIM_HORIZON")], worker_id="w1",
                          lease_duration=10.0, tick_interval=2.0 / 3, idle_backoff=0.1, processor_timeout=1.0)
    client = aws.client("kinesis")
    reads = StuckIterators(client)  # never on: it counts the reads
    worker = Worker(config, lambda: HangsOnce(journal, "w1", release), kinesis_client=client,
                    dynamodb_client=aws.client("dynamodb"))
    worker.start()
    try:
        # a call past the timeout, checked by the watchdog several times: not the reader's time
        assert eventually(lambda: any((s.processor_call_seconds or 0) > 2.5 for s in worker.status().shards), 30)
        assert worker.status().processors_hung == 1
        assert worker.status().worker_counters.get("reader_restarts", 0) == 0
        release.set()
        assert journal.wait_for(lambda _: set(written) <= journal.processed(), 30)
        # caught up: every read finds nothing waiting, so the reads advance however long it idles
        idle_from = reads.reads
        assert eventually(lambda: reads.reads >= idle_from + int(2 * config.processor_timeout / 0.1), 30)
        assert worker.status().shards[0].millis_behind_latest == 0
        assert worker.status().worker_counters.get("reader_restarts", 0) == 0
    finally:
        release.set()
        worker.stop()


@pytest.mark.parametrize("how", ["a sparse shard's empty reads nearer the tip", "throttled reads"])
def test_reads_that_move_on_without_records_or_keep_failing_are_not_a_stall(aws: LocalAWS, how: str) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="sparse", ShardCount=1)
    first = put_records(kinesis, "sparse", 3)
    client = aws.client("kinesis", config=Config(retries={"total_max_attempts": 1}))
    answers = StuckIterators(client)
    journal = Journal()
    config = WorkerConfig("sparse-leases", [StreamConfig("sparse", "app", "TRIM_HORIZON")], worker_id="w1",
                          lease_duration=10.0, tick_interval=2.0 / 3, idle_backoff=0.1, processor_timeout=1.0)
    worker = Worker(config, lambda: JournalProcessor(journal, "w1"), kinesis_client=client,
                    dynamodb_client=aws.client("dynamodb"))
    worker.start()
    try:
        assert journal.wait_for(lambda _: set(first) <= journal.processed(), 30)
        answers.lag, answers.step = 10_000_000, -1_000  # each empty read a second of stream nearer
        answers.throttle = how == "throttled reads"
        answers.on = True
        started, window_ends = answers.answered, time.monotonic() + 3 * config.processor_timeout
        # three processor_timeouts of reads answered without records (or failing, retried), and
        # reads still being answered so at the end
        assert eventually(lambda: time.monotonic() >= window_ends and answers.answered > started + 5, 60)
        answers.on = False
        later = put_records(kinesis, "sparse", 3, prefix="later")
        assert journal.wait_for(lambda _: set(later) <= journal.processed(), 30)
        assert worker.status().worker_counters.get("reader_restarts", 0) == 0, how  # none asked for either
    finally:
        worker.stop()
