"""RoundReads: what a round reads (a scan, or scoped rows and sweeps) and the view it makes.

A table in memory that counts its reads and a FakeClock: no DynamoDB, no threads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from hashring import StaticMembership
from hashring.errors import MembershipError
from kinesis.errors import KinesisRetriesExhaustedError
from kinesis.lease_loop.holder import LeaseHolder
from kinesis.lease_loop.lease_listener import NullListener, RoundRecord
from kinesis.lease_loop.membership import MemberList
from kinesis.lease_loop.observations import Observations
from kinesis.lease_loop.plan import PublishedPlan
from kinesis.lease_loop.round_reads import Planner, RoundReads, ScopedReads
from kinesis.lease_loop.settings import CoordinatorSettings, ResourceKeys, provider_of
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import TRIM_HORIZON, Lease, SessionRow, TableSnapshot
from kinesis.lease_loop.timing import FakeClock, LeaseTiming

KEYS = [f"k{i:02d}" for i in range(40)]
MEMBERS = ("a", "b", "c", "d")
TIMING = LeaseTiming.of(3.0)
SWEEP = 90.0


class MemoryTable(LeaseTable):
    """Lease rows in memory; records every scan (its consistency) and every batch read."""

    def __init__(self, rows: Mapping[str, Lease]):
        super().__init__(None, "memory-leases")
        self.rows = dict(rows)
        self.scans: list[bool] = []
        self.gets: list[set[str]] = []
        self.session_gets: list[set[str]] = []
        self.sessions: dict[str, SessionRow] = {}

    def scan(self, *, page_size: int | None = None, consistent: bool = True) -> TableSnapshot:
        self.scans.append(consistent)
        return TableSnapshot(dict(self.rows), {}, {}, read_at=0.0)

    def read_round(self, keys: Iterable[str], members: Iterable[str], raw: Iterable[str], *,
                   consistent: bool = False
                   ) -> tuple[dict[str, Lease | None], dict[str, SessionRow | None], dict[str, dict[str, Any]]]:
        wanted = set(keys)
        watched = set(members)
        self.gets.append(wanted)
        self.session_gets.append(watched)
        return {k: self.rows.get(k) for k in wanted}, {m: self.sessions.get(m) for m in watched}, {}


class Unlisted(StaticMembership):
    """A member list that cannot be read."""

    def members(self) -> tuple[str, ...]:
        raise MembershipError("the API server is away")


@dataclass
class Parts:
    reads: RoundReads
    table: MemoryTable
    holder: LeaseHolder
    record: RoundRecord
    scoped: ScopedReads
    clock: FakeClock


def parts(me: str = "a", *, reads: str = "scan", members: Iterable[str] = ("a", "b"),
          rows: Mapping[str, Lease] | None = None, membership: StaticMembership | None = None,
          table: MemoryTable | None = None) -> Parts:
    clock = FakeClock(100.0)
    table = table if table is not None else MemoryTable(rows or {})
    settings = CoordinatorSettings(
        timing=TIMING, replicas=1, write_threads=1, max_concurrent_handoffs=2, reads=reads,
        sweep_interval=SWEEP, backup_check_interval=TIMING.lease_duration / 2, weights=None,
        listener=NullListener(), resources=provider_of(KEYS), initial_checkpoint=TRIM_HORIZON,
        drive=None, warmup_ticks=0,
    )
    membership = membership or StaticMembership(members, me)
    holder = LeaseHolder(table, me, TIMING, clock)
    record = RoundRecord(me, holder.count, clock)
    observations = Observations(me)
    member_list = MemberList(membership, None, me, holder.count, clock, observations.membership)
    scoped = ScopedReads(me)
    planner = Planner(me, 1, None, scoped if reads == "scoped" else None, PublishedPlan(None, me))
    round_reads = RoundReads(me, settings, holder, member_list, ResourceKeys(settings.resources, me, holder.count),
                             observations, scoped, planner, record, clock)
    return Parts(round_reads, table, holder, record, scoped, clock)


# --- reads="scan" ------------------------------------------------------------------------


def test_a_scan_round_reads_every_row_consistently_and_may_take_every_key() -> None:
    row = Lease("k03", "b", 7)
    p = parts(rows={"k03": row})
    view = p.reads.read(full=True)
    assert view is not None
    assert p.table.scans == [True] and p.table.gets == []
    assert view.to_take == KEYS and view.snap.planned == frozenset(KEYS)
    assert view.snap.rows == {"k03": row} and view.last_full == {"k03": row}
    assert view.snap.seen["k03"].counter == 7  # the expiry timer started
    plan = view.snap.plan
    assert plan is not None and plan is p.reads.last_plan
    assert set(plan.members) == {"a", "b"} and plan.owner("k03") == "b"  # planned from the holders
    assert view.ready and view.snap.me == "a"
    assert p.record.last_table_read_at == 100.0


def test_a_member_not_listed_or_stopping_plans_without_itself_and_takes_nothing() -> None:
    view = parts(members=("b",)).reads.read(full=True)
    assert view is not None and not view.ready
    assert view.snap.plan is not None and set(view.snap.plan.members) == {"b"}
    p = parts()
    p.holder.stopping = True
    view = p.reads.read(full=True)
    assert view is not None and not view.ready
    assert view.snap.plan is not None and set(view.snap.plan.members) == {"b"}


def test_an_unreadable_member_list_gives_no_view_and_is_the_last_error() -> None:
    p = parts(membership=Unlisted(["a"], "a"))
    assert p.reads.read(full=True) is None
    assert p.table.scans == [True]  # the table was read (the round still renewed)
    assert p.record.last_table_read_at == 100.0
    assert p.record.last_error == "MembershipError: the API server is away"
    assert p.reads.last_plan is None


# --- reads="scoped" ----------------------------------------------------------------------


def test_scoped_reads_sweep_at_start_then_read_only_the_rows_that_can_change_a_decision() -> None:
    p = parts(reads="scoped", members=MEMBERS)
    first = p.reads.read(full=True)
    assert first is not None and p.table.scans == [False] and p.table.gets == []  # the start-up sweep
    p.clock.advance(0.5)
    view = p.reads.read(full=False)
    assert view is not None and p.table.scans == [False]  # no scan in steady state
    plan = view.snap.plan
    assert plan is not None and plan is p.reads.last_plan
    index = p.scoped.index(plan)
    read = p.table.gets[-1]
    assert read == set(index.primary)  # its own keys (none held yet)
    assert p.table.session_gets[-1] == set(index.backed_up)  # the session of each watched member
    assert list(view.to_take) == sorted(read)
    assert view.snap.planned == index.planned
    assert view.last_full == {}  # the sweep's rows (none)


def test_only_the_sweepers_sweep_again_after_sweep_interval() -> None:
    sweepers = [m for m in MEMBERS if ScopedReads(m).is_sweeper(list(MEMBERS))]
    assert len(sweepers) == 2
    for me in MEMBERS:
        p = parts(me, reads="scoped", members=MEMBERS)
        p.reads.read(full=True)
        p.clock.advance(SWEEP - 1)
        p.reads.read(full=True)
        assert len(p.table.scans) == 1, me  # not due yet
        p.clock.advance(1)
        p.reads.read(full=True)
        p.clock.advance(SWEEP)
        p.reads.read(full=True)
        assert len(p.table.scans) == (3 if me in sweepers else 1), me


def test_a_scoped_light_round_with_nothing_to_read_reads_nothing_a_tick_reads_one_key() -> None:
    p = parts(reads="scoped", members=("b", "c"))  # not listed: nothing planned for it, nothing to watch
    p.reads.read(full=True)
    p.clock.advance(1.0)
    view = p.reads.read(full=False)
    assert view is not None and list(view.to_take) == [] and p.table.gets == [] == p.table.session_gets
    assert p.record.last_table_read_at == 100.0  # nothing was read
    view = p.reads.read(full=True)
    assert view is not None and p.table.gets == [{KEYS[0]}]  # proof the table is reachable
    assert p.record.last_table_read_at == 101.0


class StaleSessions(MemoryTable):
    """Eventually consistent reads of a session row answer from stale replicas: the versions
    queued in ``stale`` (member -> rows, None: no row yet), one a read; strongly consistent
    reads answer the current row."""

    def __init__(self, rows: Mapping[str, Lease]):
        super().__init__(rows)
        self.stale: dict[str, list[SessionRow | None]] = {}
        self.consistent_gets: list[set[str]] = []

    def read_round(self, keys: Iterable[str], members: Iterable[str], raw: Iterable[str], *,
                   consistent: bool = False
                   ) -> tuple[dict[str, Lease | None], dict[str, SessionRow | None], dict[str, dict[str, Any]]]:
        rows, sessions, extra = super().read_round(keys, members, raw, consistent=consistent)
        if consistent:
            self.consistent_gets.append(set(sessions))
            return rows, sessions, extra
        for member in sessions:
            if self.stale.get(member):
                sessions[member] = self.stale[member].pop(0)
        return rows, sessions, extra


def watching_a_session() -> tuple[StaleSessions, Any]:
    """Member b (scoped reads) watching a's session row, seen at counter 5 of token t1."""
    table = StaleSessions({})
    p = parts("b", reads="scoped", members=("a", "b"), table=table)
    p.reads.read(full=True)  # the start-up sweep
    table.sessions["a"] = SessionRow("a", "t1", 5)
    rounds = 0
    while "a" not in p.reads._obs.sessions:
        p.clock.advance(TIMING.scan_interval)
        p.reads.read(full=False)
        rounds += 1
        assert rounds < 50
    return table, p


