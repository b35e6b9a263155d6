"""``RoundRecord``: what a coordinator's rounds leave for ``status()`` to report.

The number of ticks and when the last one ended, when the table was last read and the
last error (a round that failed, or a member list that could not be read; cleared by the
next table read). The round writes these plain values under the round lock, replacing
each whole, so any thread may read them. A failed round is counted
(``lease_loop_errors``) and logged: a table error (a :class:`~kinesis.errors.KinesisHashRingError`)
as a warning, anything else with its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kinesis.errors import KinesisHashRingError
from kinesis.lease_loop.clock import Clock

log = logging.getLogger("kinesis.lease_loop.coordinator")  # the lease loop logs as the coordinator


class RoundRecord:
    """The rounds of ``member_id`` so far (see the module docs)."""

    def __init__(self, member_id: str, count: Callable[[str], None], clock: Clock):
        self._me = member_id
        self._count = count
        self._clock = clock
        self.ticks = 0
        self.last_tick_at: float | None = None
        self.last_table_read_at: float | None = None
        self.last_error: str | None = None

    def table_read(self) -> None:
        """The table was read now: no error stands."""
        self.last_table_read_at = self._clock()
        self.last_error = None

    def failed(self, exc: Exception) -> None:
        """A round raised ``exc`` (call from the ``except`` block: the log has the traceback)."""
        self._count("lease_loop_errors")
        self.last_error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, KinesisHashRingError):
            log.warning("%s: lease loop round failed: %s", self._me, exc)
        else:
            log.exception("%s: lease loop round failed", self._me)

    def finished(self, *, full: bool) -> None:
        """A round ended (``full``: a tick, else a light round), failed or not."""
        if full:
            self.ticks += 1
            self._count("ticks")
            self.last_tick_at = self._clock()
        else:
            self._count("refreshes")
