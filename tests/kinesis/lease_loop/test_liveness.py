"""Liveness when members disagree: one focused test per defect the protocol review and the
fleet simulator found (tests/fleetsim), each failing on the code before its fix.

Fleets of real coordinators on a FakeClock (tests/coordinator_fleet.py) over the in-memory
DynamoDB (tests/support/memory_dynamodb.py, held to moto by tests/kinesis/lease_loop/test_memory_dynamodb.py),
with ``Fleet.check()`` (one holder per key) after every tick.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kinesis.errors import KinesisHashRingError
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import Checkpoint
from tests.coordinator_fleet import Fleet, memory_table, settle
from tests.support.memory_dynamodb import Fault, MemoryDynamoDB

KEYS = [f"q{i:02d}" for i in range(12)]


def rounds_until(fleet: Fleet, done: Callable[[], bool], *, limit: int) -> int:
    """Rounds run until ``done()`` (asserting it happens within ``limit`` rounds)."""
    for n in range(limit + 1):
        if done():
            return n
        fleet.round()
    raise AssertionError(f"not done within {limit} rounds")


def held_by(fleet: Fleet, keys: set[str] | list[str], members: set[str]) -> bool:
    """Every key in ``keys`` is held (and may be processed) by one of ``members``."""
    holders = fleet.holders()
    return all(any(m in members for m in holders.get(k, [])) for k in keys)


# --- stale eventually consistent reads ---------------------------------------------------------


class EveryOtherReadStale:
    """A stale-read hook: every other eventually consistent read of the matching rows returns
    the version before the current one (a replica one write behind)."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.on = False
        self._n = 0

    def __call__(self, key: str, versions: int) -> int:
        if not self.on or not key.startswith(self.prefix) or versions < 2:
            return 0
        self._n += 1
        return self._n % 2


def test_stale_reads_of_a_dead_members_session_do_not_postpone_its_takeover() -> None:
    # a watcher times a crashed member's session row; eventually consistent reads from a replica
    # one renewal behind showed a lower counter every other read, and each such read restarted
    # the timer: the takeover waited for as long as stale reads kept coming. A read older than
    # what was already seen is read again, strongly consistent.
    stale = EveryOtherReadStale("__session__#b")
    memory = MemoryDynamoDB(stale_reads=stale)
    fleet = Fleet(memory_table(memory), KEYS, ["a", "b", "c"], reads="scoped", replicas=1)
    settle(fleet)
    victim = set(fleet.coordinators["b"].held_keys())
    assert victim
    stale.on = True
    fleet.crash("b")  # still listed: only its watcher (c) times it
    limit = int((fleet.lease_duration + fleet.lease_duration / 2) / fleet.tick_interval) + 2
    rounds_until(fleet, lambda: held_by(fleet, victim, {"a", "c"}), limit=limit)



# --- a member id used by two processes -----------------------------------------------------------


def test_a_second_process_under_the_same_member_id_makes_the_first_refuse_to_run() -> None:
    # DuplicateMemberIdError said the process stops renewing, but the next tick started a new
    # session under a new token, overwriting the other process's: the two flipped the session
    # row every tick for as long as both ran. The process that finds another's token now
    # refuses to run: it drops its leases without a write and stops its loop.
    memory = MemoryDynamoDB()
    fleet = Fleet(memory_table(memory), KEYS, ["a", "b"], reads="scoped")
    settle(fleet, 3)
    first = fleet.coordinators["b"]
    assert first.held_keys()
    second = fleet.add("b")  # another process with the same id (the harness's newest "b")
    tokens = []
    for _ in range(6):
        first.tick()
        second.tick()
        fleet.coordinators["a"].tick()
        fleet.clock.advance(fleet.tick_interval)
        tokens.append(memory.item("__session__#b")["sessionToken"]["S"])
    assert len(set(tokens)) == 1, f"the session row changed hands {len(set(tokens)) - 1} times"
    assert first.status().stopping and first.held_keys() == ()
    assert "DuplicateMemberIdError" in (first.status().last_error or "")
    assert second.status().stopping is False
    for _ in range(int(2 * fleet.lease_duration / fleet.tick_interval) + 2):
        second.tick()
        fleet.coordinators["a"].tick()
        fleet.clock.advance(fleet.tick_interval)
    assert second.held_keys(), "the newer process takes the id's leases over once they expire"


