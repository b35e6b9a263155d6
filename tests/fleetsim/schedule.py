"""What one simulated run does: a :class:`Scenario` (the fleet's settings) and its events.

A scenario is drawn from a seed (:func:`draw`), so ``--seed N`` replays it exactly, and it
is plain data (:meth:`Scenario.to_json`), so a shrunk scenario can be saved and replayed
(``--replay file.json``). Times are simulated seconds from the start of the run; the
*disturbance phase* ends at ``quiet_at``, after which only the persistent conditions it
left behind stay (a listed member that never runs, an older-build member, a lagging list,
a denied action) and the fleet must recover within the stated bounds
(:mod:`tests.fleetsim.bounds`).

A scenario's ``membership`` says who keeps the member list: "static" (the world: each member
gets a :class:`~hashring.StaticMembership` the world sets, so lags, phantoms and unlisting
can be simulated), or "session" (the SDK's default, a
:class:`~kinesis.lease_loop.membership.SessionMembership` the members keep in the
lease table themselves: they publish themselves as they join, leave as they stop, and remove
the dead; the kinds that only make sense for a list managed outside, :data:`STATIC_ONLY`,
are left out of those scenarios).

Disturbance kinds (``Event.kind``):

=============== ===================================================================
``crash``       SIGKILL: the member stops at once; it stays listed until ``unlist``
``unlist``      the member list drops a member (a failing readiness probe)
``restart``     a crashed member starts again (``same_id``: the same member id)
``sigterm``     a graceful stop (hand-offs that complete at once); unlisted at once
``pause``       the process stops for ``seconds`` (SIGSTOP, a GC pause), then goes on
``join``        a new member starts and is listed after ``listed_after`` seconds
``lag``         the member's list shows the truth of ``seconds`` ago, for ``for``
                (``chore_owner``: the plan chore's owner's list, whoever that is then)
``phantom``     a member that is listed but never runs
``legacy``      a member of the previous release (rows renewed every tick, rows timed
                by their row; it cannot parse rows written under session leases)
``throttle``    the member's DynamoDB calls are throttled with probability ``p``
``ambiguous``   the member's writes are applied, then answered with a 500 (``p``), or
                answered with a 500 without being applied (``p``)
``deny``        the member may not call ``action`` (IAM) for the rest of the run
``corrupt``     a shared row is overwritten with garbage (``row``: plan_head,
                plan_chunk, manifest_head, session, lease; members_head: the head of a
                session scenario's member list)
``wall_step``   the member's wall clock jumps by ``seconds``
``reshard``     a shard is split (``worker`` scenarios: its lease key ends, two begin)
``duplicate``   a second process starts under a running member's id (a misconfiguration:
                one of the two must refuse to run)
``chore_split`` a member joins that owns the plan chore in the new member list, while the
                chore's owner in the old list does not see it for ``for`` (both own it)
=============== ===================================================================
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any

KINDS = ("crash", "unlist", "restart", "sigterm", "pause", "join", "lag", "phantom", "legacy", "throttle",
         "ambiguous", "deny", "corrupt", "wall_step", "reshard", "duplicate", "chore_split")
"""Every disturbance kind, in the order the coverage report lists them."""

MEMBERSHIPS = ("static", "session")
STATIC_ONLY = frozenset({"lag", "phantom", "chore_split", "unlist", "legacy"})
"""Kinds that need a member list managed outside the members (a legacy member, of the
previous release, runs with one too): not drawn for "session" scenarios."""

CORRUPT_ROWS = ("plan_head", "plan_chunk", "manifest_head", "session", "lease")


@dataclass(frozen=True)
class Event:
    """One disturbance at simulated time ``at``."""

    at: float
    kind: str
    member: str = ""
    args: dict[str, Any] = field(default_factory=dict)

    def arg(self, name: str, default: Any = None) -> Any:
        return self.args.get(name, default)


@dataclass(frozen=True)
class Scenario:
    """A fleet and its disturbances (see the module docs)."""

    seed: int
    reads: str = "scoped"
    """The new members' reads: "scoped" (a membership outside the table) or "scan"."""
    provider: str = "keys"
    """"keys": a fixed set of lease keys; "worker": the Worker's shard providers over a stream."""
    replicas: int = 1
    lease_duration: float = 3.0
    members: tuple[str, ...] = ("m0", "m1", "m2")
    phantoms: tuple[str, ...] = ()
    """Members listed from the start that never run (dead pods still listed, older builds
    that never run this release's chores)."""
    keys: int = 8
    """Lease keys ("keys") or open shards at the start ("worker")."""
    skew: tuple[float, ...] = ()
    """Each member's clock rate (1.0 = exact), by position in ``members`` (then 1.0)."""
    stale_reads: float = 0.0
    """Probability that an eventually consistent read returns an older version of a row."""
    quiet_at: float = 30.0
    end: float = 90.0
    events: tuple[Event, ...] = ()
    membership: str = "static"
    """Who keeps the member list: "static" (the world) or "session" (the members, in the table)."""
    loads: tuple[float, ...] = ()
    """Balance by load (``LoadBalancing``): the loads members report, a key weighing the one
    its crc32 picks; empty: by count (``--balance load`` draws them)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Scenario:
        """A scenario saved by :meth:`to_json` (other keys, such as a saved scenario's notes, are ignored)."""
        data = {k: v for k, v in json.loads(text).items() if k in cls.__dataclass_fields__}
        data["members"] = tuple(data["members"])
        data["phantoms"] = tuple(data.get("phantoms", ()))
        data["skew"] = tuple(data["skew"])
        data["events"] = tuple(Event(**e) for e in data["events"])
        data["loads"] = tuple(data.get("loads", ()))
        return cls(**data)

    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted({e.kind for e in self.events}))

    def without(self, index: int) -> Scenario:
        return replace(self, events=self.events[:index] + self.events[index + 1:])


