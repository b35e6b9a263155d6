"""``roleArn``: the source's clients sign with an assumed role's credentials (moto's STS).

moto accepts any role ARN and records every AssumeRole (session name, external ID, the access
key it issued); the moto server also sees which access key signed each Kinesis and DynamoDB
request (:func:`tests.spark_support.signed_requests`). Together they show that the assumed
role's credentials, not the base ones ("testing"), are the ones used. The role lives in
another account than the base credentials, and moto serves each access key its account's
resources: the streams are created in the role's account, as in a cross-account read.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kinesis.testing import LocalAWS
from spark_integration.assume_role import refreshable
from spark_integration.clients import client
from spark_integration.options import parse_options
from tests.spark_support import create_stream, put_json, signed_requests

ACCOUNT = "111122223333"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/kinesis-reader"
EXTERNAL_ID = "ext-7f3a9c"


def assumed_roles(session: str) -> list[Any]:
    """moto's record of every AssumeRole of ROLE as ``session``, oldest first."""
    from moto.sts.models import sts_backends

    return [r for r in sts_backends[ACCOUNT]["aws"].assumed_roles if r.session_name == session]


def kinesis_in_role_account(aws: LocalAWS) -> Any:
    """A Kinesis client of ROLE's account (the test's own AssumeRole, session "setup")."""
    answer = aws.client("sts").assume_role(RoleArn=ROLE, RoleSessionName="setup")
    keys = answer["Credentials"]
    return aws.client("kinesis", aws_access_key_id=keys["AccessKeyId"],
                      aws_secret_access_key=keys["SecretAccessKey"],
                      aws_session_token=keys["SessionToken"])


def role_options(aws: LocalAWS, session: str) -> dict[str, str]:
    # every test uses its own session name: clients and credentials are cached per process
    return {"streamName": "orders", "endpointUrl": aws.endpoint_url, "region": "us-east-1",
            "roleArn": ROLE, "roleSessionName": session, "roleExternalId": EXTERNAL_ID,
            "stsEndpointUrl": aws.endpoint_url}


def test_kinesis_and_dynamodb_calls_are_signed_with_the_assumed_role(
        aws: LocalAWS, caplog: pytest.LogCaptureFixture) -> None:
    create_stream(kinesis_in_role_account(aws), "orders", 1)
    options = parse_options(role_options(aws, "unit-session"), streaming=True)
    caplog.set_level(logging.DEBUG, logger="spark_integration")
    with signed_requests() as seen:
        client("kinesis", options).list_shards(StreamName="orders")
        client("kinesis", options, role="executor").describe_stream_summary(StreamName="orders")
        client("dynamodb", options).list_tables()
    [role] = assumed_roles("unit-session")  # one AssumeRole serves every client of the process
    assert (role.role_arn, role.session_name, role.external_id) == (
        ROLE, "unit-session", EXTERNAL_ID)
    signers = {(service, action): key for service, action, _, key in seen if service != "sts"}
    assert signers == {("kinesis", "ListShards"): role.access_key_id,
                       ("kinesis", "DescribeStreamSummary"): role.access_key_id,
                       ("dynamodb", "ListTables"): role.access_key_id}
    assert role.access_key_id != "testing"
    assert [key for service, _, _, key in seen if service == "sts"] == ["testing"]  # base chain
    with pytest.raises(Exception, match="not found"):  # the base account has no such stream
        aws.client("kinesis").list_shards(StreamName="orders")
    assert EXTERNAL_ID not in caplog.text and role.secret_access_key not in caplog.text


def test_credentials_are_assumed_again_before_they_expire(aws: LocalAWS) -> None:
    options = parse_options(role_options(aws, "refresh-session"), streaming=True)
    assert options.assume_role is not None
    shift = timedelta(0)
    credentials = refreshable(options.assume_role, "us-east-1",
                              time_fetcher=lambda: datetime.now(UTC) + shift)
    assert assumed_roles("refresh-session") == []  # nothing is assumed before the first use
    first = credentials.get_frozen_credentials()
    assert first.access_key == assumed_roles("refresh-session")[0].access_key_id
    assert credentials.get_frozen_credentials() == first  # still fresh: no new AssumeRole
    assert len(assumed_roles("refresh-session")) == 1
    shift = timedelta(minutes=55)  # 5 minutes before the hour's expiry: mandatory refresh
    second = credentials.get_frozen_credentials()
    roles = assumed_roles("refresh-session")
    assert len(roles) == 2 and second.access_key == roles[1].access_key_id
    assert second.access_key != first.access_key


@pytest.mark.slow
def test_a_spark_read_signs_driver_and_executor_calls_with_the_role(
        spark: Any, aws: LocalAWS) -> None:
    kinesis = kinesis_in_role_account(aws)
    create_stream(kinesis, "orders", 2)
    put_json(kinesis, "orders", [{"id": i} for i in range(20)])
    reader = spark.read.format("kinesis")
    for name, value in role_options(aws, "spark-session").items():
        reader = reader.option(name, value)
    with signed_requests() as seen:
        assert reader.load().count() == 20
    roles = assumed_roles("spark-session")
    assert roles and all(r.external_id == EXTERNAL_ID for r in roles)
    issued = {r.access_key_id for r in roles}
    source = [(action, side, key) for service, action, side, key in seen
              if service == "kinesis" and side != "other"]
    assert {side for _, side, _ in source} == {"driver", "executor"}
    assert {action for action, side, _ in source if side == "executor"} >= {"GetRecords"}
    assert all(key in issued for _, _, key in source), source