# --- the published plan: a corrupt head, and two members that both own its chore ----------------


PLAN_HEAD = "__manifest__#plan"


def plan_head(memory: MemoryDynamoDB) -> dict[str, Any] | None:
    return memory.item(PLAN_HEAD)


def corrupt_plan_head(memory: MemoryDynamoDB) -> None:
    """Replace the plan's head row with one nobody can read."""
    memory.corrupt(PLAN_HEAD, {"leaseKey": {"S": PLAN_HEAD}, "garbage": {"S": "x"}})


def test_a_corrupt_plan_head_is_replaced_by_the_chore_owner() -> None:
    # the head was read before the chore owner's branch, so the owner raised like everyone else
    # and nobody ever published over an unreadable head: members that restarted planned from
    # stable_assignment while the others kept their old baseline, a lasting disagreement
    memory = MemoryDynamoDB()
    fleet = Fleet(memory_table(memory), KEYS, ["a", "b", "c"], reads="scoped")
    settle(fleet)
    head = plan_head(memory)
    assert head is not None
    before = int(head["version"]["N"])
    corrupt_plan_head(memory)
    fleet.add("d")  # a change: every member follows the head again
    settle(fleet)
    head = plan_head(memory)
    assert head is not None and "version" in head, head
    assert int(head["version"]["N"]) > before  # continues the chain (followers never go back)
    versions = {c._reads._planner.published.version for c in fleet.coordinators.values()}
    assert versions == {int(head["version"]["N"])}
    assert max(fleet.counts().values()) - min(fleet.counts().values()) <= 1


def test_a_corrupt_plan_head_is_replaced_without_any_change_of_the_member_list() -> None:
    # with nothing pending, the head was read only at the backstop recheck (30 lease durations):
    # a head corrupted in steady state stayed unreadable that long (fleetsim seed 900142, fast:
    # corrupt at t=19, still unreadable at the end, t=66). The last publisher now reads its head
    # every OWNER_RECHECK_TICKS ticks and replaces an unreadable one
    from kinesis.lease_loop.plan import OWNER_RECHECK_TICKS

    memory = MemoryDynamoDB()
    fleet = Fleet(memory_table(memory), KEYS, ["a", "b", "c"], reads="scoped")
    settle(fleet)
    head = plan_head(memory)
    assert head is not None
    before = int(head["version"]["N"])
    corrupt_plan_head(memory)
    rounds_until(fleet, lambda: "version" in (plan_head(memory) or {}), limit=OWNER_RECHECK_TICKS + 4)
    head = plan_head(memory)
    assert head is not None and int(head["version"]["N"]) > before
    settle(fleet)
    assert {c._reads._planner.published.version for c in fleet.coordinators.values()} \
        <= {int(head["version"]["N"]), before}  # no one goes back; followers catch up on their own schedule


@pytest.mark.parametrize("damage", ["unreadable", "deleted"])
def test_a_plan_head_rebuilt_by_a_new_process_is_followed_by_members_with_a_newer_baseline(damage: str) -> None:
    # fleetsim seed 1732 (long): the plan head was corrupted, then a second process started
    # under the chore owner's id; the first refused to run and the new one, with no baseline,
    # rebuilt the head from version 1 with its stable_assignment. The others kept their newer
    # baseline (a peer's lower version did not make them read the head), so keys both sides
    # planned elsewhere were read by nobody: 2 keys unprocessed for ~70 s (the 30 D backstop).
    # Now a lost or unreadable head is rebuilt by any member one settling window after it sees
    # it, continuing the highest version it heard of, and the rebuilder tells every listed
    # member the new version on its session row (a peer's older version also makes a member
    # read the head): the fleet plans from one baseline again within a couple of ticks.
    from hashring import chore_owners
    from kinesis.lease_loop.plan import PLAN_CHORE

    memory = MemoryDynamoDB()
    fleet = Fleet(memory_table(memory), KEYS, ["a", "b", "c"], reads="scoped", replicas=1)
    settle(fleet)
    fleet.add("d")
    settle(fleet)
    head = plan_head(memory)
    assert head is not None
    before = int(head["version"]["N"])
    owner = chore_owners(PLAN_CHORE, fleet.member_list)[0]
    memory.corrupt(PLAN_HEAD, None if damage == "deleted"
                   else {"leaseKey": {"S": PLAN_HEAD}, "garbage": {"S": "x"}})
    first = fleet.coordinators[owner]
    fleet.add(owner)  # a second process under the chore owner's id: the first refuses to run
    rounds_until(fleet, lambda: (first.tick(), first.status().stopping)[1], limit=4)

    def agreed() -> bool:
        head = plan_head(memory) or {}
        versions = {c._reads._planner.published.version for m, c in fleet.coordinators.items()
                    if m in fleet.live()}
        return "version" in head and versions == {int(head["version"]["N"])} \
            and held_by(fleet, KEYS, set(fleet.live()))

    limit = int(3 * fleet.lease_duration / fleet.tick_interval)  # was ~30 D
    rounds_until(fleet, agreed, limit=limit)
    assert int((plan_head(memory) or {})["version"]["N"]) > before  # the chain goes on


