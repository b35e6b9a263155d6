"""How far behind a shard's consumer is, how fast it catches up, and when it will have.

Kinesis answers every GetRecords (and every fan-out event) with ``MillisBehindLatest``: how far
the records just read are from the tip of the shard, in stream time. Its trend is the signal
autoscaling needs: while a consumer covers ``s`` seconds of stream per second, the lag ``L``
changes by ``dL/dt = 1 - s`` per second; so

* the catch-up time is ``L / -(dL/dt)`` while the lag shrinks (unknown, ``inf``, while it
  does not: more consumers are needed), and 0 once it is 0;
* the arrival rate (records per second entering the shard) is the processing rate divided by
  ``s``: records processed per second cover ``s`` seconds of stream each second.

Rates and the slope are time-weighted averages over about the last ``window`` seconds
(default a minute): sums of records and of lag changes, and of the time they took, each
decayed by ``exp(-dt / window)``, so uneven polls count by their duration and the first
observations carry no more weight than later ones (an exponential moving average seeded with
its first sample keeps that sample's noise for a whole window: a real drain's estimate was
off 2x for it). A lag under :data:`CAUGHT_UP_SECONDS` counts as caught up (a consumer at
the tip reads records up to a poll interval old). Pure: the caller passes its monotonic
clock's readings; one thread observes, any thread may read :meth:`LagTracker.estimate`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CAUGHT_UP_SECONDS = 2.0
"""A lag below this is a consumer at the tip: its catch-up time is 0, not a trend's guess."""


@dataclass(frozen=True)
class LagEstimate:
    """One shard's lag and rates (None: not measured yet)."""

    lag_seconds: float | None
    """MillisBehindLatest of the last read, in seconds."""
    measured_at: float | None
    """When it was read (the caller's monotonic clock)."""
    processing_rate: float | None
    """Records per second handed to the processor (smoothed)."""
    arrival_rate: float | None
    """Records per second entering the shard (smoothed; None while the consumer makes no progress)."""
    catch_up_seconds: float | None
    """Until the lag is 0 at the current trend: 0 when caught up, ``inf`` while it does not shrink."""


class LagTracker:
    """The lag of one shard's consumer over time (see the module docs)."""

    def __init__(self, window: float = 60.0):
        if not window > 0:
            raise ValueError(f"window must be > 0 seconds, got {window!r}")
        self._window = window
        # (lag, measured at, decayed records, decayed lag change, decayed seconds) replaced
        # whole on each observation, so a reader on another thread never mixes two of them
        self._state: tuple[float, float, float, float, float] | None = None

    def observe(self, now: float, millis_behind_latest: int | None, records: int) -> None:
        """A read answered at ``now`` with ``millis_behind_latest`` (None: not reported) and
        ``records`` records handed to the processor since the last observation."""
        if millis_behind_latest is None:
            return
        lag = max(0.0, millis_behind_latest / 1000.0)
        state = self._state
        if state is None or now <= state[1]:
            self._state = (lag, now, *(state[2:] if state is not None else (0.0, 0.0, 0.0)))
            return
        last_lag, at, done, change, seconds = state
        dt = now - at
        keep = math.exp(-dt / self._window)
        self._state = (lag, now, done * keep + records, change * keep + (lag - last_lag), seconds * keep + dt)

    def estimate(self) -> LagEstimate:
        """The current estimate."""
        state = self._state
        if state is None:
            return LagEstimate(None, None, None, None, None)
        lag, at, done, change, seconds = state
        rate, slope = (done / seconds, change / seconds) if seconds > 0 else (None, None)
        catch_up: float | None
        if lag < CAUGHT_UP_SECONDS:
            catch_up = 0.0
        elif slope is None:
            catch_up = None
        else:
            catch_up = lag / -slope if slope < 0 else math.inf
        arrival = None
        if rate is not None and slope is not None:
            speed = 1.0 - slope  # seconds of stream covered per second
            arrival = rate / speed if speed > 0 else None
        return LagEstimate(lag, at, rate, arrival, catch_up)


@dataclass(frozen=True)
class FleetLag:
    """A Worker's lag over the shards it holds (None: no shard measured yet)."""

    max_lag_seconds: float | None
    processing_rate: float | None
    arrival_rate: float | None
    catch_up_seconds: float | None
    """Until every held shard is caught up at the current trends (``inf``: one is not catching
    up); shards without a trend yet are left out."""


def worker_lag(estimates: list[LagEstimate]) -> FleetLag:
    """The Worker's figures from its shards' (rates add up; lag and catch-up are the worst)."""
    measured = [e for e in estimates if e.lag_seconds is not None]
    if not measured:
        return FleetLag(None, None, None, None)

    def total(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    catch_ups = [e.catch_up_seconds for e in measured if e.catch_up_seconds is not None]
    catch_up = max(catch_ups) if catch_ups else None  # a shard read once has no trend yet: left out
    return FleetLag(max(e.lag_seconds for e in measured if e.lag_seconds is not None),
                    total([e.processing_rate for e in measured]), total([e.arrival_rate for e in measured]),
                    catch_up)
