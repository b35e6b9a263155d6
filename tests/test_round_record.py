"""RoundRecord: what status() reports of the rounds, and how a failed round is counted and logged."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from kinesis.errors import LeaseTableError
from kinesis.lease_loop.clock import FakeClock
from kinesis.lease_loop.round_record import RoundRecord

LOGGER = "kinesis.lease_loop.coordinator"


def record() -> tuple[RoundRecord, Counter[str], FakeClock]:
    counts: Counter[str] = Counter()
    clock = FakeClock(10.0)
    return RoundRecord("a", lambda name: counts.update([name]), clock), counts, clock


def test_ticks_are_counted_and_timed_light_rounds_only_counted() -> None:
    r, counts, clock = record()
    assert (r.ticks, r.last_tick_at) == (0, None)
    clock.advance(2.0)
    r.finished(full=True)
    r.finished(full=False)
    assert (r.ticks, r.last_tick_at) == (1, 12.0)
    assert counts == {"ticks": 1, "refreshes": 1}


def test_a_table_read_clears_the_last_error(caplog: pytest.LogCaptureFixture) -> None:
    r, counts, clock = record()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        try:
            raise LeaseTableError("throttled")
        except LeaseTableError as exc:
            r.failed(exc)
    assert r.last_error == "LeaseTableError: throttled" and counts["lease_loop_errors"] == 1
    (entry,) = caplog.records
    assert entry.levelno == logging.WARNING and entry.exc_info is None  # a table error: no traceback
    clock.advance(1.0)
    r.table_read()
    assert (r.last_error, r.last_table_read_at) == (None, 11.0)


def test_an_unexpected_error_is_logged_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    r, counts, _ = record()
    try:
        raise ValueError("a bug")
    except ValueError as exc:
        r.failed(exc)
    assert r.last_error == "ValueError: a bug" and counts["lease_loop_errors"] == 1
    (entry,) = caplog.records
    assert entry.levelno == logging.ERROR and entry.exc_info is not None
    assert entry.name == LOGGER
