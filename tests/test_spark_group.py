"""Group mode: two Spark applications (separate processes) share one stream's 8 shards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kinesis.testing import LocalAWS
from tests.spark_support import create_stream, put_json, read_json_sink, wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "tests" / "spark_group_app.py"
PREFIX = "orders-app/orders/"


def _owners(aws: LocalAWS, table: str) -> dict[str, str | None]:
    """shard id -> lease owner, from the lease table."""
    ddb = aws.client("dynamodb")
    out: dict[str, str | None] = {}
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = ddb.scan(**kwargs)
        for item in page["Items"]:
            key = item["leaseKey"]["S"]
            if key.startswith(PREFIX):
                out[key[len(PREFIX):]] = item.get("leaseOwner", {}).get("S")
        if "LastEvaluatedKey" not in page:
            return out
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _table_exists(aws: LocalAWS, table: str) -> bool:
    return table in aws.client("dynamodb").list_tables()["TableNames"]


def _ids(rows: list[dict[str, Any]]) -> list[int]:
    return [json.loads(r["body"])["id"] for r in rows]


@pytest.fixture
def apps(aws: LocalAWS, tmp_path: Path) -> Iterator[dict[str, tuple[subprocess.Popen[bytes], Path]]]:
    procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    for member in ("app-a", "app-b"):
        work = tmp_path / member
        work.mkdir()
        log = (work / "log.txt").open("wb")
        cmd = [sys.executable, str(APP), "--endpoint", aws.endpoint_url, "--stream", "orders",
               "--table", "spark-leases", "--member", member, "--workdir", str(work)]
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

    # stop A: it hands its leases over to B with its checkpoints
    (work_a / "stop").touch()
    assert proc_a.wait(180) == 0, (work_a / "log.txt").read_text()[-3000:]
    wait_for(lambda: set(_owners(aws, "spark-leases").values()) == {"app-b"}, 120,
             "B to hold all 8 leases")
    put_json(kinesis, "orders", [{"id": i} for i in range(120, 160)])
    wait_for(lambda: all_read(160, work_a, work_b), 240, "B to read A's shards on")

    rows_a, rows_b = read_json_sink(work_a / "out"), read_json_sink(work_b / "out")
    assert set(_ids(rows_a)) | set(_ids(rows_b)) == set(range(160))  # no loss
    by_shard: dict[str, dict[str, list[int]]] = {"a": defaultdict(list), "b": defaultdict(list)}
    for name, rows in (("a", rows_a), ("b", rows_b)):
        for r in rows:
            by_shard[name][r["shardId"]].append(int(r["sequenceNumber"]))
    assert set(by_shard["a"]) == a_shards  # A only ever read its own shards
    for shard in a_shards:
        a_seqs, b_seqs = set(by_shard["a"][shard]), set(by_shard["b"][shard])
        assert b_seqs, f"B never read {shard} after the hand-over"
        # B resumed from A's DynamoDB checkpoint: not from the start of the shard, and it
        # re-read at most A's last micro-batch (Spark commits a batch to the source when it
        # plans the next one, so the checkpoint trails the sink by up to one batch).
        assert min(b_seqs) > min(a_seqs)
        assert len(a_seqs & b_seqs) <= 5
        assert len(by_shard["b"][shard]) == len(b_seqs)  # B itself read nothing twice