def test_stale_reads_of_a_watched_session_row_neither_restart_nor_end_its_timer() -> None:
    """A member that left deleted its session row, but replicas that missed the deletion keep
    answering its old row now and then: each such read is read again, strongly consistent, so
    the tombstone's timer (its leases' expiry) is not restarted by every flip. Stale reads of a
    live session (no row yet, an older counter) do not end or restart its timer either."""
    table, p = watching_a_session()
    obs = p.reads._obs
    alive = obs.sessions["a"]
    assert (alive.token, alive.counter) == ("t1", 5)
    table.stale["a"] = [None, SessionRow("a", "t1", 4)] * 10  # a replica without it, one a renewal behind
    for _ in range(20):
        p.clock.advance(TIMING.scan_interval)
        p.reads.read(full=False)
    assert (obs.sessions["a"].token, obs.sessions["a"].since) == ("t1", alive.since)  # timed from its last renewal
    assert table.consistent_gets  # the stale answers were read again
    del table.sessions["a"]  # it left
    table.stale["a"] = []
    while obs.sessions["a"].token is not None:
        p.clock.advance(TIMING.scan_interval)
        p.reads.read(full=False)
    gone = obs.sessions["a"]
    table.stale["a"] = [SessionRow("a", "t1", 5), None, SessionRow("a", "t1", 4), None] * 10
    for _ in range(40):
        p.clock.advance(TIMING.scan_interval)
        p.reads.read(full=False)
    assert obs.sessions["a"].token is None
    assert (obs.sessions["a"].since, obs.sessions["a"].token_since) == (gone.since, gone.token_since)


