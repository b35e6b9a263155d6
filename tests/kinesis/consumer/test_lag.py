"""The lag estimator (kinesis.consumer.shard.lag) on simulated shards: a backlog draining at a
steady rate with noisy polls, a consumer that falls behind, one that is caught up."""

from __future__ import annotations

import math
import random
import threading
import time

import pytest

from kinesis import StreamConfig, Worker, WorkerConfig
from kinesis.consumer.retrieval import Record
from kinesis.consumer.shard.lag import LagEstimate, LagTracker, worker_lag
from kinesis.consumer.shard.processor import Checkpointer
from kinesis.testing import LocalAWS
from tests.support.waiting import eventually
from tests.support.worker_journal import Journal, JournalProcessor, put_records


def drain(arrival: float, processing: float, backlog_s: float, seconds: float, *, seed: int = 1,
          noise: float = 0.2) -> tuple[LagTracker, float, float]:
    """Poll a simulated shard for ``seconds``: records arrive at ``arrival``/s, the consumer
    processes about ``processing``/s (each poll's amount off by up to ``noise``), polls 0.2-1 s
    apart. Returns the tracker, the true lag at the end and the true catch-up time from there."""
    rng = random.Random(seed)
    tracker, now, lag = LagTracker(), 0.0, backlog_s
    tracker.observe(now, int(lag * 1000), 0)
    while now < seconds:
        dt = rng.uniform(0.2, 1.0)
        done = processing * dt * rng.uniform(1 - noise, 1 + noise)
        covered = done / arrival  # seconds of stream those records span
        lag = max(0.0, lag + dt - covered)
        now += dt
        tracker.observe(now, int(lag * 1000), round(done))
    speed = processing / arrival  # stream seconds covered per second, on average
    return tracker, lag, (lag / (speed - 1) if speed > 1 else math.inf)


@pytest.mark.parametrize("seed", range(5))
def test_a_draining_backlog_gets_a_catch_up_time_within_half_of_the_true_one(seed: int) -> None:
    tracker, lag, truth = drain(arrival=100, processing=300, backlog_s=600, seconds=120, seed=seed)
    e = tracker.estimate()
    assert e.lag_seconds == pytest.approx(lag, abs=0.001)
    assert e.catch_up_seconds is not None and truth > 100
    assert 0.5 * truth <= e.catch_up_seconds <= 1.5 * truth, (e.catch_up_seconds, truth)
    assert e.processing_rate == pytest.approx(300, rel=0.2)
    assert e.arrival_rate == pytest.approx(100, rel=0.2)


def test_a_consumer_that_falls_behind_never_catches_up() -> None:
    e = drain(arrival=300, processing=200, backlog_s=5, seconds=90)[0].estimate()
    assert e.catch_up_seconds == math.inf and e.lag_seconds is not None and e.lag_seconds > 20
    assert e.arrival_rate == pytest.approx(300, rel=0.2)


def test_a_caught_up_consumer_needs_no_time_and_sees_arrivals_as_processed() -> None:
    tracker = LagTracker()
    for i in range(60):
        tracker.observe(float(i), 0, 50)
    e = tracker.estimate()
    assert (e.lag_seconds, e.catch_up_seconds) == (0.0, 0.0)
    assert e.processing_rate == pytest.approx(50) and e.arrival_rate == pytest.approx(50)


def test_nothing_measured_yet_is_unknown_not_zero() -> None:
    tracker = LagTracker()
    assert tracker.estimate() == LagEstimate(None, None, None, None, None)
    tracker.observe(1.0, None, 10)  # a reader that reports no lag
    assert tracker.estimate().lag_seconds is None
    tracker.observe(2.0, 4000, 10)
    assert tracker.estimate() == LagEstimate(4.0, 2.0, None, None, None)  # one reading: no trend yet
    tracker.observe(3.0, 1500, 10)
    assert tracker.estimate().catch_up_seconds == 0.0  # under CAUGHT_UP_SECONDS: at the tip
    with pytest.raises(ValueError, match="window must be > 0 seconds"):
        LagTracker(window=0)


