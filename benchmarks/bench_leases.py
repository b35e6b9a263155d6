"""Lease dynamics: our LeaseCoordinator against a simulated KCL 2.x lease taker.

Both run in this process against the same embedded DynamoDB (moto server over HTTP), on
a shared fake clock driven by a discrete-event loop: every member ticks on its own
schedule, phase-shifted so the members do not act in lockstep. Times are reported in
units of the lease duration D (10 s, KCL's default failover time) and of our tick
(D / 3). Each system starts from the same free lease rows.

* ours: ``LeaseCoordinator`` (balanced plan, graceful hand-off, replicas=1), one tick every
  D / 3 (renew, scan, plan, act) and two light rounds between ticks (scan, plan, act; the
  default ``scan_interval``), static membership (membership changes are instantaneous
  here: we time the lease loop, not the membership source);
* baseline: KCL 2.x's ``DynamoDBLeaseTaker`` + ``DynamoDBLeaseRenewer`` with their
  published defaults: renewer every D / 3, taker every 2 x (D + 25 ms); the taker counts
  workers as the distinct owners of unexpired leases (plus itself), targets
  ceil(leases / workers), takes expired or free leases up to the target, otherwise steals
  ``maxLeasesToStealAtOneTime`` = 1 lease from the most loaded worker. A stolen lease is
  taken without a hand-off (the victim learns it at its next renewal); KCL 2.x graceful
  shutdown evicts the leases (owner cleared) and the others take them on their next taker
  run.

Scenarios (40 leases): a fleet of 5 starting together; a 6th member joining the balanced
fleet; a member crashing; a member stopping gracefully. Measured: time until every lease
is held by a live member with max - min <= 1 (and, for crash/stop, until the departed
member's leases are all held again), plus "double-held" time: lease-seconds during which
two members both believe they hold a lease. Then DynamoDB requests per member per
minute at 100 leases and 5 members in steady state, counted by a botocore event hook on
each member's own client (ours with DynamoDBMembership heartbeats included).

    .venv/bin/python benchmarks/bench_leases.py [--quick]

Writes benchmarks/results/leases.json.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import logging
import math
import platform
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report import write_json  # noqa: E402
from hashring import StaticMembership  # noqa: E402
from kinesis.errors import LeaseLostError  # noqa: E402
from kinesis.lease_loop.coordinator import LeaseCoordinator  # noqa: E402
from kinesis.lease_loop.membership import DynamoDBMembership  # noqa: E402
from kinesis.lease_loop.table.leases import LeaseTable  # noqa: E402
from kinesis.lease_loop.table.model import Lease  # noqa: E402
from kinesis.lease_loop.timing import FakeClock  # noqa: E402
from kinesis.testing import LocalAWS  # noqa: E402

D = 10.0  # lease duration / KCL failover time (s)
TICK = D / 3
SCAN = TICK / 3  # our light rounds between ticks (scan_interval default)
KCL_TAKER_INTERVAL = 2 * (D + 0.025)
KCL_RENEW_INTERVAL = D / 3
RESULTS = ROOT / "benchmarks" / "results" / "leases.json"
_tables = itertools.count()


# --- discrete-event driver ------------------------------------------------------------


class Scheduler:
    """Periodic callbacks on a FakeClock, run in time order."""

    def __init__(self, clock: FakeClock):
        self.clock = clock
        self._queue: list[tuple[float, int, str, Callable[[], None], float]] = []
        self._seq = itertools.count()
        self._cancelled: set[str] = set()

    def every(self, name: str, first: float, period: float, fn: Callable[[], None]) -> None:
        self._cancelled.discard(name)
        heapq.heappush(self._queue, (first, next(self._seq), name, fn, period))

    def cancel(self, prefix: str) -> None:
        self._cancelled.update(n for _, _, n, _, _ in self._queue if n.startswith(prefix))

    def run_until(self, done: Callable[[], bool], limit: float, step: Callable[[float], None] | None = None) -> float | None:
        """Run events until ``done()`` (checked after each event); seconds elapsed or None."""
        start = self.clock()
        while self._queue:
            at, _, name, fn, period = heapq.heappop(self._queue)
            if name in self._cancelled:
                continue
            if at - start > limit:
                heapq.heappush(self._queue, (at, next(self._seq), name, fn, period))
                return None
            before = self.clock()
            if at > before:
                self.clock.advance(at - before)
                if step is not None:
                    step(at - before)
            fn()
            heapq.heappush(self._queue, (at + period, next(self._seq), name, fn, period))
            if done():
                return self.clock() - start
        return None


def counted_table(aws: LocalAWS, name: str, counter: Counter[str], who: str) -> LeaseTable:
    """A LeaseTable on its own client whose every HTTP request is counted for ``who``."""
    client = aws.client("dynamodb")

    def count(**_: Any) -> None:
        counter[who] += 1

    client.meta.events.register("before-send.dynamodb", count)
    return LeaseTable(client, name)


# --- the two systems --------------------------------------------------------------------


class OurMember:
    def __init__(self, table: LeaseTable, name: str, keys: list[str], clock: FakeClock, members: list[str]):
        self.name = name
        self.membership = StaticMembership(members, name)
        self.coordinator = LeaseCoordinator(
            table, self.membership, keys, lease_duration=D, replicas=1, clock=clock
        )

    def act(self) -> None:
        self.coordinator.tick()

    def refresh(self) -> None:
        self.coordinator.refresh()

    def held(self) -> set[str]:
        return {k for k in self.coordinator.held_keys() if self.coordinator.holds(k)}

    def stop(self) -> None:
        self.coordinator.stop(graceful=True, timeout=0)


class KclWorker:
    """KCL 2.x lease taker + renewer, reduced to their lease-table behaviour."""

    def __init__(self, table: LeaseTable, name: str, clock: FakeClock, rng: random.Random):
        self.table = table
        self.name = name
        self.clock = clock
        self.rng = rng
        self.leases: dict[str, Lease] = {}
        self.seen: dict[str, tuple[int, float]] = {}

    def renew(self) -> None:
        for key, lease in list(self.leases.items()):
            try:
                self.leases[key] = self.table.renew(lease)
            except LeaseLostError:
                del self.leases[key]

    def take(self) -> None:
        now = self.clock()
        leases = self.table.scan().leases
        for key, lease in leases.items():
            if self.seen.get(key, (None, 0.0))[0] != lease.counter:
                self.seen[key] = (lease.counter, now)
        expired = [
            lease
            for k, lease in leases.items()
            if lease.owner is None or (lease.owner != self.name and now - self.seen[k][1] > D)
        ]
        live_owners = Counter(
            lease.owner
            for k, lease in leases.items()
            if lease.owner is not None and now - self.seen[k][1] <= D
        )
        live_owners[self.name] = len(self.leases)
        workers = len(live_owners)
        target = math.ceil(len(leases) / workers)
        needed = target - len(self.leases)
        if needed <= 0:
            return
        if expired:
            self.rng.shuffle(expired)
            chosen = expired[:needed]
        else:
            most, count = max(
                ((w, c) for w, c in live_owners.items() if w != self.name), key=lambda x: x[1], default=(None, 0)
            )
            # KCL steals from the most loaded worker if it is over target, or exactly at
            # target while this worker needs more than one lease (so it never gets stuck)
            if most is None or count < target + (0 if needed > 1 else 1):
                return
            chosen = [self.rng.choice([lease for lease in leases.values() if lease.owner == most])]
        for lease in chosen:
            taken = self.table.take(lease, self.name)
            if taken is not None:
                self.leases[lease.key] = taken

    def held(self) -> set[str]:
        return set(self.leases)

    def stop(self) -> None:
        for lease in list(self.leases.values()):
            with contextlib.suppress(LeaseLostError):
                self.table.release(lease)
        self.leases.clear()


class Fleet:
    """Members of one system on one lease table, on one scheduler."""

    def __init__(self, system: str, aws: LocalAWS, keys: list[str], *, seed: int = 7):
        self.system = system
        self.aws = aws
        self.keys = keys
        self.clock = FakeClock(0.0)
        self.scheduler = Scheduler(self.clock)
        self.requests: Counter[str] = Counter()
        self.table_name = f"bench-{system}-{next(_tables)}"
        self.observer = LeaseTable.open(aws.client("dynamodb"), self.table_name)
        for key in keys:
            self.observer.create_lease_if_absent(key)
        self.members: dict[str, Any] = {}
        self.rng = random.Random(seed)
        self.double_held = 0.0  # lease-seconds with two believers

    def add(self, name: str, phase: float) -> None:
        table = counted_table(self.aws, self.table_name, self.requests, name)
        now = self.clock()
        if self.system == "ours":
            members = sorted({*self.members, name})
            member = OurMember(table, name, self.keys, self.clock, members)
            for other in self.members.values():
                other.membership.set_members(members)
            self.members[name] = member
            self.scheduler.every(f"{name}/tick", now + phase, TICK, member.act)
            for i in (1, 2):
                self.scheduler.every(f"{name}/scan{i}", now + phase + i * SCAN, TICK, member.refresh)
        else:
            worker = KclWorker(table, name, self.clock, self.rng)
            self.members[name] = worker
            self.scheduler.every(f"{name}/renew", now + phase, KCL_RENEW_INTERVAL, worker.renew)
            self.scheduler.every(f"{name}/take", now + phase, KCL_TAKER_INTERVAL, worker.take)

    def crash(self, name: str) -> set[str]:
        member = self.members.pop(name)
        self.scheduler.cancel(f"{name}/")
        if self.system == "ours":
            self._sync()
        return member.held()

    def stop(self, name: str) -> set[str]:
        member = self.members[name]
        held = member.held()
        if self.system == "ours":
            del self.members[name]
            self._sync()
        member.stop()
        self.members.pop(name, None)
        self.scheduler.cancel(f"{name}/")
        return held

    def _sync(self) -> None:
        names = sorted(self.members)
        for member in self.members.values():
            member.membership.set_members(names)

    def holdings(self) -> dict[str, set[str]]:
        return {name: member.held() for name, member in self.members.items()}

    def balanced(self) -> bool:
        held = self.holdings()
        union = set().union(*held.values()) if held else set()
        counts = [len(v) for v in held.values()]
        return union == set(self.keys) and max(counts) - min(counts) <= 1

    def holds_all(self, keys: set[str]) -> Callable[[], bool]:
        def check() -> bool:
            held = set().union(*self.holdings().values())
            return keys <= held
        return check

    def track_doubles(self, dt: float) -> None:
        seen: Counter[str] = Counter()
        for keys in self.holdings().values():
            seen.update(keys)
        self.double_held += dt * sum(1 for c in seen.values() if c > 1)

    def run(self, done: Callable[[], bool], limit: float) -> float | None:
        return self.scheduler.run_until(done, limit, step=self.track_doubles)

    def settle(self, seconds: float, *, track: bool = True) -> None:
        self.scheduler.run_until(lambda: False, seconds, step=self.track_doubles if track else None)


def in_d(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds / D, 2)


def scenarios(system: str, aws: LocalAWS, n_keys: int, limit: float) -> dict[str, Any]:
    keys = [f"shard-{i:04d}" for i in range(n_keys)]
    fleet = Fleet(system, aws, keys)
    out: dict[str, Any] = {}
    names = [f"m{i}" for i in range(1, 6)]
    for i, name in enumerate(names):  # start together, phases spread over one tick
        fleet.add(name, i * TICK / 5)
    out["start_5_members_to_balance_D"] = in_d(fleet.run(fleet.balanced, limit))
    fleet.settle(2 * D)
    doubles = fleet.double_held
    fleet.add("m6", 0.37 * TICK)
    out["join_6th_member_to_balance_D"] = in_d(fleet.run(fleet.balanced, limit))
    fleet.settle(2 * D)
    victim_keys = fleet.crash("m3")
    out["crash_failover_all_leases_held_D"] = in_d(fleet.run(fleet.holds_all(victim_keys), limit))
    out["crash_to_balance_D"] = None if not victim_keys else in_d(
        (out["crash_failover_all_leases_held_D"] or 0) * D + (fleet.run(fleet.balanced, limit) or 0)
    )
    fleet.settle(2 * D)
    leaving_keys = fleet.stop("m4")
    out["graceful_stop_all_leases_held_D"] = in_d(fleet.run(fleet.holds_all(leaving_keys), limit))
    fleet.settle(D)
    out["final_counts"] = {name: len(keys) for name, keys in sorted(fleet.holdings().items())}
    out["double_held_lease_seconds_during_join"] = round(fleet.double_held - doubles, 2)
    out["double_held_lease_seconds_total"] = round(fleet.double_held, 2)
    return out


def requests_per_member_minute(system: str, aws: LocalAWS, n_keys: int) -> dict[str, Any]:
    """Steady state: the rows start evenly owned (by names no process answers to), each
    system takes them over after they expire, then one minute of requests is counted."""
    keys = [f"shard-{i:04d}" for i in range(n_keys)]
    fleet = Fleet(system, aws, [])
    fleet.keys = keys
    names = [f"m{i}" for i in range(1, 6)]
    for i, key in enumerate(keys):
        fleet.observer.create_lease_if_absent(key, owner=f"ghost-{i % len(names)}")
    if system == "ours":  # heartbeat membership, driven by the coordinator's tick
        for i, name in enumerate(names):
            table = counted_table(aws, fleet.table_name, fleet.requests, name)
            membership = DynamoDBMembership(table, name, member_timeout=D, clock=fleet.clock)
            coordinator = LeaseCoordinator(table, membership, keys, lease_duration=D, replicas=1, clock=fleet.clock)
            fleet.members[name] = coordinator
            fleet.scheduler.every(f"{name}/tick", i * TICK / 5, TICK, coordinator.tick)
            for j in (1, 2):
                fleet.scheduler.every(f"{name}/scan{j}", i * TICK / 5 + j * SCAN, TICK, coordinator.refresh)
        fleet.settle(4 * D, track=False)
        counts = {n: len(c.held_keys()) for n, c in fleet.members.items()}
    else:
        for i, name in enumerate(names):
            fleet.add(name, i * TICK / 5)
        fleet.settle(6 * D, track=False)
        counts = {n: len(w.held()) for n, w in fleet.members.items()}
    before = Counter(fleet.requests)
    window = 60.0
    fleet.settle(window, track=False)
    per_member = {n: fleet.requests[n] - before[n] for n in names}
    return {
        "leases": n_keys,
        "members": len(names),
        "leases_per_member": counts,
        "requests_per_member_per_minute": per_member,
        "mean": round(sum(per_member.values()) / len(names), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer leases, shorter limits")
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    logging.getLogger("kinesis").setLevel(logging.ERROR)
    n_keys, limit = (20, 80 * D) if args.quick else (40, 150 * D)
    wall = time.perf_counter()
    results: dict[str, Any] = {
        "benchmark": "leases",
        "lease_duration_s": D,
        "tick_s": round(TICK, 3),
        "kcl_taker_interval_s": KCL_TAKER_INTERVAL,
        "kcl_renew_interval_s": round(KCL_RENEW_INTERVAL, 3),
        "leases": n_keys,
        "python": platform.python_version(),
    }
    with LocalAWS() as aws:
        ours = scenarios("ours", aws, n_keys, limit)
        print(f"ours: {ours} ({time.perf_counter() - wall:.0f} s)")
        kcl = scenarios("kcl", aws, n_keys, limit)
        print(f"kcl: {kcl} ({time.perf_counter() - wall:.0f} s)")
        req_ours = requests_per_member_minute("ours", aws, 40 if args.quick else 100)
        req_kcl = requests_per_member_minute("kcl", aws, 40 if args.quick else 100)
    results["ours"] = ours
    results["kcl_2x_baseline"] = kcl
    results["requests"] = {"ours": req_ours, "kcl_2x_baseline": req_kcl}

    def ratio(key: str) -> float | None:
        a, b = ours.get(key), kcl.get(key)
        if a is None or b is None or a == 0:
            return None
        return round(b / a, 1)

    results["speedup_vs_kcl"] = {
        k: ratio(k)
        for k in (
            "start_5_members_to_balance_D",
            "join_6th_member_to_balance_D",
            "crash_failover_all_leases_held_D",
            "crash_to_balance_D",
            "graceful_stop_all_leases_held_D",
        )
    }
    results["requests_ratio_ours_over_kcl"] = round(req_ours["mean"] / req_kcl["mean"], 2)
    results["targets"] = {
        "join_to_balance_ticks<=2": ours["join_6th_member_to_balance_D"] is not None
        and ours["join_6th_member_to_balance_D"] * 3 <= 2.0 + 1e-9,
        "failover<=D+1tick": ours["crash_failover_all_leases_held_D"] is not None
        and ours["crash_failover_all_leases_held_D"] <= 1 + 1 / 3 + 1e-9,
        "graceful_stop<=1tick": ours["graceful_stop_all_leases_held_D"] is not None
        and ours["graceful_stop_all_leases_held_D"] * 3 <= 1.0 + 1e-9,
        "no_double_holders": ours["double_held_lease_seconds_total"] == 0,
    }
    results["wall_seconds"] = round(time.perf_counter() - wall, 1)

    rows = [
        ("start: 5 members to balance", "start_5_members_to_balance_D"),
        ("join: 6th member to balance", "join_6th_member_to_balance_D"),
        ("crash: departed leases held again", "crash_failover_all_leases_held_D"),
        ("crash: back to balance", "crash_to_balance_D"),
        ("graceful stop: leases held again", "graceful_stop_all_leases_held_D"),
    ]
    print(f"lease dynamics, {n_keys} leases, D = {D:g} s, tick = D/3 (times in D; ticks = 3 x D)")
    print(f"{'scenario':<36}{'ours':>10}{'ticks':>8}{'KCL 2.x':>10}{'KCL/ours':>10}")
    for label, key in rows:
        a, b = ours[key], kcl[key]
        ticks = "-" if a is None else f"{a * 3:.1f}"
        print(f"{label:<36}{a!s:>10}{ticks:>8}{b!s:>10}{results['speedup_vs_kcl'][key]!s:>10}")
    print(
        f"double-held lease-seconds (two members believe they hold one lease): ours "
        f"{ours['double_held_lease_seconds_total']}, KCL {kcl['double_held_lease_seconds_total']}"
    )
    print(
        f"DynamoDB requests per member per minute at {req_ours['leases']} leases / 5 members: "
        f"ours {req_ours['mean']} (incl. heartbeats), KCL {req_kcl['mean']} "
        f"(ratio {results['requests_ratio_ours_over_kcl']})"
    )
    print(f"targets: {results['targets']}")
    write_json(RESULTS, results)
    print(f"wrote {RESULTS.relative_to(ROOT)} in {results['wall_seconds']} s")
    return 0 if all(results["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
