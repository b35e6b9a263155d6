"""Session rows and session leases: the holder renews one session row per tick and no lease
row; its leases name the session and stay valid while its chain lasts; a watcher times them
all by that row and takes each after a consistent read of it. boto3 -> moto over HTTP,
FakeClock."""

from __future__ import annotations

import pytest

from kinesis.errors import DuplicateMemberIdError, LeaseTableUnavailableError
from kinesis.lease_loop.decisions import Seen, SessionSeen, Take, unchanged_since
from kinesis.lease_loop.holder import LeaseHolder, WritePool
from kinesis.lease_loop.lease_listener import GuardedListener, NullListener
from kinesis.lease_loop.table import model as m
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import SessionCheck, SessionRow
from kinesis.lease_loop.timing import FakeClock, LeaseTiming
from kinesis.lease_loop.writes import Acquisitions
from kinesis.testing import LocalAWS

TIMING = LeaseTiming.of(9.0, tick_interval=3.0)  # validity 6 s


@pytest.fixture
def table(aws: LocalAWS) -> LeaseTable:
    return LeaseTable.open(aws.client("dynamodb"), "sessions-test")


def test_a_session_is_renewed_under_its_token_and_a_second_process_is_named(table: LeaseTable) -> None:
    first = table.renew_session("a", "t1", None)
    assert first == SessionRow("a", "t1", 1)
    assert table.renew_session("a", "t1", 1) == SessionRow("a", "t1", 2)
    restarted = table.renew_session("a", "t2", None)  # a new run of member a replaces it
    assert restarted == SessionRow("a", "t2", 3)  # the counter never goes back
    with pytest.raises(DuplicateMemberIdError, match="unique id"):
        table.renew_session("a", "t1", 2)
    assert table.delete_session("a", "t1") is False  # not its session any more
    assert table.read_rows([], ["a", "b"]) == ({}, {"a": SessionRow("a", "t2", 3), "b": None})
    assert table.delete_session("a", "t2") is True
    again = table.renew_session("a", "t2", 3)  # deleted meanwhile: a new session, never (t2, 1) again
    assert again.token != "t2" and again.counter == 1


def test_a_new_session_started_by_a_renewal_answered_with_an_error_is_still_this_process(
        table: LeaseTable, aws: LocalAWS) -> None:
    # fleetsim seed 7013 (session membership): m1's row was deleted while it was throttled; its
    # next renewal started a new session, applied but answered with an error, so m1 still knew
    # its old token; the renewal after found the new token and m1 refused to run, taking itself
    # for a duplicate id (keys handed to it then waited for nobody). A token this process minted
    # is its own.
    table.renew_session("a", "t1", None)
    assert table.delete_session("a", "t1")
    started = table.renew_session("a", "t1", 1)  # a new session: its answer is lost in the seed
    assert started.token != "t1"
    again = table.renew_session("a", "t1", 1)
    assert (again.token, again.replayed) == (started.token, True)
    other_process = LeaseTable.open(aws.client("dynamodb"), "sessions-test")
    with pytest.raises(DuplicateMemberIdError):  # another process's session is still refused
        other_process.renew_session("a", "t9", 7)


def test_a_session_row_records_the_plan_version_its_member_plans_from(table: LeaseTable) -> None:
    assert table.renew_session("a", "t1", None, plan_version=4) == SessionRow("a", "t1", 1, 4)
    assert table.renew_session("a", "t1", 1, plan_version=5) == SessionRow("a", "t1", 2, 5)
    assert table.read_rows([], ["a"])[1]["a"] == SessionRow("a", "t1", 2, 5)
    assert table.renew_session("b", "t2", None) == SessionRow("b", "t2", 1, 0)  # none: no attribute
    assert table.renew_session("a", "t3", None) == SessionRow("a", "t3", 3, 0)  # a new run: not the old version
    table.call("update_item", Key={"leaseKey": {"S": "__session__#b"}}, UpdateExpression="SET planVersion = :v",
               ExpressionAttributeValues={":v": {"S": "seven"}})
    assert table.read_rows([], ["b"])[1]["b"] == SessionRow("b", "t2", 1, 0)  # advisory: malformed reads as 0


def test_a_scan_sorts_session_rows_out_of_the_leases(table: LeaseTable) -> None:
    table.renew_session("a", "t1", None)
    lease = table.create_lease_if_absent("k", owner="a", session="t1")
    assert lease is not None and lease.session == "t1"
    snapshot = table.scan()
    assert set(snapshot.leases) == {"k"} and snapshot.corrupt == {}
    assert snapshot.sessions == {"a": SessionRow("a", "t1", 1)}
    assert snapshot.leases["k"].session == "t1"


