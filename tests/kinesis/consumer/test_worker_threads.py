"""Workers as threads of this process, boto3 over HTTP to the moto server: balance, graceful
hand-off with records flowing, SIGTERM, crash takeover from the checkpoint, several streams and
applications, AT_TIMESTAMP, and resharding.

The resharding test runs its workers as threads on purpose: the test-only moto patch
(tests/support/moto_kinesis.py) changes moto's Kinesis backend inside this process, so only
workers that talk to this process's server see AWS-like resharding.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import urllib.request
from collections import defaultdict
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any, Self

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hashring import StaticMembership
from kinesis import StreamConfig, Worker
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.testing import LocalAWS
from tests.support.waiting import eventually
from tests.support.worker_journal import (
    Entry,
    Journal,
    JournalProcessor,
    make_worker,
    put_records,
)

TABLE = "worker-test-leases"
logging.getLogger("werkzeug").setLevel(logging.ERROR)


def held(w: Worker) -> int:
    return len(w.status().held)


def shard_order_ok(entries: list[Entry]) -> bool:
    """Every shard's records, in the order they were processed (by anyone), strictly increase."""
    by_shard: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for e in entries:
        if e.kind == "record":
            by_shard[(e.stream, e.shard_id)].append((int(e.seq), e.sub))
    return all(a < b for seqs in by_shard.values() for a, b in pairwise(seqs))


class Writer:
    """Puts a batch (:meth:`put`) every ``pause`` seconds on a thread of its own until stopped."""

    pause = 0.05

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        i = 0
        while not self._stop.wait(self.pause):
            self.put(i)
            i += 1

    def put(self, i: int) -> None:
        raise NotImplementedError


class Trickle(Writer):
    """Puts small batches until stopped, so hand-offs happen while records flow."""

    def __init__(self, client: Any, stream: str, prefix: str):
        super().__init__()
        self.client, self.stream, self.prefix = client, stream, prefix
        self.written: list[tuple[str, str]] = []

    def put(self, i: int) -> None:
        self.written += put_records(self.client, self.stream, 10, prefix=f"{self.prefix}{i}-")


def test_two_workers_balance_then_a_graceful_stop_hands_off_without_duplicates(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=6)
    written = put_records(kinesis, "orders", 200)
    journal = Journal()
    w1 = make_worker(aws, journal, "w1", health_port=0).start()
    w2 = make_worker(aws, journal, "w2", health_port=0).start()
    try:
        assert eventually(lambda: held(w1) == 3 and held(w2) == 3, 30), (w1.status().held, w2.status().held)
        assert journal.wait_for(lambda _: set(written) <= journal.processed(), 30)
        with Trickle(kinesis, "orders", "t") as trickle:
            assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) > 260, 30)
            before1, before2 = w1.status().lease_counters, w2.status().lease_counters
            stop_at = time.monotonic_ns()
            assert w1.stop(graceful=True) is True
            assert w1.state == "stopped" and not w1.is_live()
        assert eventually(lambda: held(w2) == 6, 30)
        everything = set(written) | set(trickle.written)
        assert journal.wait_for(lambda _: everything <= journal.processed(), 30)
        assert journal.duplicates() == 0
        assert shard_order_ok(journal.snapshot())
        c1, c2 = w1.status().lease_counters, w2.status().lease_counters
        assert c1["handoffs"] - before1["handoffs"] == 3
        assert c2["adopted"] - before2["adopted"] == 3
        assert c2["takeovers"] + c2["orphans_taken"] == 0  # no expiry wait anywhere
        shut = [e for e in journal.snapshot() if e.kind == "shutdown" and e.worker == "w1" and e.t > stop_at]
        assert len(shut) == 3
        # health and metrics of a real worker
        url = w2.health_url
        assert url is not None
        assert urllib.request.urlopen(url + "/readyz").status == 200
        assert urllib.request.urlopen(url + "/livez").status == 200
        processed = sum(1 for e in journal.records() if e.worker == "w2")
        assert eventually(lambda: w2.status().records_processed.get("app/orders") == processed, 10)
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(urllib.request.urlopen(url + "/metrics").read().decode())
            for s in family.samples
        }
        assert samples[("kinesis_worker_leases_held", (("worker", "w2"),))] == 6
        labels = (("application", "app"), ("stream", "orders"), ("worker", "w2"))
        assert samples[("kinesis_worker_records_processed_total", labels)] == processed
        assert samples[("kinesis_worker_takeovers_total", (("worker", "w2"),))] == 0
        assert samples[("kinesis_worker_handoffs_total", (("worker", "w2"),))] == c2["handoffs"]
        assert any(name == "kinesis_worker_millis_behind_latest" for name, _ in samples)
        # lag: every shard held was measured; all caught up, the autoscaling signal reads 0
        assert len([k for k in samples if k[0] == "kinesis_worker_lag_seconds"]) == 6
        assert len([k for k in samples if k[0] == "kinesis_worker_lag_age_seconds"]) == 6
        assert ("kinesis_worker_max_lag_seconds", (("worker", "w2"),)) in samples
        assert eventually(lambda: (w2.status().max_lag_seconds, w2.status().catch_up_seconds) == (0.0, 0.0), 10), \
            w2.status()
        assert w2.status_dict()["shards"][0]["lag_seconds"] == 0.0
        status = w2.status()
        assert status.ready and status.members == ("w2",) and len(status.shards) == 6
        assert status.records_processed == {"app/orders": processed}
    finally:
        w1.stop()
        w2.stop()


