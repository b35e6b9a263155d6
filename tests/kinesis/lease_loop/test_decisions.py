"""The lease loop's decisions, table-driven: pure functions over snapshots built with a
FakeClock. No moto, no threads, no coordinator."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest

from hashring import Assignment, chore_owners
from kinesis.lease_loop import decisions
from kinesis.lease_loop.decisions import Offer, Seen, SessionSeen, Snapshot, Suspicions, Take
from kinesis.lease_loop.table.model import Lease, LeaseState, SessionCheck
from kinesis.lease_loop.timing import FakeClock, LeaseTiming

# lease 9 s, tick 3 s, adopt 3 s (a tick), backup grace 9 s, orphan 9 + 3 * 9 = 36 s, hand-off 9 s
TIMING = LeaseTiming.of(9.0, tick_interval=3.0, replicas=2)
LEASE, GRACE, ADOPT, ORPHAN = TIMING.lease_duration, TIMING.backup_grace, TIMING.adopt_timeout, TIMING.orphan_timeout
EPS = 0.01


def plan(**owners: str) -> Assignment:
    """plan(k1="a,b,c"): k1's primary a, then backups b and c."""
    parsed = {key: tuple(o.split(",")) for key, o in owners.items()}
    return Assignment(tuple(sorted({m for o in parsed.values() for m in o})), parsed, {})


class Scene:
    """What one member has seen: rows, and when each (counter, owner) was first seen on a
    FakeClock."""

    def __init__(self) -> None:
        self.clock = FakeClock(1000.0)
        self.rows: dict[str, Lease] = {}
        self.seen: dict[str, Seen] = {}

    def row(self, key: str, owner: str | None, counter: int = 1, handed_off_by: str | None = None) -> Scene:
        """The table shows this row now: its timer restarts if (counter, owner) changed."""
        lease = Lease(key, owner, counter, handed_off_by=handed_off_by)
        self.rows[key] = lease
        old = self.seen.get(key)
        if old is None or (old.counter, old.owner) != (counter, owner):
            self.seen[key] = Seen(counter, owner, self.clock())
        return self

    def later(self, seconds: float) -> Scene:
        self.clock.advance(seconds)
        return self

    def snap(self, me: str, the_plan: Assignment | None = None, *, held: Iterable[str] = (),
             suspects: Iterable[str] = (), probation: Iterable[str] = (),
             offers: dict[str, Offer] | None = None, stopping: bool = False,
             max_handoffs: int = 2) -> Snapshot:
        now = self.clock()
        return Snapshot(
            now=now, me=me, timing=TIMING, rows=dict(self.rows), seen=dict(self.seen),
            held=frozenset(held), plan=the_plan,
            suspicions=Suspicions({m: now for m in suspects}, {m: 1 for m in suspects}, frozenset(probation)),
            planned=frozenset(the_plan.owners) if the_plan is not None else frozenset(),
            offers=offers or {}, stopping=stopping, max_concurrent_handoffs=max_handoffs,
        )


def taken(snap: Snapshot, keys: Iterable[str] = ("k",)) -> dict[str, str]:
    """key -> kind of each take."""
    return {t.key: t.kind for t in decisions.takes(snap, keys).takes}


# --- taking ---------------------------------------------------------------------------------

K_ABC = plan(k="a,b,c")


@pytest.mark.parametrize(("me", "after", "kind"), [
    ("a", 0.0, "acquired"),              # the planned primary: at once
    ("b", 0.0, None),                    # its first backup: one grace later
    ("b", GRACE - EPS, None),
    ("b", GRACE, "acquired"),
    ("c", GRACE, None),                  # the second backup: two graces later
    ("c", 2 * GRACE, "acquired"),
    ("d", 2 * GRACE, None),              # not planned: only once orphaned
    ("d", ORPHAN - EPS, None),
    ("d", ORPHAN, "orphans_taken"),
])
def test_a_free_lease_is_taken_by_its_planned_owner_and_by_others_only_in_turn(
        me: str, after: float, kind: str | None) -> None:
    scene = Scene().row("k", None).later(after)
    assert taken(scene.snap(me, K_ABC)) == ({"k": kind} if kind else {})


