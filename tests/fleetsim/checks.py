"""The invariants the simulator checks, after every event and at the end of a run.

After every event:

* **one holder**: no key is held (``holds(key)``: the member may process it now) by two
  members at once, paused members included (a paused member resumes with the validity it had);
* **checkpoints never go backwards**: each lease row's ``checkpointOrder`` never decreases;
* **no duplicate after a graceful hand-off** (recorded by the world as records are delivered);
* **liveness**: from :func:`~tests.fleetsim.bounds.settled_at` on, every ready key is
  processed (a running, unpaused member holds it and processes it), with gaps no longer than
  :attr:`~tests.fleetsim.bounds.Timing.gap`.

At the end: every record written before the quiet phase was delivered, a session scenario's
member list (each running member's view, and the table's) lists the members running then
and no other, and the run's figures
(worst recovery in lease durations, duplicates by cause, scans and plan publishes in the last
stretch of the quiet phase).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kinesis.consumer.discovery.manifest import ShardManifestSync
from kinesis.lease_loop.membership import DOCUMENT as MEMBERS_DOCUMENT
from kinesis.lease_loop.membership import SessionMembership
from kinesis.lease_loop.membership import decode as decode_members
from kinesis.lease_loop.table.manifests import (
    ManifestConflictError,
    ManifestCorruptError,
    ManifestStore,
)
from tests.fleetsim.bounds import effect_end, settled_at
from tests.fleetsim.world import MEMBERS_HEAD, World


@dataclass
class KeyTrack:
    unprocessed_since: float | None = 0.0
    last_gap_end: float = 0.0
    """When the key's last gap longer than the allowance ended (recovery)."""
    order: str = ""


GRACEFUL = frozenset({"sigterm", "join", "lag", "reshard", "wall_step"})
"""Disturbances that must not make any record be delivered twice (nothing expires)."""
PLAN_HEAD = "__manifest__#plan"