def test_run_hands_every_lease_off_on_sigterm(aws: LocalAWS) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be installed by the main thread")
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=4)
    written = put_records(kinesis, "orders", 100)
    journal = Journal()
    w2 = make_worker(aws, journal, "w2").start()
    w1 = make_worker(aws, journal, "w1")
    sent = threading.Event()

    def terminate_when_balanced() -> None:
        try:
            eventually(lambda: w1.state == "running" and held(w1) == 2 and held(w2) == 2, 30)
        except AssertionError:
            return  # never balanced: no SIGTERM is sent, and the test's own wait fails
        journal.wait_for(lambda _: set(written) <= journal.processed(), 30)
        sent.set()
        os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=terminate_when_balanced, daemon=True)
    killer.start()
    try:
        clean = w1.run()  # blocks in the main thread until SIGTERM
        assert sent.is_set() and clean is True
        assert w1.status().lease_counters["handoffs"] >= 2
        assert w2.status().lease_counters["takeovers"] == 0
        assert eventually(lambda: held(w2) == 4, 20)
        more = put_records(kinesis, "orders", 40, prefix="after")
        assert journal.wait_for(lambda _: set(more) <= journal.processed(), 30)
        assert journal.duplicates() == 0
    finally:
        killer.join(5)
        w1.stop()
        w2.stop()


def test_a_crashed_worker_is_taken_over_from_its_checkpoint(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=4)
    written = put_records(kinesis, "orders", 120)
    journal = Journal()
    w1 = make_worker(aws, journal, "w1", lease_duration=2.0).start()  # w2 waits for its expiry
    w2 = make_worker(aws, journal, "w2", lease_duration=2.0).start()
    try:
        assert eventually(lambda: held(w1) == 2 and held(w2) == 2, 30)
        assert journal.wait_for(lambda _: set(written) <= journal.processed(), 30)
        lost = set(w1.status().held)
        table = LeaseTable(aws.client("dynamodb"), TABLE)
        crashed_at = time.monotonic_ns()
        w1.stop(graceful=False)  # like a crash: no hand-off, no release
        at_crash = {k: table.get(k) for k in lost}
        assert all(lease is not None and lease.owner == "w1" for lease in at_crash.values())
        assert eventually(lambda: held(w2) == 4, 30)
        assert w2.status().lease_counters["takeovers"] + w2.status().lease_counters["orphans_taken"] == 2

        def inits_after_crash(entries: list[Entry], shard: str) -> list[Entry]:
            return [e for e in entries
                    if e.kind == "init" and e.worker == "w2" and e.shard_id == shard and e.t > crashed_at]

        # holding the lease comes first; the processor is initialised after, on its own thread
        shards = [key.rsplit("/", 1)[1] for key in at_crash]
        assert journal.wait_for(lambda es: all(inits_after_crash(es, s) for s in shards), 30)
        for key, lease in at_crash.items():
            inits = inits_after_crash(journal.snapshot(), key.rsplit("/", 1)[1])
            assert lease is not None and inits
            cp = lease.checkpoint
            assert inits[0].checkpoint == f"{cp.sequence_number}/{cp.sub_sequence_number}"
        more = put_records(kinesis, "orders", 40, prefix="after")
        assert journal.wait_for(lambda _: set(more) <= journal.processed(), 30)
        assert journal.duplicates() == 0  # w1 had checkpointed every batch it processed
    finally:
        w1.stop()
        w2.stop()


