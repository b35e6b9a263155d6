"""Waiting for a condition with a deadline (never a bare sleep standing in for synchronisation)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def eventually(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "") -> Any:
    """Poll ``predicate`` until it is truthy and return its value; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        pause.wait(0.01)