def test_a_take_checked_against_the_session_fails_once_the_session_was_renewed(table: LeaseTable) -> None:
    table.renew_session("x", "tx", None)
    lease = table.create_lease_if_absent("k", owner="x", session="tx")
    assert lease is not None
    timed = SessionCheck("x", "tx", 1)
    table.renew_session("x", "tx", 1)  # x renewed after the watcher timed it: x is alive
    assert table.take(lease, "b", session="tb", check=timed) is None
    row = table.get("k")
    assert row is not None and row.owner == "x" and row.session == "tx"
    taken = table.take(lease, "b", session="tb", check=SessionCheck("x", "tx", 2))
    assert taken is not None and taken.owner == "b" and taken.counter == lease.counter + 1
    row = table.get("k")
    assert row is not None and (row.owner, row.counter, row.session) == ("b", taken.counter, "tb")
    assert row.write_token == taken.write_token


def test_writes_that_change_the_owner_set_or_remove_the_session_and_the_session_lease_state(
        table: LeaseTable) -> None:
    def state() -> tuple[str | None, str]:
        row = table.get("k")
        assert row is not None
        return row.session, row.state.value

    lease = table.create_lease_if_absent("k", owner="a", session="ta")
    assert lease is not None and state() == ("ta", "ACTIVE_SESSION")
    offered = table.handoff(lease, "b")
    assert state() == (None, "ACTIVE")  # an offer is timed by its row, by every release
    adopted = table.adopt(offered, session="tb")
    assert state() == ("tb", "ACTIVE_SESSION")
    renewed = table.renew(adopted, session="tb", leased=False)  # its session cannot be renewed
    assert state() == ("tb", "ACTIVE")
    table.release(renewed)
    assert state() == (None, "ACTIVE")
    free = table.get("k")
    assert free is not None
    table.take(free, "c")  # a take without a session leaves none behind (the bare LeaseTable API)
    assert state() == (None, "ACTIVE")
    assert m.SESSION not in table.get_items(["k"])["k"]


def test_a_release_before_0_2_never_writes_a_session_lease(table: LeaseTable) -> None:
    # releases before 0.2 reject a leaseState they do not know (reported, never written): the
    # state is the fence that keeps them from a lease whose row its holder does not renew
    lease = table.create_lease_if_absent("k", owner="a", session="ta")
    assert lease is not None
    item = table.get_items(["k"])["k"]
    assert item[m.STATE] == {"S": "ACTIVE_SESSION"}
    assert "ACTIVE_SESSION" not in ("ACTIVE", "SHARD_END")  # what those releases parse


@pytest.mark.parametrize("writer", ["old", "a"])
def test_a_row_a_0_1_member_wrote_last_has_no_session(table: LeaseTable, writer: str) -> None:
    # a 0.1 member's take or renewal sets owner and counter and leaves leaseSession as it was;
    # "a": a 0.1 run under an id whose earlier 0.2 run left its session row (ta, 1) behind
    table.renew_session("a", "ta", None)
    lease = table.create_lease_if_absent("k", owner="a", session="ta")
    assert lease is not None and lease.session == "ta" and table.get("k").session == "ta"  # type: ignore[union-attr]
    table.client.update_item(
        TableName=table.table_name, Key={m.KEY: {"S": "k"}},
        UpdateExpression="SET #o = :o, #c = :c", ConditionExpression="#c = :old",
        ExpressionAttributeNames={"#o": m.OWNER, "#c": m.COUNTER},
        ExpressionAttributeValues={":o": {"S": writer}, ":c": {"N": "2"}, ":old": {"N": "1"}})
    snapshot = table.scan()
    row = snapshot.leases["k"]
    assert table.get_items(["k"])["k"][m.SESSION] == {"S": "ta"}  # still in the item
    assert (row.owner, row.session) == (writer, None)  # but its counter moved past leaseSessionCounter
    seen = Seen(row.counter, row.owner, 50.0, row.session)
    sessions = {member: SessionSeen(r.token, r.counter, 0.0, 100.0) for member, r in snapshot.sessions.items()}
    assert unchanged_since(seen, sessions, 100.0) == 50.0  # timed by its row alone


