"""Run a graceful stop when SIGTERM ends the process, then terminate as before.

PySpark 4.x runs a Python streaming source's driver side (``initialOffset``,
``latestOffset``, ``partitions``, ``commit``) in a separate Python process, the *streaming
source runner* (``pyspark/sql/streaming/python_streaming_source_runner.py``). When the query
stops, the JVM stops that process with ``Process.destroy()``, i.e. SIGTERM
(``PythonStreamingSourceRunner.stop`` -> ``PythonWorkerFactory.stopWorker``, and once more
from ``PythonWorkerFactory.stop``), then closes its socket; it never sends SIGKILL and does
not wait. SIGTERM's default action ends the process at once, so the reader's ``stop()``
never runs. :class:`SigtermStop` replaces that default with: run the stop, restore the
previous handler, and terminate the way it would have (re-raise the signal, or call the
previous Python handler).

Signal handlers run on the main thread between bytecodes. While the main thread is inside
a reader method (:meth:`SigtermStop.busy`), the stop waits until the method returns, so a
checkpoint write or a batch's planning is never cut in half; while it waits for the JVM (a
socket read) the stop runs at once. Further SIGTERMs during the stop are ignored.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class SigtermStop:
    """Calls ``on_terminate`` once when SIGTERM arrives, outside any :meth:`busy` section."""

    def __init__(self, on_terminate: Callable[[], None], name: str = "kinesis source"):
        self._on_terminate = on_terminate
        self._name = name
        self._previous: _Handler = None
        self._installed = False
        self._depth = 0
        self._requested = False
        self._done = False

    @property
    def installed(self) -> bool:
        return self._installed

    @property
    def requested(self) -> bool:
        """True once SIGTERM arrived (the stop has run, or runs when the busy section ends)."""
        return self._requested

    def install(self) -> bool:
        """Handle SIGTERM in this process; False (and nothing changed) if that is not possible.

        Only the main thread may set signal handlers; a SIGTERM that is ignored (``SIG_IGN``)
        stays ignored.
        """
        if self._installed:
            return True
        if threading.current_thread() is not threading.main_thread():
            log.debug("%s: not on the main thread, SIGTERM keeps its handler", self._name)
            return False
        previous = signal.getsignal(signal.SIGTERM)
        if previous == self._handle:  # left installed by a stop off the main thread
            previous = self._previous
        if previous is None or previous == signal.SIG_IGN:  # None: a handler set outside Python
            return False
        signal.signal(signal.SIGTERM, self._handle)
        self._previous = previous
        self._installed = True
        return True

    def uninstall(self) -> None:
        """Give SIGTERM back to the previous handler (if ours is still the one installed)."""
        self._installed = False
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may; install() and _terminate() mend it later
        if signal.getsignal(signal.SIGTERM) == self._handle:
            signal.signal(signal.SIGTERM, self._previous)

    @contextmanager
    def busy(self) -> Iterator[None]:
        """A section the stop must not interrupt; a SIGTERM inside it acts when it ends."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0 and self._requested and not self._done:
                self._terminate(signal.SIGTERM, None)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._requested:  # PySpark sends SIGTERM twice: the stop is already under way
            log.info("%s: SIGTERM again; the graceful stop is under way", self._name)
            return
        self._requested = True
        if self._depth:
            log.info("%s: SIGTERM; stopping gracefully once the current call returns",
                     self._name)
            return
        self._terminate(signum, frame)

    def _terminate(self, signum: int, frame: FrameType | None) -> None:
        self._done = True
        log.info("%s: SIGTERM; stopping gracefully", self._name)
        try:
            self._on_terminate()
        except Exception:
            log.exception("%s: the graceful stop on SIGTERM failed", self._name)
        finally:
            previous = self._previous
            self.uninstall()
        if callable(previous):
            previous(signum, frame)
            return
        # SIG_DFL (the runner's case): terminate as SIGTERM would have, now that we are done.
        os.kill(os.getpid(), signum)
        raise SystemExit(128 + signum)  # only if the signal was blocked