@dataclass
class Checker:
    """Looks at a :class:`World` after each event (see the module docs)."""

    world: World
    settle: float = 0.0
    keys: dict[str, KeyTrack] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    max_violations: int = 5
    publishes: list[tuple[float, str]] = field(default_factory=list)
    """When the published plan's head moved to a new version, and who published it."""
    list_changes: list[float] = field(default_factory=list)
    """When a session scenario's member list (kept by its members in the table) moved to a new
    version: list changes, like the world's changes of a static list."""
    key_moves: list[float] = field(default_factory=list)
    """When a running member first planned with a new set of keys (a shard manifest version
    taking effect ``poll_interval`` after its publish: a reshard's children): a plan input."""
    _keysets_seen: set[frozenset[str]] = field(default_factory=set)
    _plan_version: str = ""
    _list_version: str = ""
    _writes: int = -1
    _world_reported: int = 0
    """How many of the world's own violations (duplicates after a hand-off) were reported."""

    def __post_init__(self) -> None:
        self.settle = settled_at(self.world.scenario)
        self.keys = {k: KeyTrack() for k in self.world.ready_keys()}
        self.world.observers.append(self)

    def fail(self, what: str) -> None:
        if len(self.violations) < self.max_violations:
            self.violations.append(f"t={self.world.now:.3f}: {what}")

    def __call__(self, world: World) -> None:
        now = world.now
        gap = world.timing.gap
        serving = world.serving()
        holders: dict[str, list[str]] = {}
        processing: set[str] = set()
        for m in world.members.values():
            if not m.alive:
                continue
            for key in m.coordinator.held_keys():  # holds(key) implies a held key: ask only those
                if m.coordinator.holds(key):
                    holders.setdefault(key, []).append(m.name)
                    tenure = m.tenures.get(key)
                    if now >= m.paused_until and tenure is not None and not tenure.ended:
                        processing.add(key)
        written = world.memory.writes != self._writes  # rows are read only when something was written
        self._writes = world.memory.writes
        for key in world.ready_keys():
            if len(holders.get(key, ())) > 1:
                self.fail(f"{key} held by {holders[key]} at once")
            track = self.keys.get(key)
            if track is None:  # ready from now on (a new shard whose parents finished)
                track = self.keys[key] = KeyTrack(unprocessed_since=now)
            if key in processing:
                if track.unprocessed_since is not None:
                    if now - track.unprocessed_since > gap:
                        track.last_gap_end = now
                        if now - max(track.unprocessed_since, self.settle) > gap:
                            self.fail(f"{key} was unprocessed from t={track.unprocessed_since:.3f} "
                                      f"(settled at t={self.settle:.3f}, allowed gap {gap:.2f} s)")
                    track.unprocessed_since = None
            elif not serving:
                track.unprocessed_since = None  # nobody runs who could: no stall to judge
            elif track.unprocessed_since is None:
                track.unprocessed_since = now
            if (track.unprocessed_since is not None and now >= self.settle
                    and now - max(track.unprocessed_since, self.settle) > gap):
                self.fail(f"{key} unprocessed since t={track.unprocessed_since:.3f} "
                          f"(settled at t={self.settle:.3f}, allowed gap {gap:.2f} s)")
                track.unprocessed_since = now  # report each stall once
            if written:
                item = world.memory.peek(key)
                order = item.get("checkpointOrder", {}).get("S", "") if item else ""
                if order and track.order and order < track.order:
                    self.fail(f"{key} checkpoint went backwards: {track.order!r} -> {order!r}")
                if order:
                    track.order = order
        self._watch_keys(world)
        if written:
            head = world.memory.peek(PLAN_HEAD)
            version = str(head.get("version", {}).get("N", "")) if head else ""
            if version and version != self._plan_version and head is not None:
                self.publishes.append((now, str(head.get("owner", {}).get("S", ""))))
            self._plan_version = version
            if world.scenario.membership == "session":
                head = world.memory.peek(MEMBERS_HEAD)
                version = str(head.get("version", {}).get("N", "")) if head else ""
                if version and version != self._list_version:
                    self.list_changes.append(now)
                self._list_version = version
        for v in world.violations[self._world_reported:]:  # each once, stamped by the world already
            if len(self.violations) < self.max_violations:
                self.violations.append(v)
        self._world_reported = len(world.violations)

    def _watch_keys(self, world: World) -> None:
        """Record when a running member plans with a key set (its shard manifest's) that no
        member planned with before in this run: once per new key set, not once per member,
        at its first adoption (the chore owner's, which publishes for it, is usually within a
        manifest poll of it). A member that starts adds nothing unless its first set is new:
        its start is a disturbance of its own."""
        for m in world.members.values():
            if not m.alive or m.legacy or not isinstance(m.provider, ShardManifestSync):
                continue
            keys = frozenset(m.provider.keys)
            if keys and keys not in self._keysets_seen:
                if self._keysets_seen:  # not the run's first set
                    self.key_moves.append(world.now)
                self._keysets_seen.add(keys)

    def finish(self) -> dict[str, Any]:
        """End-of-run checks and figures."""
        world = self.world
        scenario = world.scenario
        for key in world.all_keys() if world.serving() else ():
            cutoff = world.produced(key, scenario.quiet_at)
            missing = [s for s in range(1, cutoff + 1) if s not in world.delivered[key]]
            if missing:
                self.fail(f"{key}: {len(missing)} records written before the quiet phase were never "
                          f"delivered (first {missing[0]})")
        kinds = set(scenario.kinds())
        if world.duplicates and kinds <= GRACEFUL:
            self.fail(f"records delivered twice ({dict(world.duplicates)}) though only {sorted(kinds)} happened: "
                      "nothing expired, so nothing may be delivered again")
        self._check_publishes()
        self._check_processes()
        self._check_shared_rows()
        self._check_member_list()
        last = max([0.0, *(effect_end(e) for e in scenario.events)])
        recovery = max((t.last_gap_end for t in self.keys.values()), default=0.0)
        d = scenario.lease_duration
        return {
            "seed": scenario.seed,
            "kinds": list(scenario.kinds()),
            "membership": scenario.membership,
            "violations": list(self.violations),
            "recovery_d": round(max(0.0, recovery - last) / d, 3) if scenario.events else 0.0,
            "duplicates": dict(world.duplicates),
            "settle_d": round(self.settle / d, 2),
            "events": len(scenario.events),
            "publishes": len(self.publishes),
            "load_plans": sum(1 for m in world.members.values() if m.alive and not m.legacy
                              and (base := m.coordinator._reads._planner.published.baseline) is not None
                              and base.loads is not None),
        }

    def _check_publishes(self) -> None:
        """The plan is published about once per change of the fleet, not over and over while
        members disagree: at most 2 + (changes of the member list, moments a member's lagging
        list moved without it, new key sets planned with, and disturbances in the last 3 lease
        durations) versions within
        any 2 lease durations, and at most 4 times a member publishing over another member's
        version in any 20 lease durations without a change of the member list in between (two
        members that both own the chore in their own lists).
        A session scenario's list changes are its versions in the table; there are at most 2 +
        one per member started or stopped + two per disturbance of them (a list kept by its
        members does not flap either)."""
        world = self.world
        d = world.scenario.lease_duration
        # the list itself is not republished over and over: a version per member started or
        # stopped, and up to two per disturbance (a member removed, then back)
        allowed = 2 + len(world._truth) - 1 + 2 * len(world.scenario.events)
        if len(self.list_changes) > allowed:
            self.fail(f"the member list was published {len(self.list_changes)} times (allowed {allowed}: "
                      "members started or stopped, two per disturbance)")
            return
        truth = [t for t, _ in world._truth[1:]] + self.list_changes
        events = [e.at for e in world.scenario.events]
        # a lagging list that moves (its lag ended) changes the list its member plans with: the
        # chore's owner publishes then, as at any change (once a moment: an event's own refresh
        # of it is that disturbance)
        lagging = sorted(set(world.view_moves) - set(events))
        # a new key set (a shard manifest version taking effect, well after its reshard event:
        # a sync interval plus a poll interval) is a new plan input too, once per key set
        changes = truth + events + lagging + self.key_moves
        for i, (at, _) in enumerate(self.publishes):
            recent = [t for t, _ in self.publishes[: i + 1] if t > at - 2 * d]
            allowed = 2 + sum(1 for t in changes if at - 3 * d <= t <= at)
            if len(recent) > allowed:
                self.fail(f"the plan was published {len(recent)} times within 2 lease durations before "
                          f"t={at:.3f} (allowed {allowed}: list changes and disturbances nearby)")
                return
        overwrites = [at for (before, who_before), (at, who) in zip(self.publishes, self.publishes[1:], strict=False)
                      if who != who_before and not any(before - 3 * d < t <= at for t in truth)]
        for at in overwrites:
            window = [t for t in overwrites if at - 20 * d < t <= at]
            if len(window) > 4:
                self.fail(f"members published over each other's plan {len(window)} times within 20 lease "
                          f"durations before t={at:.3f}, with no change of the member list in between")
                return

    def _check_processes(self) -> None:
        """Two processes under one member id: one must have refused to run by the end."""
        by_id: dict[str, list[str]] = {}
        for m in self.world.members.values():
            if m.alive and not m.legacy and not m.coordinator.status().stopping:
                by_id.setdefault(m.id, []).append(m.name)
        for member_id, names in by_id.items():
            if len(names) > 1:
                self.fail(f"{names} both still run as member {member_id!r}: one must refuse a duplicate id")

    def _check_member_list(self) -> None:
        """A session scenario's member list ends as the members running then, in every running
        member's view and in the table (a missing or unreadable head is published again by the
        first member to read it, :meth:`_check_shared_rows`): each running member
        listed itself (again, if it was removed while it could not renew its session), and
        every member gone was removed (by itself, or by its watcher)."""
        world = self.world
        running = [m for m in world.members.values()
                   if m.alive and not m.legacy and not m.coordinator.status().stopping]
        expected = sorted({m.id for m in running})
        if world.scenario.membership != "session" or not running:
            return
        for m in running:
            assert m.membership is not None
            if list(m.membership.members()) != expected:
                self.fail(f"{m.name} lists {list(m.membership.members())} at the end, the running members are {expected}")
        store = ManifestStore(world._setup, MEMBERS_DOCUMENT)  # no member's faults
        try:
            head = store.head(consistent=True)
            listed = list(decode_members(store.read(head), store.head_key)) if head is not None and head.chunks else []
        except (ManifestCorruptError, ManifestConflictError):
            return  # an unreadable head: _check_shared_rows reports it
        if head is not None and listed != expected:
            self.fail(f"the member list ends as {listed} in the table, the running members are {expected}")

    def _check_shared_rows(self) -> None:
        """A corrupt or missing plan head (and shard manifest head, and a session scenario's
        member list head) is repaired while scoped members run and are listed (a running process whose id left the list, such as the
        second process of a duplicate id after a SIGTERM, owns no chore)."""
        world = self.world
        scoped = [m for m in world.members.values() if m.alive and not m.legacy and m.id in world.listed]
        if world.scenario.reads != "scoped" or not scoped:
            return
        head = world.memory.peek(PLAN_HEAD)
        if head is not None and not all(k in head for k in ("version", "digest", "owner", "counter")):
            self.fail(f"the plan head is still unreadable at the end: {head}")
        members_head = world.memory.peek(MEMBERS_HEAD) if world.scenario.membership == "session" else None
        if members_head is not None and not all(k in members_head for k in ("version", "digest", "owner", "counter")):
            self.fail(f"the member list's head is still unreadable at the end: {members_head}")
        if (world.scenario.membership == "session" and members_head is None
                and any(isinstance(m.membership, SessionMembership) and m.membership.known_version for m in scoped)):
            self.fail("the member list's head is still missing at the end (members had read a version)")
        if world.scenario.provider == "worker":  # the shard manifest's heads, likewise
            for key in sorted(k for k in world.memory.items() if k.startswith("__manifest__#shards") and k.count("#") == 1):
                item = world.memory.peek(key)
                if item is not None and not all(k in item for k in ("version", "digest", "owner", "counter")):
                    self.fail(f"the shard manifest head {key} is still unreadable at the end: {item}")
