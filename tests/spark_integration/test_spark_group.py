"""Group mode: two Spark applications (separate processes) share one stream's 8 shards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kinesis.testing import LocalAWS
from tests.spark_support import create_stream, put_json, read_json_sink, wait_for
from tests.support.paths import ROOT

pytestmark = pytest.mark.slow

APP = ROOT / "tests" / "spark_group_app.py"
PREFIX = "orders-app/orders/"


def _rows(aws: LocalAWS, table: str) -> dict[str, dict[str, Any]]:
    """shard id -> lease row (DynamoDB attribute values), from the lease table."""
    ddb = aws.client("dynamodb")
    out: dict[str, dict[str, Any]] = {}
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = ddb.scan(**kwargs)
        for item in page["Items"]:
            key = item["leaseKey"]["S"]
            if key.startswith(PREFIX):
                out[key[len(PREFIX):]] = item
        if "LastEvaluatedKey" not in page:
            return out
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _owners(aws: LocalAWS, table: str) -> dict[str, str | None]:
    """shard id -> lease owner, from the lease table."""
    return {shard: item.get("leaseOwner", {}).get("S")
            for shard, item in _rows(aws, table).items()}


def _table_exists(aws: LocalAWS, table: str) -> bool:
    return table in aws.client("dynamodb").list_tables()["TableNames"]


def _ids(rows: list[dict[str, Any]]) -> list[int]:
    return [json.loads(r["body"])["id"] for r in rows]


def _batch_ends(work: Path) -> dict[int, dict[str, int]]:
    """batch id -> {shard id: end sequence number} of the batches the app's sink committed.

    Read from the query's checkpoint: ``offsets/<id>`` (line 3: this source's end offset)
    for every ``commits/<id>`` (the batch reached the sink).
    """
    ck = work / "ck"
    out: dict[int, dict[str, int]] = {}
    for commit in (ck / "commits").iterdir():
        if not commit.name.isdigit():
            continue
        batch = int(commit.name)
        offset = json.loads((ck / "offsets" / commit.name).read_text().splitlines()[2])
        out[batch] = {key.split("/", 1)[1]: int(entry["seq"])
                      for key, entry in offset.items() if "seq" in entry}
    return out


#: Long enough that no lease can expire (and be taken over) within the test's hand-over wait.
LEASE_DURATION_S = 60
#: How long B may take to hold A's leases after A's query stops: a hand-off (or release)
#: does it within one of B's light rounds (LEASE_DURATION_S / 9); an expiry take-over cannot
#: happen before A's last renewal + LEASE_DURATION_S, i.e. at least 2/3 of it after the stop.
HANDOVER_WAIT_S = 30


@pytest.fixture
def apps(aws: LocalAWS, tmp_path: Path) -> Iterator[dict[str, tuple[subprocess.Popen[bytes], Path]]]:
    procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    for member in ("app-a", "app-b"):
        work = tmp_path / member
        work.mkdir()
        log = (work / "log.txt").open("wb")
        cmd = [sys.executable, str(APP), "--endpoint", aws.endpoint_url, "--stream", "orders",
               "--table", "spark-leases", "--member", member, "--workdir", str(work),
               "--lease-duration", f"{LEASE_DURATION_S}s"]
        procs[member] = (subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log,
                                          stderr=subprocess.STDOUT), work)
    yield procs
    for _proc, work in procs.values():
        (work / "stop").touch()
    for proc, _ in procs.values():
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_two_applications_share_shards_and_hand_over(aws: LocalAWS, apps: Any) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 8)
    put_json(kinesis, "orders", [{"id": i} for i in range(80)])
    (proc_a, work_a), (_proc_b, work_b) = apps["app-a"], apps["app-b"]

    def alive() -> None:
        for name, (proc, work) in apps.items():
            if proc.poll() is not None and not (work / "stop").exists():
                raise AssertionError(f"{name} exited early:\n{(work / 'log.txt').read_text()[-3000:]}")

    def balanced() -> bool:
        alive()
        if not _table_exists(aws, "spark-leases"):
            return False
        owners = _owners(aws, "spark-leases")
        counts = defaultdict(int)
        for owner in owners.values():
            counts[owner] += 1
        return len(owners) == 8 and counts == {"app-a": 4, "app-b": 4}

    def all_read(n: int, *works: Path) -> bool:
        alive()
        ids = {i for w in works if (w / "out" / "_spark_metadata").exists()
               for i in _ids(read_json_sink(w / "out"))}
        return ids >= set(range(n))

    wait_for(balanced, 300, "the two applications to hold 4 leases each")
    put_json(kinesis, "orders", [{"id": i} for i in range(80, 120)])
    wait_for(lambda: all_read(120, work_a, work_b), 240, "all records read by the pair")
    assert balanced()  # still 4/4 once both are running steadily
    a_shards = {s for s, o in _owners(aws, "spark-leases").items() if o == "app-a"}

    # stop A: its query's stop hands A's leases to B with A's last committed checkpoints
    (work_a / "stop").touch()
    seen_handed_off: set[str] = set()

    def a_handed_over() -> bool:
        rows = _rows(aws, "spark-leases")
        for shard, item in rows.items():
            if item.get("handedOffBy", {}).get("S") == "app-a":
                seen_handed_off.add(shard)
        return all(item.get("leaseOwner", {}).get("S") != "app-a" for item in rows.values())

    wait_for(lambda: (work_a / "stopping").exists(), 60, "A to stop its query")
    # Not an expiry: B cannot see A's leases expire within HANDOVER_WAIT_S of the stop.
    wait_for(a_handed_over, HANDOVER_WAIT_S, "A's leases to leave A after its query.stop()",
             interval=0.05)
    released_at = time.time()
    wait_for(lambda: set(_owners(aws, "spark-leases").values()) == {"app-b"}, HANDOVER_WAIT_S,
             "B to hold all 8 leases")
    stopping = float((work_a / "stopping").read_text())
    print(f"\nA's leases left A {released_at - stopping:.2f} s after query.stop() was called "
          f"(polled every 0.05 s); hand-off rows seen before B adopted them: "
          f"{len(seen_handed_off)}/{len(a_shards)}")
    assert proc_a.wait(180) == 0, (work_a / "log.txt").read_text()[-3000:]
    returned = float((work_a / "stop-returned").read_text())
    waited = float((work_a / "handed-over").read_text())
    print(f"A: query.stop() took {returned - stopping:.2f} s; wait_for_handover returned "
          f"{waited - stopping:.2f} s after query.stop() was called")
    put_json(kinesis, "orders", [{"id": i} for i in range(120, 160)])
    wait_for(lambda: all_read(160, work_a, work_b), 240, "B to read A's shards on")

    rows_a, rows_b = read_json_sink(work_a / "out"), read_json_sink(work_b / "out")
    assert set(_ids(rows_a)) | set(_ids(rows_b)) == set(range(160))  # no loss
    by_shard: dict[str, dict[str, list[int]]] = {"a": defaultdict(list), "b": defaultdict(list)}
    for name, rows in (("a", rows_a), ("b", rows_b)):
        for r in rows:
            by_shard[name][r["shardId"]].append(int(r["sequenceNumber"]))
    assert set(by_shard["a"]) == a_shards  # A only ever read its own shards
    # Spark commits batch N to the source (our DynamoDB checkpoint) when it plans batch
    # N + 1, so A's checkpoint of a shard is at least the end of the batch before A's last
    # completed one: B may re-read A's last batch of a shard, and nothing before it.
    ends = _batch_ends(work_a)
    last = max(ends)
    for shard in a_shards:
        a_seqs, b_seqs = set(by_shard["a"][shard]), set(by_shard["b"][shard])
        assert b_seqs, f"B never read {shard} after the hand-over"
        assert len(by_shard["b"][shard]) == len(b_seqs)  # B itself read nothing twice
        committed = max((e[shard] for b, e in ends.items() if b < last and shard in e),
                        default=None)
        assert committed is not None, f"A never committed a batch of {shard} before its last"
        again = a_seqs & b_seqs
        assert all(seq > committed for seq in again), (
            f"B re-read records of {shard} up to {committed}, which A had committed")
        assert len(again) <= 5  # maxRecordsPerShard: at most one batch of the shard
        assert min(b_seqs) > committed  # B resumed from A's checkpoint, not from the start
