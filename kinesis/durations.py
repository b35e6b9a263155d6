"""One validator for durations given in seconds (configuration of the lease loop and readers)."""

from __future__ import annotations

import math

from kinesis.errors import ConfigurationError


def check_seconds(name: str, value: object, *, allow_zero: bool = False) -> float:
    """``value`` as a float number of seconds, or a :class:`ConfigurationError` naming ``name``.

    Finite and > 0 (>= 0 with ``allow_zero``); bools are refused although they are ints.
    """
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and (value > 0 or (allow_zero and value == 0))
    )
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigurationError(f"{name} must be a finite number of seconds {bound}, got {value!r}")
    return float(value)  # type: ignore[arg-type]