class OldestPlanHead:
    """A stale-read hook: while ``on``, every eventually consistent read of the plan head
    returns its oldest version kept (before its first write: no head at all)."""

    def __init__(self) -> None:
        self.on = False
        self.reads = 0

    def __call__(self, key: str, versions: int) -> int:
        if not self.on or key != PLAN_HEAD:
            return 0
        self.reads += 1
        return versions - 1


def test_a_stale_read_of_no_plan_head_does_not_stop_its_publisher_watching_it() -> None:
    # a stale replica answered the last publisher's recheck with no head at all; it took that
    # as "the head is nobody's" and stopped its every-OWNER_RECHECK_TICKS read, so a head
    # corrupted later stayed unreadable until the backstop read (30 lease durations): fleetsim
    # seed 9119, fast, session membership (stale read at t=33, corrupt at t=41, unreadable at
    # the end, t=102). A head read missing or older than the baseline is confirmed consistently.
    from kinesis.lease_loop.plan import OWNER_RECHECK_TICKS

    stale = OldestPlanHead()
    memory = MemoryDynamoDB(stale_reads=stale)
    fleet = Fleet(memory_table(memory), KEYS, ["a", "b", "c"], reads="scoped")
    settle(fleet)
    head = plan_head(memory)
    assert head is not None
    before = int(head["version"]["N"])
    stale.on = True
    settle(fleet, OWNER_RECHECK_TICKS + 2)  # the publisher's recheck reads the head: stale, none
    assert stale.reads
    stale.on = False
    corrupt_plan_head(memory)
    rounds_until(fleet, lambda: "version" in (plan_head(memory) or {}), limit=OWNER_RECHECK_TICKS + 4)
    head = plan_head(memory)
    assert head is not None and int(head["version"]["N"]) > before


def test_a_corrupt_plan_head_is_rebuilt_one_settling_window_after_a_survivor_sees_it() -> None:
    # fleetsim seed 8856 (long): the last publisher (the plan chore's owner) crashed, still
    # listed, after the head was corrupted and before its own recheck; the others saw the
    # unreadable head at the backstop read (30 D) but, with nothing pending, read it again
    # only at the next backstop, another 30 D on: still unreadable at the end of the run. A
    # member that saw an unreadable head reads it again one settling window later and rebuilds it.
    from kinesis.lease_loop.plan import SETTLE_TICKS
    from kinesis.lease_loop.round_reads import PLAN_RECHECK

    memory = MemoryDynamoDB()
    fleet = Fleet(memory_table(memory), KEYS, ["a", "b", "c"], reads="scoped")
    settle(fleet)
    head = plan_head(memory)
    assert head is not None
    before, publisher = int(head["version"]["N"]), head["owner"]["S"]
    fleet.crash(publisher)  # stays listed: the chore stays its own
    corrupt_plan_head(memory)
    backstop = int(PLAN_RECHECK * fleet.lease_duration / fleet.tick_interval)
    rounds_until(fleet, lambda: "version" in (plan_head(memory) or {}), limit=backstop + SETTLE_TICKS + 2)
    head = plan_head(memory)
    assert head is not None and int(head["version"]["N"]) > before and head["owner"]["S"] != publisher