PROFILES = {"long": (6, 25.0), "fast": (4, 14.0)}
"""Profile -> (most disturbances, lease durations of quiet after them)."""


def draw(seed: int, *, kinds: tuple[str, ...] = KINDS, max_events: int | None = None, reads: str | None = None,
         provider: str | None = None, profile: str = "long", membership: str | None = None,
         balance: str = "count") -> Scenario:
    """The scenario of ``seed``: a random fleet and up to ``max_events`` disturbances of ``kinds``
    (``reads``, ``provider`` and ``membership``: fixed instead of drawn; ``profile``: "long", or
    "fast": fewer disturbances and a shorter quiet phase, for the test suite; ``balance="load"``:
    scoped members that balance by skewed loads, drawn from a stream of their own)."""
    if balance not in ("count", "load"):
        raise ValueError(f"balance must be 'count' or 'load', got {balance!r}")
    if balance == "load":
        weights = random.Random(seed * 15485863 + 3)
        loads = tuple(round(weights.choice([1.0, 1.0, 1.0, 2.0, 8.0]) * weights.uniform(0.8, 1.2), 3)
                      for _ in range(16))
        return replace(draw(seed, kinds=kinds, max_events=max_events, reads="scoped", provider=provider,
                            profile=profile, membership=membership), loads=loads)
    most, quiet = PROFILES[profile]
    max_events = most if max_events is None else max_events
    # its own stream, drawn first: a static scenario draws exactly what it drew before there was a choice
    kept_by = random.Random(seed * 104729 + 11)
    drawn_membership = "session" if kept_by.random() < 0.3 else "static"
    membership = membership or drawn_membership
    if membership not in MEMBERSHIPS:
        raise ValueError(f"membership must be one of {MEMBERSHIPS}, got {membership!r}")
    rng = random.Random(seed)
    drawn_reads = rng.choice(["scoped", "scoped", "scan"])
    drawn_provider = rng.choice(["keys", "keys", "worker"])
    reads = reads or drawn_reads
    provider = provider or drawn_provider
    n = rng.randint(2, 5)
    members = tuple(f"m{i}" for i in range(n))
    d = 3.0
    scenario = Scenario(
        seed=seed,
        reads=reads,
        provider=provider,
        replicas=rng.choice([0, 1, 1, 2]),
        lease_duration=d,
        members=members,
        keys=rng.randint(3, 12),
        skew=tuple(round(1.0 + rng.uniform(-0.004, 0.004), 5) for _ in members),
        stale_reads=rng.choice([0.0, 0.0, 0.2]),
        quiet_at=rng.choice([8.0, 12.0, 20.0]) * d,
        end=0.0,
    )
    extra = random.Random(seed * 7919 + 5)  # its own stream: earlier seeds keep their scenarios
    if "phantom" in kinds and extra.random() < 0.3:
        scenario = replace(scenario, phantoms=tuple(f"p{i}" for i in range(extra.randint(1, 2))))
    events: list[Event] = []
    running = list(members)
    crashed: list[str] = []
    fresh = iter(f"n{i}" for i in range(100))
    for _ in range(rng.randint(1, max_events)):
        kind = rng.choice(kinds)
        at = round(rng.uniform(2.0 * d, scenario.quiet_at - d), 3)
        event = _event(rng, kind, at, d, running, crashed, fresh, provider)
        if event is not None:
            events.append(event)
    events.sort(key=lambda e: e.at)
    scenario = replace(scenario, events=tuple(events), end=scenario.quiet_at + quiet * d)
    return _kept_by_members(scenario, kept_by) if membership == "session" else scenario


