"""ScopedReads: which rows a scoped round reads, and which holders look stalled. No I/O."""

from __future__ import annotations

import functools
from collections.abc import Callable

from hashring import Assignment, stable_assignment
from kinesis.lease_loop.decisions import SessionSeen
from kinesis.lease_loop.round_reads import ScopedReads
from kinesis.lease_loop.table.model import SessionRow

MEMBERS = ("a", "b", "c", "d")
KEYS = [f"k{i:02d}" for i in range(40)]
PLAN = stable_assignment(MEMBERS, KEYS, replicas=1)


def test_reads_planned_keys_not_held_and_one_session_per_backed_up_holder() -> None:
    reads = ScopedReads("a")
    index = reads.index(PLAN)
    assert set(index.primary) == {k for k in KEYS if PLAN.owner(k) == "a"}
    assert {h for h in index.backed_up} <= {"b", "c", "d"}
    held = set(index.primary[:3])
    wanted, sessions = reads.to_read(PLAN, held, check_backups=False)
    assert wanted == set(index.primary) - held and sessions == set()
    wanted, sessions = reads.to_read(PLAN, index.primary, check_backups=True)
    assert index.predecessor == sorted(MEMBERS)[-1]  # "a" is first: its predecessor wraps around
    assert sessions == set(index.backed_up) | {index.predecessor}  # one session row per holder, no lease row
    assert wanted == set()
    # without backups (replicas=0) a check still reads the predecessor's session (its plan version)
    alone = ScopedReads("b")
    plain = stable_assignment(MEMBERS, KEYS)
    assert alone.to_read(plain, alone.index(plain).primary, check_backups=True) == (set(), {"a"})
    assert alone.to_read(plain, alone.index(plain).primary, check_backups=False) == (set(), set())
    assert reads.index(PLAN) is index  # computed once per plan


def test_a_holder_whose_session_stops_changing_for_a_tick_is_read_in_full_until_it_writes() -> None:
    reads = ScopedReads("a")
    holder, keys = next((h, ks) for h, ks in reads.index(PLAN).backed_up.items() if len(ks) > 1)
    row = SessionRow(holder, "t1", 5)
    reads.judge({holder: row}, {holder: SessionSeen("t1", 4, 0.0, 0.0)}, now=1.0, tick_interval=1.0)
    assert holder not in reads.stalled  # the counter moved: alive
    reads.judge({holder: row}, {holder: SessionSeen("t1", 5, 1.0, 1.0)}, now=1.5, tick_interval=1.0)
    assert holder not in reads.stalled  # unchanged for less than a tick
    reads.judge({holder: row}, {holder: SessionSeen("t1", 5, 1.0, 1.0)}, now=2.0, tick_interval=1.0)
    assert holder in reads.stalled
    wanted, sessions = reads.to_read(PLAN, (), check_backups=False)
    assert set(keys) <= wanted and holder in sessions  # its rows and its session, every round
    reads.judge({holder: SessionRow(holder, "t2", 1)}, {holder: SessionSeen("t1", 5, 1.0, 1.0)}, now=2.5,
                tick_interval=1.0)
    assert holder not in reads.stalled  # a new session (a restart under the same id): alive
    reads.stalled.add(holder)
    reads.alive([holder])
    assert holder not in reads.stalled


def test_a_holder_without_a_session_row_is_stalled() -> None:
    reads = ScopedReads("a")
    reads.judge({"c": None}, {}, now=0.0, tick_interval=1.0)
    assert reads.stalled == {"c"}


def test_a_run_of_dead_predecessors_is_walked_one_member_a_round_not_one_a_backup_check() -> None:
    """Past a stalled predecessor, the member before it is read every round until it is known
    to run; a dead one there makes its keys read the next round, and so on: keys planned for a
    run of members that never ran are read and timed within a round per member of the run
    (seed 34: a crash next to two listed members that never ran took three backup checks)."""
    plan = stable_assignment(("m0", "m1", "p0", "p1"), KEYS, replicas=1)
    reads = ScopedReads("m1")
    reads.judge({"m0": None}, {}, now=0.0, tick_interval=1.0)  # its predecessor is dead
    _, sessions = reads.to_read(plan, (), check_backups=False)
    assert "p1" in sessions  # the one before it, read this round: not only at a backup check
    reads.judge({"p1": None}, {}, now=0.1, tick_interval=1.0)
    wanted, sessions = reads.to_read(plan, (), check_backups=False)
    assert set(plan.keys_of("p1")) <= wanted and "p0" in sessions
    reads.judge({"p0": None}, {}, now=0.2, tick_interval=1.0)
    wanted, _ = reads.to_read(plan, (), check_backups=False)
    assert set(plan.keys_of("p0")) | set(plan.keys_of("m0")) <= wanted
    reads.settled.add("p0")  # a settled dead member is read at the backup checks only
    assert "p0" not in reads.to_read(plan, (), check_backups=False)[1]