def test_a_plan_head_nobody_can_repair_is_read_once_a_settling_window_not_every_tick() -> None:
    # while the head stays unreadable and every repair fails (writes to it denied), a member
    # that saw it reads it again once a settling window, not on every tick after the first
    from kinesis.lease_loop.plan import SETTLE_TICKS

    denied = False
    reads: list[str] = []

    def faults(operation: str, request: dict[str, Any]) -> Fault | None:
        if operation == "GetItem" and PLAN_HEAD in repr(request):
            reads.append(operation)
        writes = operation in ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems")
        if denied and writes and PLAN_HEAD in repr(request):
            return Fault.denied()
        return None

    memory = MemoryDynamoDB(faults=faults)
    fleet = Fleet(memory_table(memory), KEYS, ["a", "b", "c"], reads="scoped")
    settle(fleet)
    denied = True
    corrupt_plan_head(memory)
    rounds_until(fleet, lambda: bool(reads), limit=200)  # someone saw it unreadable
    reads.clear()
    windows = 12
    for _ in range(windows * SETTLE_TICKS):
        fleet.round()
    assert plan_head(memory) is not None and "version" not in plan_head(memory)  # type: ignore[operator]
    # at most a read a window for each member that saw it (here one): not one a round
    assert 0 < len(reads) <= windows, f"{len(reads)} head reads in {windows} settling windows"


def test_two_members_that_both_own_the_plan_chore_do_not_republish_every_round() -> None:
    # c owns the plan chore among a, b, c; with the newcomer n3 listed, n3 owns it. While c's
    # member list lags (it does not list n3 yet), both publish: each read the other's plan,
    # planned from it and published its own again, every round (the head went from version 1
    # to 12 in 40 ticks in the review, at ~510 WCU a publish at 100,000 x 10,000)
    memory = MemoryDynamoDB()
    fleet = Fleet(memory_table(memory), KEYS, ["a", "b", "c"], reads="scoped")
    settle(fleet)
    fleet.add("n3", visible=False)
    for member in ("a", "b", "n3"):
        fleet.memberships[member].set_members(["a", "b", "c", "n3"])
    fleet.member_list = ["a", "b", "c", "n3"]
    head = plan_head(memory)
    assert head is not None
    before = int(head["version"]["N"])
    for _ in range(40):  # c's list lags for 40 ticks
        fleet.round()
    published = int(plan_head(memory)["version"]["N"]) - before  # type: ignore[index]
    assert published <= 8, f"{published} versions in 40 ticks"
    fleet.memberships["c"].set_members(["a", "b", "c", "n3"])  # the lag ends
    settle(fleet)
    assert max(fleet.counts().values()) - min(fleet.counts().values()) <= 1
    # the baselines meet again (a publish waits while the last overwrite's doubling runs out)
    rounds_until(fleet, lambda: len({c._reads._planner.published.version for c in fleet.coordinators.values()}) == 1,
                 limit=40)


# --- hand-offs and dead members under scoped reads (defect 1) ------------------------------------


def ticks(fleet: Fleet, seconds: float) -> int:
    return int(seconds / fleet.tick_interval + 0.999)


def test_with_replicas_0_a_listed_member_that_never_runs_has_its_keys_taken_as_orphans() -> None:
    # nobody read the rows planned for a member that never ran (no backups, and the published
    # plan gives them to it): they stayed unprocessed for good. Its successor watches it all
    # the same and takes them once they are orphaned (orphan_timeout)
    fleet = Fleet(memory_table(), KEYS, ["a", "b", "c", "d"], reads="scoped", replicas=0)
    fleet.crash("d")  # listed from the start, never runs: nobody ever held its keys
    fleet.round()
    planned = set(fleet.coordinators["a"].last_plan.keys_of("d"))  # type: ignore[union-attr]
    assert planned
    c = fleet.coordinators["a"]
    limit = ticks(fleet, c.orphan_timeout + c.backup_check_interval) + 2
    rounds_until(fleet, lambda: held_by(fleet, planned, {"a", "b", "c"}), limit=limit)