@pytest.mark.parametrize("me", ["a", "b", "d"])
def test_a_free_lease_at_shard_end_is_taken_by_nobody(me: str) -> None:
    # fully processed: taking it meant a take and a release every few ticks while the key
    # stayed planned (fleetsim seed 7032: 10 takes of one finished shard in 16 s)
    from kinesis.lease_loop.checkpoints import SHARD_END

    scene = Scene().row("k", None).later(ORPHAN)
    scene.rows["k"] = replace(scene.rows["k"], checkpoint=SHARD_END, state=LeaseState.SHARD_END)
    assert taken(scene.snap(me, K_ABC)) == {}
    held = Scene().row("k", "c", counter=3).later(ORPHAN)  # held (its holder gone): taken over as before
    held.rows["k"] = replace(held.rows["k"], checkpoint=SHARD_END, state=LeaseState.SHARD_END)
    assert taken(held.snap(me, K_ABC)) != {}


@pytest.mark.parametrize(("me", "after", "kind"), [
    ("a", 0.0, "created"),
    ("b", 0.0, None),
    ("b", GRACE - EPS, None),
    ("b", GRACE, "created"),
    ("d", ORPHAN - EPS, None),
    ("d", ORPHAN, "orphans_taken"),
])
def test_a_missing_row_is_created_by_its_planned_owner_from_the_moment_it_is_first_seen_missing(
        me: str, after: float, kind: str | None) -> None:
    scene = Scene()
    first = decisions.takes(scene.snap(me, K_ABC), ["k"])
    assert first.timers == {"k": Seen(None, None, scene.clock())}  # the timer starts now
    scene.seen.update(first.timers)
    scene.later(after)
    result = decisions.takes(scene.snap(me, K_ABC), ["k"])
    expected = {"k": kind} if kind else {}
    assert {t.key: t.kind for t in result.takes} == expected
    assert all(t.lease is None for t in result.takes)  # no row: the write creates it
    assert result.timers == {}  # the timer runs on: not restarted


@pytest.mark.parametrize(("me", "after", "kind"), [
    ("a", LEASE - EPS, None),            # x's lease has not expired yet
    ("a", LEASE, "takeovers"),           # the planned primary takes it once expired
    ("b", LEASE, None),
    ("b", LEASE + GRACE, "takeovers"),
    ("c", LEASE + GRACE, None),
    ("c", LEASE + 2 * GRACE, "takeovers"),
    ("d", LEASE + 2 * GRACE, None),
    ("d", ORPHAN, "orphans_taken"),
])
def test_an_expired_lease_is_taken_over_by_its_planned_owner_first(me: str, after: float, kind: str | None) -> None:
    scene = Scene().row("k", "x", counter=7).later(after)  # x crashed: its counter stopped
    assert taken(scene.snap(me, K_ABC)) == ({"k": kind} if kind else {})


@pytest.mark.parametrize(("me", "after", "kind"), [
    ("b", LEASE - EPS, None),            # the primary a still holds it
    ("b", LEASE, "takeovers"),           # a's first backup, once a's lease expired
    ("c", LEASE, None),                  # the second backup waits one grace more
    ("c", LEASE + GRACE - EPS, None),
    ("c", LEASE + GRACE, "takeovers"),
])
def test_a_backup_takes_over_only_after_the_primarys_lease_expired(me: str, after: float, kind: str | None) -> None:
    scene = Scene().row("k", "a", counter=3).later(after)
    assert taken(scene.snap(me, K_ABC)) == ({"k": kind} if kind else {})


def test_a_renewal_restarts_the_expiry_a_backup_waits_for() -> None:
    scene = Scene().row("k", "a", counter=3)
    for counter in range(4, 10):  # a renews every tick: its lease never expires
        scene.later(TIMING.tick_interval).row("k", "a", counter=counter)
        assert taken(scene.snap("b", K_ABC)) == {}
    scene.later(LEASE)
    assert taken(scene.snap("b", K_ABC)) == {"k": "takeovers"}


