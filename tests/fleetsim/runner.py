"""Run scenarios: one at a time (deterministically), many in parallel, and shrink failures.

A run is deterministic for a scenario: the world's choices come from a generator seeded by
the scenario's seed, ``uuid.uuid4`` (write and session tokens, chunk ids) and the ``random``
module (retry jitter) are seeded too, and members run on one thread. String hashing is the
one input outside the seed: processes started here (and ``make simulate-fleet``) run with
``PYTHONHASHSEED=0``, so a failing seed replays exactly with
``PYTHONHASHSEED=0 python -m tests.fleetsim --seed N``.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
import uuid
from collections.abc import Iterator
from typing import Any
from unittest import mock

from tests.fleetsim.checks import Checker
from tests.fleetsim.schedule import Scenario, draw
from tests.fleetsim.world import World


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed ``random`` and ``uuid.uuid4`` for one run (restored after)."""
    rng = random.Random(seed ^ 0x5EED)
    state = random.getstate()
    random.seed(seed)
    with mock.patch("uuid.uuid4", lambda: uuid.UUID(int=rng.getrandbits(128), version=4)):
        try:
            yield
        finally:
            random.setstate(state)


class _SimTime(logging.Filter):
    """Stamps log records with the simulated time of the world being run."""

    def __init__(self) -> None:
        super().__init__()
        self.world: World | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        record.simtime = f"t={self.world.now:9.3f}" if self.world is not None else "t=?"
        return True


def run(scenario: Scenario, *, trace: bool = False) -> dict[str, Any]:
    """Run ``scenario`` to its end; its result (violations, figures). ``trace``: log the
    lease loop at INFO to stderr, stamped with the simulated time."""
    started = time.process_time()
    quiet = logging.getLogger("kinesis")
    level = quiet.level
    stamp = _SimTime()
    handler: logging.Handler | None = None
    if trace:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(simtime)s %(name)s %(message)s"))
        handler.addFilter(stamp)
        quiet.addHandler(handler)
        quiet.setLevel(logging.INFO)
    else:
        quiet.setLevel(logging.CRITICAL + 1)  # a duplicate id is logged CRITICAL: expected here
    try:
        with seeded(scenario.seed):
            world = World(scenario)
            stamp.world = world
            checker = Checker(world)
            if scenario.phantoms:
                world.set_listed(set(scenario.phantoms))
            for member in scenario.members:
                world.start_member(member)
            world.schedule(scenario.events)
            world.run(scenario.end)
            result = checker.finish()
            result["counters"] = _counters(world)
            result["log"] = world.log
    finally:
        quiet.setLevel(level)
        if handler is not None:
            quiet.removeHandler(handler)
    result["cpu_s"] = round(time.process_time() - started, 3)
    return result


def _counters(world: World) -> dict[str, int]:
    totals: dict[str, int] = {}
    for m in world.members.values():
        counters = getattr(m.coordinator, "counters", {})
        for name, value in counters.items():
            totals[name] = totals.get(name, 0) + value
        for op, n in m.calls.items():
            totals[f"calls.{op}"] = totals.get(f"calls.{op}", 0) + n
    return totals


def run_seed(seed: int, kinds: tuple[str, ...] | None = None, **fixed: Any) -> dict[str, Any]:
    """Run the scenario of ``seed`` (only ``kinds`` of disturbances; ``fixed``: reads, provider)."""
    scenario = draw(seed, **({"kinds": kinds} if kinds else {}), **fixed)
    result = run(scenario)
    result["scenario"] = scenario.to_json() if result["violations"] else None
    return result


def shrink(scenario: Scenario, *, budget: int = 60) -> Scenario:
    """A smaller scenario that still fails: drop events one at a time (then members, keys)
    while some violation remains; at most ``budget`` runs."""
    def fails(s: Scenario) -> bool:
        return bool(run(s)["violations"])

    runs = 0
    changed = True
    while changed and runs < budget:
        changed = False
        for i in range(len(scenario.events) - 1, -1, -1):
            candidate = scenario.without(i)
            runs += 1
            if fails(candidate):
                scenario, changed = candidate, True
            if runs >= budget:
                break
    for fewer in range(2, scenario.keys):
        if runs >= budget:
            break
        candidate = Scenario(**{**scenario.__dict__, "keys": fewer})
        runs += 1
        if fails(candidate):
            scenario = candidate
            break
    return scenario
