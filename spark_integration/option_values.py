"""One option value of the ``kinesis`` source: integers, booleans, sizes, durations, URLs, times.

Each helper reads one option from the lower-cased option map, returns its default when unset,
and raises :class:`~spark_integration.errors.InvalidOptionError` naming the option (:func:`fail`) when
the value is malformed or out of range. No I/O: plain functions of the text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from urllib.parse import urlparse

from spark_integration.errors import InvalidOptionError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_BYTES = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)
_BYTE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def fail(option: str, message: str) -> InvalidOptionError:
    """The error to raise for ``option`` (its canonical spelling), saying what is wrong."""
    return InvalidOptionError(f"option '{option}': {message}", option=option)


def url_option(value: str | None, name: str = "endpointUrl") -> str | None:
    """An http(s) URL without its trailing slash, or None when unset."""
    if value is None or value == "":
        return None
    url = urlparse(value)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise fail(name, f"{value!r} is not an http(s) URL such as "
                   "'http://127.0.0.1:5000' (leave it unset for AWS)")
    return value.rstrip("/")


def parse_timestamp_ms(value: str) -> int:
    """Epoch milliseconds from ISO-8601 (naive means UTC) or epoch seconds / milliseconds."""
    text = value.strip()
    try:
        number = float(text)
    except ValueError:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return int(parsed.timestamp() * 1000)
    # 1e11 seconds is the year 5138: anything larger is milliseconds.
    return int(number) if number > 1e11 else int(number * 1000)


def int_option(opts: Mapping[str, str], name: str, default: int | None, *, low: int,
               high: int) -> int | None:
    """An integer in ``low..high``, or ``default`` when unset."""
    value = opts.get(name.lower())
    if value is None or value == "":
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise fail(name, f"{value!r} is not an integer") from None
    if not low <= number <= high:
        raise fail(name, f"{number} is out of range: use {low}..{high}")
    return number


def bool_option(opts: Mapping[str, str], name: str, default: bool) -> bool:
    value = (opts.get(name.lower()) or "").strip().lower()
    if not value:
        return default
    if value not in ("true", "false"):
        raise fail(name, f"{value!r} is neither 'true' nor 'false'")
    return value == "true"


def parse_bytes(value: str) -> int:
    """Bytes from '4m', '512k', '4MiB', '1g' (binary units, as Spark's) or a bare number."""
    match = _BYTES.match(value)
    if not match:
        raise ValueError(value)
    unit = (match.group(2) or "").lower()[:1]
    return int(match.group(1)) * _BYTE_UNITS[unit]


def bytes_option(opts: Mapping[str, str], name: str, default: int, *, high: int) -> int:
    """A size in bytes of at most ``high`` (0 allowed), or ``default`` when unset."""
    parsed = _size_of(opts, name, "'4m', '512k' or '1048576' (bytes; 0 turns shipping off)")
    if parsed is None:
        return default
    value, number = parsed
    if number > high:
        raise fail(name, f"{value!r} is too large: use at most {high >> 20}m (Spark sends "
                   "every task through its RPC layer; larger ranges are better re-read "
                   "by the executors)")
    return number


def size_option(opts: Mapping[str, str], name: str, *, high: int) -> int | None:
    """A positive size in bytes ('1m', '512k', a number), or None when unset."""
    parsed = _size_of(opts, name, "'1m', '512k' or '1048576' (bytes)")
    if parsed is None:
        return None
    value, number = parsed
    if not 1 <= number <= high:
        raise fail(name, f"{value!r} is out of range: use a positive size of at most "
                   f"{high >> 30}g (unset: no byte limit)")
    return number


def _size_of(opts: Mapping[str, str], name: str, examples: str) -> tuple[str, int] | None:
    """``(text, bytes)`` of a size option, or None when unset; ``examples`` end the error."""
    value = opts.get(name.lower())
    if value is None or value == "":
        return None
    try:
        return value, parse_bytes(value)
    except ValueError:
        raise fail(name, f"{value!r} is not a size such as {examples}") from None


def parse_duration_s(value: str) -> float:
    """Seconds from '250ms', '10s', '5m', '1h' or a bare number of seconds."""
    match = _DURATION.match(value)
    if not match:
        raise ValueError(value)
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def duration_option(opts: Mapping[str, str], name: str, default: float, *, low: float) -> float:
    value = opts.get(name.lower())
    if value is None or value == "":
        return default
    try:
        seconds = parse_duration_s(value)
    except ValueError:
        raise fail(name, f"{value!r} is not a duration such as '500ms', '10s', '5m'") from None
    if seconds < low:
        raise fail(name, f"{value!r} must be at least {low} s")
    return seconds
