"""The shard manifest: one member per stream lists shards and publishes a versioned manifest
(head row + chunks) that every other member polls; Workers with ``reads="scoped"`` plan from it.

Store tests run against the moto server; the provider tests drive members round by round with
a FakeClock (no threads); the Worker tests run Workers as threads against moto.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from hashring import StaticMembership, owners_of
from kinesis import StreamConfig, Worker, WorkerConfig
from kinesis.consumer.discovery.manifest import ShardManifest, ShardManifestSync
from kinesis.consumer.discovery.shards import ShardDiscovery
from kinesis.errors import ConfigurationError
from kinesis.lease_loop.membership import DynamoDBMembership, SessionMembership
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.manifests import (
    ManifestConflictError,
    ManifestCorruptError,
    ManifestStore,
)
from kinesis.lease_loop.table.model import TableSnapshot
from kinesis.lease_loop.timing import FakeClock
from kinesis.testing import LocalAWS
from tests.support.waiting import eventually
from tests.support.worker_journal import Journal, JournalProcessor, put_records

TABLE = "manifest-test-leases"
SPEC = StreamConfig("orders", "app", "TRIM_HORIZON")
EMPTY = TableSnapshot({}, {}, {}, 0.0)


@pytest.fixture
def table(aws: LocalAWS) -> LeaseTable:
    return LeaseTable.open(aws.client("dynamodb"), TABLE)


def chunk_keys(table: LeaseTable) -> set[str]:
    items = table.client.scan(TableName=TABLE)["Items"]
    return {i["leaseKey"]["S"] for i in items if i["leaseKey"]["S"].count("#") >= 3}


# --- the store ---------------------------------------------------------------------------


def test_a_payload_larger_than_a_chunk_round_trips_and_old_chunks_are_deleted(table: LeaseTable) -> None:
    store = ManifestStore(table, "shards/app/orders/", chunk_bytes=1_000)
    head = store.claim("a", None)
    payloads = [json.dumps([f"shardId-{i:012d}-{v}" for i in range(2_000)]).encode() for v in range(4)]
    for payload in payloads:
        head = store.publish(head, payload)
        assert head.chunks > 3  # the compressed payload spans several rows
        assert store.read(store.head(consistent=True)) == payload  # type: ignore[arg-type]
    assert head.version == 4
    versions = {int(k.split("#")[2]) for k in chunk_keys(table)}
    assert versions == {3, 4}, "the previous version stays readable, older ones are deleted"
    assert table.scan().leases == {}, "manifest rows are not lease rows"


def test_a_publish_on_a_moved_head_fails_and_leaves_the_head_as_it_was(table: LeaseTable) -> None:
    store = ManifestStore(table, "m")
    seen = store.claim("a", None)
    taken = store.claim("b", seen)  # b claims the chore
    with pytest.raises(ManifestConflictError, match="head moved"):
        store.publish(seen, b"stale")
    with pytest.raises(ManifestConflictError):
        store.renew(seen)
    assert store.head(consistent=True) == taken
    assert chunk_keys(table) == set(), "the loser's chunks are deleted"
    with pytest.raises(ManifestConflictError):
        store.claim("c", None)  # a head exists: no blind create


def test_a_chunk_that_does_not_match_the_digest_is_reported(table: LeaseTable) -> None:
    store = ManifestStore(table, "m")
    head = store.publish(store.claim("a", None), b"payload")
    (key,) = chunk_keys(table)
    import zlib

    table.client.put_item(TableName=TABLE, Item={"leaseKey": {"S": key}, "data": {"B": zlib.compress(b"other")}})
    with pytest.raises(ManifestCorruptError, match="digest"):
        store.read(head)
    table.client.put_item(TableName=TABLE, Item={"leaseKey": {"S": store.head_key}, "version": {"S": "x"}})
    with pytest.raises(ManifestCorruptError, match="head row unreadable"):
        store.head()


# --- the provider, member by member --------------------------------------------------------


class CountingDiscovery(ShardDiscovery):
    calls: Counter[str] = Counter()

    def __init__(self, client: Any, member: str):
        super().__init__(client, "orders", cache_ttl=0.001)
        self.member = member

    def list_shards(self, force: bool = False) -> list[Any]:
        CountingDiscovery.calls[self.member] += 1
        return super().list_shards(force=True)


class Fleet:
    def __init__(self, aws: LocalAWS, table: LeaseTable, members: list[str], *, poll: float = 5.0):
        CountingDiscovery.calls = Counter()
        self.clock = FakeClock()
        self.table = table
        self.members = list(members)
        self.syncs = {
            m: ShardManifestSync(
                table, [(SPEC, CountingDiscovery(aws.client("kinesis"), m))], member_id=m,
                membership=StaticMembership(members, m), lease_duration=3.0, tick_interval=1.0,
                shard_sync_interval=2.0, poll_interval=poll, replicas=1, clock=self.clock,
            )
            for m in members
        }
        self.keys: dict[str, list[str]] = {}

    def round(self, *alive: str) -> None:
        for m in alive or self.members:
            self.keys[m] = self.syncs[m](EMPTY)

    def advance(self, seconds: float = 1.0) -> None:
        self.clock.advance(seconds)

    def owner(self) -> str | None:
        head = ManifestStore(self.table, "shards/app/orders/").head(consistent=True)
        return None if head is None else head.owner


def test_one_member_lists_shards_creates_rows_and_everyone_plans_the_same_keys(
    aws: LocalAWS, table: LeaseTable
) -> None:
    aws.client("kinesis").create_stream(StreamName="orders", ShardCount=4)
    fleet = Fleet(aws, table, ["a", "b", "c", "d"])
    first = owners_of("__chore__", "shards/app/orders/", fleet.members, replicas=1)[0]
    for _ in range(8):
        fleet.round()
        fleet.advance()
    expected = [f"app/orders/shardId-00000000000{i}" for i in range(4)]
    assert fleet.owner() == first
    assert all(sorted(keys) == expected for keys in fleet.keys.values()), fleet.keys
    assert set(CountingDiscovery.calls) == {first}, "only the chore owner calls ListShards"
    assert sorted(table.scan().leases) == expected
    assert fleet.syncs[first].published == 1, "nothing changed: one version"


def test_a_dead_owner_is_replaced_by_its_backup_within_a_lease_duration_and_a_tick(
    aws: LocalAWS, table: LeaseTable
) -> None:
    aws.client("kinesis").create_stream(StreamName="orders", ShardCount=2)
    fleet = Fleet(aws, table, ["a", "b", "c", "d", "e"])
    first, backup = owners_of("__chore__", "shards/app/orders/", fleet.members, replicas=1)
    for _ in range(3):
        fleet.round()
        fleet.advance()
    assert fleet.owner() == first
    others = [m for m in fleet.members if m != first]
    died_at = fleet.clock()  # `first` stops renewing but stays listed
    while fleet.owner() == first:
        fleet.round(*others)
        fleet.advance(0.25)
        assert fleet.clock() - died_at <= 3.0 + 1.0 + 0.25, "taken over within a lease duration + a tick"
    assert fleet.owner() == backup, "only the ranked backup claims"
    fleet.round(first)  # back from a pause: its renewal fails and it steps down
    assert fleet.owner() == backup and not fleet.syncs[first].owns_chore(SPEC)


@pytest.mark.parametrize("damage", ["lost", "unreadable"])
def test_a_damaged_head_is_rebuilt_and_republished_so_a_member_that_starts_later_plans_the_keys(
    aws: LocalAWS, table: LeaseTable, damage: str
) -> None:
    aws.client("kinesis").create_stream(StreamName="orders", ShardCount=2)
    fleet = Fleet(aws, table, ["a", "b", "c", "d"])
    first, backup = owners_of("__chore__", "shards/app/orders/", fleet.members, replicas=1)
    late = next(m for m in fleet.members if m not in (first, backup))
    early = [m for m in fleet.members if m != late]
    for _ in range(3):
        fleet.round(*early)
        fleet.advance()
    store = ManifestStore(table, "shards/app/orders/")
    assert store.head(consistent=True).version == 1  # type: ignore[union-attr]
    if damage == "lost":
        table.client.delete_item(TableName=TABLE, Key={"leaseKey": {"S": store.head_key}})
    else:
        table.client.put_item(TableName=TABLE, Item={"leaseKey": {"S": store.head_key}, "garbage": {"S": "\x00"}})
    for _ in range(3):
        fleet.round(*early)
        fleet.advance()
    head = store.head(consistent=True)  # readable again: nothing raises
    assert head is not None and head.owner in ((first,) if damage == "lost" else (first, backup))
    assert head.version == 2 and head.chunks, "rebuilt past the version its owner read, then published"
    for _ in range(2):
        fleet.round()
        fleet.advance()
    expected = [f"app/orders/shardId-00000000000{i}" for i in range(2)]
    assert sorted(fleet.keys[late]) == expected, "a member that never read the damaged version plans the keys"


def test_a_split_is_planned_only_once_the_parent_finished_and_one_poll_after_publishing(
    kinesis_resharding: LocalAWS, table: LeaseTable
) -> None:
    kinesis = kinesis_resharding.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    fleet = Fleet(kinesis_resharding, table, ["a", "b", "c"], poll=5.0)
    for _ in range(7):  # members that are not chore candidates poll the head every 5 s
        fleet.round()
        fleet.advance()
    parent = "app/orders/shardId-000000000000"
    assert all(keys == [parent] for keys in fleet.keys.values())
    shard = kinesis.list_shards(StreamName="orders")["Shards"][0]["HashKeyRange"]
    middle = (int(shard["StartingHashKey"]) + int(shard["EndingHashKey"])) // 2
    kinesis.split_shard(StreamName="orders", ShardToSplit="shardId-000000000000", NewStartingHashKey=str(middle))
    for _ in range(4):  # the owner lists again and creates the children's rows
        fleet.round()
        fleet.advance()
    rows = table.scan().leases
    assert rows["app/orders/shardId-000000000001"].parents == (parent,)
    assert all(keys == [parent] for keys in fleet.keys.values()), "children wait for the parent"
    lease = table.take(rows[parent], "a")
    assert lease is not None
    table.mark_shard_end(lease)
    fleet.round()  # the owner reads the closed shard's row within a tick and publishes
    published = fleet.clock()
    children = ["app/orders/shardId-000000000001", "app/orders/shardId-000000000002"]
    while fleet.clock() < published + 5.0 - 0.5:
        fleet.advance(0.5)
        fleet.round()
        assert all(keys == [parent] for keys in fleet.keys.values()), "not before one poll interval"
    # its age is counted in the owner's head renewals (one a tick): at most a tick late
    fleet.advance(1.0)
    fleet.round()
    fleet.advance(1.0)
    fleet.round()
    assert all(sorted(keys) == children for keys in fleet.keys.values()), fleet.keys


def test_the_manifest_round_trips_shards_with_128_bit_hash_keys() -> None:
    from kinesis.consumer.discovery.shards import Shard

    shard = Shard("shardId-000000000001", "shardId-000000000000", None, "1", None, (0, 2**128 - 1))
    manifest = ShardManifest((shard,), frozenset({"shardId-000000000000"}), 12)
    assert ShardManifest.from_bytes(manifest.to_bytes()) == manifest


# --- Workers -------------------------------------------------------------------------------


def scoped_worker(aws: LocalAWS, journal: Journal, member: str, members: StaticMembership) -> Worker:
    config = WorkerConfig(
        table_name=TABLE, streams=[SPEC], lease_duration=10.0, tick_interval=2.0 / 3, idle_backoff=0.1,
        shard_sync_interval=1.0, manifest_poll_interval=1.0, shutdown_grace=10.0, reads="scoped",
    )
    return Worker(config, lambda: JournalProcessor(journal, member), membership=members,
                  kinesis_client=aws.client("kinesis"), dynamodb_client=aws.client("dynamodb"))


def test_scoped_workers_balance_process_everything_once_and_hand_off_on_stop(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=6)
    written = put_records(kinesis, "orders", 200)
    journal = Journal()
    views = {m: StaticMembership(["w1", "w2"], m) for m in ("w1", "w2")}
    w1 = scoped_worker(aws, journal, "w1", views["w1"]).start()
    w2 = scoped_worker(aws, journal, "w2", views["w2"]).start()
    try:
        assert eventually(lambda: len(w1.status().held) == 3 and len(w2.status().held) == 3, 60)
        assert journal.wait_for(lambda _: set(written) <= journal.processed(), 60)
        assert w1.coordinator.reads == w2.coordinator.reads == "scoped"
        syncs = [w.shard_sync for w in (w1, w2)]
        assert all(isinstance(sync, ShardManifestSync) for sync in syncs)
        owners = [sync.owns_chore(SPEC) for sync in syncs]  # type: ignore[attr-defined]
        assert sorted(owners) == [False, True], "one member holds the shard chore"
        lister = (w1, w2)[owners.index(True)]
        other = (w1, w2)[owners.index(False)]
        assert eventually(lambda: lister.discoveries[SPEC.key_prefix].calls > 1, 30), "the owner lists again"
        assert other.discoveries[SPEC.key_prefix].calls == 1, "the other lists only once, at start-up"
        for view in views.values():
            view.set_members(["w2"])
        assert w1.stop(graceful=True) is True
        more = put_records(kinesis, "orders", 60, prefix="late")
        assert eventually(lambda: len(w2.status().held) == 6, 60)
        assert journal.wait_for(lambda _: set(written + more) <= journal.processed(), 60)
        assert journal.duplicates() == 0
        assert w2.status().lease_counters["takeovers"] == 0, "moved by hand-off, not expiry"
    finally:
        w1.stop()
        w2.stop()


def test_scoped_reads_with_a_membership_fed_by_the_scans_name_the_fix(aws: LocalAWS) -> None:
    config = WorkerConfig(table_name=TABLE, streams=[SPEC], reads="scoped")
    table = LeaseTable(aws.client("dynamodb"), TABLE)
    with pytest.raises(ConfigurationError, match="leave membership unset"):
        Worker(config, lambda: JournalProcessor(Journal(), "x"), membership=DynamoDBMembership(table, "x"),
               kinesis_client=aws.client("kinesis"), dynamodb_client=aws.client("dynamodb"))
    with pytest.raises(ConfigurationError, match="reads must be"):
        WorkerConfig(table_name=TABLE, streams=[SPEC], reads="index")  # type: ignore[arg-type]


def test_by_default_a_worker_reads_scoped_with_the_member_list_in_the_table(aws: LocalAWS) -> None:
    config = WorkerConfig(table_name=TABLE, streams=[SPEC], backup_check_interval=1.5)
    assert config.reads == "auto"
    factory = lambda: JournalProcessor(Journal(), "x")  # noqa: E731
    clients = {"kinesis_client": aws.client("kinesis"), "dynamodb_client": aws.client("dynamodb")}
    outside = Worker(config, factory, membership=StaticMembership(["x"], "x"), **clients)
    assert outside.reads == outside.coordinator.reads == "scoped"
    assert isinstance(outside.shard_sync, ShardManifestSync) and outside.coordinator.backup_check_interval == 1.5
    default = Worker(config, factory, **clients)  # the member list as a document in the table: no scan
    assert isinstance(default.membership, SessionMembership) and default.coordinator.reads == "scoped"
    assert isinstance(default.shard_sync, ShardManifestSync)
    with pytest.raises(ConfigurationError, match="backup_check_interval only applies to scoped reads"):
        Worker(WorkerConfig(table_name=TABLE, streams=[SPEC], reads="scan", backup_check_interval=1.5), factory,
               **clients)  # backup_check_interval would be silently unused
    heartbeats = Worker(WorkerConfig(table_name=TABLE, streams=[SPEC], reads="scan"), factory, **clients)
    assert isinstance(heartbeats.membership, DynamoDBMembership)
    assert heartbeats.reads == heartbeats.coordinator.reads == "scan"  # its heartbeats are in the scans
    assert not isinstance(heartbeats.shard_sync, ShardManifestSync)
    pinned = Worker(WorkerConfig(table_name=TABLE, streams=[SPEC], reads="scan"), factory,
                    membership=StaticMembership(["x"], "x"), **clients)
    assert pinned.coordinator.reads == "scan"


def test_backup_check_interval_reaches_the_coordinator_and_only_with_scoped_reads(aws: LocalAWS) -> None:
    config = WorkerConfig(table_name=TABLE, streams=[SPEC], reads="scoped", backup_check_interval=1.5)
    worker = Worker(config, lambda: JournalProcessor(Journal(), "x"), membership=StaticMembership(["x"], "x"),
                    kinesis_client=aws.client("kinesis"), dynamodb_client=aws.client("dynamodb"))
    assert worker.coordinator.backup_check_interval == 1.5
    default = WorkerConfig(table_name=TABLE, streams=[SPEC], reads="scoped").coordinator_kwargs("scoped")
    assert "backup_check_interval" not in default  # the coordinator's default: lease_duration / 2
    with pytest.raises(ConfigurationError, match="only applies to scoped reads"):
        WorkerConfig(table_name=TABLE, streams=[SPEC], reads="scan", backup_check_interval=1.5)
    with pytest.raises(ConfigurationError, match="backup_check_interval must be"):
        WorkerConfig(table_name=TABLE, streams=[SPEC], reads="scoped", backup_check_interval=0)


def test_a_chore_whose_candidates_never_run_reaches_a_running_member(aws: LocalAWS) -> None:
    # the chore's two ranked candidates are listed but never run (older builds during a rolling
    # upgrade, dead pods still listed): nobody claimed it, so no key was ever planned. Any other
    # member claims a head that did not move (or no head at all) for orphan_timeout
    from hashring import chore_owners

    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=2)
    table = LeaseTable.open(aws.client("dynamodb"), "manifest-orphaned")
    members = ["a", "b", "c", "d", "e"]
    fleet = Fleet(aws, table, members, poll=2.0)
    dead = chore_owners("shards/app/orders/", members, replicas=1)
    running = [m for m in members if m not in dead]
    orphan = fleet.syncs[running[0]].orphan_timeout
    for _ in range(int(orphan + 2.0) + 2):
        fleet.round(*running)
        fleet.advance()
    assert fleet.owner() in running
    fleet.round(*running)
    assert all(len(fleet.keys[m]) == 2 for m in running), fleet.keys
