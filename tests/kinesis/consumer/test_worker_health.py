"""The Worker's probes and startup line, decided from values (no worker, no AWS)."""

from __future__ import annotations

from typing import Any

import pytest

from hashring import Assignment
from kinesis import StreamConfig, WorkerConfig, WorkerStatus
from kinesis.consumer.worker import health as worker_health
from kinesis.consumer.worker.health import (
    is_live,
    planned_members,
    readiness,
    seconds_since,
    startup_line,
)
from kinesis.lease_loop.lease_listener import CoordinatorStatus


def status(**kwargs: Any) -> CoordinatorStatus:
    base: dict[str, Any] = dict(member_id="w1", running=True, stopping=False, held=(), pending_handoffs={},
                                suspects=(), ticks=3, last_tick_at=99.0, counters={},
                                last_table_read_at=99.0, last_membership_at=99.0)
    return CoordinatorStatus(**{**base, **kwargs})


def test_seconds_since_is_never_negative_and_none_before_anything_happened() -> None:
    assert seconds_since(None, 10.0) is None
    assert seconds_since(4.0, 10.0) == 6.0
    assert seconds_since(12.0, 10.0) == 0.0  # a tick stamped after the probe read the clock


def test_liveness_counts_from_the_last_tick_and_from_the_start_before_the_first_one() -> None:
    assert is_live(95.0, 0.0, 100.0, timeout=5.0)
    assert not is_live(94.0, 0.0, 100.0, timeout=5.0)
    assert is_live(None, 96.0, 100.0, timeout=5.0)  # not ticked yet: the first window
    assert not is_live(None, 90.0, 100.0, timeout=5.0)


@pytest.mark.parametrize(
    ("cs", "why"),
    [
        (status(ticks=0), "the lease loop has not completed a round yet"),
        (status(last_table_read_at=None), "lease table never read (readiness_timeout 5 s)"),
        (status(last_table_read_at=90.0, last_error="ThrottlingException"),
         "lease table not read for 10.0 s (readiness_timeout 5 s) (last error: ThrottlingException)"),
        (status(last_table_read_at=90.0, last_membership_at=90.0, last_error="StaleMembershipError: away"),
         "lease table not read for 10.0 s and member list not read for 10.0 s (readiness_timeout 5 s) "
         "(last error: StaleMembershipError: away)"),
        (status(last_membership_at=94.0), "member list not read for 6.0 s (readiness_timeout 5 s)"),
    ],
)
def test_readiness_names_what_is_missing(cs: CoordinatorStatus, why: str) -> None:
    assert readiness(cs, 100.0, 5.0, "w1", ("w1",)) == (False, why)


def test_readiness_waits_for_the_member_list_only_when_asked_to() -> None:
    assert readiness(status(), 100.0, 5.0, "w1", ("w1", "w2")) == (True, "ready")
    assert readiness(status(), 100.0, 5.0, "w1", ("w2",)) == (False, "w1 is not in the member list yet")
    assert readiness(status(), 100.0, 5.0, "w1", None) == (True, "ready")  # e.g. Kubernetes: ready pods only


def test_planned_members_are_those_of_the_last_plan() -> None:
    assert planned_members(None) == ()
    plan = Assignment(members=("w1", "w2"), owners={}, quotas={})
    assert planned_members(plan) == ("w1", "w2")


def test_the_startup_line_names_the_streams_the_membership_and_the_health_server() -> None:
    config = WorkerConfig(table_name="orders-leases", lease_duration=6.0, streams=[
        StreamConfig("orders", "app", "TRIM_HORIZON"),
        StreamConfig("clicks", "app", "LATEST", retrieval="fanout"),
    ])
    line = startup_line("w1", config, "StaticMembership", None)
    assert line.startswith("worker w1 started: table orders-leases, streams [app/orders from TRIM_HORIZON, "
                           "app/clicks from LATEST (fan-out consumer app)], membership StaticMembership, lease 6 s")
    assert line.endswith("replicas 1, health off")
    assert startup_line("w1", config, "X", "http://127.0.0.1:8080").endswith("health http://127.0.0.1:8080")


def test_worker_status_is_importable_where_it_was() -> None:
    from kinesis.consumer.worker.worker import WorkerStatus as FromWorker

    assert FromWorker is WorkerStatus is worker_health.WorkerStatus