def test_a_backup_behind_owners_whose_sessions_are_gone_takes_over_as_the_first_live_one() -> None:
    # k's owners p and q never ran (no session row for a lease duration), then c; x held k and
    # crashed: c takes it once expired, not two graces later (seed 539271: a crash bound)
    scene = Scene().row("k", "x", counter=7)
    gone = {m: SessionSeen(None, 0, scene.clock(), scene.clock()) for m in ("p", "q")}
    scene.later(LEASE)
    the_plan = plan(k="p,q,c")
    assert taken(read_now(scene.snap("c", the_plan), gone)) == {"k": "takeovers"}
    assert taken(scene.snap("c", the_plan)) == {}  # their sessions not read this round: in turn
    live_q = {**gone, "q": SessionSeen("tok-q", 3, scene.clock(), scene.clock())}
    assert taken(read_now(scene.snap("c", the_plan), live_q)) == {}  # q may be running: one grace


@pytest.mark.parametrize("me", ["a", "c", "d"])
def test_a_member_never_takes_a_lease_it_is_not_planned_for_while_the_holder_is_live(me: str) -> None:
    # the plan gives k to a, but b holds it and keeps renewing: a gets it by hand-off, never by
    # taking it; c (a backup) and d (not planned) leave it alone too, however long it lasts
    scene = Scene().row("k", "b", counter=1)
    for counter in range(2, 40):
        scene.later(TIMING.tick_interval).row("k", "b", counter=counter)
        assert taken(scene.snap(me, K_ABC)) == {}
    assert scene.clock() - 1000.0 > 2 * ORPHAN


@pytest.mark.parametrize(("me", "after", "kind"), [
    ("a", ADOPT - EPS, None),            # b may still adopt it
    ("a", ADOPT, "offers_withdrawn"),    # a, the next planned owner, takes it back
    ("c", ADOPT, None),
    ("c", ADOPT + GRACE, "offers_withdrawn"),
    ("d", ORPHAN - EPS, None),
    ("d", ORPHAN, "orphans_taken"),
])
def test_an_offer_not_adopted_within_adopt_timeout_is_withdrawn(me: str, after: float, kind: str | None) -> None:
    # a handed k to b (the plan's primary); b never adopts it
    scene = Scene().row("k", "b", counter=5, handed_off_by="a").later(after)
    assert taken(scene.snap(me, plan(k="b,a,c"))) == ({"k": kind} if kind else {})


@pytest.mark.parametrize(("handed_off_by", "after", "kind"), [
    (None, LEASE - EPS, None),
    (None, LEASE, "takeovers"),          # left behind by an earlier run of this member id
    ("b", 10 * LEASE, None),             # handed to it: adopted, never taken
])
def test_a_row_naming_this_member_but_not_held_is_taken_back_once_expired(
        handed_off_by: str | None, after: float, kind: str | None) -> None:
    scene = Scene().row("k", "a", counter=2, handed_off_by=handed_off_by).later(after)
    assert taken(scene.snap("a", K_ABC)) == ({"k": kind} if kind else {})


def test_held_keys_and_a_missing_plan_take_nothing() -> None:
    scene = Scene().row("k", None).later(ORPHAN)
    assert taken(scene.snap("a", K_ABC, held={"k"})) == {}
    assert decisions.takes(scene.snap("a", None), ["k"]) == decisions.Takes({}, ())


def test_takes_carry_the_row_they_are_conditional_on() -> None:
    scene = Scene().row("k", "x", counter=7).later(LEASE)
    (take,) = decisions.takes(scene.snap("a", K_ABC), ["k"]).takes
    assert take == Take("k", "takeovers", scene.rows["k"])


# --- adopting --------------------------------------------------------------------------------


