"""SessionMembership, the Worker's default: the member list as a document its members keep.

Coordinators with ``reads="scoped"`` over one in-memory lease table (DynamoDB's conditional
writes; ``tests/kinesis/lease_loop/test_memory_dynamodb.py`` holds it to moto), driven tick by tick on one
FakeClock, checking after every round that no key has two holders. What must hold: a member
joins by publishing itself, leaves by publishing the list without itself, a dead member is
removed by its watcher a lease duration after its session stopped, everyone learns of each
change within a tick, and nothing is scanned or re-published in steady state.
"""

from __future__ import annotations

from collections import Counter

import pytest

from kinesis.errors import KinesisRetriesExhaustedError
from kinesis.lease_loop.coordinator import LeaseCoordinator
from kinesis.lease_loop.membership import SessionMembership, decode, encode
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.timing import FakeClock
from tests.support.memory_dynamodb import MemoryDynamoDB

KEYS = [f"k{i:02d}" for i in range(12)]
D = 3.0


class Fleet:
    def __init__(self, members: list[str]):
        self.memory = MemoryDynamoDB()
        self.clock = FakeClock(1000.0)
        self.table = LeaseTable(self.memory, "sessions-list", retry_attempts=2, sleep=lambda s: None).ensure_table()
        self.coordinators: dict[str, LeaseCoordinator] = {}
        self.dead: set[str] = set()
        for m in members:
            self.add(m)

    def add(self, member: str) -> LeaseCoordinator:
        membership = SessionMembership(self.table, member, clock=self.clock)
        self.coordinators[member] = LeaseCoordinator(self.table, membership, KEYS, lease_duration=D,
                                                     replicas=1, clock=self.clock, reads="scoped")
        return self.coordinators[member]

    def live(self) -> list[str]:
        return sorted(m for m in self.coordinators if m not in self.dead)

    def round(self) -> None:
        for m in self.live():
            self.coordinators[m].tick()
        self.check()
        self.clock.advance(D / 3)

    def check(self) -> None:
        holders = Counter(k for m in self.live() for k in self.coordinators[m].held_keys()
                          if self.coordinators[m].holds(k))
        assert all(n == 1 for n in holders.values()), holders

    def lists(self) -> dict[str, tuple[str, ...]]:
        return {m: self.coordinators[m].membership.members() for m in self.live()}

    def until(self, done: object, limit: int) -> int:
        for n in range(limit + 1):
            if done():  # type: ignore[operator]
                return n
            self.round()
        raise AssertionError(f"not within {limit} rounds: lists {self.lists()}")

    def counts(self) -> list[int]:
        return [len(self.coordinators[m].held_keys()) for m in self.live()]

    def calls(self, operation: str) -> int:
        return self.memory.calls[operation]


def everyone_lists(fleet: Fleet, members: list[str]) -> bool:
    return all(listed == tuple(members) for listed in fleet.lists().values())


def balanced(fleet: Fleet) -> bool:
    counts = fleet.counts()
    return sum(counts) == len(KEYS) and max(counts) - min(counts) <= 1


def test_members_join_by_publishing_themselves_and_everyone_lists_everyone() -> None:
    fleet = Fleet(["a", "b", "c"])
    fleet.until(lambda: everyone_lists(fleet, ["a", "b", "c"]), limit=6)
    fleet.until(lambda: balanced(fleet), limit=int(4 * D / (D / 3)))
    fleet.add("d")
    joined = fleet.until(lambda: everyone_lists(fleet, ["a", "b", "c", "d"]), limit=6)
    assert joined <= 3  # the newcomer publishes, and tells the others on their session rows
    fleet.until(lambda: balanced(fleet), limit=int(4 * D / (D / 3)))


def test_a_graceful_stop_leaves_the_list_at_once() -> None:
    fleet = Fleet(["a", "b", "c"])
    fleet.until(lambda: everyone_lists(fleet, ["a", "b", "c"]) and balanced(fleet), limit=20)
    fleet.coordinators["b"].begin_stop(graceful=True)  # leaves the list, then hands its leases off
    assert fleet.until(lambda: all(fleet.lists()[m] == ("a", "c") for m in ("a", "c")), limit=4) <= 2
    fleet.until(lambda: not fleet.coordinators["b"].held_keys(), limit=6)
    fleet.dead.add("b")
    fleet.until(lambda: balanced(fleet), limit=6)