def test_with_replicas_0_a_crashed_member_still_listed_is_taken_over_after_orphan_timeout() -> None:
    fleet = Fleet(memory_table(), KEYS, ["a", "b", "c"], reads="scoped", replicas=0)
    settle(fleet)
    victim = set(fleet.coordinators["b"].held_keys())
    fleet.crash("b")
    c = fleet.coordinators["a"]
    limit = ticks(fleet, c.orphan_timeout + c.backup_check_interval) + 2
    rounds_until(fleet, lambda: held_by(fleet, victim, {"a", "c"}), limit=limit)


def test_an_offer_to_a_member_whose_list_lags_is_adopted_within_a_tick() -> None:
    # b stops gracefully and hands its keys to their planned owners; c's member list lags
    # (it still lists b, so its plan gives c none of them) and c never read the rows offered
    # to it: they stalled for as long as the lag. The offer is now also written to c's session
    # row, which c reads with every renewal: it adopts whatever its own plan says
    fleet = Fleet(memory_table(), KEYS, ["a", "b", "c"], reads="scoped", replicas=1)
    settle(fleet)
    victim = set(fleet.coordinators["b"].held_keys())
    fleet.memberships["a"].set_members(["a", "c"])
    fleet.coordinators["b"].begin_stop()
    for _ in range(2):
        fleet.tick("b")  # b plans without itself and hands everything off at once
    assert not fleet.coordinators["b"].held_keys()
    fleet.crashed.add("b")
    handed = {k for k, lease in fleet.table.scan().leases.items() if k in victim and lease.owner == "c"}
    assert handed, "b handed some of its keys to c"
    rounds_until(fleet, lambda: held_by(fleet, handed, {"c"}), limit=2)  # c's list still lists b


def test_an_offer_to_a_member_that_died_after_it_started_is_taken_back_by_the_offerer() -> None:
    # with replicas=0 nobody but the offerer is a candidate for the key: it watches its offer
    # and takes it back adopt_timeout after it (then hands nothing more to the suspect)
    fleet = Fleet(memory_table(), KEYS, ["a", "b", "c"], reads="scoped", replicas=0)
    settle(fleet)
    fleet.add("d", visible=False)
    fleet.coordinators["d"].tick()  # a session row: it ran once
    fleet.crash("d")
    fleet.sync_membership(["a", "b", "c", "d"])
    stalled: dict[str, int] = {}
    for _ in range(ticks(fleet, 4 * fleet.lease_duration)):
        fleet.round()
        for key, owner in fleet.table_owners().items():
            stalled[key] = stalled.get(key, 0) + 1 if owner == "d" else 0
            assert stalled[key] <= 2, (key, stalled)
    assert fleet.counter("handoffs") >= 1 and fleet.counter("offers_withdrawn") >= 1


# --- a member list change during a takeover (defect 8) --------------------------------------------


def test_a_list_change_before_the_expiry_does_not_restart_the_takeover_timing() -> None:
    # b dies; its watcher c times its session. Most of a lease later the member list drops b
    # (a failing readiness probe), and the new plan names other owners for b's keys, who had
    # never timed b's session: they timed it from scratch (2.12 D in the review). c goes on
    # timing b through the list change and takes its leases at the expiry, then hands them on
    fleet = Fleet(memory_table(), KEYS, ["a", "b", "c", "d"], reads="scoped", replicas=1)
    settle(fleet)
    victim = set(fleet.coordinators["b"].held_keys())
    fleet.crash("b")
    crashed = fleet.clock()
    for _ in range(ticks(fleet, 0.8 * fleet.lease_duration)):
        fleet.round()
    fleet.sync_membership(["a", "c", "d"])
    bound = fleet.lease_duration + fleet.coordinators["a"].backup_check_interval + 2 * fleet.tick_interval
    rounds_until(fleet, lambda: held_by(fleet, victim, {"a", "c", "d"}), limit=ticks(fleet, bound))
    assert fleet.clock() - crashed <= bound
    settle(fleet)
    assert max(fleet.counts().values()) - min(fleet.counts().values()) <= 1