def test_leases_handed_to_this_member_are_adopted_by_key_unless_held() -> None:
    scene = (Scene().row("k3", "a", handed_off_by="b").row("k1", "a", handed_off_by="c")
             .row("k2", "a").row("k4", "b", handed_off_by="a").row("k6", "a", handed_off_by="b")
             .row("k5", "a", handed_off_by="b"))
    adopted = decisions.adoptions(scene.snap("a", held={"k5"}))
    assert [(t.key, t.kind) for t in adopted] == [("k1", "adopted"), ("k3", "adopted"), ("k6", "adopted")]
    assert [t.lease for t in adopted] == [scene.rows["k1"], scene.rows["k3"], scene.rows["k6"]]


# --- suspecting ------------------------------------------------------------------------------


@pytest.mark.parametrize(("rows", "after", "suspected"), [
    ([("k1", "x", None), ("k2", "x", None)], LEASE, {"x"}),           # all of x's leases expired
    ([("k1", "x", None), ("k2", "x", None)], LEASE - EPS, set()),
    ([("k1", "x", "a")], ADOPT, {"x"}),                               # x left an offer unadopted
    ([("k1", "x", "a")], ADOPT - EPS, set()),
    ([("k1", "a", None)], 10 * LEASE, set()),                         # never suspects itself
    ([("k1", None, None)], 10 * LEASE, set()),                        # a free lease has no holder
])
def test_a_holder_whose_leases_all_expired_is_suspected(
        rows: list[tuple[str, str | None, str | None]], after: float, suspected: set[str]) -> None:
    scene = Scene()
    for key, owner, by in rows:
        scene.row(key, owner, handed_off_by=by)
    result = decisions.suspect(scene.later(after).snap("a"), active=())
    assert set(result.suspicions.suspects) == suspected
    assert set(result.suspected) == suspected


def test_a_holder_with_one_live_lease_is_not_suspected() -> None:
    scene = Scene().row("k1", "x", counter=1).row("k2", "x", counter=1).later(LEASE)
    scene.row("k2", "x", counter=2)  # x renewed k2 just now
    assert decisions.suspect(scene.snap("a"), active=()).suspicions.suspects == {}


def test_a_suspect_seen_writing_is_cleared_at_once() -> None:
    scene = Scene().row("k1", "x").later(LEASE)
    snap = scene.snap("a", suspects={"x"})
    result = decisions.suspect(snap, active={"x"})
    assert result.suspicions.suspects == {} and result.revived == ("x",)
    assert "x" not in result.suspicions.counts and "x" not in result.suspicions.probation


def test_a_suspect_is_put_on_probation_after_a_back_off_that_doubles_each_time() -> None:
    scene = Scene()

    def judged(state: Suspicions) -> Suspicions:
        snap = Snapshot(scene.clock(), "a", TIMING, rows=dict(scene.rows), seen=dict(scene.seen),
                        suspicions=state)
        return decisions.suspect(snap, active=()).suspicions

    state = judged(Suspicions())
    for n in (1, 2):  # suspected the n-th time in a row: probation after n back-offs of orphan_timeout
        scene.row("k1", "x", counter=n).later(LEASE)
        state = judged(state)
        assert state.counts == {"x": n} and "x" in state.suspects and "x" not in state.probation
        scene.rows.clear()  # x's lease was taken over: nothing renews the suspicion
        scene.later(2 ** (n - 1) * ORPHAN - EPS)
        state = judged(state)
        assert "x" in state.suspects and "x" not in state.probation
        scene.later(EPS)
        state = judged(state)
        assert "x" not in state.suspects and "x" in state.probation


def test_a_new_membership_version_puts_every_suspect_on_probation() -> None:
    state = Suspicions({"x": 1.0, "y": 2.0}, {"x": 3, "y": 1}, frozenset({"z"}))
    assert state.forgiven() == Suspicions({}, {"x": 3, "y": 1}, frozenset({"x", "y", "z"}))


