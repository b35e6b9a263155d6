"""The fault proxy as a counting proxy (bench_peers.py puts one in front of each member) and
the pure helpers of the peers benchmark."""

from __future__ import annotations

from kinesis.testing import LocalAWS, client_for
from tests.support.fault_proxy import classify, fault_proxy


def test_classify_names_service_and_operation_of_each_protocol() -> None:
    assert classify("DynamoDB_20120810.UpdateItem", "/") == ("dynamodb", "UpdateItem")
    assert classify("Kinesis_20131202.GetRecords", "/") == ("kinesis", "GetRecords")
    assert classify("DynamoDBStreams_20120810.GetRecords", "/") == ("dynamodbstreams", "GetRecords")
    assert classify(None, "/service/GraniteServiceVersion20100801/operation/PutMetricData") == (
        "cloudwatch", "PutMetricData")
    assert classify(None, "/", b"Action=PutMetricData&Version=2010-08-01") == ("query", "PutMetricData")
    assert classify(None, "/moto-api/") == ("other", "/moto-api/")


def test_counts_requests_per_service_and_operation_against_moto(aws: LocalAWS) -> None:
    def relabel(service: str, operation: str, body: bytes) -> str:
        return "UpdateItem (checkpoint)" if operation == "UpdateItem" and b"checkpoint" in body else operation

    with fault_proxy(aws.endpoint_url, relabel=relabel) as proxy:
        ddb = client_for("dynamodb", proxy.endpoint_url)
        kinesis = client_for("kinesis", proxy.endpoint_url)
        ddb.create_table(TableName="t", KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
                         AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                         BillingMode="PAY_PER_REQUEST")
        ddb.put_item(TableName="t", Item={"k": {"S": "a"}})
        for attr in ("checkpoint", "counter", "checkpoint"):
            ddb.update_item(TableName="t", Key={"k": {"S": "a"}}, UpdateExpression="SET #a = :v",
                            ExpressionAttributeNames={"#a": attr}, ExpressionAttributeValues={":v": {"S": "1"}})
        kinesis.create_stream(StreamName="s", ShardCount=1)
        kinesis.list_shards(StreamName="s")
        kinesis.list_shards(StreamName="s")
        counts = proxy.counts()
    assert counts == {
        ("dynamodb", "CreateTable"): 1, ("dynamodb", "PutItem"): 1, ("dynamodb", "UpdateItem"): 1,
        ("dynamodb", "UpdateItem (checkpoint)"): 2, ("kinesis", "CreateStream"): 1, ("kinesis", "ListShards"): 2,
    }
    assert proxy.requests["UpdateItem"] == 3, "faults still match the real operation name"


def test_window_summary_keeps_checkpoint_writes_apart() -> None:
    from benchmarks.peers.process_run import summarise_window

    members = {
        "m1": {"requests_per_minute": {"dynamodb": {"Scan": 6.0, "UpdateItem (checkpoint)": 30.0},
                                       "kinesis": {"GetRecords": 60.0}}, "cpu_percent": 2.0},
        "m2": {"requests_per_minute": {"dynamodb": {"Scan": 4.0, "UpdateItem": 10.0}}, "cpu_percent": None},
    }
    assert summarise_window(members) == {
        "mean_per_member_per_minute": {"dynamodb": 10.0, "kinesis": 30.0},
        "mean_checkpoint_writes_per_member_per_minute": 15.0,
        "mean_cpu_percent": 2.0,
    }
