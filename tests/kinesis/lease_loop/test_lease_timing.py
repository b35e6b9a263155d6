"""LeaseTiming: the lease loop's durations, their defaults and rules, checked in one place."""

from __future__ import annotations

from typing import Any

import pytest

from hashring import StaticMembership
from kinesis import StreamConfig, WorkerConfig
from kinesis.errors import ConfigurationError
from kinesis.lease_loop.coordinator import LeaseCoordinator
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.timing import LeaseTiming


def test_defaults_follow_the_lease_duration() -> None:
    t = LeaseTiming.of(9.0, replicas=2)
    assert (t.tick_interval, t.scan_interval, t.backup_grace) == (3.0, 1.0, 9.0)
    assert t.orphan_timeout == 9.0 + 3 * 9.0 and t.handoff_timeout == 9.0 and t.adopt_timeout == 3.0
    assert t.validity == 6.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lease_duration": 0}, "lease_duration must be"),
        ({"lease_duration": 3, "tick_interval": 2}, "at most half of lease_duration"),
        ({"lease_duration": 9, "scan_interval": 4}, "scan_interval .* at most tick_interval"),
        ({"lease_duration": 10, "orphan_timeout": 5}, "orphan_timeout .* must be >= lease_duration"),
        ({"adopt_timeout": float("inf")}, "adopt_timeout must be"),
    ],
)
def test_each_rule_names_its_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        LeaseTiming.of(**kwargs)


def test_worker_config_builds_the_timing_the_coordinator_uses() -> None:
    config = WorkerConfig("leases", [StreamConfig("orders", "app")], lease_duration=6.0, scan_interval=0.5,
                          adopt_timeout=1.0, replicas=2)
    assert config.timing == LeaseTiming.of(6.0, scan_interval=0.5, adopt_timeout=1.0, replicas=2)
    assert config.effective_tick_interval == 2.0
    with pytest.raises(ConfigurationError, match="at most half of lease_duration"):
        WorkerConfig("leases", [StreamConfig("orders", "app")], lease_duration=2.0, tick_interval=1.5)


def test_the_coordinator_takes_a_timing_or_durations_but_not_both() -> None:
    table = LeaseTable(object(), "leases-test")
    membership = StaticMembership(["a"], "a")
    timing = LeaseTiming.of(6.0)
    coordinator = LeaseCoordinator(table, membership, ["k"], timing=timing)
    assert coordinator.timing is timing and coordinator.tick_interval == 2.0
    with pytest.raises(ConfigurationError, match="either timing= or the durations"):
        LeaseCoordinator(table, membership, ["k"], timing=timing, lease_duration=6.0)
    with pytest.raises(ConfigurationError, match="timing must be a LeaseTiming"):
        LeaseCoordinator(table, membership, ["k"], timing=6.0)  # type: ignore[arg-type]


def test_a_misspelt_duration_is_named() -> None:
    table = LeaseTable(object(), "leases-test")
    with pytest.raises(TypeError, match="unknown duration 'tick_intreval'; the durations are lease_duration, tick_interval"):
        LeaseCoordinator(table, StaticMembership(["a"], "a"), ["k"], tick_intreval=1.0)  # type: ignore[call-arg]
    coordinator = LeaseCoordinator(table, StaticMembership(["a"], "a"), ["k"], lease_duration=6.0, adopt_timeout=1.0)
    assert (coordinator.tick_interval, coordinator.adopt_timeout) == (2.0, 1.0)