def test_a_dead_member_is_removed_by_its_watcher_a_lease_duration_after_its_session_stopped() -> None:
    fleet = Fleet(["a", "b", "c"])
    fleet.until(lambda: everyone_lists(fleet, ["a", "b", "c"]) and balanced(fleet), limit=20)
    fleet.dead.add("b")  # SIGKILL: no leave
    rounds = fleet.until(lambda: everyone_lists(fleet, ["a", "c"]), limit=int(3 * D / (D / 3)))
    assert rounds * D / 3 <= D + D / 2 + 2 * D / 3  # lease + backup check + a round either side
    fleet.until(lambda: balanced(fleet), limit=int(4 * D / (D / 3)))


def test_steady_state_scans_nothing_and_publishes_nothing() -> None:
    fleet = Fleet(["a", "b", "c"])
    fleet.until(lambda: everyone_lists(fleet, ["a", "b", "c"]) and balanced(fleet), limit=20)
    for _ in range(int(2 * D / (D / 3))):  # past the settling window
        fleet.round()
    publishes = sum(c.membership.publishes for c in fleet.coordinators.values())  # type: ignore[attr-defined]
    scans = fleet.calls("Scan")
    for _ in range(int(10 * D / (D / 3))):
        fleet.round()
    assert fleet.calls("Scan") == scans
    assert sum(c.membership.publishes for c in fleet.coordinators.values()) == publishes  # type: ignore[attr-defined]


def test_racing_joins_both_end_up_listed() -> None:
    fleet = Fleet(["a"])
    fleet.until(lambda: everyone_lists(fleet, ["a"]), limit=4)
    fleet.add("b")
    fleet.add("c")  # both publish against the same head in one round: one retries on the new one
    fleet.until(lambda: everyone_lists(fleet, ["a", "b", "c"]), limit=6)


def test_a_corrupt_list_is_replaced_by_the_next_change() -> None:
    fleet = Fleet(["a", "b"])
    fleet.until(lambda: everyone_lists(fleet, ["a", "b"]), limit=6)
    head_key = fleet.coordinators["a"].membership.head_key  # type: ignore[attr-defined]
    fleet.memory.put_item(TableName=fleet.table.table_name,
                          Item={"leaseKey": {"S": head_key}, "garbage": {"S": "\x00not a row"}})
    fleet.add("c")
    fleet.until(lambda: everyone_lists(fleet, ["a", "b", "c"]), limit=8)


def test_a_lost_head_is_published_again_so_a_member_told_of_its_last_version_catches_up() -> None:
    # d joins and tells the others on their session rows, then the head is deleted before they
    # read it: they were told of a version no head holds any more, and before the fix nobody
    # rebuilt a missing head (only the next change would have), so a, b and c planned without d
    # for good while d planned with itself, and the plan flapped between the two lists
    fleet = Fleet(["a", "b", "c"])
    fleet.until(lambda: everyone_lists(fleet, ["a", "b", "c"]) and balanced(fleet), limit=20)
    fleet.add("d").tick()  # publishes the list with itself added
    assert fleet.coordinators["d"].membership.members() == ("a", "b", "c", "d")
    head_key = fleet.coordinators["a"].membership.head_key  # type: ignore[attr-defined]
    fleet.memory.delete_item(TableName=fleet.table.table_name, Key={"leaseKey": {"S": head_key}})
    fleet.clock.advance(D / 3)
    # the next head read of a member that knows a version (backup_check_interval: D / 2)
    # publishes what it knows again; everyone reads that version at its next renewal
    rounds = fleet.until(lambda: everyone_lists(fleet, ["a", "b", "c", "d"]), limit=int(2 * D / (D / 3)))
    assert rounds * D / 3 <= D / 2 + 2 * D / 3, rounds  # a head read, then a round either side
    store = fleet.coordinators["a"].membership.store  # type: ignore[attr-defined]
    head = store.head(consistent=True)
    assert head is not None and decode(store.read(head), head_key) == ("a", "b", "c", "d")
    fleet.until(lambda: balanced(fleet), limit=int(4 * D / (D / 3)))


@pytest.mark.parametrize("members", [(), ("a",), ("a", "b", "c")])
def test_the_list_encodes_and_decodes(members: tuple[str, ...]) -> None:
    assert decode(encode(members), "here") == members


