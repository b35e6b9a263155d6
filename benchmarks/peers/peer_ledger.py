"""The ledger every benchmark member writes, whatever library it runs (no imports from the
repository: peer drivers run in the peer's own environment).

The format is ``examples/demo_member.py``'s, so one audit reads every peer::

    I <shard> <checkpoint or -> <t>                    a shard's processor starts
    R <shard> <sequence> <sub> <partition key> <n> <t> one processed record
    S <shard> <t>                                      shutdown requested (after its checkpoint)
    E <shard> <t>                                      shard ended
    L <shard> <t>                                      lease lost

``t`` is ``time.time_ns()``. A peer that does not tell the shard or sequence number of a
record writes ``-`` for them; the benchmark fills them in from what the producer wrote (the
payload's partition key and counter name one record).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path


class Ledger:
    """Append-only, one ``os.write`` per batch (on disk before the checkpoint that follows)."""

    def __init__(self, path: Path | str):
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def write(self, lines: list[str]) -> None:
        if not lines:
            return
        data = "".join(line + "\n" for line in lines).encode()
        with self._lock:
            os.write(self._fd, data)

    def event(self, kind: str, shard: str, extra: str = "") -> None:
        parts = [kind, shard, *([extra] if extra else []), str(time.time_ns())]
        self.write([" ".join(parts)])


def record_line(shard: str | None, sequence: str | None, sub: int, data: bytes | str) -> str:
    """One ``R`` line for a record whose payload is the producer's ``{"pk": .., "n": ..}``."""
    try:
        payload = json.loads(data)
        pk, n = str(payload["pk"]), int(payload["n"])
    except (ValueError, KeyError, TypeError):
        pk, n = "?", -1
    return f"R {shard or '-'} {sequence or '-'} {sub} {pk} {n} {time.time_ns()}"


def install_stop(handler: object) -> threading.Event:
    """SIGTERM and SIGINT set the returned event (and call ``handler()`` if callable)."""
    import signal

    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()
        if callable(handler):
            handler()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop
