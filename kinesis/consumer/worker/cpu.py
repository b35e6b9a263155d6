"""This process's CPU utilisation against the CPU it may use: the container's limit when a
cgroup sets one (a pod with ``resources.limits.cpu``), else the CPUs it may run on.

The utilisation is CPU seconds (user + system, every thread) per wall second over the time
since the previous reading, divided by that limit: 1.0 is a saturated pod. Readings closer
together than :data:`MIN_INTERVAL` return the previous value, so a burst of scrapes does not
turn noise into a figure.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

MIN_INTERVAL = 1.0
"""Seconds a reading covers at least."""
CGROUP = Path("/sys/fs/cgroup")


def cpu_limit(root: Path = CGROUP) -> float:
    """The CPUs this process may use: the cgroup v2 ``cpu.max`` or v1 CFS quota when one is set,
    else the CPUs in its affinity mask."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota != "max":
            return int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        if quota_us > 0 and period_us > 0:
            return quota_us / period_us
    except (OSError, ValueError):
        pass
    try:
        return float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return float(os.cpu_count() or 1)


class CpuUtilisation:
    """Readings of this process's CPU utilisation (see the module docs); thread-safe."""

    def __init__(self, limit: float | None = None, *, clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = time.process_time):
        self.limit = cpu_limit() if limit is None else limit
        self._clock, self._cpu_clock = clock, cpu_clock
        self._lock = threading.Lock()
        self._at, self._cpu_at = clock(), cpu_clock()
        self._last: float | None = None

    def read(self) -> float | None:
        """The utilisation since the previous reading (None until :data:`MIN_INTERVAL` passed)."""
        with self._lock:
            now, cpu = self._clock(), self._cpu_clock()
            if now - self._at >= MIN_INTERVAL:
                self._last = max(0.0, cpu - self._cpu_at) / (now - self._at) / self.limit
                self._at, self._cpu_at = now, cpu
            return self._last
