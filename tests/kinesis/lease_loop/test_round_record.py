"""RoundRecord: what status() reports of the rounds, and how a failed round is counted and logged."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from kinesis.errors import LeaseTableError
from kinesis.lease_loop.lease_listener import RoundRecord
from kinesis.lease_loop.timing import FakeClock

LOGGER = "kinesis.lease_loop.lease_listener"


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


@pytest.mark.parametrize(("error", "level", "traceback"), [
    (LeaseTableError("throttled"), logging.WARNING, False),  # a table error: a warning
    (ValueError("a bug"), logging.ERROR, True),  # anything else: logged with its traceback
])
def test_a_failed_round_is_counted_kept_and_logged(
    caplog: pytest.LogCaptureFixture, error: Exception, level: int, traceback: bool,
) -> None:
    r, counts, _ = record()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        try:
            raise error
        except Exception as exc:
            r.failed(exc)
    assert r.last_error == f"{type(error).__name__}: {error}" and counts == {"lease_loop_errors": 1}
    (entry,) = caplog.records
    assert (entry.name, entry.levelno, entry.exc_info is not None) == (LOGGER, level, traceback)


def test_a_table_read_clears_the_last_error() -> None:
    r, _, clock = record()
    r.failed(LeaseTableError("throttled"))
    assert r.last_error is not None
    clock.advance(1.0)
    r.table_read()
    assert (r.last_error, r.last_table_read_at) == (None, 11.0)