def test_members_that_start_together_see_each_other_before_taking_free_leases() -> None:
    # the first member listed alone must not take every lease and hand them on (the hot spot
    # this SDK exists to avoid): a list that moved lately is read before every round's plan
    fleet = Fleet(["a", "b", "c", "d"])  # a Deployment scaled from 0 to 4: they join in one round
    most = 0
    for i in range(int(3 * D / (D / 9))):  # a tick, then two light rounds
        for m in fleet.live():
            if i % 3:
                fleet.coordinators[m].refresh()
            else:
                fleet.coordinators[m].tick()
        fleet.check()
        most = max(most, *fleet.counts())
        fleet.clock.advance(D / 9)
    assert balanced(fleet)
    assert most <= len(KEYS) // 4 + 1, most


def test_a_removed_dead_member_is_not_read_every_round_for_good() -> None:
    # its watcher times it through the list change (departed), then forgets it once it holds no
    # row: 60 reads a minute for good in bench_peers.py's idle window before
    fleet = Fleet(["a", "b", "c"])
    fleet.until(lambda: everyone_lists(fleet, ["a", "b", "c"]) and balanced(fleet), limit=20)
    fleet.dead.add("b")
    fleet.until(lambda: everyone_lists(fleet, ["a", "c"]) and balanced(fleet), limit=int(6 * D / (D / 3)))
    for _ in range(int(2 * D / (D / 3))):
        fleet.round()
    reads_of_b: list[int] = []
    read_round = fleet.table.read_round

    def counting(keys: object, members: object, *args: object, **kwargs: object) -> object:
        listed = list(members)  # type: ignore[call-overload]
        reads_of_b.append(int("b" in listed))
        return read_round(keys, listed, *args, **kwargs)  # type: ignore[arg-type]

    fleet.table.read_round = counting  # type: ignore[method-assign,assignment]
    for i in range(18):  # two lease durations: a tick, then two light rounds
        for m in fleet.live():
            fleet.coordinators[m].tick() if i % 3 == 0 else fleet.coordinators[m].refresh()
        fleet.check()
        fleet.clock.advance(D / 9)
    assert sum(reads_of_b) <= 2, f"b read in {sum(reads_of_b)} of 18 rounds"


def test_a_stale_replica_of_an_older_head_is_no_reason_to_repair_the_list(caplog: pytest.LogCaptureFixture) -> None:
    # the head is read eventually consistent with the round's session samples; a replica one
    # version behind made a member log "the member list went back" and run a repair (which
    # then found the head current and published nothing) at every such read. A head older
    # than the member knows is read again, strongly consistent, before it counts as gone back.
    fleet = Fleet(["a", "b", "c"])
    fleet.until(lambda: everyone_lists(fleet, ["a", "b", "c"]) and balanced(fleet), limit=20)
    fleet.add("d")
    fleet.until(lambda: everyone_lists(fleet, ["a", "b", "c", "d"]), limit=8)
    head_key = fleet.coordinators["a"].membership.head_key  # type: ignore[attr-defined]
    fleet.memory.stale_reads = lambda key, versions: 1 if key.startswith(head_key) and versions > 1 else 0
    caplog.set_level("WARNING", logger="kinesis.lease_loop.membership")
    for _ in range(int(4 * D / (D / 3))):
        fleet.round()
    assert everyone_lists(fleet, ["a", "b", "c", "d"])
    assert not [r for r in caplog.records if "went back" in r.getMessage()]


def test_a_failed_confirming_read_of_the_head_waits_for_the_next_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # the consistent read that confirms a stale head (or its absence) is throttled: the round
    # must go on (before: the error escaped the round's reads and aborted the round)
    fleet = Fleet(["a", "b"])
    fleet.until(lambda: everyone_lists(fleet, ["a", "b"]), limit=6)
    membership = fleet.coordinators["a"].membership
    assert isinstance(membership, SessionMembership)

    def throttled(*, consistent: bool = False) -> None:
        raise KinesisRetriesExhaustedError("throttled")

    current = fleet.memory.get_item(TableName=fleet.table.table_name, Key={"leaseKey": {"S": membership.head_key}},
                                    ConsistentRead=True)["Item"]
    older = {**current, "version": {"N": str(membership.known_version - 1)}}
    assert membership.store.head_of(dict(older)).version < membership.known_version  # a well-formed older head
    monkeypatch.setattr(membership.store, "head", throttled)
    membership.observe_head(None)  # no head where one was known
    membership.observe_head(older)  # a replica a version behind
    assert membership.members() == ("a", "b")