def test_a_dead_member_still_listed_is_read_every_round_only_until_its_keys_moved() -> None:
    # a watcher reads a stalled predecessor's session and keys every round, so its expiry is
    # seen when it comes; once every key of it is held by a running member, reading it every
    # light round forever (Kubernetes: a dead pod still listed) is cost without a purpose
    table = memory_table()
    fleet = Fleet(table, KEYS, ["a", "b", "c"], reads="scoped", replicas=1)
    settle(fleet)
    victim = set(fleet.coordinators["b"].held_keys())
    fleet.crash("b")
    rounds_until(fleet, lambda: held_by(fleet, victim, {"a", "c"}), limit=ticks(fleet, 3 * fleet.lease_duration))
    settle(fleet, 3)
    reads_of_b: list[int] = []
    read_round = table.read_round

    def counting(keys: Any, members: Any, *args: Any, **kwargs: Any) -> Any:
        members = list(members)
        reads_of_b.append(int("b" in members))
        return read_round(keys, members, *args, **kwargs)

    table.read_round = counting  # type: ignore[method-assign]
    light_rounds = 18  # two lease durations: a tick, then two light rounds, for both
    for i in range(light_rounds):
        for m in ("a", "c"):
            fleet.coordinators[m].tick() if i % 3 == 0 else fleet.coordinators[m].refresh()
        fleet.check()
        fleet.clock.advance(fleet.tick_interval / 3)
    checks = int(light_rounds * (fleet.tick_interval / 3) / fleet.coordinators["c"].backup_check_interval) + 1
    assert sum(reads_of_b) <= checks, f"b's session read in {sum(reads_of_b)} of {light_rounds} rounds (checks: {checks})"


def test_an_offer_looked_at_before_its_hand_off_write_is_still_adopted() -> None:
    # a hand-off tells the target (its session row's offers) and then writes the row. A target
    # whose round fell between the two writes read the offer, found the row still the
    # offerer's, and marked the offer handled: with a plan that does not give it the key (its
    # list still lists the stopping offerer) it never read the row again, and the graceful
    # stop waited for an adoption that never came (CI, test_published_plan). The offerer now
    # tells the target again while its offer stays unadopted
    fleet = Fleet(memory_table(), KEYS, ["a", "b", "c"], reads="scoped", replicas=1)
    settle(fleet)
    victim = set(fleet.coordinators["b"].held_keys())
    fleet.memberships["a"].set_members(["a", "c"])
    handoff = fleet.table.handoff
    raced: list[str] = []

    def handoff_after_the_target_looked(lease: Any, target: str, **kwargs: Any) -> Any:
        if target == "c":
            raced.append(lease.key)
            fleet.coordinators["c"].tick()  # c reads its offers; the row is still b's
        return handoff(lease, target, **kwargs)

    fleet.table.handoff = handoff_after_the_target_looked  # type: ignore[method-assign]
    fleet.coordinators["b"].begin_stop()
    for _ in range(2):
        fleet.tick("b")  # b plans without itself and hands everything off at once
    assert not fleet.coordinators["b"].held_keys() and raced, "b handed some of its keys to c"
    fleet.table.handoff = handoff  # type: ignore[method-assign]
    # c adopts within a tick of the offer's adopt_timeout, not after a backup's grace or an orphan timeout
    for _ in range(ticks(fleet, fleet.coordinators["c"].adopt_timeout) + 2):
        fleet.round(["a", "b", "c"])  # b's stop ticks on until its offers are adopted
        if held_by(fleet, set(raced), {"c"}):
            break
    assert held_by(fleet, set(raced), {"c"}) and fleet.counter("offers_retold") >= 1
    rounds_until(fleet, lambda: held_by(fleet, victim, {"a", "c"}), limit=2)


def test_scan_reads_judge_a_listed_member_that_never_ran_gone_so_a_crash_is_taken_over_in_time() -> None:
    # d is listed and never runs: its keys go to their backups (c among them). When c crashes,
    # the keys whose owners are d and c need a stand-in. The scan loop never timed d's missing
    # session row (only rows it saw), so nobody stood in and they waited for orphan_timeout
    # (or a suspicion, 2 D here) instead of the crash bound (simulator seed 34 of the fast profile)
    fleet = Fleet(memory_table(), KEYS, ["a", "b", "c", "d"], reads="scan", replicas=1)
    fleet.crash("d")  # listed, never runs
    settle(fleet)
    assert held_by(fleet, KEYS, {"a", "b", "c"})
    fleet.crash("c")
    c = fleet.coordinators["a"]
    rounds_until(fleet, lambda: held_by(fleet, KEYS, {"a", "b"}), limit=ticks(fleet, c.lease_duration) + 1)


