"""``LeaseTiming``: every duration of the lease loop, with its defaults and rules, in one place.

:class:`~kinesis.consumer.worker.config.WorkerConfig` builds one (``config.timing``) and the
:class:`~kinesis.lease_loop.coordinator.LeaseCoordinator` takes it (or builds one from its keyword
arguments), so each rule is written and checked once. All values are seconds.

================== ======================================= =====================================
``lease_duration`` a lease unchanged this long is expired    10 (KCL's failover time)
``tick_interval``  renewals (at least twice per lease)      ``lease_duration / 3``
``scan_interval``  light rounds between ticks               ``tick_interval / 3``
``backup_grace``   extra wait of each further backup        ``lease_duration``
``orphan_timeout`` after this any member may take a lease   ``lease_duration + (replicas+1) * backup_grace``
``handoff_timeout`` log a listener slower than this         ``lease_duration``
``adopt_timeout``  an unadopted hand-off is withdrawn       ``tick_interval``
================== ======================================= =====================================

A holder treats its lease as valid until ``lease_duration - tick_interval`` after it sent its
last successful write (:attr:`validity`), so it stops before any observer can see it expire.

* ``lease_duration`` is judged on each observer's own monotonic clock: a lease is expired
  when its counter has not changed for this long since the observer first saw that value.
* ``tick_interval`` is at most half of ``lease_duration``. Each light round (``scan_interval``)
  costs one scan request; ``scan_interval = tick_interval`` turns them off.
* ``handoff_timeout`` only logs and counts a slow listener: the lease is still renewed.
* ``adopt_timeout``: a lease handed to a member that has not adopted it after this long (on
  the observer's clock) is taken back by the plan's next owner, and that member is
  suspected (a live member adopts within a light round). Safe at any time: a handed-off
  lease is processed only after the target's adopt write, and the take is conditional on
  the counter it saw.

Injectable monotonic clocks for the lease loop.

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
from dataclasses import dataclass
from typing import TypedDict, Unpack

from kinesis.durations import check_seconds
from kinesis.errors import ConfigurationError


class Durations(TypedDict, total=False):
    """The durations besides ``lease_duration`` (None or absent: the default; see the module
    docs): declared once here, the keyword arguments of :meth:`LeaseTiming.of` and of
    :class:`~kinesis.lease_loop.coordinator.LeaseCoordinator`, and the same-named fields of
    :class:`~kinesis.consumer.worker.config.WorkerConfig` (a test keeps those in step)."""

    tick_interval: float | None
    scan_interval: float | None
    backup_grace: float | None
    orphan_timeout: float | None
    handoff_timeout: float | None
    adopt_timeout: float | None


DURATIONS: tuple[str, ...] = tuple(Durations.__annotations__)
"""The names of :class:`Durations`."""


@dataclass(frozen=True)
class LeaseTiming:
    """The validated durations of one lease loop (see the module docs); build with :meth:`of`."""

    lease_duration: float
    tick_interval: float
    scan_interval: float
    backup_grace: float
    orphan_timeout: float
    handoff_timeout: float
    adopt_timeout: float

    @classmethod
    def of(
        cls,
        lease_duration: float = 10.0,
        *,
        replicas: int = 1,
        **durations: Unpack[Durations],
    ) -> LeaseTiming:
        """Fill in the defaults and check every rule (a ConfigurationError names the field)."""
        unknown = sorted(set(durations) - set(DURATIONS))
        if unknown:
            raise TypeError(f"unknown duration {unknown[0]!r}; the durations are lease_duration, {', '.join(DURATIONS)}")
        tick_interval = durations.get("tick_interval")
        scan_interval = durations.get("scan_interval")
        backup_grace = durations.get("backup_grace")
        orphan_timeout = durations.get("orphan_timeout")
        handoff_timeout = durations.get("handoff_timeout")
        adopt_timeout = durations.get("adopt_timeout")
        lease = check_seconds("lease_duration", lease_duration)
        tick = check_seconds("tick_interval", tick_interval if tick_interval is not None else lease / 3)
        if tick * 2 > lease:
            raise ConfigurationError(
                f"tick_interval ({tick:g} s) must be at most half of lease_duration ({lease:g} s): "
                "leases are renewed once per tick and must be renewed at least twice per lease "
                "duration (default: lease_duration / 3)"
            )
        scan = check_seconds("scan_interval", scan_interval if scan_interval is not None else tick / 3)
        if scan > tick:
            raise ConfigurationError(
                f"scan_interval ({scan:g} s) must be at most tick_interval ({tick:g} s); set it to "
                "tick_interval to scan on ticks only"
            )
        grace = check_seconds("backup_grace", backup_grace if backup_grace is not None else lease)
        orphan = check_seconds(
            "orphan_timeout", orphan_timeout if orphan_timeout is not None else lease + (replicas + 1) * grace
        )
        if orphan < lease:
            raise ConfigurationError(
                f"orphan_timeout ({orphan:g} s) must be >= lease_duration ({lease:g} s): a lease "
                "cannot be orphaned before it expires"
            )
        handoff = check_seconds("handoff_timeout", handoff_timeout if handoff_timeout is not None else lease)
        adopt = check_seconds("adopt_timeout", adopt_timeout if adopt_timeout is not None else tick)
        return cls(lease, tick, scan, grace, orphan, handoff, adopt)

    @property
    def validity(self) -> float:
        """How long after sending its last successful write a holder may process."""
        return self.lease_duration - self.tick_interval


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