@pytest.mark.parametrize(("ready", "keep_suspects", "members"), [
    (True, False, ["a", "c"]),
    (False, False, ["c"]),
    (True, True, ["a", "b", "c"]),
    (False, True, ["b", "c"]),
])
def test_the_plan_leaves_out_suspects_and_this_member_until_ready(
        ready: bool, keep_suspects: bool, members: list[str]) -> None:
    planned = decisions.plan_members(["a", "b", "c"], "a", {"b": 1.0}, ready=ready, keep_suspects=keep_suspects)
    assert planned == members
    assert decisions.plan_members(["c"], "a", {}, ready=True, keep_suspects=False) == ["c", "a"]


# --- handing off -----------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "the_plan", "stopping", "target"), [
    ("k", plan(k="b,a"), False, "b"),
    ("k", plan(k="a,b"), False, "a"),       # planned here: keep it
    ("gone", plan(k="b,a"), False, None),   # no longer planned: release
    ("k", None, False, "a"),                # no plan (no members): keep it
    ("k", None, True, None),                # ... unless stopping: release
])
def test_a_held_lease_belongs_to_its_planned_owner(
        key: str, the_plan: Assignment | None, stopping: bool, target: str | None) -> None:
    snap = Scene().snap("a", the_plan, stopping=stopping)
    if the_plan is None:
        snap = Snapshot(snap.now, "a", TIMING, planned=frozenset({"k"}), stopping=stopping)
    assert decisions.handoff_target(snap, key) == target


def test_a_stopping_member_hands_a_lease_past_owners_that_do_not_run_to_the_next_member() -> None:
    # k's owners p (listed, never ran: absent) and a (stopping): releasing k would leave it
    # for orphan_timeout; the next member in the sorted list after the owners takes the offer.
    the_plan = Assignment(("a", "b", "c", "p"), {"k": ("p", "a"), "j": ("b", "c")}, {})
    snap = replace(Scene().snap("a", the_plan, stopping=True), absent=frozenset({"p"}))
    assert decisions.handoff_target(snap, "k") == "b"
    snap = replace(snap, suspicions=Suspicions({"b": snap.now}, {"b": 1}, frozenset()))
    assert decisions.handoff_target(snap, "k") == "c"
    assert decisions.handoff_target(replace(snap, stopping=False), "k") == "p"  # running: its planned owner


def _may_offer(scene: Scene, target: str | None, **snap: Any) -> bool | None:
    """Whether a hand-off to ``target`` starts now: None (not now), else whether it counts."""
    s = scene.snap("a", plan(k="b,a"), **snap)
    started = decisions.start_handoff(s, decisions.handoff_budget(s), target)
    return None if started is None else started[0]


@pytest.mark.parametrize(("case", "kwargs", "expected"), [
    ("a live planned owner", {}, True),
    ("a suspect", {"suspects": {"b"}}, None),
    ("on probation, holding nothing", {"probation": {"b"}}, True),
    ("on probation, one probe in flight", {"probation": {"b"}, "offers": {"k9": Offer("b", True)}}, None),
    ("the limit reached", {"offers": {"k8": Offer("c", True), "k9": Offer("d", True)}}, None),
    ("under the limit", {"offers": {"k8": Offer("c", True), "k9": Offer(None, False)}}, True),
    ("stopping: to anyone, no limit", {"suspects": {"b"}, "stopping": True, "max_handoffs": 1,
                                       "offers": {"k9": Offer("c", True)}}, False),
])
def test_a_graceful_handoff_goes_to_the_planned_owner_only_while_it_is_live(
        case: str, kwargs: dict[str, object], expected: bool | None) -> None:
    assert _may_offer(Scene(), "b", **kwargs) is expected, case


def test_no_handoff_to_a_member_that_lets_a_lease_expire_or_an_offer_wait() -> None:
    scene = Scene().row("other", "b", counter=4).later(LEASE)
    assert _may_offer(scene, "b") is None  # b stopped renewing one of its leases
    scene = Scene().row("other", "b", counter=4, handed_off_by="c").later(ADOPT)
    assert _may_offer(scene, "b") is None  # b has not adopted what c handed it
    scene = Scene().row("other", "b", counter=4).later(LEASE - EPS)
    assert _may_offer(scene, "b") is True


