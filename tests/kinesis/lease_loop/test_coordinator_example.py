"""examples/coordinator_generic.py runs end to end: balance, scale-out, scale-in, crash."""

from __future__ import annotations

import importlib.util

import pytest

from tests.support.paths import ROOT

EXAMPLE = ROOT / "examples" / "coordinator_generic.py"


@pytest.mark.slow
def test_generic_coordinator_example_balances_and_never_double_holds() -> None:
    spec = importlib.util.spec_from_file_location("coordinator_generic", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = module.main(["--queues", "12", "--lease-duration", "1.5"], quiet=True)
    phases = results["phases"]
    assert list(phases) == [
        "start (3 members)",
        "scale-out (+member-d)",
        "scale-in (member-b stops gracefully)",
        "crash (member-c goes silent)",
    ]
    assert sorted(phases["start (3 members)"]["counts"].values()) == [4, 4, 4]
    assert sorted(phases["scale-out (+member-d)"]["counts"].values()) == [3, 3, 3, 3]
    assert sorted(phases["scale-in (member-b stops gracefully)"]["counts"].values()) == [4, 4, 4]
    assert sorted(phases["crash (member-c goes silent)"]["counts"].values()) == [6, 6]
    assert results["graceful_stop_handed_everything_off"] is True
    counters = results["counters"]
    assert counters["created"] == 12
    assert counters["handoffs"] >= 3 + 3  # scale-out quota, then member-b's queues
    # every offer was adopted, or taken back by the member that made it (one made to
    # member-c just before it went silent, when nobody suspected it yet)
    assert counters["adopted"] + counters["offers_withdrawn"] == counters["handoffs"]
    assert counters["takeovers"] >= 4  # the crashed member's queues
    assert results["overlaps"] == 0 and results["samples"] > 10
