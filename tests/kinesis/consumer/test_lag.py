"""The lag estimator (kinesis.consumer.shard.lag) on simulated shards: a backlog draining at a
steady rate with noisy polls, a consumer that falls behind, one that is caught up."""

from __future__ import annotations

import math
import random

import pytest

from kinesis.consumer.shard.lag import LagEstimate, LagTracker, worker_lag


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
