"""ScopedReads: which rows a scoped round reads, and which holders look stalled. No I/O."""

from __future__ import annotations

from hashring import stable_assignment
from kinesis.lease_loop.lease_model import Lease
from kinesis.lease_loop.scoped_reads import ScopedReads

MEMBERS = ("a", "b", "c", "d")
KEYS = [f"k{i:02d}" for i in range(40)]
PLAN = stable_assignment(MEMBERS, KEYS, replicas=1)


def test_reads_planned_keys_not_held_and_one_sample_per_backed_up_holder() -> None:
    reads = ScopedReads("a")
    index = reads.index(PLAN)
    assert set(index.primary) == {k for k in KEYS if PLAN.owner(k) == "a"}
    assert {h for h in index.backed_up} <= {"b", "c", "d"}
    held = set(index.primary[:3])
    wanted, samples = reads.to_read(PLAN, held, check_backups=False)
    assert wanted == set(index.primary) - held and samples == {}
    wanted, samples = reads.to_read(PLAN, index.primary, check_backups=True)
    assert samples == {h: keys[0] for h, keys in index.backed_up.items()}
    assert wanted == set(samples.values())  # one row per holder, not one per backed-up key
    assert reads.index(PLAN) is index  # computed once per plan


def test_a_holder_whose_sample_stops_changing_for_a_tick_is_read_in_full_until_it_writes() -> None:
    reads = ScopedReads("a")
    holder, keys = next((h, ks) for h, ks in reads.index(PLAN).backed_up.items() if len(ks) > 1)
    sample = keys[0]
    row = Lease(sample, holder, 5)
    reads.judge({holder: sample}, {sample: row}, {sample: (4, holder, 0.0)}, now=1.0, tick_interval=1.0)
    assert holder not in reads.stalled  # the counter moved: alive
    reads.judge({holder: sample}, {sample: row}, {sample: (5, holder, 1.0)}, now=1.5, tick_interval=1.0)
    assert holder not in reads.stalled  # unchanged for less than a tick
    reads.judge({holder: sample}, {sample: row}, {sample: (5, holder, 1.0)}, now=2.0, tick_interval=1.0)
    assert holder in reads.stalled
    wanted, samples = reads.to_read(PLAN, (), check_backups=True)
    assert set(keys) <= wanted and holder not in samples
    reads.alive([holder])
    assert holder not in reads.stalled


def test_a_sample_row_that_moved_or_vanished_marks_its_holder_stalled() -> None:
    reads = ScopedReads("a")
    reads.judge({"b": "k00"}, {"k00": Lease("k00", "c", 9)}, {}, now=0.0, tick_interval=1.0)
    reads.judge({"c": "k01"}, {"k01": None}, {}, now=0.0, tick_interval=1.0)
    assert reads.stalled == {"b", "c"}


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
