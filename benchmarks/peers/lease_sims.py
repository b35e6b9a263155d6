"""Lease loops on a simulated clock (moto over HTTP, discrete events, as in
``benchmarks/bench_leases.py``): Knock's design, emulated with this SDK's pieces, next to
this SDK's :class:`~kinesis.lease_loop.coordinator.LeaseCoordinator` in the same harness.

Knock's design, as the issue states it: every member hashes each (consumer, shard) key with
the ``range`` strategy (``hashring.placement.RangePlacement``: the keyspace split into N
equal ranges over the sorted members) and only the key's range owner takes or renews its
lease. Leases move only by expiry: a member that is no longer a key's owner stops renewing
it (and stops processing it), and the new owner takes it once it has looked unchanged for a
lease duration (the KCL rule); a graceful stop releases nothing. Each member scans the table
once per tick (D / 3) and renews what it holds.

Membership is instantaneous for both (a join, stop or crash is in every member's list at
once), as in ``bench_leases.py``: this times the lease loop, not the membership source.
No records flow here (the process runs of bench_peers.py measure those).
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from benchmarks.bench_leases import SCAN, TICK, D, OurMember, Scheduler, counted_table
from hashring.hashing import key_hash
from hashring.placement import make_strategy
from kinesis.errors import LeaseLostError
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import Lease
from kinesis.lease_loop.timing import FakeClock
from kinesis.testing import LocalAWS

CONSUMER = "bench-app"
_tables = itertools.count()


class KnockMember:
    """Range placement gating acquisition and renewal; leases move only by expiry."""

    def __init__(self, table: LeaseTable, name: str, clock: FakeClock, members: list[str]):
        self.table = table
        self.name = name
        self.clock = clock
        self.leases: dict[str, Lease] = {}
        self.seen: dict[str, tuple[int, float]] = {}
        self.set_members(members)

    def set_members(self, members: list[str]) -> None:
        self.strategy = make_strategy("range", tuple(sorted(members)))

    def owner(self, key: str) -> str:
        return self.strategy.owners(key_hash(CONSUMER, key), 0)[0]

    def act(self) -> None:
        now = self.clock()
        rows = self.table.scan().leases
        for key, lease in rows.items():
            if self.seen.get(key, (None, 0.0))[0] != lease.counter:
                self.seen[key] = (lease.counter, now)
        for key, lease in rows.items():
            mine = self.owner(key) == self.name
            if key in self.leases:
                if not mine:
                    del self.leases[key]  # stop renewing: the lease expires, then moves
                    continue
                try:
                    self.leases[key] = self.table.renew(self.leases[key])
                except LeaseLostError:
                    del self.leases[key]
            elif mine and (lease.owner is None or now - self.seen[key][1] > D):
                taken = self.table.take(lease, self.name)
                if taken is not None:
                    self.leases[key] = taken

    def held(self) -> set[str]:
        return set(self.leases)

    def stop(self) -> None:
        self.leases.clear()  # nothing released: the leases expire


class SimFleet:
    def __init__(self, system: str, aws: LocalAWS, keys: list[str]):
        self.system = system
        self.aws = aws
        self.keys = keys
        self.clock = FakeClock(0.0)
        self.scheduler = Scheduler(self.clock)
        self.requests: Counter[str] = Counter()
        self.table_name = f"peers-{system}-{next(_tables)}"
        self.observer = LeaseTable.open(aws.client("dynamodb"), self.table_name)
        for key in keys:
            self.observer.create_lease_if_absent(key)
        self.members: dict[str, Any] = {}
        self.timeline: list[tuple[float, dict[str, int]]] = []
        self.double_held = 0.0

    def names(self) -> list[str]:
        return sorted(self.members)

    def add(self, name: str, phase: float) -> None:
        table = counted_table(self.aws, self.table_name, self.requests, name)
        now = self.clock()
        members = sorted({*self.members, name})
        if self.system == "ours":
            member: Any = OurMember(table, name, self.keys, self.clock, members)
            self.members[name] = member
            self._sync()
            self.scheduler.every(f"{name}/tick", now + phase, TICK, member.act)
            for i in (1, 2):
                self.scheduler.every(f"{name}/scan{i}", now + phase + i * SCAN, TICK, member.refresh)
        else:
            member = KnockMember(table, name, self.clock, members)
            self.members[name] = member
            self._sync()
            self.scheduler.every(f"{name}/tick", now + phase, TICK, member.act)

    def _sync(self) -> None:
        names = self.names()
        for m in self.members.values():
            if self.system == "ours":
                m.membership.set_members(names)
            else:
                m.set_members(names)

    def remove(self, name: str, *, graceful: bool) -> set[str]:
        member = self.members[name]
        held: set[str] = member.held()
        if graceful and self.system == "ours":
            del self.members[name]
            self._sync()
            member.stop()
        else:
            del self.members[name]
            self._sync()
            if graceful:
                member.stop()
        self.scheduler.cancel(f"{name}/")
        return held

    def owners(self) -> dict[str, str | None]:
        """Lease -> live holder (a row whose owner is gone or who dropped it counts as free)."""
        out: dict[str, str | None] = dict.fromkeys(self.keys)
        for name, member in self.members.items():
            for key in member.held():
                out[key] = name
        return out

    def counts(self) -> dict[str, int]:
        owners = self.owners()
        return {n: sum(1 for o in owners.values() if o == n) for n in self.names()}

    def balanced(self) -> bool:
        owners = self.owners()
        if any(o is None for o in owners.values()):
            return False
        c = self.counts()
        return max(c.values()) - min(c.values()) <= 1

    def settled(self) -> bool:
        """Every lease held; for Knock also by its range owner (its own idea of done)."""
        owners = self.owners()
        if any(o is None for o in owners.values()):
            return False
        if self.system == "knock":
            first = next(iter(self.members.values()))
            return all(first.owner(k) == o for k, o in owners.items())
        return self.balanced()

    def step(self, dt: float) -> None:
        seen: Counter[str] = Counter()
        for m in self.members.values():
            seen.update(m.held())
        self.double_held += dt * sum(1 for c in seen.values() if c > 1)

    def run_phase(self, window: float) -> list[tuple[float, bool, bool, tuple[tuple[str, str | None], ...]]]:
        start = self.clock()
        samples = [(start, self.balanced(), self.settled(), tuple(sorted(self.owners().items())))]

        def sample() -> bool:
            samples.append((self.clock(), self.balanced(), self.settled(), tuple(sorted(self.owners().items()))))
            self.timeline.append((round(self.clock(), 2), self.counts()))
            return False

        self.scheduler.run_until(sample, window, step=self.step)
        return samples


def summarise(samples: list[tuple[float, bool, bool, Any]], start: float) -> dict[str, Any]:
    first = next((t - start for t, ok, _, _ in samples if ok), None)
    settled = next((t - start for t, _, ok, _ in samples if ok), None)
    owned = next((t - start for t, _, _, own in samples if all(o is not None for _, o in own)), None)
    last_change = start
    for (_, _, _, a), (t, _, _, b) in itertools.pairwise(samples):
        if a != b:
            last_change = t
    end_ok = samples[-1][1] or samples[-1][2]
    return {
        "all_owned_s": None if owned is None else round(owned, 1),
        "balanced_s": None if first is None else round(first, 1),
        "settled_s": None if settled is None else round(settled, 1),
        "stable_s": round(last_change - start, 1) if end_ok else None,
    }


def run(system: str, aws: LocalAWS, shards: int, members: int, *, window: float = 8 * D) -> dict[str, Any]:
    """The scenario of bench_peers.py on a simulated clock; times in seconds (D = 10 s)."""
    keys = [f"shardId-{i:012d}" for i in range(shards)]
    fleet = SimFleet(system, aws, keys)
    phases: dict[str, Any] = {}
    for i in range(members):
        fleet.add(f"m{i + 1}", i * TICK / members)
    t0 = fleet.clock()
    phases["cold_start"] = summarise(fleet.run_phase(window), t0)
    newcomer = f"m{members + 1}"
    t0 = fleet.clock()
    fleet.add(newcomer, 0.37 * TICK)
    samples = fleet.run_phase(window)
    phases["join"] = summarise(samples, t0)
    first = next((t - t0 for t, _, _, own in samples if any(o == newcomer for _, o in own)), None)
    phases["join"]["newcomer_first_lease_s"] = None if first is None else round(first, 1)
    for phase, graceful in (("sigterm", True), ("sigkill", False)):
        counts = fleet.counts()
        victim = sorted(counts, key=lambda n: (-counts[n], n))[0]
        t0 = fleet.clock()
        held = fleet.remove(victim, graceful=graceful)
        samples = fleet.run_phase(window)
        phases[phase] = summarise(samples, t0)
        back = next((t - t0 for t, _, _, own in samples if all(dict(own)[k] is not None for k in held)), None)
        phases[phase].update(victim=victim, victim_leases=len(held),
                             leases_back_s=None if back is None else round(back, 1))
    before = Counter(fleet.requests)
    steady = 60.0
    fleet.run_phase(steady)
    per_member = {n: round((fleet.requests[n] - before[n]) * 60 / steady, 1) for n in fleet.names()}
    return {
        "peer": "knock (emulated)" if system == "knock" else "ours (LeaseCoordinator)",
        "shards": shards, "members": members, "lease_duration_s": D, "tick_s": round(TICK, 3),
        "phase_window_s": window, "phases": phases,
        "dynamodb_requests_per_member_per_minute": per_member,
        "dynamodb_requests_per_member_per_minute_mean": round(sum(per_member.values()) / len(per_member), 1),
        "double_held_lease_seconds": round(fleet.double_held, 1),
        "final_counts": fleet.counts(),
        "timeline": fleet.timeline,
    }