def test_one_worker_serves_several_streams_and_applications(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=2)
    kinesis.create_stream(StreamName="payments", ShardCount=1)
    orders = put_records(kinesis, "orders", 30)
    payments = put_records(kinesis, "payments", 10, prefix="p")
    journal, payments_journal = Journal(), Journal()
    streams = [
        StreamConfig("orders", "billing", "TRIM_HORIZON"),
        StreamConfig("orders", "audit", "TRIM_HORIZON"),
        StreamConfig("payments", "billing", "TRIM_HORIZON",
                     processor_factory=lambda: JournalProcessor(payments_journal, "w1")),
    ]
    w = make_worker(aws, journal, "w1", streams).start()
    try:
        assert journal.wait_for(lambda _: len(journal.records("orders")) == 60, 30)
        assert payments_journal.wait_for(lambda _: payments_journal.processed() == set(payments), 30)
        assert journal.processed("orders") == set(orders) and journal.records("payments") == []
        assert journal.duplicates() == 30  # each of the two applications reads every record once
        assert sorted(w.status().held) == sorted(
            [f"billing/orders/shardId-00000000000{i}" for i in range(2)]
            + [f"audit/orders/shardId-00000000000{i}" for i in range(2)]
            + ["billing/payments/shardId-000000000000"]
        )
        expected = {"billing/orders": 30, "audit/orders": 30, "billing/payments": 10}
        assert eventually(lambda: w.status().records_processed == expected, 10), w.status().records_processed
    finally:
        w.stop()


def test_at_timestamp_starts_at_the_first_record_at_or_after_it(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    put_records(kinesis, "orders", 5, prefix="before")
    ts = datetime.now(UTC)
    after = put_records(kinesis, "orders", 5, prefix="after")
    journal = Journal()
    w = make_worker(aws, journal, "w1", [StreamConfig("orders", "app", f"AT_TIMESTAMP:{ts.isoformat()}")]).start()
    try:
        assert journal.wait_for(lambda _: journal.processed() == set(after), 30)
        assert all(e.data.startswith(b"after") for e in journal.records())
    finally:
        w.stop()


@pytest.mark.parametrize("reads", ["scan", "scoped"])
def test_resharding_while_running_parents_finish_before_children(kinesis_resharding: LocalAWS, reads: str) -> None:
    """With ``reads="scoped"`` one member lists the shards and publishes the shard manifest
    (kinesis.consumer.discovery.manifest); the others plan from it."""
    aws = kinesis_resharding
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=2)
    written = put_records(kinesis, "orders", 60, prefix="a")
    journal = Journal()
    scoped = {"reads": "scoped", "manifest_poll_interval": 1.0} if reads == "scoped" else {}
    workers = [
        make_worker(aws, journal, f"w{i}", membership=StaticMembership(["w1", "w2"], f"w{i}") if scoped else None,
                    **scoped).start()
        for i in (1, 2)
    ]
    try:
        assert journal.wait_for(lambda _: set(written) <= journal.processed(), 30)
        shard0 = kinesis.list_shards(StreamName="orders")["Shards"][0]["HashKeyRange"]
        middle = (int(shard0["StartingHashKey"]) + int(shard0["EndingHashKey"])) // 2
        kinesis.split_shard(StreamName="orders", ShardToSplit="shardId-000000000000", NewStartingHashKey=str(middle))
        written += put_records(kinesis, "orders", 60, prefix="b")  # to shards 1, 2, 3
        kinesis.merge_shards(StreamName="orders", ShardToMerge="shardId-000000000003",
                             AdjacentShardToMerge="shardId-000000000001")
        written += put_records(kinesis, "orders", 60, prefix="c")  # to shards 2, 4
        assert journal.wait_for(lambda _: set(written) <= journal.processed(), 60)
        entries = journal.snapshot()
        assert journal.duplicates() == 0 and shard_order_ok(entries)
        parents = {"shardId-000000000002": ["shardId-000000000000"],
                   "shardId-000000000003": ["shardId-000000000000"],
                   "shardId-000000000004": ["shardId-000000000003", "shardId-000000000001"]}
        records = [e for e in entries if e.kind == "record"]
        for child, ps in parents.items():
            first_child = min((e.t for e in records if e.shard_id == child), default=None)
            if first_child is None:
                continue  # no record landed in this child
            for p in ps:
                last_parent = max(e.t for e in records if e.shard_id == p)
                assert last_parent < first_child, f"{child} started before its parent {p} finished"
        ended = {e.shard_id for e in entries if e.kind == "ended"}
        assert ended == {"shardId-000000000000", "shardId-000000000001", "shardId-000000000003"}
        rows = LeaseTable(aws.client("dynamodb"), TABLE).scan().leases
        assert {k.rsplit("/", 1)[1] for k, v in rows.items() if v.is_shard_end} == ended
        assert rows["app/orders/shardId-000000000004"].parents == (
            "app/orders/shardId-000000000003", "app/orders/shardId-000000000001")
    finally:
        for w in workers:
            w.stop()


