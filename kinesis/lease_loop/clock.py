"""Injectable monotonic clocks for the lease loop.

Lease expiry and member liveness are judged on the *observer's* monotonic clock
(never by comparing wall clocks across hosts), so every component that measures
time takes a ``clock: Clock`` argument: a no-argument callable returning seconds.
Production code uses :func:`time.monotonic`; tests and benchmarks use
:class:`FakeClock` to advance time without sleeping.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from kinesis.errors import ConfigurationError

Clock = Callable[[], float]
"""A monotonic clock: returns seconds as a float, never goes backwards."""

MONOTONIC: Clock = time.monotonic
"""The default clock."""


class FakeClock:
    """A manually advanced monotonic clock (thread-safe), for tests and simulations."""

    def __init__(self, start: float = 0.0):
        self._now = float(start)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` (>= 0) and return the new time."""
        if not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds < 0:
            raise ConfigurationError(
                f"a clock only moves forward: advance() needs a finite number >= 0, got {seconds!r}"
            )
        with self._lock:
            self._now += float(seconds)
            return self._now

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now!r})"
