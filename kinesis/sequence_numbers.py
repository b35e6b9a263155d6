"""The one validator of sequence numbers and sub-sequence numbers.

Every entry point (``Checkpoint``/``Position``, checkpoint calls, kclpy's checkpointer, lease
rows, Spark offsets) goes through these two functions, so the same bad value raises the same
:class:`~kinesis.errors.InvalidSequenceNumberError` with the same message everywhere.
"""

from __future__ import annotations

from kinesis.errors import InvalidSequenceNumberError

SEQUENCE_DIGITS = 130
"""Most digits of a sequence number (Kinesis: ``0|([1-9]\\d{0,128})``; the lease table's
``checkpointOrder`` is this wide, so it must never change)."""
SUB_SEQUENCE_DIGITS = 20
"""Most digits of a sub-sequence number (a KPL aggregate's index, an unsigned 64-bit int)."""

_EXAMPLE = "49590338271490256608559692538361571095921575989136588898"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def check_sequence_number(value: object) -> str:
    """``value`` in canonical form (no leading zeros) if it is a Kinesis sequence number: a
    string of 1 to :data:`SEQUENCE_DIGITS` ASCII decimal digits. Else raise
    :class:`InvalidSequenceNumberError`."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= SEQUENCE_DIGITS:
        return value if value[0] != "0" or value == "0" else str(int(value))
    kind = "" if isinstance(value, str) else f"{type(value).__name__} "
    raise InvalidSequenceNumberError(
        f"a sequence number must be a string of 1 to {SEQUENCE_DIGITS} decimal digits, such as "
        f"{_EXAMPLE!r}, got {kind}{_shown(value)}"
    )


def check_sub_sequence_number(value: object) -> int:
    """``value`` if it is a sub-sequence number: an int (not a bool) from 0 to
    ``10**SUB_SEQUENCE_DIGITS - 1``. Else raise :class:`InvalidSequenceNumberError`."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**SUB_SEQUENCE_DIGITS:
        return value
    raise InvalidSequenceNumberError(
        f"a sub-sequence number must be an int from 0 (a plain record) to "
        f"{10**SUB_SEQUENCE_DIGITS - 1}, got {type(value).__name__} {_shown(value)}"
    )