def renew_behind_replicas_repeating_counter_5(table: StaleSessions, p: Any) -> None:
    """For 3 lease durations a renews its session while every eventually consistent read of it
    answers counter 5; a must never look stalled."""
    obs = p.reads._obs
    for counter in range(6, 6 + int(3 * TIMING.lease_duration / TIMING.scan_interval)):
        table.sessions["a"] = SessionRow("a", "t1", counter)  # a renews
        table.stale["a"] = [SessionRow("a", "t1", 5)]  # every eventually consistent read: counter 5
        p.clock.advance(TIMING.scan_interval)
        p.reads.read(full=False)
        assert p.clock() - obs.sessions["a"].since < 1.5 * TIMING.lease_duration + TIMING.scan_interval, \
            "a live session looked stalled"


def test_stale_reads_repeating_a_live_sessions_last_counter_do_not_make_it_look_stalled() -> None:
    """Fleetsim seed 3142 (long, session membership, no disturbance): for a lease duration,
    replicas answered the counter m0 had last seen of m1's session while m1 kept renewing it;
    m0 took the session for stalled and removed a running member from the member list. A
    session unchanged for a lease duration is read again, strongly consistent, before it
    counts as stalled."""
    table, p = watching_a_session()
    renew_behind_replicas_repeating_counter_5(table, p)
    assert table.consistent_gets