def test_every_holder_write_records_its_session_with_the_counter(table: LeaseTable) -> None:
    lease = table.create_lease_if_absent("k", owner="a", session="t1")
    assert lease is not None
    renewed = table.renew(lease, session="t2")  # a new session of the holder re-binds its rows
    assert renewed.session == "t2" and table.get("k").session == "t2"  # type: ignore[union-attr]
    checkpointed = table.checkpoint(renewed, "5", session="t2")
    assert table.get_items(["k"])["k"][m.SESSION_COUNTER] == {"N": str(checkpointed.counter)}
    plain = table.checkpoint(checkpointed, "6")  # a write without a session (the bare LeaseTable API)
    assert plain.session is None


class FlakySessions(LeaseTable):
    """A table whose session renewals fail while ``down`` (applied first if ``applied``)."""

    down = False
    applied = False

    def renew_session(self, member_id: str, token: str, previous: int | None, *, plan_version: int = 0,
                      handled: frozenset[str] = frozenset(), loads: bytes | None = None) -> SessionRow:
        if self.down:
            if self.applied:
                super().renew_session(member_id, token, previous, plan_version=plan_version, handled=handled,
                                      loads=loads)
            raise LeaseTableUnavailableError("throttled")
        return super().renew_session(member_id, token, previous, plan_version=plan_version, handled=handled,
                                     loads=loads)


def test_a_session_lease_is_valid_while_its_chain_lasts_and_no_lease_row_is_written_to_renew_it(
        aws: LocalAWS) -> None:
    clock = FakeClock(100.0)
    table = FlakySessions.open(aws.client("dynamodb"), "sessions-flaky")
    holder = LeaseHolder(table, "a", TIMING, clock)
    pool = WritePool(2, "a")
    tick = lambda: holder.renew_all(pool, lambda key, held: None)  # noqa: E731
    try:
        holder.renew_session()  # sent 100: the chain lasts until 106
        clock.advance(2.0)
        lease = table.create_lease_if_absent("k", owner="a", session=holder.session)
        assert lease is not None
        holder.add("k", lease, holder.stamp())
        for _ in range(5):  # five ticks: the session row is renewed, the lease row is not
            clock.advance(3.0)
            tick()
            assert holder.holds("k")
        assert table.get("k").counter == lease.counter and holder.counters()["renewals"] == 0  # type: ignore[union-attr]
        table.down = True  # session renewals fail (116): the chain (until 118) will not reach the next tick
        clock.advance(3.0)
        tick()
        row = table.get("k")
        assert row is not None and row.counter == lease.counter + 1 and row.state.value == "ACTIVE"
        assert holder.holds("k")  # renewed by its row now, as before 0.2: valid until 119 + 6
        clock.advance(3.0)
        tick()
        assert holder.holds("k") and table.get("k").counter == lease.counter + 2  # type: ignore[union-attr]
        table.down = False
        clock.advance(3.0)
        tick()  # the chain is back: the lease becomes a session lease again (one write)
        row = table.get("k")
        assert row is not None and row.state.value == "ACTIVE_SESSION" and row.counter == lease.counter + 3
        clock.advance(3.0)
        tick()
        assert table.get("k").counter == lease.counter + 3 and holder.holds("k")  # type: ignore[union-attr]
    finally:
        pool.shutdown()


def test_a_renewal_answered_after_the_chain_ran_out_makes_the_holder_write_its_leases_first(
        aws: LocalAWS) -> None:
    # the holder is paused past its chain: its next renewal succeeds but is answered late, so
    # a watcher may have taken a lease in between; its leases are not processed until a
    # conditional write of each shows nobody did
    clock = FakeClock(100.0)
    table = FlakySessions.open(aws.client("dynamodb"), "sessions-late")
    holder = LeaseHolder(table, "a", TIMING, clock)
    pool = WritePool(2, "a")
    try:
        holder.renew_session()
        lease = table.create_lease_if_absent("k", owner="a", session=holder.session)
        assert lease is not None
        holder.add("k", lease, holder.stamp())
        clock.advance(7.0)  # paused: the chain (until 106) ran out
        assert not holder.holds("k")
        holder.renew_session()  # answered now: a new chain; the lease belongs to the old one
        assert not holder.holds("k")
        taken = table.take(table.get("k"), "b", session="tb")  # type: ignore[arg-type]
        assert taken is not None  # a watcher took it meanwhile
        lost: list[str] = []
        holder.renew_all(pool, lambda key, held: lost.append(key))
        assert lost == ["k"] and not holder.holds("k")
    finally:
        pool.shutdown()