# --- ambiguous writes ----------------------------------------------------------------------------


class AmbiguousWritesOf:
    """A faults hook: while ``on``, every write of the row ``key`` is applied, then answered
    with a 500 (the writer cannot tell whether it happened)."""

    def __init__(self, key: str):
        self.key = key
        self.on = False
        self.hits = 0

    def __call__(self, operation: str, request: dict[str, Any]) -> Fault | None:
        if not self.on or operation not in ("UpdateItem", "PutItem"):
            return None
        row = request.get("Key") or request.get("Item") or {}
        if row.get("leaseKey", {}).get("S") != self.key:
            return None
        self.hits += 1
        return Fault.ambiguous()


def first_key_written_ambiguously() -> tuple[Fleet, str, str, AmbiguousWritesOf]:
    """A settled fleet a, b, c (scoped reads, replicas=1) whose writes of a's first key are
    applied and answered with a 500 from now on; (fleet, that key, its backup, the hook)."""
    memory = MemoryDynamoDB()
    fleet = Fleet(memory_table(memory), KEYS, ["a", "b", "c"], reads="scoped", replicas=1)
    settle(fleet)
    plan = fleet.coordinators["b"]._reads.last_plan
    assert plan is not None
    key = sorted(fleet.coordinators["a"].held_keys())[0]
    backup = plan.owners[key][1]
    writes = AmbiguousWritesOf(key)
    memory.faults = writes
    writes.on = True
    return fleet, key, backup, writes


def test_a_backup_take_answered_with_an_error_is_read_until_its_outcome_is_known() -> None:
    # a backup took over a paused holder's key, and that take and each of its recoveries were
    # applied but answered with a 500. The holder then resumed: the backup stopped reading the
    # key (its holder runs again), so it never learned the lease in the table was its own, and
    # nobody else could take it (its owner's session lives on): the key stalled until the
    # backup happened to read it again (fleetsim seed 9048, fast, session membership, kinds
    # pause..join: 22 s, 7 lease durations). A take answered with an error is read each round
    # until a read shows whether it was applied.
    fleet, key, backup, writes = first_key_written_ambiguously()
    others = [m for m in ("a", "b", "c") if m != "a"]
    for _ in range(ticks(fleet, 2 * fleet.lease_duration) + 1):  # a pauses past its lease
        fleet.round(others)
    assert writes.hits, f"{backup} tried to take {key} over"
    assert key not in fleet.coordinators[backup].held_keys()
    watcher = fleet.coordinators[backup]
    rounds_until(fleet, lambda: "a" not in watcher._scoped.stalled, limit=ticks(fleet, fleet.lease_duration))
    fleet.round()  # a runs again, and its backup sees it does: its key is no longer read there
    writes.on = False
    limit = ticks(fleet, fleet.lease_duration + fleet.lease_duration / 2) + 2
    rounds_until(fleet, lambda: held_by(fleet, [key], {"a", "b", "c"}), limit=limit)


def test_a_stopping_member_recovers_its_take_answered_with_an_error_and_hands_it_on() -> None:
    # a backup took over a crashed holder's key; the take was applied but answered with a
    # 500, and the backup began stopping (SIGTERM) before a read showed it the take was its
    # own. A stopping member takes nothing, so the row (its own, under its live session)
    # stalled until its session ended. It recovers such a take while stopping too, and hands
    # the key on as it does every lease it holds.
    fleet, key, backup, writes = first_key_written_ambiguously()
    (other,) = {"b", "c"} - {backup}
    fleet.crash("a")
    rounds_until(fleet, lambda: writes.hits > 0, limit=ticks(fleet, 3 * fleet.lease_duration))
    assert fleet.table_owners()[key] == backup and key not in fleet.coordinators[backup].held_keys()
    fleet.coordinators[backup].begin_stop()
    writes.on = False
    limit = ticks(fleet, fleet.lease_duration / 3 + 2 * fleet.lease_duration / 9) + 2  # the sigterm bound, in rounds
    for _ in range(limit):
        fleet.round([backup, other])  # the stopping member goes on ticking until it is done
        if held_by(fleet, [key], {other}):
            break
    assert held_by(fleet, [key], {other}), f"{key} stalled with the stopping {backup}"