def test_rows_an_earlier_process_of_this_member_id_holds_are_read_every_round_whatever_the_plan() -> None:
    """Fleetsim seed 3981 (long; a corrupt plan chunk, then a second process under m2's id):
    the old process refused to run and left a lease naming m2 under its session; the new
    process planned from another plan that gave the key to listed members that never ran,
    so it never read the row, and neither did anyone else until the plan moved: the key
    stayed unprocessed for 3 lease durations. A process reads every row it last saw naming
    its member id under another session each round, so it takes them back (``takes``: a
    lease duration after its first renewal) whoever its plan names, then hands them on."""
    p = parts("a", reads="scoped", members=MEMBERS)
    plan = p.reads._planner(list(MEMBERS), {}, KEYS, {}, ready=True)
    assert plan is not None
    theirs = next(k for k in KEYS if "a" not in plan.owners[k])
    p.table.rows[theirs] = replace(Lease(theirs, "a", 9), session="an-earlier-process")
    mine = next(k for k in KEYS if k != theirs)
    p.table.rows[mine] = replace(Lease(mine, "a", 4), session=p.holder.session)
    p.reads.read(full=True)  # the start-up sweep sees both rows
    for _ in range(4):
        p.clock.advance(TIMING.scan_interval)
        view = p.reads.read(full=False)
        assert view is not None and theirs in p.table.gets[-1] and theirs in view.to_take
    p.table.rows[theirs] = replace(Lease(theirs, "b", 10), session="b-session")  # taken on by its owner
    p.clock.advance(TIMING.scan_interval)
    p.reads.read(full=False)
    p.clock.advance(TIMING.scan_interval)
    p.reads.read(full=False)
    assert theirs not in p.table.gets[-1]  # moved on: no longer read


class FailingConsistentReads(StaleSessions):
    """:class:`StaleSessions` whose next ``fail`` strongly consistent reads raise (throttled
    past the retries)."""

    def __init__(self, rows: Mapping[str, Lease]):
        super().__init__(rows)
        self.fail = 0

    def read_round(self, keys: Iterable[str], members: Iterable[str], raw: Iterable[str], *,
                   consistent: bool = False
                   ) -> tuple[dict[str, Lease | None], dict[str, SessionRow | None], dict[str, dict[str, Any]]]:
        if consistent and self.fail:
            self.fail -= 1
            raise KinesisRetriesExhaustedError("throttled")
        return super().read_round(keys, members, raw, consistent=consistent)


def test_a_failed_consistent_read_of_a_session_about_to_stall_is_made_again_next_round() -> None:
    """The consistent read that confirms a session unchanged for a lease duration (seed 3142)
    is owed until it succeeds: if it fails (throttled), the next round makes it again, instead
    of taking a stale replica's repetition of the last counter for a stall."""
    table = FailingConsistentReads({})
    p = parts("b", reads="scoped", members=("a", "b"), table=table)
    p.reads.read(full=True)
    table.sessions["a"] = SessionRow("a", "t1", 5)
    while "a" not in p.reads._obs.sessions:
        p.clock.advance(TIMING.scan_interval)
        p.reads.read(full=False)
    obs = p.reads._obs
    table.fail = 1
    failed = 0
    for counter in range(6, 6 + int(3 * TIMING.lease_duration / TIMING.scan_interval)):
        table.sessions["a"] = SessionRow("a", "t1", counter)  # a renews
        table.stale["a"] = [SessionRow("a", "t1", 5)]  # every eventually consistent read: counter 5
        p.clock.advance(TIMING.scan_interval)
        try:
            p.reads.read(full=False)
        except KinesisRetriesExhaustedError:
            failed += 1  # a round that fails is retried by the loop: the next one reads again
            continue
        assert p.clock() - obs.sessions["a"].since < 1.5 * TIMING.lease_duration + TIMING.scan_interval, \
            "a live session looked stalled after a failed consistent read"
    assert failed == 1 and table.consistent_gets


def test_a_reread_of_a_row_that_was_behind_does_not_use_up_the_stall_confirming_read() -> None:
    """A stale replica one renewal behind (counter 4 where 5 was seen) is read again, strongly
    consistent; that re-read is no confirmation of a stall. Marked as one, it let later stale
    reads repeating counter 5 while a renewed make a look stalled without a consistent read
    (found by review)."""
    table, p = watching_a_session()
    obs = p.reads._obs
    table.stale["a"] = [SessionRow("a", "t1", 4)]  # one read a renewal behind: read again at once
    while table.stale["a"]:
        p.clock.advance(TIMING.scan_interval)
        p.reads.read(full=False)
    assert table.consistent_gets and (obs.sessions["a"].token, obs.sessions["a"].counter) == ("t1", 5)
    renew_behind_replicas_repeating_counter_5(table, p)
