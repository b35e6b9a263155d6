"""Readable logs for applications that have not configured logging themselves.

The library only logs through ``logging.getLogger(__name__)``; it configures nothing unless
the application asks: :meth:`kinesis.Worker.run` calls :func:`setup_logging` by default
(``configure_logging=False`` turns that off), and :func:`setup_logging` does nothing when the
root logger already has handlers, so an application's own configuration always wins.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s [%(threadName)s] %(message)s"
"""Timestamp, level, logger, thread (``shard-<lease key>`` for a shard's reader), message."""

QUIET_LOGGERS = ("botocore", "boto3", "urllib3", "werkzeug")
"""Chatty dependencies, raised to WARNING by :func:`setup_logging`."""


def setup_logging(level: int | str = logging.INFO, *, stream: TextIO | None = None) -> bool:
    """Log ``level`` and above to ``stream`` (stderr) with timestamps, unless logging is set up.

    Returns True if it configured logging, False if the root logger already had handlers
    (then nothing is changed).
    """
    root = logging.getLogger()
    if root.handlers:
        return False
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(handler)
    root.setLevel(level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    return True