def handing_off_after_an_ambiguous_checkpoint() -> tuple[Fleet, LeaseTable, str, AmbiguousWritesOf]:
    """Member a hands one of its two keys to b (manual hand-offs: pending until finished), and
    its processor's last checkpoint ("42") is applied but answered with an error; ambiguous
    writes of the key stay on."""
    memory = MemoryDynamoDB()
    table = memory_table(memory)
    fleet = Fleet(table, ["k1", "k2"], ["a"], manual_handoffs=True)
    fleet.round()
    fleet.add("b")
    fleet.start_session("b")
    fleet.round(["a"])
    (key,) = fleet.coordinators["a"].status().pending_handoffs
    lease = table.get(key)
    assert lease is not None and lease.checkpoint.is_initial
    writes = AmbiguousWritesOf(key)
    memory.faults = writes
    writes.on = True
    with pytest.raises(KinesisHashRingError):  # the processor's last checkpoint: applied, then a 500
        fleet.coordinators["a"].checkpoint(key, "42")
    return fleet, table, key, writes


@pytest.mark.parametrize("how", ["plan changed back", "target left"])
def test_a_hand_off_called_off_resumes_from_the_checkpoint_its_row_has(how: str) -> None:
    # the listener's last checkpoint before a hand-off was applied but answered with a 500; the
    # hand-off was then called off (the plan gave the key back, or its target's session row went)
    # and processing resumed from the holder's last *confirmed* row: records the processor had
    # checkpointed were delivered again, and its next checkpoints behind the row's were refused
    # as regressions (fleetsim seed 1835, long profile: sigterm while writes were ambiguous,
    # then "has no session row any more: keeping k01" twice, records 116-118 redelivered). The
    # holder confirms the row (one fenced write that recognises its own) before it resumes.
    fleet, table, key, writes = handing_off_after_an_ambiguous_checkpoint()
    a = fleet.coordinators["a"]
    writes.on = False
    assert table.get(key).checkpoint == Checkpoint("42")  # type: ignore[union-attr]
    if how == "plan changed back":
        fleet.sync_membership(["a"])
    else:
        table.delete_session("b", fleet.coordinators["b"]._holder.session)
    fleet.listeners["a"].finish(key)
    fleet.round(["a"])
    assert a.holds(key) and a.counters["handoffs_resumed"] == 1
    member, started, checkpoint = fleet.processing.starts[-1]
    assert (member, started) == ("a", key)
    assert checkpoint == Checkpoint("42"), f"resumed from {checkpoint}, the row has 42"
    a.checkpoint(key, "43")  # not a regression: the holder knows the row
    assert table.get(key).checkpoint == Checkpoint("43")  # type: ignore[union-attr]


def test_a_hand_off_called_off_while_its_row_cannot_be_confirmed_resumes_once_it_can() -> None:
    # the write that confirms the row before processing resumes is answered with errors too:
    # nothing processes the key meanwhile, and a later round resumes from the row's checkpoint
    fleet, _table, key, writes = handing_off_after_an_ambiguous_checkpoint()
    a = fleet.coordinators["a"]
    fleet.sync_membership(["a"])
    fleet.listeners["a"].finish(key)
    starts = len(fleet.processing.starts)
    hits = writes.hits
    fleet.round(["a"])
    assert writes.hits > hits, "a tried to confirm the row"
    assert not a.holds(key) and len(fleet.processing.starts) == starts and a.counters["handoffs_resumed"] == 0
    writes.on = False
    fleet.round(["a"])
    assert a.holds(key) and a.counters["handoffs_resumed"] == 1
    assert fleet.processing.starts[-1] == ("a", key, Checkpoint("42"))
