"""Feature detection across PySpark 4.x: read limits and Trigger.AvailableNow (Spark 4.2+)."""

from __future__ import annotations

from typing import Any

try:  # Spark 4.2+
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    READ_LIMITS = True
except ImportError:  # pragma: no cover - Spark 4.0/4.1
    READ_LIMITS = False

    class ReadLimit:  # type: ignore[no-redef]
        """Placeholder: this Spark has no read limits."""

    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """Placeholder: this Spark has no read limits."""

    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """Placeholder: this Spark has no read limits."""

        def __init__(self, max_rows: int):
            self.max_rows = max_rows

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Placeholder: Trigger.AvailableNow is not offered to Python sources here."""

        def prepareForTriggerAvailableNow(self) -> None:
            """Unused on this Spark."""


__all__ = ["READ_LIMITS", "ReadAllAvailable", "ReadLimit", "ReadMaxRows",
           "SupportsTriggerAvailableNow", "limit_name"]


def limit_name(limit: Any) -> str:
    """A short description of a read limit, for logs."""
    return type(limit).__name__ if limit is not None else "none"
