"""The stuck-processor watchdog: a processor call that runs past ``processor_timeout`` is reported.

A ``process_records`` call that never returns holds its shard for ever: the lease is renewed
(the member is alive), so nobody takes it over, and nothing is processed. KCL only logs such
tasks; here each one is reported once per call, with the stack of the thread running it (taken
from its current frame), counted in ``status()`` and ``/metrics``, and, with
``on_processor_timeout="restart"``, fails ``/livez`` so Kubernetes restarts the pod.

Python cannot stop a thread from outside: the honest remedy for a call that will not return is
a new process. The restart goes through the pod's SIGTERM, so the Worker first hands off every
lease it can (the hung shard's hand-off waits for its call until ``shutdown_grace``; then its
lease expires and another member takes it from its last checkpoint). With the default
``"wait"`` the Worker only reports and keeps waiting (the call may yet return).

A shard whose *reads* stopped advancing for ``processor_timeout`` while it was reading (no
record, no fresh read that found it caught up or nearer the tip: a stuck iterator, a lost
fan-out subscription) is reported the same way, once per stall, and its reader is restarted:
a new iterator or subscription from the last record delivered. Failing reads (retried with
backoff and logged), processor calls and lease pauses do not count as a stall. Unlike a processor call, a
reader can be replaced from outside, so this needs no pod restart.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)


class Watched(Protocol):
    """What the watchdog reads of a shard consumer."""

    key: str
    call_started: float | None
    """When its processor call in progress began (monotonic), None between calls."""
    thread: threading.Thread

    advanced_at: float
    """When its reads last advanced (identifies a stall: reported and restarted once)."""

    def reader_stalled_for(self, now: float) -> float | None:
        """Seconds its reads have not advanced while reading (None: not reading now)."""

    def restart_reader(self) -> None:
        """Replace its reader, reading on from the last record delivered."""


@dataclass(frozen=True)
class Hung:
    """A processor call past its timeout."""

    key: str
    seconds: float
    """How long the call has run."""


def thread_stack(thread: threading.Thread) -> str:
    """The current stack of ``thread`` (innermost frame last), or why there is none."""
    frame = sys._current_frames().get(thread.ident) if thread.ident is not None else None
    if frame is None:
        return "(the thread has no frame: it ended)"
    return "".join(traceback.format_stack(frame))


class Watchdog:
    """Reports processor calls that run longer than ``timeout`` seconds (see the module docs)."""

    def __init__(self, timeout: float, clock: Callable[[], float]):
        self.timeout = timeout
        self._clock = clock
        self._reported: set[tuple[str, float]] = set()  # (key, call start) already logged
        self._restarted: set[tuple[str, float]] = set()  # (key, when its reads last advanced) restarted
        self.readers_restarted = 0
        """Readers restarted because their reads stopped advancing."""
        self.hung: tuple[Hung, ...] = ()
        """The calls past their timeout at the last :meth:`check`."""

    def check(self, consumers: Iterable[Watched]) -> tuple[Hung, ...]:
        """Look at every consumer's call in progress; log each new hung call once, with its stack."""
        now = self._clock()
        hung, current = [], set()
        for consumer in consumers:
            started = consumer.call_started
            if started is None or now - started < self.timeout:
                continue
            current.add((consumer.key, started))
            hung.append(Hung(consumer.key, now - started))
            if (consumer.key, started) not in self._reported:
                log.error("%s: processor call STUCK for %.1f s (processor_timeout %.1f s): the shard makes no "
                          "progress while its lease is held; the thread's stack:\n%s",
                          consumer.key, now - started, self.timeout, thread_stack(consumer.thread))
        self._reported = current
        self.hung = tuple(hung)
        return self.hung

    def check_readers(self, consumers: Iterable[Watched]) -> int:
        """Restart every reader whose reads have not advanced for ``timeout`` (logged once per
        stall, with the consumer thread's stack); how many were restarted."""
        now = self._clock()
        restarted, current = 0, set()
        for consumer in consumers:
            stalled = consumer.reader_stalled_for(now)
            if stalled is None or stalled < self.timeout:
                continue
            stall = (consumer.key, consumer.advanced_at)
            current.add(stall)
            if stall in self._restarted:
                continue  # asked already (a read that will not return): a new reader has a new clock
            log.error("%s: reads STALLED for %.1f s (processor_timeout %.1f s): no record and no read that "
                      "found the shard caught up; restarting its reader from the last record delivered. "
                      "The consumer thread's stack:\n%s", consumer.key, stalled, self.timeout,
                      thread_stack(consumer.thread))
            consumer.restart_reader()
            restarted += 1
        self._restarted = current
        self.readers_restarted += restarted
        return restarted
