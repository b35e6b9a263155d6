"""Turn SIGTERM / SIGINT into a graceful stop request (Kubernetes sends SIGTERM on pod deletion)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_on_signals(
    request_stop: Callable[[], None], signals: tuple[signal.Signals, ...] = DEFAULT_SIGNALS
) -> Iterator[bool]:
    """Call ``request_stop`` on the given signals while inside the block; restore handlers after.

    Yields False (and installs nothing) outside the main thread, where Python cannot install
    signal handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous: dict[signal.Signals, Any] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        request_stop()

    for sig in signals:
        previous[sig] = signal.signal(sig, handler)
    try:
        yield True
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
