"""The embedded moto server speaks real HTTP and resets between tests."""

from __future__ import annotations

from kinesis.testing import LocalAWS


def test_boto3_reaches_the_server_over_http(aws: LocalAWS) -> None:
    assert aws.endpoint_url.startswith("http://127.0.0.1:")
    ddb = aws.client("dynamodb")
    ddb.create_table(
        TableName="t", BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
    )
    assert ddb.list_tables()["TableNames"] == ["t"]


def test_reset_forgets_everything(aws: LocalAWS) -> None:
    assert aws.client("dynamodb").list_tables()["TableNames"] == []