def _kept_by_members(scenario: Scenario, rng: random.Random) -> Scenario:
    """``scenario`` with a :class:`SessionMembership`: scoped reads (it needs them), no phantoms
    and no :data:`STATIC_ONLY` events; a crashed member is never unlisted by the world (its
    watcher removes it) and a newcomer is listed by its own first tick, not after a delay.
    Half the corrupted rows are the member list's head instead (drawn from ``rng``, the
    membership's own stream, so the other streams draw what they always did)."""
    events = []
    for e in scenario.events:
        if e.kind in STATIC_ONLY:
            continue
        if e.kind == "crash":
            e = replace(e, args={**e.args, "unlist_after": None})
        elif e.kind == "join":
            e = replace(e, args={**e.args, "listed_after": 0.0})
        elif e.kind == "corrupt" and rng.random() < 0.5:
            e = replace(e, args={**e.args, "row": "members_head"})
        events.append(e)
    return replace(scenario, membership="session", reads="scoped", phantoms=(), events=tuple(events))


def _event(rng: random.Random, kind: str, at: float, d: float, running: list[str], crashed: list[str],
           fresh: Any, provider: str) -> Event | None:
    """One event of ``kind`` (None if it cannot happen in this fleet)."""
    if kind in ("crash", "sigterm", "pause", "lag", "throttle", "ambiguous", "deny", "wall_step", "duplicate") \
            and not running:
        return None
    if kind == "crash":
        member = rng.choice(running)
        running.remove(member)
        crashed.append(member)
        return Event(at, kind, member, {"unlist_after": rng.choice([None, 0.0, d, 2 * d])})
    if kind == "unlist":
        if not crashed:
            return None
        return Event(at, kind, rng.choice(crashed))
    if kind == "restart":
        if not crashed:
            return None
        member = crashed.pop(rng.randrange(len(crashed)))
        same = rng.random() < 0.5
        new = member if same else next(fresh)
        running.append(new)
        return Event(at, kind, member, {"as": new})
    if kind == "sigterm":
        if len(running) < 2:
            return None
        member = rng.choice(running)
        running.remove(member)
        return Event(at, kind, member)
    if kind == "pause":
        return Event(at, kind, rng.choice(running), {"seconds": round(rng.uniform(0.3, 2.5) * d, 3)})
    if kind == "join":
        member = next(fresh)
        running.append(member)
        return Event(at, kind, member, {"listed_after": rng.choice([0.0, 0.0, d / 3])})
    if kind == "lag":  # half of them lag the plan chore's owner (then two members may both own it)
        return Event(at, kind, rng.choice(running),
                     {"seconds": round(rng.uniform(0.5, 3.0) * d, 3), "for": round(rng.uniform(1.0, 12.0) * d, 3),
                      "chore_owner": rng.random() < 0.5})
    if kind == "phantom":
        return Event(at, kind, next(fresh))
    if kind == "legacy":
        return Event(at, kind, f"old-{next(fresh)}")
    if kind == "ambiguous":  # each write: applied then a 500, or a 500 without applying (p each)
        return Event(at, kind, rng.choice(running),
                     {"p": rng.choice([0.3, 0.6]), "for": round(rng.uniform(0.5, 3.0) * d, 3)})
    if kind == "throttle":
        return Event(at, kind, rng.choice(running),
                     {"p": rng.choice([0.3, 0.7, 1.0]), "for": round(rng.uniform(0.5, 3.0) * d, 3)})
    if kind == "deny":
        return Event(at, kind, rng.choice(running), {"action": "TransactWriteItems"})
    if kind == "corrupt":
        return Event(at, kind, "", {"row": rng.choice(CORRUPT_ROWS), "pick": rng.randrange(1000)})
    if kind == "wall_step":
        return Event(at, kind, rng.choice(running), {"seconds": rng.choice([-3.0, 3.0, 30.0, -30.0]) * d})
    if kind == "reshard":
        if provider != "worker":
            return None
        return Event(at, kind, "", {"pick": rng.randrange(1000)})
    if kind == "duplicate":
        return Event(at, kind, rng.choice(running))
    if kind == "chore_split":
        return Event(at, kind, "", {"for": round(rng.uniform(4.0, 14.0) * d, 3)})
    raise ValueError(f"unknown disturbance kind {kind!r}")
