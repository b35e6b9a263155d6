"""The moto resharding patch: plain moto is wrong in each documented way, and each fix restores AWS.

The "plain moto" tests assert moto's current (wrong) behaviour on purpose: when a moto upgrade
fixes one, its test fails, and the matching fix in tests/support/moto_kinesis.py can go.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis.testing import LocalAWS
from tests.support.moto_kinesis import ALL_FIXES, kinesis_resharding

STREAM = "patch-test"


@pytest.fixture
def kinesis(aws: LocalAWS) -> Any:
    client = aws.client("kinesis")
    client.create_stream(StreamName=STREAM, ShardCount=1)
    return client


def _only_shard(client: Any) -> dict[str, Any]:
    (shard,) = client.list_shards(StreamName=STREAM)["Shards"]
    return shard


def _split(client: Any, shard: dict[str, Any]) -> None:
    low = int(shard["HashKeyRange"]["StartingHashKey"])
    high = int(shard["HashKeyRange"]["EndingHashKey"])
    client.split_shard(StreamName=STREAM, ShardToSplit=shard["ShardId"], NewStartingHashKey=str((low + high) // 2))


def _read_all(client: Any, shard_id: str, max_calls: int = 5) -> tuple[list[bytes], dict[str, Any]]:
    it = client.get_shard_iterator(StreamName=STREAM, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    data: list[bytes] = []
    response: dict[str, Any] = {}
    for _ in range(max_calls):
        response = client.get_records(ShardIterator=it)
        data += [r["Data"] for r in response["Records"]]
        it = response.get("NextShardIterator")
        if it is None:
            break
    return data, response


def _put(client: Any, n: int, prefix: str) -> list[str]:
    return [
        client.put_record(StreamName=STREAM, Data=f"{prefix}{i}".encode(), PartitionKey=f"{prefix}{i}")["ShardId"]
        for i in range(n)
    ]


# --- writes_go_to_open_shards -------------------------------------------------------------


def test_plain_moto_writes_into_the_closed_parent_after_a_split(kinesis: Any) -> None:
    parent = _only_shard(kinesis)
    _split(kinesis, parent)
    assert set(_put(kinesis, 10, "after")) == {parent["ShardId"]}


def test_fix_writes_go_to_open_shards(kinesis: Any) -> None:
    parent = _only_shard(kinesis)
    with kinesis_resharding(["writes_go_to_open_shards"]):
        _split(kinesis, parent)
        shards_written = set(_put(kinesis, 20, "after"))
    assert parent["ShardId"] not in shards_written
    assert shards_written == {"shardId-000000000001", "shardId-000000000002"}


# --- resharding_leaves_records_in_parents -------------------------------------------------


def _merge_setup(client: Any) -> None:
    client.delete_stream(StreamName=STREAM)
    client.create_stream(StreamName=STREAM, ShardCount=2)
    _put(client, 10, "before")


def test_plain_moto_merge_copies_parent_records_into_the_child(kinesis: Any) -> None:
    _merge_setup(kinesis)
    kinesis.merge_shards(StreamName=STREAM, ShardToMerge="shardId-000000000000", AdjacentShardToMerge="shardId-000000000001")
    child_data, _ = _read_all(kinesis, "shardId-000000000002")
    assert len(child_data) == 10


def test_fix_merge_leaves_records_in_parents_and_child_starts_empty(kinesis: Any) -> None:
    _merge_setup(kinesis)
    with kinesis_resharding(["resharding_leaves_records_in_parents"]):
        kinesis.merge_shards(StreamName=STREAM, ShardToMerge="shardId-000000000000", AdjacentShardToMerge="shardId-000000000001")
        child_data, _ = _read_all(kinesis, "shardId-000000000002")
        parents = [_read_all(kinesis, f"shardId-00000000000{i}")[0] for i in (0, 1)]
        shards = {s["ShardId"]: s for s in kinesis.list_shards(StreamName=STREAM)["Shards"]}
    assert child_data == []
    assert sorted(parents[0] + parents[1]) == sorted(f"before{i}".encode() for i in range(10))
    assert shards["shardId-000000000002"]["ParentShardId"] == "shardId-000000000000"
    assert shards["shardId-000000000002"]["AdjacentParentShardId"] == "shardId-000000000001"
    assert "EndingSequenceNumber" in shards["shardId-000000000000"]["SequenceNumberRange"]


def test_fix_merge_refuses_closed_or_non_adjacent_shards(kinesis: Any) -> None:
    kinesis.delete_stream(StreamName=STREAM)
    kinesis.create_stream(StreamName=STREAM, ShardCount=3)
    with kinesis_resharding(["resharding_leaves_records_in_parents"]):
        with pytest.raises(ClientError, match="not adjacent"):
            kinesis.merge_shards(StreamName=STREAM, ShardToMerge="shardId-000000000000", AdjacentShardToMerge="shardId-000000000002")
        kinesis.merge_shards(StreamName=STREAM, ShardToMerge="shardId-000000000000", AdjacentShardToMerge="shardId-000000000001")
        with pytest.raises(ClientError, match="must both be open"):
            kinesis.merge_shards(StreamName=STREAM, ShardToMerge="shardId-000000000001", AdjacentShardToMerge="shardId-000000000002")


def test_fix_split_keeps_parent_records_with_their_sequence_numbers(kinesis: Any) -> None:
    _put(kinesis, 6, "before")
    parent = _only_shard(kinesis)
    it = kinesis.get_shard_iterator(StreamName=STREAM, ShardId=parent["ShardId"], ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    before = [(r["SequenceNumber"], r["Data"]) for r in kinesis.get_records(ShardIterator=it)["Records"]]
    with kinesis_resharding():
        _split(kinesis, parent)
        it = kinesis.get_shard_iterator(StreamName=STREAM, ShardId=parent["ShardId"], ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        after = [(r["SequenceNumber"], r["Data"]) for r in kinesis.get_records(ShardIterator=it)["Records"]]
        children = [_read_all(kinesis, f"shardId-00000000000{i}")[0] for i in (1, 2)]
    assert after == before and len(before) == 6
    assert children == [[], []]


# --- closed_shard_reaches_shard_end -------------------------------------------------------


def test_plain_moto_never_ends_a_drained_closed_shard(kinesis: Any) -> None:
    _put(kinesis, 3, "x")
    parent = _only_shard(kinesis)
    _split(kinesis, parent)
    data, last = _read_all(kinesis, parent["ShardId"], max_calls=4)
    assert len(data) == 3
    assert last.get("NextShardIterator")


def test_fix_closed_shard_reaches_shard_end(kinesis: Any) -> None:
    _put(kinesis, 3, "x")
    parent = _only_shard(kinesis)
    with kinesis_resharding(["closed_shard_reaches_shard_end"]):
        it = kinesis.get_shard_iterator(StreamName=STREAM, ShardId=parent["ShardId"], ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        open_response = kinesis.get_records(ShardIterator=it, Limit=2)
        assert open_response.get("NextShardIterator")  # an open shard never ends
        _split(kinesis, parent)
        first = kinesis.get_records(ShardIterator=open_response["NextShardIterator"], Limit=10)
    assert [r["Data"] for r in first["Records"]] == [b"x2"]
    assert "NextShardIterator" not in first
    assert sorted(c["ShardId"] for c in first["ChildShards"]) == ["shardId-000000000001", "shardId-000000000002"]
    assert all(c["ParentShards"] == [parent["ShardId"]] for c in first["ChildShards"])


# --- list_shards_follows_aws_rules --------------------------------------------------------


def test_plain_moto_list_shards_breaks_the_next_token_rules(kinesis: Any) -> None:
    kinesis.delete_stream(StreamName=STREAM)
    kinesis.create_stream(StreamName=STREAM, ShardCount=3)
    token = kinesis.list_shards(StreamName=STREAM, MaxResults=2)["NextToken"]
    with pytest.raises(ClientError):
        kinesis.list_shards(NextToken=token, MaxResults=2)  # the AWS way fails on moto
    page = kinesis.list_shards(StreamName=STREAM, NextToken=token, MaxResults=2)  # AWS refuses
    assert [s["ShardId"] for s in page["Shards"]] == ["shardId-000000000002"]


def test_plain_moto_ignores_shard_filter(kinesis: Any) -> None:
    _split(kinesis, _only_shard(kinesis))
    listed = kinesis.list_shards(StreamName=STREAM, ShardFilter={"Type": "AT_LATEST"})["Shards"]
    assert len(listed) == 3


def test_fix_list_shards_next_token_alone_pages_through(kinesis: Any) -> None:
    kinesis.delete_stream(StreamName=STREAM)
    kinesis.create_stream(StreamName=STREAM, ShardCount=7)
    with kinesis_resharding(["list_shards_follows_aws_rules"]):
        page = kinesis.list_shards(StreamName=STREAM, MaxResults=3)
        ids = [s["ShardId"] for s in page["Shards"]]
        while "NextToken" in page:
            with pytest.raises(ClientError, match="cannot be provided together"):
                kinesis.list_shards(StreamName=STREAM, NextToken=page["NextToken"])
            page = kinesis.list_shards(NextToken=page["NextToken"], MaxResults=3)
            ids += [s["ShardId"] for s in page["Shards"]]
    assert ids == [f"shardId-{i:012d}" for i in range(7)]


def test_fix_list_shards_applies_shard_filter(kinesis: Any) -> None:
    with kinesis_resharding(ALL_FIXES):
        _split(kinesis, _only_shard(kinesis))
        latest = kinesis.list_shards(StreamName=STREAM, ShardFilter={"Type": "AT_LATEST"})["Shards"]
        after = kinesis.list_shards(StreamName=STREAM, ShardFilter={"Type": "AFTER_SHARD_ID", "ShardId": "shardId-000000000001"})["Shards"]
        horizon = kinesis.list_shards(StreamName=STREAM, ShardFilter={"Type": "AT_TRIM_HORIZON"})["Shards"]
    assert [s["ShardId"] for s in latest] == ["shardId-000000000001", "shardId-000000000002"]
    assert [s["ShardId"] for s in after] == ["shardId-000000000002"]
    assert len(horizon) == 3


def test_patch_is_removed_on_exit(kinesis: Any) -> None:
    parent = _only_shard(kinesis)
    with kinesis_resharding():
        pass
    _split(kinesis, parent)
    assert set(_put(kinesis, 3, "after")) == {parent["ShardId"]}  # plain moto again


def test_unknown_fix_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown fixes"), kinesis_resharding(["no_such_fix"]):
        pass
