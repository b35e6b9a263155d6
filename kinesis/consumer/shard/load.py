"""What one shard costs its member: records/s, bytes/s, CPU and processor time, smoothed.

The load-aware planner (:func:`hashring.balance_loads`) weighs each lease by its shard's
measured load. A shard consumer runs on a thread of its own, so the CPU time of that thread
between two reads (``time.thread_time``) is exactly what the shard costs: reading, parsing,
de-aggregating and the processor's own work, whatever its records look like; a cold shard
costs the few polls it makes. The processor's wall time (time inside ``process_records``, as
a share of the time) is reported beside it: an I/O-bound processor is busy without using CPU.

Rates are time-weighted averages over about the last ``window`` seconds (a minute by
default), as :mod:`kinesis.consumer.shard.lag` does: sums of each quantity and of the
elapsed time, decayed by ``exp(-dt / window)``, so uneven reads count by their duration and
the first samples weigh no more than later ones. One thread observes; any thread may read
:meth:`ShardLoad.sample` (the state is replaced whole).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

LOAD_METRICS = ("cpu", "records", "bytes")
"""What a lease weighs when the planner balances loads (``WorkerConfig.load_metric``)."""


@dataclass(frozen=True)
class LoadSample:
    """One shard's smoothed load (all per second of wall time)."""

    records_per_s: float
    bytes_per_s: float
    cpu: float
    """CPU seconds per second of the shard's thread (1.0: a whole core)."""
    processor_busy: float
    """Share of the time spent inside ``process_records`` (1.0: always processing)."""
    seconds: float
    """The decayed time the sample covers (small at first: read it as the sample's weight)."""

    def weight(self, metric: str) -> float:
        """The value of ``metric`` (one of :data:`LOAD_METRICS`)."""
        if metric == "cpu":
            return self.cpu
        if metric == "records":
            return self.records_per_s
        if metric == "bytes":
            return self.bytes_per_s
        raise ValueError(f"load metric must be one of {LOAD_METRICS}, got {metric!r}")


class ShardLoad:
    """The smoothed load of one shard consumer (see the module docs)."""

    def __init__(self, window: float = 60.0, *, clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = time.thread_time):
        if not window > 0:
            raise ValueError(f"window must be > 0 seconds, got {window!r}")
        self._window = window
        self._clock, self._cpu_clock = clock, cpu_clock
        self._at: float | None = None  # wall and CPU clocks at the last observation
        self._cpu_at = 0.0
        # decayed (records, bytes, cpu seconds, processor seconds, elapsed seconds)
        self._sums: tuple[float, float, float, float, float] = (0.0, 0.0, 0.0, 0.0, 0.0)

    def start(self) -> None:
        """Start timing from now (on the observing thread: its CPU clock is the shard's)."""
        self._at, self._cpu_at = self._clock(), self._cpu_clock()

    def observe(self, records: int, nbytes: int, processor_seconds: float) -> None:
        """One pass of the read loop: ``records`` of ``nbytes`` payload bytes delivered, after
        ``processor_seconds`` inside the processor. Called on the shard's own thread."""
        now, cpu = self._clock(), self._cpu_clock()
        if self._at is None:
            self._at, self._cpu_at = now, cpu
            return
        dt = now - self._at
        if dt <= 0:
            return
        keep = math.exp(-dt / self._window)
        r, b, c, p, s = self._sums
        self._sums = (r * keep + records, b * keep + nbytes, c * keep + max(0.0, cpu - self._cpu_at),
                      p * keep + processor_seconds, s * keep + dt)
        self._at, self._cpu_at = now, cpu

    def sample(self) -> LoadSample | None:
        """The current smoothed load; None before a first full pass."""
        r, b, c, p, s = self._sums
        if s <= 0:
            return None
        return LoadSample(r / s, b / s, c / s, min(1.0, p / s), s)