def test_the_worker_figures_are_the_worst_shard_and_the_summed_rates() -> None:
    shards = [LagEstimate(2.0, 1.0, 10.0, 5.0, 4.0), LagEstimate(9.0, 1.0, 20.0, 10.0, 30.0),
              LagEstimate(None, None, None, None, None)]
    lag = worker_lag(shards)
    assert (lag.max_lag_seconds, lag.processing_rate, lag.arrival_rate, lag.catch_up_seconds) == (9.0, 30.0, 15.0, 30.0)
    assert worker_lag([*shards, LagEstimate(1.0, 1.0, 1.0, None, math.inf)]).catch_up_seconds == math.inf
    assert worker_lag([*shards, LagEstimate(9.0, 1.0, None, None, None)]).catch_up_seconds == 30.0  # no trend yet
    assert worker_lag([LagEstimate(9.0, 1.0, None, None, None)]).catch_up_seconds is None
    assert worker_lag([]).max_lag_seconds is None


class Paced(JournalProcessor):
    """Processes ``rate`` records per second at most (each record costs 1/rate s of work)."""

    rate = 100.0

    def process_records(self, records: list[Record], checkpointer: Checkpointer,
                        millis_behind_latest: int | None = None) -> None:
        time.sleep(len(records) / self.rate)  # the work a record costs, not a wait for anything
        super().process_records(records, checkpointer, millis_behind_latest)


def test_a_real_workers_catch_up_estimate_during_a_backlog_drain_is_within_half_of_the_truth(aws: LocalAWS) -> None:
    """A producer writes 50 records/s for 10 s before a Worker starts (a 10 s backlog in stream
    time) and goes on writing; the Worker processes up to 100/s, so it covers 2 s of stream
    per second and the lag shrinks by 1 s a second. Once the rate is steady (the lag under
    7 s), the Worker's estimate is compared with the time the lag then really took to reach
    the tip (moto's MillisBehindLatest: the stream time between the last record read and the
    newest)."""
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="backlog", ShardCount=1)
    stop = threading.Event()
    written: list[tuple[str, str]] = []

    def produce() -> None:
        started, n = time.monotonic(), 0
        while not stop.wait(0.1):  # 50 records a second, kept to the clock however long a put takes
            due = int(50 * (time.monotonic() - started)) - len(written)
            if due > 0:
                written.extend(put_records(kinesis, "backlog", due, prefix=f"p{n}-"))
                n += 1

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    journal = Journal()
    config = WorkerConfig("backlog-leases", [StreamConfig("backlog", "app", "TRIM_HORIZON")], worker_id="w1",
                          lease_duration=10.0, tick_interval=2.0 / 3, idle_backoff=0.1, max_records=20)
    worker = Worker(config, lambda: Paced(journal, "w1"), kinesis_client=aws.client("kinesis"),
                    dynamodb_client=aws.client("dynamodb"))
    try:
        assert eventually(lambda: len(written) >= 500, 60)  # ~10 s of records first: the backlog
        worker.start()
        samples: list[tuple[float, float | None, float | None]] = []  # (when, lag, catch-up estimate)
        estimate: tuple[float, float] | None = None
        caught_at = None
        deadline = time.monotonic() + 90
        while caught_at is None and time.monotonic() < deadline:
            status = worker.status()
            now = time.monotonic()
            samples.append((now, status.max_lag_seconds, status.catch_up_seconds))
            lag = status.max_lag_seconds
            if estimate is None and lag is not None and lag < 7.0 and status.catch_up_seconds is not None:
                estimate = (now, status.catch_up_seconds)
            if estimate is not None and lag is not None and lag < 0.5:
                caught_at = now
            stop.wait(0.05)  # sampling the Worker's figures, not waiting for an event
        assert estimate is not None and caught_at is not None, samples[-5:]
        truth = caught_at - estimate[0]
        print(f"catch-up estimate {estimate[1]:.1f} s, truth {truth:.1f} s (ratio {estimate[1] / truth:.2f})")
        assert 0.5 * truth <= estimate[1] <= 1.5 * truth, (estimate[1], truth)
    finally:
        stop.set()
        producer.join()
        worker.stop()