def test_a_worker_whose_member_id_another_process_takes_refuses_to_run(aws: LocalAWS) -> None:
    # two processes with one worker_id (a misconfiguration): the one that finds the other's
    # session token stops processing at once, its run() raises DuplicateMemberIdError and its
    # liveness probe fails; the other keeps the id and takes its leases over
    from kinesis.errors import DuplicateMemberIdError

    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=2)
    journal = Journal()
    members = StaticMembership(["w1"], "w1")
    first = make_worker(aws, journal, "w1", lease_duration=2.0, membership=members)
    outcome: list[BaseException | bool] = []

    def run_first() -> None:
        try:
            outcome.append(first.run(install_signal_handlers=False, configure_logging=False))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run_first, daemon=True)
    thread.start()
    assert eventually(lambda: first.state == "running" and held(first) == 2, 30)
    second = make_worker(aws, journal, "w1", lease_duration=2.0, membership=StaticMembership(["w1"], "w1")).start()
    try:
        thread.join(30)
        assert outcome and isinstance(outcome[0], DuplicateMemberIdError), outcome
        assert not first.is_live() and held(first) == 0
        assert eventually(lambda: held(second) == 2, 30)  # its leases, once they expired
    finally:
        second.stop()


class HotShards(Writer):
    """Puts records into chosen shards only (by their starting hash keys) until stopped."""

    pause = 0.02

    def __init__(self, client: Any, stream: str, shards: list[str]):
        super().__init__()
        listed = {s["ShardId"]: s["HashKeyRange"]["StartingHashKey"]
                  for s in client.list_shards(StreamName=stream)["Shards"]}
        self.client, self.stream, self.hash_keys = client, stream, [listed[s] for s in shards]

    def put(self, i: int) -> None:
        self.client.put_records(StreamName=self.stream, Records=[
            {"Data": f"hot-{i}-{j}".encode(), "PartitionKey": "p", "ExplicitHashKey": h}
            for j in range(20) for h in self.hash_keys])


def test_workers_balancing_by_load_spread_hot_shards_by_graceful_hand_offs(aws: LocalAWS) -> None:
    """Two hot shards on one worker of two: balance='load' moves one of them to the other
    worker (by a hand-off: no takeover, no duplicate), and each worker's status shows what
    its shards cost."""
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=4)
    journal = Journal()
    workers = [make_worker(aws, journal, w, balance="load", load_metric="records", load_balance_interval=2.0)
               for w in ("w1", "w2")]
    for w in workers:
        w.start()
    try:
        assert eventually(lambda: [held(w) for w in workers] == [2, 2], 30), [w.status().held for w in workers]
        hot = sorted(k.rsplit("/", 1)[1] for k in workers[0].status().held)
        with HotShards(kinesis, "orders", hot):
            def spread() -> bool:
                return all(sum(k.rsplit("/", 1)[1] in hot for k in w.status().held) == 1 for w in workers)

            assert eventually(spread, 60), [w.status().held for w in workers]

            def measured(w: Worker) -> bool:  # the hot shard it runs now, once read a while
                loads = {s.shard_id: s.load for s in w.status().shards if s.key in w.status().held}
                return any(s in loads and (sample := loads[s]) is not None and sample.records_per_s > 0
                           for s in hot)

            assert eventually(lambda: all(measured(w) for w in workers), 30)
        for w in workers:
            status = w.status()
            assert status.lease_counters["takeovers"] == 0
            assert status.load_share is not None  # the published plan is a load plan
            assert status.cpu_utilisation is not None and status.cpu_utilisation >= 0
        assert journal.duplicates() == 0
        assert shard_order_ok(journal.snapshot())
    finally:
        for w in workers:
            w.stop()
