"""``Lifecycle``: a coordinator's round lock, and starting and stopping its loop, each once.

Rounds run one at a time under the *round lock* (:meth:`Lifecycle.exclusive`), on the loop's
thread or on whoever calls ``tick()`` / ``refresh()``; the thread running a round is known,
so a ``stop()`` from a listener callback (which would wait for itself) is refused.

:meth:`Lifecycle.start` starts the :class:`~kinesis.lease_loop.round_loop.RoundLoop` once; a
stopped coordinator cannot be restarted. :meth:`Lifecycle.stop` acts on the first call only
(later or concurrent calls wait for it and return its result): it sets the loop's flags and
the holder's ``stopping`` under the holder's lock and leaves the membership (graceful)
(:meth:`Lifecycle.begin`, which a caller that runs the rounds itself may call first), waits
for the loop (which hands the leases off), then, under the round lock, drops what is left
and stops the writer threads, so no round (not even a manual tick) runs after it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from hashring import Membership
from kinesis.errors import ConfigurationError
from kinesis.lease_loop.holder import LeaseHolder
from kinesis.lease_loop.round_loop import RoundLoop
from kinesis.lease_loop.write_pool import WritePool

log = logging.getLogger("kinesis.lease_loop.coordinator")  # the lease loop logs as the coordinator


class Lifecycle:
    """The round lock and the start / stop of one coordinator (see the module docs)."""

    def __init__(self, holder: LeaseHolder, loop: RoundLoop, pool: WritePool, membership: Membership,
                 member_id: str):
        self._holder = holder
        self._loop = loop
        self._pool = pool
        self._membership = membership
        self._me = member_id
        self.round_lock = threading.Lock()
        """One round at a time; guards all round state."""
        self.stopped = False  # set under the round lock by stop(): no round runs after it
        self.ticking: threading.Thread | None = None
        """The thread running a round now."""
        self._stop_done = threading.Event()  # set when the first stop() call has finished
        self._stop_result = False
        self._begun = False  # the stop flags are set (by begin() or the first stop())
        self._finishing = False  # a stop() call is finishing (later ones wait for it)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[bool]:
        """Hold the round lock as the tick thread (listener callbacks run here); False: stopped."""
        with self.round_lock:
            if self.stopped:
                yield False
                return
            self.ticking = threading.current_thread()
            try:
                yield True
            finally:
                self.ticking = None

    def start(self) -> None:
        """Start the loop's thread (once); a ConfigurationError after a stop."""
        with self._holder.lock:
            if self.stopped or self._loop.stopped.is_set():
                raise ConfigurationError("a stopped coordinator cannot be restarted: build a new one")
            self._loop.start(f"lease-coordinator-{self._me}")

    def begin(self, graceful: bool, timeout: float) -> bool:
        """Set the stop flags (the rounds plan without this member from now on, if graceful)
        and leave the membership: on the first call only (True), not waiting for anything."""
        with self._holder.lock:
            if self._begun:
                return False
            self._begun = True  # a crash (not graceful) must not plan without this member meanwhile
            self._holder.stopping = graceful
            self._loop.stop(graceful, timeout)
        self._loop.wake.set()
        leave = getattr(self._membership, "leave", None)
        if graceful and callable(leave):
            try:
                leave()
            except Exception:
                log.exception("%s: leaving the membership failed", self._me)
        return True

    def stop(self, graceful: bool, timeout: float) -> bool:
        """Stop (see the module docs); True if no lease is left behind."""
        if self.ticking is threading.current_thread():
            raise RuntimeError(
                "stop() was called from a listener callback (the tick thread): call it from "
                "another thread, e.g. the one handling SIGTERM"
            )
        self.begin(graceful, timeout)
        with self._holder.lock:
            first = not self._finishing
            self._finishing = True
        if not first:  # the first call does the work; later calls get its result
            self._stop_done.wait()
            return self._stop_result
        graceful = self._loop.graceful
        self._loop.finish()
        with self.round_lock, self._holder.lock:  # no round (not even a manual tick) goes on after this
            self.stopped = True
            left = self._holder.drop_all()
            self._pool.shutdown()
        if left:
            (log.warning if graceful else log.info)("%s stopped with leases left to expire: %s", self._me, left)
        elif graceful:  # nothing left to time by it (leases left expire faster with it)
            self._holder.end_session()
        self._stop_result = graceful and not left
        self._stop_done.set()
        return self._stop_result
