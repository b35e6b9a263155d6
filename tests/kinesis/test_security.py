"""docs/security.md's IAM policy: exactly the AWS calls the code makes, and enough to run a Worker.

The static test reads every boto3 call out of the source; the moto test binds an IAM user to the
policy's actions (moto checks actions, not resource ARNs, for Kinesis and DynamoDB) and removes
one action at a time.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import botocore.exceptions
import botocore.session
import pytest

from kinesis import (
    KinesisAccessDeniedError,
    LeaseTableAccessDeniedError,
    StreamConfig,
    Worker,
    WorkerConfig,
)
from kinesis.testing import LocalAWS, client_for
from tests.support.paths import ROOT
from tests.support.worker_journal import Journal, JournalProcessor, put_records

TABLE = "orders-app-leases"


def policy() -> dict[str, Any]:
    text = (ROOT / "docs" / "security.md").read_text()
    [block] = re.findall(r"```json\n(.*?)```", text, re.S)
    parsed: dict[str, Any] = json.loads(block)
    return parsed


def policy_actions() -> set[str]:
    return {a for s in policy()["Statement"] for a in s["Action"]}


def called_operations() -> set[str]:
    """``service:Operation`` for every boto3 client call in the SDK's source."""
    services = {name: set(botocore.session.get_session().get_service_model(name).operation_names)
                for name in ("kinesis", "dynamodb")}
    found: set[str] = set()
    for package in ("kinesis", "spark_integration", "hashring"):
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "testing.py":  # the embedded moto server, not the SDK's calls
                continue
            source = path.read_text()
            snake = set(re.findall(r"client\.([a-z_]+)", source))
            snake |= set(re.findall(r"(?:_write|getattr)\(\s*\"([a-z_]+)\"", source))
            snake |= set(re.findall(r"^\s*\"(put_item|update_item|delete_item)\",$", source, re.M))
            for name in snake:
                operation = "".join(part.title() for part in name.split("_"))
                owners = [s for s, ops in services.items() if operation in ops]
                found |= {f"{s}:{operation}" for s in owners}
    return found


def test_the_policy_lists_exactly_the_calls_the_code_makes() -> None:
    called = called_operations()
    assert {"kinesis:GetRecords", "dynamodb:UpdateItem"} <= called, "the scan finds the calls"
    assert called == policy_actions()
    resources = {r for s in policy()["Statement"] for r in s["Resource"]}
    assert all(r.startswith(("arn:aws:kinesis:", "arn:aws:dynamodb:")) and "*" not in r for r in resources)


# --- moto with IAM enforced ----------------------------------------------------------------------


def _reset_auth(aws: LocalAWS, count: str) -> None:
    request = urllib.request.Request(f"{aws.endpoint_url}/moto-api/reset-auth", data=count.encode(),
                                     headers={"Content-Type": "text/plain"}, method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass


@pytest.fixture
def enforced(aws: LocalAWS) -> Iterator[LocalAWS]:
    """The moto server with a one-shard stream holding 5 records; IAM enforced while the test runs."""
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    put_records(kinesis, "orders", 5)
    try:
        yield aws
    finally:
        _reset_auth(aws, "inf")  # moto's default: no authentication


def bound_to(aws: LocalAWS, actions: set[str]) -> dict[str, str]:
    """Credentials of a new IAM user whose only policy allows ``actions`` (on every resource,
    as moto evaluates these services against "*"), then IAM enforcement switched on."""
    iam = aws.client("iam")
    iam.create_user(UserName="consumer")
    statement = {"Effect": "Allow", "Action": sorted(actions), "Resource": "*"}
    iam.put_user_policy(UserName="consumer", PolicyName="least-privilege",
                        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [statement]}))
    key = iam.create_access_key(UserName="consumer")["AccessKey"]
    _reset_auth(aws, "0")
    return {"aws_access_key_id": key["AccessKeyId"], "aws_secret_access_key": key["SecretAccessKey"]}


def worker_with(aws: LocalAWS, credentials: dict[str, str], journal: Journal) -> Worker:
    import boto3

    session = boto3.session.Session(region_name=aws.region, **credentials)
    config = WorkerConfig(TABLE, [StreamConfig("orders", "orders-app", "TRIM_HORIZON")], worker_id="w1",
                          lease_duration=1.0, idle_backoff=0.05, shard_sync_interval=1.0)
    return Worker(config, lambda: JournalProcessor(journal, "w1"), session=session,
                  endpoint_url=aws.endpoint_url, region_name=aws.region)


def test_the_policy_is_enough_to_run_a_worker(enforced: LocalAWS) -> None:
    journal = Journal()
    worker = worker_with(enforced, bound_to(enforced, policy_actions()), journal)
    worker.start()
    try:
        assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) >= 5, 30)
    finally:
        assert worker.stop(graceful=True, timeout=10)
    assert [e.data for e in journal.records()] == [f"r{i}".encode() for i in range(5)]
    assert worker.status().worker_counters["read_errors"] == 0
    # and without the credentials' policy nothing works: enforcement is really on
    anonymous = client_for("dynamodb", enforced.endpoint_url, enforced.region)
    with pytest.raises(botocore.exceptions.ClientError, match=r"InvalidClientTokenId|UnrecognizedClient|token"):
        anonymous.describe_table(TableName=TABLE)


@pytest.mark.parametrize("removed", ["dynamodb:DescribeTable", "dynamodb:CreateTable", "kinesis:ListShards"])
def test_one_action_less_fails_at_start_naming_it(enforced: LocalAWS, removed: str) -> None:
    worker = worker_with(enforced, bound_to(enforced, policy_actions() - {removed}), Journal())
    error = LeaseTableAccessDeniedError if removed.startswith("dynamodb") else KinesisAccessDeniedError
    with pytest.raises(error) as info:
        worker.start()
    assert info.value.action == removed
    assert f"Grant {removed}" in str(info.value) and "docs/security.md" in str(info.value)


def test_without_get_records_reads_are_denied_logged_and_nothing_is_skipped(enforced: LocalAWS) -> None:
    journal = Journal()
    worker = worker_with(enforced, bound_to(enforced, policy_actions() - {"kinesis:GetRecords"}), journal)
    worker.start()
    try:
        from tests.support.waiting import eventually

        eventually(lambda: worker.status().worker_counters["read_errors"] >= 2, 30, "denied reads")
        assert journal.records() == [] and worker.status().held, "the lease is kept, nothing processed"
    finally:
        worker.stop(graceful=False, timeout=5)