def test_the_walk_stops_at_a_member_known_to_run() -> None:
    """A running member the walk reaches (past a dead, settled one) is read at the backup
    checks only, not every round: a dead listed pod must not cost its successor's successor
    a read a round forever."""
    plan = stable_assignment(("m0", "m1", "m2", "p0"), KEYS, replicas=1)
    reads = ScopedReads("m0")  # its predecessor p0 never runs; m2 before it runs
    reads.judge({"p0": None}, {}, now=0.0, tick_interval=1.0)
    reads.settled.add("p0")
    assert "m2" in reads.to_read(plan, (), check_backups=False)[1]  # not known to run yet
    reads.judge({"m2": SessionRow("m2", "t", 6)}, {"m2": SessionSeen("t", 5, 0.0, 0.0)}, now=0.5,
                tick_interval=1.0)  # its session moved: it runs
    assert "m2" not in reads.to_read(plan, (), check_backups=False)[1]
    assert "m2" in reads.to_read(plan, (), check_backups=True)[1]
    reads.judge({"m2": None}, {"m2": SessionSeen("t", 6, 0.5, 0.5)}, now=1.0, tick_interval=1.0)
    assert "m2" in reads.to_read(plan, (), check_backups=False)[1]  # gone: walked past again


def test_stable_tuples_for_the_planner_cache_and_the_sweep_chore_owners() -> None:
    reads = ScopedReads("a")
    first = reads.members_tuple(["c", "a", "b"])
    assert reads.members_tuple(["b", "c", "a"]) is first and first == ("a", "b", "c")
    keys = list(KEYS)
    assert reads.keys_tuple(keys) is reads.keys_tuple(keys)
    sweepers = [m for m in MEMBERS if ScopedReads(m).is_sweeper(list(MEMBERS))]
    assert len(sweepers) == 2
    assert not ScopedReads("z").is_sweeper(list(MEMBERS))


def test_successor_backups_make_each_member_watch_only_its_predecessors() -> None:
    base = stable_assignment(MEMBERS, KEYS)
    for replicas, watched in ((1, {"d"}), (2, {"c", "d"})):
        plan = ScopedReads("a").watched(base, replicas)
        assert {k: o[0] for k, o in plan.owners.items()} == {k: base.owner(k) for k in KEYS}
        assert all(o[1:] == tuple(MEMBERS[(MEMBERS.index(o[0]) + j) % 4] for j in range(1, replicas + 1))
                   for o in plan.owners.values())
        assert set(ScopedReads("a").index(plan).backed_up) == watched
    reads = ScopedReads("a")
    assert reads.watched(base, 1) is reads.watched(base, 1)  # cached per base plan
    assert all(len(o) == 2 for o in ScopedReads("a").watched(stable_assignment(["a", "b"], KEYS), 5).owners.values())


def test_a_member_new_to_the_plan_is_read_in_full_by_its_watcher_until_it_writes() -> None:
    reads = ScopedReads("a")
    old = reads.watched(stable_assignment(("a", "b", "c"), KEYS), 1)
    new = reads.watched(stable_assignment(MEMBERS, KEYS), 1)  # d joins; a watches d
    reads.plan_changed(old, new)
    assert reads.stalled == {"d"}
    d_keys = set(reads.index(new).backed_up["d"])
    wanted, _ = reads.to_read(new, reads.index(new).primary, check_backups=False)
    assert wanted == d_keys  # every round, not only on backup checks
    reads.alive(["d"])
    assert reads.to_read(new, reads.index(new).primary, check_backups=False)[0] == set()


def test_a_first_sight_of_a_session_leaves_a_newcomer_read_in_full_until_its_session_moves() -> None:
    reads = ScopedReads("a")
    reads.stalled.add("d")  # a newcomer (plan_changed): read in full until seen running
    reads.judge({"d": SessionRow("d", "t", 1)}, {}, now=0.0, tick_interval=1.0)
    assert "d" in reads.stalled
    reads.judge({"d": SessionRow("d", "t", 2)}, {"d": SessionSeen("t", 1, 0.0, 0.0)}, now=0.5, tick_interval=1.0)
    assert "d" not in reads.stalled


def test_a_plan_whose_owners_change_without_new_inputs_settles_again() -> None:
    # a newly read baseline changes the plan for the same members and keys; a new but
    # equal plan object does not
    def every_tick_after(second: Callable[[Assignment], Assignment]) -> bool:
        reads = ScopedReads("a")
        first = reads.watched(stable_assignment(reads.members_tuple(MEMBERS), reads.keys_tuple(KEYS)), 1)
        reads.new_plan(None, first, now=0.0)
        due = functools.partial(reads.backups_due, interval=100.0, tick_interval=1.0, lease_duration=3.0)
        assert due(20.0)  # past the first settling window: the next check is at 120
        reads.new_plan(first, second(first), now=118.0)
        assert due(120.0)
        return due(121.0)

    def equal(plan: Assignment) -> Assignment:
        return Assignment(plan.members, dict(plan.owners), plan.quotas)

    def one_key_moved(plan: Assignment) -> Assignment:
        owners = dict(plan.owners)
        key = KEYS[0]
        owners[key] = (next(m for m in MEMBERS if m != owners[key][0]), *owners[key][1:])
        return Assignment(plan.members, owners, plan.quotas)

    assert not every_tick_after(equal)
    assert every_tick_after(one_key_moved)