def test_suspects_get_no_handoffs_and_probation_gets_one_at_a_time() -> None:
    scene = Scene().row("other", "b", counter=1)  # b holds a lease: not proven alive by adopting
    assert _may_offer(scene, "b", suspects={"b"}) is None
    assert _may_offer(scene, "b", probation={"b"}) is None
    assert _may_offer(scene, "b") is True


def test_releases_and_keeping_are_not_handoffs() -> None:
    scene = Scene()
    full = {"offers": {"k8": Offer("c", True), "k9": Offer("d", True)}}
    assert _may_offer(scene, None, **full) is False  # a release: not counted, never limited
    s = scene.snap("a", plan(k="a,b"))
    assert decisions.start_handoff(s, decisions.handoff_budget(s), "a") is None


def test_the_budget_counts_hand_offs_in_progress_not_per_round() -> None:
    s = Scene().snap("a", plan(k="b,a"), offers={"k1": Offer("c", True), "k2": Offer(None, False)},
                     max_handoffs=2)
    budget = decisions.handoff_budget(s)
    assert budget.in_flight == 1 and budget.probing == {"c", None}
    started = decisions.start_handoff(s, budget, "b")
    assert started is not None and started[0] is True
    budget = started[1]
    assert budget.in_flight == 2 and "b" in budget.probing
    assert decisions.start_handoff(s, budget, "d") is None  # at the limit
    budget = budget.finished(True)  # one completed
    assert decisions.start_handoff(s, budget, "d") is not None
    assert budget.finished(False) == budget  # a release never counted


@pytest.mark.parametrize(("waited", "overdue"), [(TIMING.handoff_timeout - EPS, False),
                                                 (TIMING.handoff_timeout, True)])
def test_a_slow_listener_is_overdue_after_handoff_timeout(waited: float, overdue: bool) -> None:
    scene = Scene()
    requested = scene.clock()
    assert decisions.handoff_overdue(scene.later(waited).snap("a"), requested) is overdue


# --- observing and scheduling ----------------------------------------------------------------


def test_observing_restarts_timers_of_changed_rows_and_names_the_writers() -> None:
    clock = FakeClock(50.0)
    seen = {"k1": Seen(1, "x", 0.0), "k2": Seen(1, "y", 0.0), "k3": Seen(1, "z", 0.0), "k4": Seen(None, None, 0.0)}
    rows = {"k1": Lease("k1", "x", 2), "k2": Lease("k2", "y", 1), "k3": Lease("k3", "w", 2, handed_off_by="z"),
            "k5": Lease("k5", "v", 1)}
    seen_now = decisions.observe(rows, seen, clock())
    assert seen_now.changed == {"k1": Seen(2, "x", 50.0), "k3": Seen(2, "w", 50.0), "k5": Seen(1, "v", 50.0)}
    assert seen_now.active == {"x"}  # a hand-off (k3) and a first sight (k5) prove nothing
    assert seen_now.gone == ()  # k4 has no row yet: its missing-row timer stays
    assert decisions.observe({}, seen, clock()).gone == ("k1", "k2", "k3")
    assert decisions.observe({}, seen, clock(), partial=True).gone == ()


def test_the_next_expiry_is_the_first_future_expiry_of_someone_elses_lease() -> None:
    seen = {"k1": Seen(1, "x", 10.0), "k2": Seen(1, "y", 4.0), "k3": Seen(1, "a", 1.0),
            "k4": Seen(None, None, 0.0), "k5": Seen(1, "z", 2.0)}
    assert decisions.next_expiry(seen, {"k5"}, "a", LEASE, after=0.0) == 4.0 + LEASE
    assert decisions.next_expiry(seen, {"k5"}, "a", LEASE, after=4.0 + LEASE) == 10.0 + LEASE
    assert decisions.next_expiry(seen, set(), "a", LEASE, after=10.0 + LEASE) == float("inf")


