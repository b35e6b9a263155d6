"""Lifecycle: the round lock, start once, stop once. A loop of stub rounds; no DynamoDB."""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field

import pytest

from hashring import StaticMembership
from kinesis.errors import ConfigurationError
from kinesis.lease_loop.coordinator import Lifecycle, RoundLoop, Rounds
from kinesis.lease_loop.holder import LeaseHolder, WritePool
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import Lease
from kinesis.lease_loop.timing import FakeClock, LeaseTiming


class Leaving(StaticMembership):
    """Counts ``leave()`` calls; ``fail``: leaving raises."""

    def __init__(self, fail: bool = False):
        super().__init__(["a"], "a")
        self.left = 0
        self.fail = fail

    def leave(self) -> None:
        self.left += 1
        if self.fail:
            raise RuntimeError("the API server is away")


@dataclass
class Parts:
    life: Lifecycle
    loop: RoundLoop
    holder: LeaseHolder
    membership: Leaving
    rounds: list[str] = field(default_factory=list)


def parts(fail_to_leave: bool = False) -> Parts:
    timing = LeaseTiming.of(3.0)
    holder = LeaseHolder(LeaseTable(None, "no-leases"), "a", timing, FakeClock())
    rounds: list[str] = []
    loop = RoundLoop(Rounds(lambda: rounds.append("tick"), lambda: rounds.append("refresh"), lambda: None,
                            lambda: math.inf, holder.holding, lambda: False), timing)
    membership = Leaving(fail_to_leave)
    life = Lifecycle(holder, loop, WritePool(1, "a"), membership, "a")
    return Parts(life, loop, holder, membership, rounds)


def test_a_round_holds_the_round_lock_as_the_tick_thread() -> None:
    p = parts()
    with p.life.exclusive() as running:
        assert running
        assert p.life.ticking is threading.current_thread() and p.life.round_lock.locked()
    assert p.life.ticking is None and not p.life.round_lock.locked()


def test_stop_from_a_round_is_refused_and_changes_nothing() -> None:
    p = parts()
    with p.life.exclusive(), pytest.raises(RuntimeError, match="listener callback"):
        p.life.stop(True, 1.0)
    assert not p.loop.stopped.is_set() and not p.holder.stopping and p.membership.left == 0


def test_a_graceful_stop_leaves_hands_off_on_this_thread_and_only_the_first_call_acts() -> None:
    p = parts()
    assert p.life.stop(True, 5.0) is True
    assert p.membership.left == 1 and p.holder.stopping
    assert p.rounds == ["refresh"]  # never started: the loop ran here, planning without this member
    assert p.life.stop(False, 5.0) is True  # the first call's result; nothing done again
    assert p.membership.left == 1 and p.holder.stopping and p.rounds == ["refresh"]
    with p.life.exclusive() as running:
        assert not running  # no round after a stop
    with pytest.raises(ConfigurationError, match="cannot be restarted"):
        p.life.start()


def test_a_crash_stops_renewing_and_leaves_the_leases_to_expire(caplog: pytest.LogCaptureFixture) -> None:
    p = parts()
    p.holder.add("k1", Lease("k1", "a", 4), 0.0)
    with caplog.at_level(logging.INFO, logger="kinesis.lease_loop"):
        assert p.life.stop(False, 5.0) is False
    assert not p.holder.holding() and not p.holder.stopping
    assert p.membership.left == 0 and p.rounds == []  # no leave, no hand-off round
    assert "leases left to expire: ['k1']" in caplog.text


def test_a_failure_to_leave_the_membership_is_logged_and_the_stop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = parts(fail_to_leave=True)
    assert p.life.stop(True, 5.0) is True
    assert p.membership.left == 1 and p.rounds == ["refresh"]
    assert "leaving the membership failed" in caplog.text


def test_start_runs_the_loop_on_one_thread_once() -> None:
    p = parts()
    p.life.start()
    thread = p.loop.thread
    assert thread is not None and thread.name == "lease-coordinator-a"
    p.life.start()
    assert p.loop.thread is thread
    assert p.life.stop(True, 5.0) is True  # nothing held: nothing left behind
    assert not thread.is_alive()
    assert p.rounds[-1] == "refresh"  # the stop's round, on the loop's thread
