"""Stale-on-error bookkeeping: how old the last good member list is, logged per transition."""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable

from hashring.errors import MembershipError, MembershipUnavailableError, StaleMembershipError

log = logging.getLogger(__name__)


class State(enum.Enum):
    FRESH = "fresh"
    STALE = "stale"  # serving the last good list after an error
    UNAVAILABLE = "unavailable"  # older than max_staleness: raising


class Freshness:
    """Tracks the last successful contact with the API and the last error.

    Logs once when it starts serving stale data, once when the data gets too
    old to serve, and once when it recovers, never once per call.
    """

    def __init__(self, max_staleness: float, clock: Callable[[], float]):
        self.max_staleness = max_staleness
        self._clock = clock
        self._lock = threading.Lock()
        self.last_ok: float | None = None
        self.last_error: MembershipError | None = None
        self.state = State.FRESH

    def ok(self) -> None:
        """A successful list, watch event, bookmark or cleanly ended watch."""
        now = self._clock()
        with self._lock:
            if self.state is not State.FRESH and self.last_ok is not None:
                log.info("kubernetes membership recovered after %.1fs without fresh data",
                         now - self.last_ok)
            self.last_ok = now
            self.last_error = None
            self.state = State.FRESH

    def failed(self, exc: MembershipError) -> None:
        """A failed refresh; the caller keeps serving the last good list if young enough."""
        with self._lock:
            self.last_error = exc
            if self.state is State.FRESH and self.last_ok is not None:
                self.state = State.STALE
                log.warning(
                    "kubernetes membership: serving the last good member list (%.1fs old, "
                    "max_staleness %.0fs) after an API error: %s",
                    self._clock() - self.last_ok, self.max_staleness, exc,
                )

    def age(self) -> float | None:
        """Seconds since the last good contact, or None before the first one."""
        last = self.last_ok
        return None if last is None else self._clock() - last

    def check(self) -> None:
        """Raise unless there is a member list no older than ``max_staleness``."""
        last_ok, error = self.last_ok, self.last_error
        if last_ok is None:
            if error is not None:
                raise error
            raise MembershipUnavailableError("no member list has been read from Kubernetes yet")
        age = self._clock() - last_ok
        if age <= self.max_staleness:
            return
        with self._lock:
            if self.state is not State.UNAVAILABLE:
                self.state = State.UNAVAILABLE
                log.error(
                    "kubernetes membership unavailable: the last good member list is %.1fs "
                    "old (max_staleness %.0fs); last error: %s", age, self.max_staleness, error,
                )
        raise StaleMembershipError(
            f"the last good Kubernetes member list is {age:.1f}s old, over max_staleness="
            f"{self.max_staleness:g}s, and refreshing keeps failing"
            + (f": {error}" if error is not None else "")
            + ". Not acquiring leases on a stale view; fix API access or raise max_staleness.",
            age=age,
            last_error=error,
        )