def test_nothing_is_taken_before_a_session_renewal_succeeds(aws: LocalAWS) -> None:
    table = FlakySessions.open(aws.client("dynamodb"), "sessions-none")
    table.down = True
    holder = LeaseHolder(table, "a", TIMING, FakeClock(100.0))
    pool = WritePool(2, "a")
    counts: list[str] = []
    acquisitions = Acquisitions(holder, GuardedListener(NullListener(), "a", counts.append), pool, "a",
                                m.TRIM_HORIZON)
    try:
        acquisitions.run([Take("k", "acquired", None)], set(), {}, {})
        assert holder.keys() == frozenset() and table.get("k") is None  # not even created
        table.down = False
        acquisitions.run([Take("k", "acquired", None)], set(), {}, {})
        assert holder.holds("k") and table.get("k").session == holder.session  # type: ignore[union-attr]
    finally:
        pool.shutdown()


def test_a_renewal_answered_with_an_error_but_applied_is_recognised_and_dated_from_its_send(
        aws: LocalAWS) -> None:
    # the renewal sent at 103 is applied but answered with an error: a watcher may first see its
    # counter at 103. The next renewal (107) finds this session's token with that counter: it
    # was ours; the session keeps its token and counts from 103, not 107
    clock = FakeClock(100.0)
    table = FlakySessions.open(aws.client("dynamodb"), "sessions-applied")
    holder = LeaseHolder(table, "a", TIMING, clock)
    holder.renew_session()
    first = holder.session
    clock.advance(3.0)
    table.down = table.applied = True
    holder.renew_session()
    assert table.read_rows([], ["a"])[1]["a"].counter == 2  # type: ignore[union-attr]
    table.down = False
    clock.advance(4.0)
    holder.renew_session()
    row = table.read_rows([], ["a"])[1]["a"]
    assert holder.session == first and row is not None and (row.token, row.counter) == (first, 2)
    assert holder.chain_alive() and not holder.chain_alive(103.0 + TIMING.validity - clock() + 0.01)
    clock.advance(1.0)
    holder.renew_session()  # an ordinary renewal again
    assert table.read_rows([], ["a"])[1]["a"].counter == 3  # type: ignore[union-attr]


class CountingReads(LeaseTable):
    """Counts strongly consistent reads of session rows."""

    consistent_reads = 0

    def read_rows(self, keys, members, *, consistent=False):  # type: ignore[no-untyped-def]
        if consistent and members:
            self.consistent_reads += 1
        return super().read_rows(keys, members, consistent=consistent)


def test_takes_relying_on_one_session_read_it_once_strongly_consistent_and_skip_if_it_moved(
        aws: LocalAWS) -> None:
    table = CountingReads(aws.client("dynamodb"), "sessions-checked")
    table.ensure_table()
    table.renew_session("x", "tx", None)
    leases = [table.create_lease_if_absent(f"k{i}", owner="x", session="tx") for i in range(8)]
    holder = LeaseHolder(table, "a", TIMING, FakeClock(100.0))
    pool = WritePool(8, "a")
    acquisitions = Acquisitions(holder, GuardedListener(NullListener(), "a", lambda _: None), pool, "a",
                                m.TRIM_HORIZON)
    try:
        table.renew_session("x", "tx", 1)  # x renewed after it was timed at counter 1: alive
        stale = SessionCheck("x", "tx", 1)
        acquisitions.run([Take(f"k{i}", "takeovers", lease, stale) for i, lease in enumerate(leases)], set(), {}, {})
        assert holder.keys() == frozenset() and table.consistent_reads == 1
        check = SessionCheck("x", "tx", 2)
        acquisitions.run([Take(f"k{i}", "takeovers", lease, check) for i, lease in enumerate(leases)], set(), {}, {})
        assert holder.keys() == {f"k{i}" for i in range(8)} and table.consistent_reads == 2
        assert holder.counters()["take_conflicts"] == 8
    finally:
        pool.shutdown()


def test_an_offer_of_a_key_its_member_already_holds_leaves_the_session_row() -> None:
    # an offer read in a renewal's answer after its key was adopted another way (a round read
    # the handed-off row first) was never looked at: offers piled up on the session row (40 KB
    # of reads a minute per member at 2,000 shards in bench_lease_cost.py), up to the item limit
    from tests.coordinator_fleet import Fleet, memory_table, settle

    fleet = Fleet(memory_table(), [f"q{i:02d}" for i in range(12)], ["a", "b"], reads="scoped", replicas=1)
    settle(fleet)
    key = fleet.coordinators["b"].held_keys()[0]
    assert fleet.table.offer("b", key)  # as if its adoption had been read before the offer
    for _ in range(3):
        fleet.round()
    _, sessions = fleet.table.read_rows([], ["b"], consistent=True)
    row = sessions["b"]
    assert row is not None and row.offers == frozenset(), row.offers
    assert key in fleet.coordinators["b"].held_keys()
