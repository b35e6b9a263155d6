"""``RoundLoop``: when a coordinator's rounds run, on its own thread.

Ticks run on a fixed schedule (every ``tick_interval``) and light rounds every
``scan_interval`` between them (skipped when the tick comes less than half an interval
later); a light round also runs just after a lease held by someone else is due to expire
(each such moment once), and hand-offs whose listener finished are written between rounds
(looked at every 50 ms while any is pending). After a graceful stop the loop plans without
its member at once and goes on until every lease is handed off and adopted (light rounds at
least every 0.25 s read the offers) or the deadline passes. The
schedule is in real time (``time.monotonic``); rounds judge expiry on the coordinator's clock.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kinesis.lease_loop.lease_timing import LeaseTiming

_COMPLETION_POLL = 0.05  # seconds between looks at pending hand-off completions (local state)
_OFFER_POLL = 0.25  # a stopping member reads its offers not adopted yet at least this often


@dataclass(frozen=True)
class Rounds:
    """What the loop runs (the coordinator's methods)."""

    tick: Callable[[], None]
    refresh: Callable[[], None]
    complete_handoffs: Callable[[], None]
    """Write the hand-offs whose listener finished since the last round."""
    next_expiry: Callable[[], float]
    """Seconds until the next round due to an expiry (math.inf: none)."""
    holding: Callable[[], bool]
    """Whether any lease is held (a graceful stop ends once none is)."""
    handoffs_pending: Callable[[], bool]
    """Whether a hand-off waits for its listener (then completions are polled)."""


class RoundLoop:
    """The loop of one coordinator (see the module docs). Its flags are set under the
    holder's lock by the coordinator's ``start`` and ``stop``; the loop only reads them."""

    def __init__(self, rounds: Rounds, timing: LeaseTiming):
        self._rounds = rounds
        self._tick_interval = timing.tick_interval
        self._scan_interval = timing.scan_interval
        self.wake = threading.Event()
        """Interrupts the wait between rounds."""
        self.stopped = threading.Event()
        """Set by a stop: the loop ends (graceful: once nothing is held)."""
        self.graceful = True
        self.deadline = math.inf  # real time (time.monotonic) by which a graceful stop ends
        self.thread: threading.Thread | None = None

    def start(self, name: str) -> None:
        """Run :meth:`serve` on a daemon thread (once)."""
        if self.thread is None:
            self.thread = threading.Thread(target=self.serve, name=name, daemon=True)
            self.thread.start()

    def stop(self, graceful: bool, timeout: float) -> None:
        """End the loop: at once, or (graceful) when nothing is held or ``timeout`` passed."""
        self.graceful = graceful
        self.deadline = time.monotonic() + timeout
        self.stopped.set()

    def finish(self) -> None:
        """After :meth:`stop`: wait for the loop to end; a graceful stop of a loop never
        started runs it on this thread (to hand every lease off)."""
        if self.thread is not None:
            self.thread.join()
        elif self.graceful:
            self.serve()

    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def serve(self) -> None:
        """The loop (see the module docs)."""
        rounds = self._rounds
        next_tick = time.monotonic()
        last_round = -math.inf
        expiry_at = math.inf  # a light round when a lease this member saw is due to expire
        stop_seen = False
        while True:
            now = time.monotonic()
            if self.stopped.is_set():
                if not self.graceful:
                    return
                if not stop_seen:  # plan without this member and hand off right away
                    stop_seen = True
                    rounds.refresh()  # also adopts (to hand on) what was handed to this member
                    rounds.complete_handoffs()
                    last_round = now
                if not rounds.holding() or time.monotonic() >= self.deadline:
                    return
            if now >= next_tick:
                rounds.tick()
                last_round = now
                next_tick = max(next_tick + self._tick_interval, time.monotonic())
            elif now >= min(expiry_at, self._next_scan(last_round, next_tick)):
                rounds.refresh()
                last_round = now
            if last_round == now and expiry_at <= now:
                expiry_at = math.inf  # served by this round
            rounds.complete_handoffs()
            now = time.monotonic()
            expiry_at = min(expiry_at, now + rounds.next_expiry())  # each moment scheduled once
            wait = min(next_tick, self._next_scan(last_round, next_tick), expiry_at) - now
            if rounds.handoffs_pending():
                wait = min(wait, _COMPLETION_POLL)
            if self.stopped.is_set():
                wait = min(wait, self.deadline - now)
                if not rounds.holding():
                    continue  # all handed off: end now
            if wait > 0 and self.wake.wait(wait):
                self.wake.clear()

    def _next_scan(self, last_round: float, next_tick: float) -> float:
        """When the next light round is due: ``scan_interval`` after the last round, unless
        the next tick comes less than half an interval later (then the tick does it); while
        a graceful stop waits for its offers to be adopted, at least every 0.25 s."""
        if self.stopped.is_set() and self.graceful:
            return last_round + min(self._scan_interval, _OFFER_POLL)
        due = last_round + self._scan_interval
        return next_tick if next_tick - due < self._scan_interval / 2 else due
