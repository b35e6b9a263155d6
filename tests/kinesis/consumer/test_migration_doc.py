"""docs/migrating-from-kclpy.md, run as a migrating user would: carry_checkpoints.py copies a
KCL lease table's checkpoints into a new table, then kclpy_worker.py (an amazon-kclpy processor
and a Worker) runs as its own process against the moto server, resumes after them and logs
every record once."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import SHARD_END, Checkpoint
from kinesis.testing import LocalAWS
from tests.support.paths import ROOT
from tests.support.waiting import eventually
from tests.support.worker_journal import put_records

pytestmark = pytest.mark.slow


def python_files() -> dict[str, str]:
    """The doc's ``# name.py: ...``-headed python blocks, by file name."""
    text = (ROOT / "docs" / "migrating-from-kclpy.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    return {m.group(1): b for b in blocks if (m := re.match(r"# (\S+\.py):", b))}


def kcl_row(shard_id: str, checkpoint: str, sub: int = 0) -> dict[str, Any]:
    """A KCL 2 lease row (single-stream application), as the MultiLangDaemon leaves it."""
    return {
        "leaseKey": {"S": shard_id},
        "checkpoint": {"S": checkpoint},
        "checkpointSubSequenceNumber": {"N": str(sub)},
        "leaseCounter": {"N": "42"},
        "leaseOwner": {"S": "kcl-worker-1"},
        "ownerSwitchesSinceCheckpoint": {"N": "0"},
    }


def test_the_migration_page_carries_checkpoints_over_and_runs_the_kclpy_processor(
    aws: LocalAWS, tmp_path: Path
) -> None:
    files = python_files()
    assert set(files) >= {"kclpy_worker.py", "carry_checkpoints.py"}
    kinesis, dynamodb = aws.client("kinesis"), aws.client("dynamodb")
    kinesis.create_stream(StreamName="orders", ShardCount=2)
    written = put_records(kinesis, "orders", 40)
    by_shard = {s: [q for sh, q in written if sh == s] for s, _ in written}
    shard0, shard1 = "shardId-000000000000", "shardId-000000000001"
    assert len(by_shard[shard0]) > 3 and by_shard[shard1]
    dynamodb.create_table(TableName="orders-app", BillingMode="PAY_PER_REQUEST",
                          AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}],
                          KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}])
    resume_after = by_shard[shard0][2]
    for row in (kcl_row(shard0, resume_after), kcl_row(shard1, "TRIM_HORIZON"),
                kcl_row("shardId-000000000009", "SHARD_END")):
        dynamodb.put_item(TableName="orders-app", Item=row)

    namespace: dict[str, Any] = {}
    exec(compile(files["carry_checkpoints.py"], "carry_checkpoints.py", "exec"), namespace)
    copied = namespace["carry_checkpoints"](dynamodb, "orders-app", "orders-app-leases", "orders-app", "orders")
    assert copied == 2  # shard 0 and the finished shard 9; shard 1 was never checkpointed
    table = LeaseTable(dynamodb, "orders-app-leases")
    assert table.get(f"orders-app/orders/{shard0}").checkpoint == Checkpoint(resume_after)  # type: ignore[union-attr]
    assert table.get("orders-app/orders/shardId-000000000009").checkpoint == SHARD_END  # type: ignore[union-attr]
    assert table.get(f"orders-app/orders/{shard1}") is None

    script = tmp_path / "kclpy_worker.py"
    script.write_text(files["kclpy_worker.py"])
    env = {**os.environ, "AWS_ENDPOINT_URL": aws.endpoint_url, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path)
    lines: list[str] = []
    errors: list[str] = []
    readers = [threading.Thread(target=lambda out=out, into=into: into.extend(iter(out.readline, "")), daemon=True)
               for out, into in ((proc.stdout, lines), (proc.stderr, errors))]
    for r in readers:
        r.start()
    try:
        expected = {(shard0, q) for q in by_shard[shard0][3:]} | {(shard1, q) for q in by_shard[shard1]}

        def printed() -> list[tuple[str, str]]:
            found = (re.search(r" processed (\S+) (\S+) r\d+$", line) for line in list(errors))
            return [(m.group(1), m.group(2)) for m in found if m]

        try:
            eventually(lambda: expected <= set(printed()) or proc.poll() is not None, 60, "every record logged")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; printed {sorted(printed())}; stderr:\n{''.join(errors)}") from None
        assert sorted(printed()) == sorted(expected)  # shard 0 resumed after the KCL checkpoint, nothing twice
        assert lines == []  # stdout untouched
        eventually(lambda: all((r := table.get(f"orders-app/orders/{s}")) is not None
                               and r.checkpoint == Checkpoint(by_shard[s][-1]) for s in (shard0, shard1)),
                   30, "the processor's checkpoints")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for r in readers:
            r.join(10)
    err = "".join(errors)
    assert proc.returncode == 0, err
    assert "handed" in err or "stopped (clean)" in err  # the SIGTERM stop was graceful
    assert "ProcessorStyleError" not in err and "Traceback" not in err