# --- sessions ---------------------------------------------------------------------------------


def session_scene(token: str = "tok-x", *, leased: bool = True) -> tuple[Scene, dict[str, SessionSeen]]:
    """x renewed its session (tok-x, counter 5) at t0 for the last time; its lease row k
    (naming session ``token``, held under a session lease unless ``leased`` is False) is first
    read half a lease later (a checkpoint of x's changed it since this member last read it)."""
    scene = Scene()
    sessions = {"x": SessionSeen("tok-x", 5, scene.clock(), scene.clock(), scene.clock() - LEASE)}
    scene.later(LEASE / 2)
    state = LeaseState.ACTIVE_SESSION if leased else LeaseState.ACTIVE
    scene.rows["k"] = Lease("k", "x", 7, state=state, session=token)
    scene.seen["k"] = Seen(7, "x", scene.clock(), token, leased)
    return scene, sessions


def read_now(snap: Snapshot, sessions: dict[str, SessionSeen]) -> Snapshot:
    """``snap`` with ``sessions`` read this round (unchanged since their ``since``)."""
    return replace(snap, sessions={m: replace(s, read_at=snap.now) for m, s in sessions.items()})


def test_a_session_lease_expires_with_its_session_whatever_its_row_did_and_its_take_checks_it() -> None:
    # the holder's session chain is what keeps a session lease valid: a checkpoint (a row
    # write) never makes it valid for longer, so the row's own timer does not matter
    scene, sessions = session_scene()
    scene.later(LEASE / 2 - EPS)  # LEASE - EPS after the session's last renewal
    assert decisions.takes(read_now(scene.snap("a", K_ABC), sessions), ["k"]).takes == ()
    scene.later(EPS)
    got = decisions.takes(read_now(scene.snap("a", K_ABC), sessions), ["k"]).takes
    assert [(t.key, t.kind, t.check) for t in got] == [("k", "takeovers", SessionCheck("x", "tok-x", 5))]
    assert decisions.suspect(read_now(scene.snap("b"), sessions), ()).suspected == ("x",)
    assert decisions.next_expiry(scene.seen, set(), "a", LEASE, after=0.0, sessions=sessions) == 1000.0 + LEASE


def test_a_session_not_read_this_round_does_not_time_a_lease() -> None:
    # an old view (a member not watched any more, last seen by a sweep) is no news
    scene, sessions = session_scene()
    scene.later(LEASE / 2)
    snap = replace(scene.snap("a", K_ABC), sessions=sessions)  # read at t0 only
    assert decisions.takes(snap, ["k"]).takes == ()
    assert decisions.suspect(replace(scene.snap("b"), sessions=sessions), ()).suspected == ()
    assert decisions.takes(scene.snap("a", K_ABC), ["k"]).takes == ()  # no session read at all


def test_a_lease_naming_a_session_that_is_gone_is_timed_from_the_first_sight_of_its_replacement() -> None:
    # taken by an earlier run of x: x's current session replaced it; this member first saw the
    # new token when it first read the row (the earlier run's chain ended before that)
    scene, sessions = session_scene(token="tok-old")
    sessions = {"x": replace(sessions["x"], token_since=scene.clock())}
    scene.later(LEASE - EPS)
    assert decisions.takes(read_now(scene.snap("a", K_ABC), sessions), ["k"]).takes == ()
    scene.later(EPS)
    got = decisions.takes(read_now(scene.snap("a", K_ABC), sessions), ["k"]).takes
    assert [(t.kind, t.check) for t in got] == [("takeovers", SessionCheck("x", "tok-old", None))]
    long_ago = {"x": replace(sessions["x"], token_since=scene.clock() - 5 * LEASE)}  # the row's timer
    assert taken(read_now(scene.snap("a", K_ABC), long_ago)) == {"k": "takeovers"}  # does not matter


