"""Option validation of the ``kinesis`` source (no Spark needed: the parser is plain Python)."""

from __future__ import annotations

import pickle

import pytest

from kinesis.errors import ConfigurationError
from spark_integration.errors import InvalidOptionError
from spark_integration.options import (
    DEFAULT_MAX_SHIPPED_BYTES,
    parse_bytes,
    parse_duration_s,
    parse_options,
    parse_timestamp_ms,
)


def parse(streaming: bool = True, **opts: str):
    return parse_options({"streamName": "orders", **opts}, streaming=streaming)


def test_defaults_and_case_insensitive_keys() -> None:
    o = parse_options({"STREAMNAME": "b, a", "endpointurl": "http://127.0.0.1:5000/"},
                      streaming=True)
    assert o.streams == ("a", "b")
    assert o.endpoint_url == "http://127.0.0.1:5000"
    assert o.initial_position == "LATEST"
    assert o.max_records_per_shard == 10_000
    assert o.shards_per_partition == 1
    assert o.group is None
    assert parse(streaming=False).initial_position == "TRIM_HORIZON"
    assert pickle.loads(pickle.dumps(o)) == o


@pytest.mark.parametrize(
    ("opts", "option", "fragment"),
    [
        ({"streamName": ""}, "streamName", "is required"),
        ({"streamName": "bad name!"}, "streamName", "not a valid Kinesis stream name"),
        ({"streamName": "a,a"}, "streamName", "twice"),
        ({"region": "mars"}, "region", "us-east-1"),
        ({"endpointUrl": "localhost:4566"}, "endpointUrl", "http(s) URL"),
        ({"initialPosition": "EARLIEST"}, "initialPosition", "LATEST, TRIM_HORIZON"),
        ({"initialPosition": "AT_TIMESTAMP"}, "initialTimestamp", "is required"),
        ({"initialPosition": "AT_TIMESTAMP", "initialTimestamp": "yesterday"},
         "initialTimestamp", "ISO-8601"),
        ({"initialTimestamp": "2024-01-01T00:00:00Z"}, "initialTimestamp", "only used with"),
        ({"maxRecordsPerShard": "0"}, "maxRecordsPerShard", "out of range"),
        ({"maxRecordsPerShard": "ten"}, "maxRecordsPerShard", "not an integer"),
        ({"maxRecordsPerShard": "10001"}, "maxRecordsPerShard", "use 1..10000"),
        ({"maxRecordsPerTrigger": "-5"}, "maxRecordsPerTrigger", "out of range"),
        ({"shardsPerPartition": "1.5"}, "shardsPerPartition", "not an integer"),
        ({"describeShardInterval": "often"}, "describeShardInterval", "duration"),
        ({"maxShippedBytesPerPartition": "lots"}, "maxShippedBytesPerPartition", "'4m'"),
        ({"maxShippedBytesPerPartition": "-1"}, "maxShippedBytesPerPartition", "0 turns"),
        ({"maxShippedBytesPerPartition": "1.5m"}, "maxShippedBytesPerPartition", "size"),
        ({"maxShippedBytesPerPartition": "65m"}, "maxShippedBytesPerPartition", "at most 64m"),
        ({"maxBytesPerShard": "0"}, "maxBytesPerShard", "positive size"),
        ({"maxBytesPerShard": "-1k"}, "maxBytesPerShard", "not a size"),
        ({"maxBytesPerShard": "lots"}, "maxBytesPerShard", "'1m'"),
        ({"maxBytesPerShard": "2048g"}, "maxBytesPerShard", "at most 1024g"),
        ({"roleArn": "arn:aws:iam::12:role/reader"}, "roleArn", "not an IAM role ARN"),
        ({"roleArn": "arn:aws:iam::123456789012:user/reader"}, "roleArn", "role/kinesis-reader"),
        ({"roleArn": "arn:aws:iam::123456789012:role/r", "roleSessionName": "has space"},
         "roleSessionName", "2-64 characters"),
        ({"roleArn": "arn:aws:iam::123456789012:role/r", "roleExternalId": "s3cr3t-value!"},
         "roleExternalId", "not shown"),
        ({"roleArn": "arn:aws:iam::123456789012:role/r", "stsEndpointUrl": "sts.local"},
         "stsEndpointUrl", "http(s) URL"),
        ({"roleExternalId": "s3cr3t-value"}, "roleExternalId", "only used with 'roleArn'"),
        ({"roleSessionName": "spark"}, "roleSessionName", "only used with 'roleArn'"),
        ({"rolArn": "arn:aws:iam::123456789012:role/r"}, "rolarn", "Did you mean 'roleArn'"),
        ({"consumerType": "SubscribeToShards"}, "consumerType",
         "Did you mean 'SubscribeToShard'?"),
        ({"consumerType": "getrecord"}, "consumerType", "Did you mean 'GetRecords'?"),
        ({"consumerType": "efo"}, "consumerType", "Enhanced Fan-Out is SubscribeToShard"),
        ({"consumerType": "SubscribeToShard"}, "consumerName", "is required with"),
        ({"consumerType": "SubscribeToShard", "consumerName": "bad name"}, "consumerName",
         "not a valid stream consumer name"),
        ({"consumerName": "app"}, "consumerName", "only used with consumerType=SubscribeToShard"),
        ({"consumerNames": "app"}, "consumernames", "Did you mean 'consumerName'"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss", "neither 'true' nor 'false'"),
        ({"failOnDataLoss": "0"}, "failOnDataLoss", "neither 'true' nor 'false'"),
        ({"failOnDatalost": "false"}, "failondatalost", "Did you mean 'failOnDataLoss'"),
        ({"maxRecordPerShard": "5"}, "maxrecordpershard", "Did you mean 'maxRecordsPerShard'"),
        ({"awsSecretAccessKey": "s3cr3t-value"}, "awssecretaccesskey", "credential chain"),
        ({"applicationName": "app"}, "applicationName", "set 'leaseTable'"),
        ({"leaseTable": "x"}, "leaseTable", "not a valid DynamoDB table name"),
        ({"leaseTable": "leases"}, "applicationName", "is required in group mode"),
        ({"leaseTable": "leases", "applicationName": "a", "membership": "zookeeper"},
         "membership", "static, kubernetes, dynamodb"),
        ({"leaseTable": "leases", "applicationName": "a", "membership": "static"},
         "members", "is required with membership=static"),
        ({"leaseTable": "leases", "applicationName": "a", "membership": "static",
          "members": "p1,p2", "memberId": "p3"}, "memberId", "is not in 'members'"),
        ({"leaseTable": "leases", "applicationName": "a", "memberId": "driver 1"},
         "memberId", "may not contain whitespace"),
        ({"leaseTable": "leases", "applicationName": "a", "memberId": "driver\t1"},
         "memberId", "may not contain whitespace"),
        ({"leaseTable": "leases", "applicationName": "a", "replicas": "-1"},
         "replicas", "out of range"),
        ({"leaseTable": "leases", "applicationName": "a", "leaseDuration": "1ms"},
         "leaseDuration", "at least"),
    ],
)
def test_bad_options_name_the_option(opts: dict[str, str], option: str, fragment: str) -> None:
    with pytest.raises(InvalidOptionError) as info:
        parse(**opts)
    assert info.value.option == option
    assert f"'{option}'" in str(info.value)
    assert fragment in str(info.value)
    assert isinstance(info.value, ConfigurationError) and isinstance(info.value, ValueError)
    assert "s3cr3t-value" not in str(info.value)


def test_batch_only_rules() -> None:
    with pytest.raises(InvalidOptionError, match="LATEST makes an empty batch read"):
        parse(streaming=False, initialPosition="LATEST")
    with pytest.raises(InvalidOptionError, match="group mode is for streaming"):
        parse(streaming=False, leaseTable="leases", applicationName="a")


def test_group_mode_options() -> None:
    o = parse(leaseTable="leases", applicationName=" orders-app ", membership="STATIC",
              members="p2, p1", memberId="p1", replicas="1", leaseDuration="3s")
    assert o.group is not None
    assert o.group.application_name == "orders-app"
    assert o.group.members == ("p1", "p2")
    assert (o.group.membership, o.group.member_id, o.group.replicas) == ("static", "p1", 1)
    assert o.group.lease_duration_s == 3.0
    default = parse(leaseTable="leases", applicationName="a").group
    assert default is not None and default.membership == "dynamodb" and default.member_id


def test_secrets_are_not_kept() -> None:
    with pytest.raises(InvalidOptionError) as info:
        parse(sessionToken="tok-123")
    assert "tok-123" not in str(info.value)


def test_timestamps_and_durations() -> None:
    at = parse(initialPosition="at_timestamp", initialTimestamp="2024-05-01T12:00:00Z")
    assert at.initial_timestamp_ms == 1714564800000
    assert parse_timestamp_ms("1714564800") == 1714564800000
    assert parse_timestamp_ms("1714564800123") == 1714564800123
    assert parse_timestamp_ms("2024-05-01T12:00:00") == 1714564800000
    assert parse_duration_s("250ms") == 0.25
    assert parse_duration_s("2m") == 120.0
    assert parse_duration_s("7") == 7.0


def test_shipped_bytes_cap() -> None:
    assert parse().max_shipped_bytes_per_partition == DEFAULT_MAX_SHIPPED_BYTES == 4 << 20
    assert parse(maxShippedBytesPerPartition="512k").max_shipped_bytes_per_partition == 512 << 10
    assert parse(MAXSHIPPEDBYTESPERPARTITION="0").max_shipped_bytes_per_partition == 0
    assert parse(maxShippedBytesPerPartition="64MiB").max_shipped_bytes_per_partition == 64 << 20
    assert [parse_bytes(v) for v in ("4m", "4MB", "2g", "1048576", "7b")] == [
        4 << 20, 4 << 20, 2 << 30, 1 << 20, 7]


def test_byte_limit_per_shard() -> None:
    assert parse().max_bytes_per_shard is None
    assert parse(maxBytesPerShard="1m").max_bytes_per_shard == 1 << 20
    assert parse(MAXBYTESPERSHARD="1").max_bytes_per_shard == 1
    assert parse(maxBytesPerShard="64KiB").max_bytes_per_shard == 64 << 10


def test_assume_role_options_keep_the_external_id_out_of_sight() -> None:
    assert parse().assume_role is None
    arn = "arn:aws-cn:iam::123456789012:role/team/kinesis-reader"
    o = parse(roleArn=arn, roleExternalId="s3cr3t-value", stsEndpointUrl="http://127.0.0.1:1/")
    role = o.assume_role
    assert role is not None
    assert (role.role_arn, role.session_name) == (arn, "kinesis-hashring-spark")
    assert (role.external_id, role.sts_endpoint_url) == ("s3cr3t-value", "http://127.0.0.1:1")
    assert parse(roleArn=arn, roleSessionName="etl@prod").assume_role.session_name == "etl@prod"
    assert "s3cr3t-value" not in repr(o)
    assert "s3cr3t-value" not in str(o.raw)
    assert pickle.loads(pickle.dumps(o)) == o


def test_fail_on_data_loss_defaults_to_true() -> None:
    assert parse().fail_on_data_loss is True
    assert parse(failOnDataLoss="FALSE").fail_on_data_loss is False
    assert parse(streaming=False, failondataloss=" true ").fail_on_data_loss is True


def test_consumer_type() -> None:
    assert (parse().consumer_type, parse().consumer_name) == ("GetRecords", None)
    assert parse(consumerType="getrecords").consumer_type == "GetRecords"
    fanout = parse(streaming=False, consumertype="subscribetoshard", consumerName=" orders-x ")
    assert (fanout.consumer_type, fanout.consumer_name) == ("SubscribeToShard", "orders-x")
