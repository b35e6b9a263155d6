"""``PublishedPlan``: the last plan one member published, the input that keeps scoped plans sticky.

Under ``reads="scoped"`` no member reads every current owner. A plan of (members, keys)
alone (:func:`hashring.stable_assignment`) moves 2-3x the optimum on a join at about ten
keys per member: no stateless, exactly balanced function measured does better
(:mod:`hashring.stable`). So members plan from a shared *baseline* instead: the last plan
published in the lease table, a versioned document of
:class:`~kinesis.lease_loop.table.manifests.ManifestStore` named ``plan`` (a head row and
zlib-compressed chunks). Every member computes
:func:`hashring.plan_assignment` (members, keys, current owners = the baseline) itself:

* **deterministic**: members with the same baseline, members and keys make the same plan;
* **sticky**: it moves exactly the optimum against the baseline (the newcomer's quota on a
  join, the leaver's keys on a leave) and keeps max - min <= 1;
* **peer to peer**: nobody waits for a publish. A member plans from the baseline it has the
  moment it sees the member list change; publishing only moves the baseline forward for
  the next change. Before any baseline exists, the plan is ``stable_assignment``.

Publishing is a chore: the owner of the reserved ring key ``__chore__/plan`` (or, while its
plan stays unpublished, the next member in the chore's ranking after 3 ticks, the one after
that after 6..., so a listed member that never runs holds nothing up for long), while ready
(listed and not stopping), publishes its plan when it differs from the head's, conditional
on the head it read (so versions form one chain; a publisher whose baseline is not the head
reads the head first; racing publishers write their chunks under ids of their own). Everyone
else reads the head (one small, eventually consistent GetItem) on each tick while its plan
differs from its baseline, backing off to every 2, 4, then 8 ticks after three reads in a
row found nothing new. If the head's digest is that of its own plan, that plan becomes the
baseline without another read (the usual case: a head read or two per member per change);
if the head is another version, its chunks are read once. A head not newer than the
baseline (a stale replica, or a head rebuilt from version 1) is confirmed by a consistent
read first (a missing head too), so the baseline never goes back on a stale read and the
last publisher never forgets it wrote the head.

A member whose plan equals an old baseline (it missed a change: a lagging member list)
would never look again, and offers made to it under the newer plan would wait forever. So
every session row records the version its member plans from (``planVersion``), and every
member reads its predecessor's session row (in the sorted member list) at each backup check,
even without backups: a newer version there makes it read the head at its next tick; and
every ``recheck_interval`` (the sweep interval) each member reads it anyway. The member that
wrote the head it last saw (its ``owner``) reads it every ``OWNER_RECHECK_TICKS`` ticks, so an
unreadable head is replaced within that bound even when no change ever comes. In steady state
(plan = baseline) nothing else is read.

The plan is advice, not a lock: every take and hand-off stays a conditional write on the
row read, so a stale, missing, corrupt or unreadable baseline costs moves, never safety;
errors are logged and counted (``plan_errors``) and the member keeps planning from the
baseline it has; a version whose chunks cannot be read is replaced by the chore owner. A dead publisher
only stops the baseline from moving (the chore moves with the member list).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from botocore.exceptions import BotoCoreError, ClientError

from hashring import (
    Assignment,
    LoadReport,
    balance_loads,
    chore_owners,
    load_report,
    plan_assignment,
    stable_assignment,
)
from hashring.loads import DEFAULT_TOLERANCE
from kinesis.errors import KinesisHashRingError
from kinesis.lease_loop.table.manifests import (
    ManifestConflictError,
    ManifestCorruptError,
    ManifestHead,
    ManifestStore,
)
from kinesis.lease_loop.table.sessions import tell_each

log = logging.getLogger(__name__)

PLAN_CHORE = "plan"
"""The reserved ring key (:func:`hashring.chore_owners`) whose owner publishes the plan."""
DOCUMENT = "plan"
"""The :class:`ManifestStore` name of the plan (``__manifest__#plan``; shard manifests are ``shards/...``)."""
FORMAT = 1
FREE_POLLS = 3
"""Ticks in a row a member reads the head while its plan is unpublished, before backing off."""
MAX_BACKOFF_TICKS = 8
"""Then it reads the head every 2, 4, then at most every this many ticks."""
SETTLE_TICKS = 3
"""A chore owner publishes over another member's plan for other inputs (members, keys) only
once its own inputs and that head have both been unchanged this many ticks, doubling with
every such overwrite until its inputs change: two members that both own the chore in their
own member lists take turns at most that often instead of every round."""
MAX_SETTLE_DOUBLINGS = 4
OWNER_RECHECK_TICKS = 10
"""Ticks between two reads of the head by the member that wrote it last (when nothing is
pending; an unreadable head is then replaced by it or the chore's next owner): one small read."""


Loads = Mapping[str, float]
"""Key -> measured load (:func:`hashring.balance_loads`)."""


@dataclass(frozen=True)
class Baseline:
    """A published plan: its version, the digest of its payload, each key's owner, and the
    loads it was balanced with (None: a count plan)."""

    version: int
    digest: str
    owners: Mapping[str, str]
    loads: Loads | None = None
    tolerance: float = DEFAULT_TOLERANCE
    """The tolerance it was balanced with: every member plans from it with the same one."""


def encode(plan: Assignment, loads: Loads | None = None, tolerance: float = DEFAULT_TOLERANCE) -> bytes:
    """The canonical payload of ``plan``'s primaries (keys sorted; owners as member indexes)
    and, for a load plan, the loads it was balanced with (null: a key not measured) and the
    tolerance."""
    index = {m: i for i, m in enumerate(plan.members)}
    keys = sorted(plan.owners)
    doc: dict[str, object] = {"format": FORMAT, "members": list(plan.members), "keys": keys,
                              "owners": [index[plan.owners[k][0]] for k in keys]}
    if loads is not None:
        doc["loads"] = [loads.get(k) for k in keys]
        doc["tolerance"] = tolerance
    return json.dumps(doc, separators=(",", ":")).encode()


def decode(payload: bytes, where: str) -> tuple[dict[str, str], Loads | None, float]:
    """(key -> owner, key -> load or None, tolerance) of a payload; :class:`ManifestCorruptError`
    (naming ``where``) if malformed."""
    try:
        doc = json.loads(payload)
        members, keys, owners = doc["members"], doc["keys"], doc["owners"]
        if doc["format"] != FORMAT or len(keys) != len(owners):
            raise ValueError(f"format {doc['format']!r}, {len(keys)} keys, {len(owners)} owners")
        loads = None
        if doc.get("loads") is not None:
            if len(doc["loads"]) != len(keys):
                raise ValueError(f"{len(doc['loads'])} loads for {len(keys)} keys")
            loads = {str(k): float(v) for k, v in zip(keys, doc["loads"], strict=True) if v is not None}
            if any(not math.isfinite(v) or v < 0 for v in loads.values()):
                raise ValueError("a load is not a finite number >= 0")
        tolerance = float(doc.get("tolerance", DEFAULT_TOLERANCE))
        if not 0 < tolerance < 1:
            raise ValueError(f"tolerance {tolerance!r}")
        return {str(k): str(members[i]) for k, i in zip(keys, owners, strict=True)}, loads, tolerance
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise ManifestCorruptError(where, f"plan unreadable ({exc!r}): the chore owner publishes a new one") from exc


class PublishedPlan:
    """One member's baseline and plans (see the module docs). Called from its round only."""

    def __init__(self, store: ManifestStore | None, member_id: str,
                 count: Callable[[str], None] = lambda name: None,
                 tell: Callable[[str, int], bool] | None = None, *, tolerance: float = DEFAULT_TOLERANCE):
        self._store = store
        self.tolerance = tolerance
        self._me = member_id
        self._tell = tell  # records a rebuilt head's version on a member's session row
        self._count = count  # the coordinator's counters: plans_published, plan_errors
        self.baseline: Baseline | None = None
        self._plan: tuple[tuple[object, ...], Assignment] | None = None
        self._encoded: tuple[Assignment, bytes, str] | None = None
        self._plan_loads: tuple[Assignment, Loads | None, float] | None = None  # a plan, the loads and
        # tolerance it was made with
        self._balanced_at = -math.inf  # when this member last planned with fresh loads (the load chore)
        self._report: tuple[Assignment, LoadReport | None] | None = None  # the last plan's load report
        self._hot: tuple[str, ...] = ()  # the hot keys last logged
        self._next_poll = -math.inf
        self._misses = 0
        self._pending_digest = ""  # the plan the current run of head reads is for
        self._pending_since = -math.inf  # since when it is pending (this member's clock)
        self._corrupt_since: float | None = None  # since when the head is unreadable
        self._behind = False  # a member with a newer baseline was heard of
        self._last_read = -math.inf
        self._inputs: tuple[object, ...] = ()  # the last plan's (members, keys, weights)
        self._followed_inputs: tuple[object, ...] | None = None  # the inputs the last follow() saw
        self._inputs_since = -math.inf  # when they last changed (this member's clock)
        self._head_seen: tuple[int, float] = (0, -math.inf)  # a head version, and since when it is seen
        self._overwrites = 0  # other members' heads published over since the inputs last changed
        self._head_owner = ""  # the owner of the head last read or written (the last publisher)
        self._highest_heard = 0  # the highest baseline version heard of (in peers' session rows)
        self._older_heard: tuple[int, set[int]] = (0, set())  # (own version, older ones heard under it)

    def plan(self, members: tuple[str, ...], keys: tuple[str, ...],
             weights: Mapping[str, float] | None) -> Assignment:
        """The plan from the baseline (``stable_assignment`` without one); the same object
        for the same inputs (identical member and key tuples, the same baseline)."""
        base = self.baseline
        inputs = (members, keys, base, weights)
        self._inputs = inputs[:2] + inputs[3:]
        hit = self._plan
        if hit is not None and all(a is b or a == b for a, b in zip(hit[0], inputs, strict=True)):
            return hit[1]
        if base is None:
            plan = stable_assignment(members, keys, weights=weights)
            if weights is not None:  # weighted quotas can break float ties by holdings: settle them now
                owners = {k: o[0] for k, o in plan.owners.items()}
                plan = plan_assignment(members, keys, current_owners=owners, weights=weights)
        elif base.loads is not None:  # a load plan: balanced with its loads (the same plan back)
            plan = balance_loads(members, keys, base.owners, base.loads, weights, tolerance=base.tolerance)
        else:
            plan = plan_assignment(members, keys, current_owners=base.owners, weights=weights)
        self._plan = (inputs, plan)
        self._plan_loads = (plan, base.loads, base.tolerance) if base is not None else (plan, None, DEFAULT_TOLERANCE)
        return plan

    def pending(self, plan: Assignment) -> bool:
        """Whether ``plan`` differs from the baseline (a change not yet published or adopted)."""
        return self.baseline is None or self._encode(plan)[1] != self.baseline.digest

    def heard(self, versions: Iterable[int]) -> None:
        """Other members run with baselines ``versions`` (their session rows say so). One
        newer than this member's: read the head at the next tick even if nothing is pending
        (a member that missed a change must not keep an old baseline forever). One older,
        not heard before under this baseline: read the head once too (it may have been
        rebuilt from a lower version by a member that could not read it, and members with a
        newer baseline would otherwise plan apart from it until the backstop read). The
        highest version heard is where a rebuilt head continues the chain."""
        for version in versions:
            if version <= 0:
                continue
            self._highest_heard = max(self._highest_heard, version)
            if version > self.version:
                self._behind = True
            elif version < self.version and version not in self._older_heard[1]:
                if self._older_heard[0] != self.version:
                    self._older_heard = (self.version, set())
                self._older_heard[1].add(version)
                self._behind = True

    @property
    def version(self) -> int:
        """The baseline's version (0: none), recorded in this member's session row."""
        return self.baseline.version if self.baseline is not None else 0

    @property
    def _chain_version(self) -> int:
        """The version a head rebuilt by this member continues from (after a missing or
        unreadable one): the highest it knows, so followers with a newer baseline move on."""
        return max(self.version, self._highest_heard)

    def follow(self, plan: Assignment, listed: list[str], now: float, *, full: bool, ready: bool,
               tick_interval: float, recheck_interval: float) -> None:
        """Move the baseline towards ``plan`` (this round's plan) on a tick (``full``):

        * while ``plan`` is pending, read the head (backing off while nothing new comes):
          adopt it when it publishes ``plan``, read it when it is another version, publish
          ``plan`` when this member is ``ready`` and owns the chore among ``listed``;
        * otherwise read the head only if another member was :meth:`heard` with a newer
          baseline, or ``recheck_interval`` passed since the last read (a backstop).

        Errors are logged; the baseline held stays."""
        if self._store is None or not full:
            return
        if self._followed_inputs is None or not all(
                a is b or a == b for a, b in zip(self._followed_inputs, self._inputs, strict=True)):
            self._followed_inputs = self._inputs
            self._inputs_since, self._overwrites = now, 0
        digest, pending = self._encode(plan)[1], self.pending(plan)
        if pending and digest != self._pending_digest:  # a new change: read now, no backoff carried over
            self._pending_digest, self._misses, self._next_poll = digest, 0, -math.inf
            self._pending_since = now
        if pending:
            due = self._behind or now >= self._next_poll
        else:
            if self._head_owner == self._me:  # the last publisher watches its head: a corrupt one is replaced
                recheck_interval = min(recheck_interval, OWNER_RECHECK_TICKS * tick_interval)
            due = self._behind or now - self._last_read >= recheck_interval
        if self._corrupt_since is not None:  # an unreadable head seen: read it again one settling
            # window later to rebuild it (not at the backstop, 30 D on, when nothing is pending),
            # and then once a window while it stays unreadable (not every tick)
            due = due or now - max(self._corrupt_since, self._last_read) >= SETTLE_TICKS * tick_interval
        if not due:
            return
        self._behind, self._last_read = False, now
        try:
            moved = self._follow(self._store, plan, listed, pending=pending, ready=ready, now=now,
                                 settle=SETTLE_TICKS * tick_interval)
        except (KinesisHashRingError, BotoCoreError, ClientError) as exc:  # keep the baseline
            log.warning("%s: the published plan could not be followed: %s", self._me, exc)
            self._count("plan_errors")
            moved = False
        self._misses = 0 if moved else self._misses + 1
        wait = min(2 ** max(self._misses - FREE_POLLS + 1, 0), MAX_BACKOFF_TICKS)
        self._next_poll = now + (wait - 0.01) * tick_interval

    def rebalance(self, listed: list[str], now: float, *, ready: bool, interval: float,
                  read_loads: Callable[[tuple[str, ...]], Loads | None]) -> None:
        """The load chore: the owner of the plan chore among ``listed``, while ``ready``,
        nothing pending and at most once per ``interval``, reads the members' loads
        (``read_loads``: None when a member reports none, such as an older build) and plans
        from the baseline with them (:func:`hashring.balance_loads`; without loads, back to
        the count plan). A plan whose owners differ is published with its loads, over the
        baseline's head only (a consistent read first), and each member that gives or takes a
        key is told (its session row), so it reads the head at its next tick. Everyone else
        adopts it as any plan, and plans joins and leaves from it with the same loads.
        Errors are logged and counted; the baseline held stays."""
        made = self._plan
        if self._store is None or not ready or made is None or now - self._balanced_at < interval:
            return
        (members, keys, base, weights), plan = made
        if not isinstance(base, Baseline) or base is not self.baseline or self.pending(plan):
            return  # no baseline yet, or a change in flight: it goes first
        assert isinstance(members, tuple) and isinstance(keys, tuple)
        if self._me not in listed or chore_owners(PLAN_CHORE, listed)[0] != self._me:
            return
        self._balanced_at = now
        made_with = self._plan_loads
        try:
            measured = read_loads(members)
            if measured is None and base.loads is None:
                return  # a count plan stays one
            # only the keys planned (what the document keeps, so every member weighs alike); a
            # key nobody reports yet (just handed over: its new owner has not measured it long
            # enough) keeps the load the baseline has for it rather than weighing the median
            planned = frozenset(keys)
            loads = None if measured is None else {
                k: v for k, v in {**(base.loads or {}), **measured}.items() if k in planned}
            w = weights if isinstance(weights, Mapping) else None
            new = (plan_assignment(members, keys, current_owners=base.owners, weights=w) if loads is None
                   else balance_loads(members, keys, base.owners, loads, w, tolerance=self.tolerance))
            moved = {k: o[0] for k, o in new.owners.items() if base.owners.get(k) != o[0]}
            if not moved and loads is not None:
                return  # nothing to move: the baseline keeps the loads it was made with
            head = self._store.head(consistent=True)
            if head is None or (head.version, head.digest) != (base.version, base.digest):
                self._behind = True  # another version meanwhile: read it at the next tick
                return
            self._plan_loads = (new, loads, self.tolerance)
            if self._publish(self._store, head, new):
                self._plan = ((members, keys, self.baseline, weights), new)
                log.info("%s: balanced by load: %d keys move", self._me, len(moved))
                if self._tell is not None:
                    tell_each(sorted({*moved.values(), *(base.owners.get(k, "") for k in moved)} - {""}),
                              self._tell, self.version, me=self._me, what="plan")
        except (KinesisHashRingError, BotoCoreError, ClientError) as exc:
            log.warning("%s: the load chore failed (the plan stays): %s", self._me, exc)
            self._count("plan_errors")
        finally:
            if self._plan is not None and self._plan[1] is not (self._plan_loads or (None,))[0]:
                self._plan_loads = made_with  # not published: this round's plan keeps its own loads

    def load_report(self) -> LoadReport | None:
        """How this member's last plan spreads the baseline's loads (None under a count plan),
        computed once per plan. The hot keys it names are logged once per new set, with the
        advice to split those shards."""
        made, base = self._plan, self.baseline
        if made is None or base is None or base.loads is None or made[0][2] is not base:
            return None
        hit = self._report
        if hit is not None and hit[0] is made[1]:
            return hit[1]
        weights = made[0][3] if isinstance(made[0][3], Mapping) else None
        report = load_report(made[1], base.loads, weights)
        self._report = (made[1], report)
        hot = report.hot_keys if report is not None else ()
        if hot and hot != self._hot and report is not None:
            log.warning("%s: %d lease(s) each hotter than a member's fair share, each given a member to "
                        "itself: %s; split those shards to spread their load", self._me, len(hot),
                        ", ".join(f"{k} ({report.hot_shares[k]:.1f}x a share)" for k in hot[:10]))
        self._hot = hot
        return report

    def _differs(self, head: ManifestHead | None) -> bool:
        """Whether ``head`` names a published plan other than the baseline."""
        if head is None or head.version == 0:  # none, or claimed and never published
            return False
        base = self.baseline
        return base is None or (head.version, head.digest) != (base.version, base.digest)

    def _not_newer(self, head: ManifestHead | None) -> bool:
        """Whether ``head`` (read eventually consistent) is missing, or another version than the
        baseline but not newer: confirmed by a consistent read before it counts. A missing head
        too: a stale read of none made the last publisher forget it wrote the head, so it
        stopped watching it (an unreadable head then stayed until the backstop read)."""
        base = self.baseline
        if base is None:
            return head is None and self._highest_heard > 0  # a plan others heard of is gone?
        return head is None or ((head.version, head.digest) != (base.version, base.digest)
                                and head.version <= base.version)

    def _follow(self, store: ManifestStore, plan: Assignment, listed: list[str], *, pending: bool,
                ready: bool, now: float, settle: float) -> bool:
        def owner(since: float, *, repair: bool = False) -> bool:
            """Whether the chore is this member's now: the chore's owner at once, the next one
            in the chore's ranking of every member once ``since`` is ``settle`` old, and so on
            (so a listed member that never runs holds nothing up for long). A ``repair`` of an
            unreadable head: any member after one ``settle`` (members ahead in the ranking read
            the head only when something is pending, so they may never see it; racing repairs
            are conditional on the unreadable item). Rendezvous over every member: only when
            it matters."""
            if not ready or self._me not in listed:
                return False
            ranking = chore_owners(PLAN_CHORE, listed, replicas=len(listed) - 1)
            rank = ranking.index(self._me)
            return now - since >= (min(rank, 1) if repair else rank) * settle

        try:
            head = store.head()
            if self._not_newer(head):  # a stale read, or a head lost or rebuilt from 1
                head = store.head(consistent=True)
        except ManifestCorruptError as exc:  # the head row itself is unreadable
            if self._corrupt_since is None:
                self._corrupt_since = now
            if exc.item is None or not owner(self._corrupt_since, repair=True):
                raise
            log.warning("%s: the published plan's head is unreadable (%s): replacing it", self._me, exc.reason)
            self._count("plan_errors")
            try:
                head = store.claim_corrupt(self._me, exc.item, version=self._chain_version)
            except ManifestConflictError:
                return False  # repaired by someone else meanwhile: read it next time
            return self._publish(store, head, plan, rebuilt=listed)
        self._corrupt_since = None
        self._head_owner = head.owner if head is not None else ""
        if head is not None and head.version != self._head_seen[0]:
            self._head_seen = (head.version, now)
        if self._differs(head):
            assert head is not None
            if head.digest == self._encode(plan)[1]:
                self._adopt(head, plan)
                return True
            try:
                owners, loads, tolerance = decode(store.read(head), store.head_key)
            except (ManifestCorruptError, ManifestConflictError) as exc:
                if not owner(self._head_seen[1], repair=True):
                    raise
                log.warning("%s: published plan version %d is unreadable (%s): publishing over it",
                            self._me, head.version, exc)
                self._count("plan_errors")
            else:
                self.baseline = Baseline(head.version, head.digest, owners, loads, tolerance)
                return True
        elif not (pending and owner(self._pending_since, repair=head is None and self._chain_version > 0)):
            return False  # (a head lost after others planned from it: rebuilt like an unreadable one)
        if head is not None and head.version and head.owner != self._me:  # over another's plan
            wait = settle * 2 ** min(self._overwrites, MAX_SETTLE_DOUBLINGS)
            if now - self._inputs_since < settle or now - self._head_seen[1] < wait:
                return False
            self._overwrites += 1
        try:
            seen = head if head is not None else store.claim(self._me, None, version=self._chain_version)
        except ManifestConflictError:
            return False
        rebuilt = listed if head is None and self._chain_version else ()  # a lost head: others planned
        return self._publish(store, seen, plan, rebuilt=rebuilt)

    def _publish(self, store: ManifestStore, seen: ManifestHead, plan: Assignment,
                 rebuilt: list[str] | tuple[()] = ()) -> bool:
        """Publish ``plan`` over the head ``seen`` (conditional on it); whether it was written.
        ``rebuilt``: the head was missing or unreadable, so these members may plan from a
        baseline nobody can read any more and, with nothing pending, would not read the head
        again before the backstop: each is told the new version on its session row (read at
        its next renewal: a tick), best effort, at most :data:`~.table.sessions.TELL_AT_MOST`."""
        try:
            written = store.publish(replace(seen, owner=self._me), self._encode(plan)[0])
        except ManifestConflictError:
            return False  # another publisher moved the head: read it next time
        self._adopt(written, plan)
        self._head_owner = written.owner
        self._count("plans_published")
        log.info("%s: published plan version %d (%d keys, %d members)", self._me, written.version,
                 len(plan.owners), len(plan.members))
        if self._tell is not None:
            tell_each(rebuilt, self._tell, written.version, me=self._me, what="plan")
        return True

    def _adopt(self, head: ManifestHead, plan: Assignment) -> None:
        """``plan`` (published as ``head``) becomes the baseline. Planning from a plan gives
        that plan back (the planner is idempotent), so the cached plan stays the answer for
        its inputs: no second re-plan after a change is adopted (0.4-0.5 s at 100,000 x
        10,000 in ``benchmarks/bench_planner.py``, re-plan after a join)."""
        loads, tolerance = self._loads(plan)
        self.baseline = Baseline(head.version, head.digest, {k: o[0] for k, o in plan.owners.items()},
                                 loads, tolerance)
        if self._plan is not None and self._plan[1] is plan:
            members, keys, _, weights = self._plan[0]
            self._plan = ((members, keys, self.baseline, weights), plan)

    def _loads(self, plan: Assignment) -> tuple[Loads | None, float]:
        """The loads (None: a count plan) and tolerance ``plan`` was made with."""
        made = self._plan_loads
        return (made[1], made[2]) if made is not None and made[0] is plan else (None, DEFAULT_TOLERANCE)

    def _encode(self, plan: Assignment) -> tuple[bytes, str]:
        hit = self._encoded
        if hit is None or hit[0] is not plan:
            payload = encode(plan, *self._loads(plan))
            hit = (plan, payload, hashlib.sha256(payload).hexdigest())
            self._encoded = hit
        return hit[1], hit[2]