def test_a_row_its_holder_renews_is_unchanged_while_its_row_or_its_session_is() -> None:
    # a row naming a session its holder renews by writing it (a release before 0.2, or a
    # session that cannot be renewed): expired only once both have been unchanged
    scene, sessions = session_scene(leased=False)
    scene.later(LEASE / 2)  # the session is a lease duration old, the row half of one
    assert decisions.takes(read_now(scene.snap("a", K_ABC), sessions), ["k"]).takes == ()
    scene.later(LEASE / 2)
    got = decisions.takes(read_now(scene.snap("a", K_ABC), sessions), ["k"]).takes
    assert [(t.kind, t.check) for t in got] == [("takeovers", SessionCheck("x", "tok-x", 5))]


def test_a_row_of_this_member_id_is_recovered_at_once_if_it_names_this_session_else_taken_back_once_expired() -> None:
    scene = Scene()
    scene.rows["k"] = Lease("k", "a", 3, state=LeaseState.ACTIVE_SESSION, session="tok-now")
    scene.seen["k"] = Seen(3, "a", scene.clock(), "tok-now", True)
    mine = replace(scene.snap("a", K_ABC), session="tok-now", session_since=scene.clock())
    assert taken(mine) == {"k": "recovered"}  # its own take, answered with an error after all
    scene.rows["k"] = Lease("k", "a", 3, state=LeaseState.ACTIVE_SESSION, session="tok-before")
    scene.seen["k"] = Seen(3, "a", scene.clock() - 2 * LEASE, "tok-before", True)
    started = scene.clock()
    scene.later(LEASE - EPS)  # an earlier run's: gone since this run's session started at the latest
    earlier = replace(scene.snap("a", K_ABC), session="tok-now", session_since=started)
    assert decisions.takes(earlier, ["k"]).takes == ()
    scene.later(EPS)
    earlier = replace(scene.snap("a", K_ABC), session="tok-now", session_since=started)
    got = decisions.takes(earlier, ["k"]).takes
    assert [(t.kind, t.check) for t in got] == [("takeovers", SessionCheck("a", "tok-before", None))]


def test_a_row_read_late_does_not_make_a_holder_with_a_session_read_now_active() -> None:
    seen = {"k1": Seen(1, "x", 0.0, "tok-x"), "k2": Seen(1, "y", 0.0, "tok-y")}
    rows = {"k1": Lease("k1", "x", 2, session="tok-x"), "k2": Lease("k2", "y", 2, session="tok-y")}
    fresh = {"x": SessionSeen("tok-x", 5, 0.0, 50.0)}
    assert decisions.observe(rows, seen, 50.0, sessions=fresh).active == {"y"}
    stale = {"x": SessionSeen("tok-x", 5, 0.0, 40.0)}  # not read this round: the row tells
    assert decisions.observe(rows, seen, 50.0, sessions=stale).active == {"x", "y"}


def test_stale_session_rows_are_deleted_by_the_chore_owner_once_unlisted_unchanged_and_owning_nothing() -> None:
    listed = ["a", "b", "c"]
    [owner] = chore_owners(decisions.SESSION_CHORE, listed)
    sessions = {
        "gone": SessionSeen("t1", 4, 0.0, 50.0),      # unlisted, unchanged, owns nothing: deleted
        "fresh": SessionSeen("t2", 9, 45.0, 50.0),    # unlisted but renewed within a lease duration
        "holding": SessionSeen("t3", 2, 0.0, 50.0),   # unlisted, unchanged, still owns a lease
        "b": SessionSeen("t4", 1, 0.0, 50.0),         # listed
    }
    leases = {"k": Lease("k", "holding", 3)}
    got = decisions.stale_sessions(sessions, leases, listed, owner, 50.0, LEASE)
    assert got == [("gone", sessions["gone"])]
    others = [m for m in listed if m != owner]
    assert all(decisions.stale_sessions(sessions, leases, listed, m, 50.0, LEASE) == [] for m in others)
