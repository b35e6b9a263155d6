"""Shard discovery (ListShards over HTTP to moto) and lineage (ready_shards, shard_order)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.config import Config
from hypothesis import given, settings
from hypothesis import strategies as st

from kinesis.consumer.discovery.shards import (
    Shard,
    ShardDiscovery,
    children_of,
    ready_shards,
    shard_order,
)
from kinesis.errors import ConfigurationError, KinesisRetriesExhaustedError, StreamNotFoundError
from kinesis.testing import LocalAWS
from tests.support.kinesis_faults import FaultInjector

NO_BOTO_RETRIES = Config(retries={"total_max_attempts": 1})


def shard(sid: str, *parents: str, closed: bool = False) -> Shard:
    return Shard(
        shard_id=sid,
        parent_shard_id=parents[0] if parents else None,
        adjacent_parent_shard_id=parents[1] if len(parents) > 1 else None,
        starting_sequence_number="1",
        ending_sequence_number="9" if closed else None,
        hash_key_range=(0, 1),
    )


def ids(shards: list[Shard]) -> list[str]:
    return [s.shard_id for s in shards]


# --- Shard ----------------------------------------------------------------------------------


def test_shard_from_api_reads_lineage_and_ranges() -> None:
    s = Shard.from_api(
        {
            "ShardId": "shardId-000000000003",
            "ParentShardId": "shardId-000000000001",
            "AdjacentParentShardId": "shardId-000000000002",
            "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "340282366920938463463374607431768211455"},
            "SequenceNumberRange": {"StartingSequenceNumber": "49590338271490256608559692538361571095921575989136588898"},
        }
    )
    assert s.parents == ("shardId-000000000001", "shardId-000000000002")
    assert s.is_open
    assert s.hash_key_range == (0, 2**128 - 1)
    closed = Shard.from_api(
        {
            "ShardId": "a",
            "HashKeyRange": {"StartingHashKey": "5", "EndingHashKey": "9"},
            "SequenceNumberRange": {"StartingSequenceNumber": "1", "EndingSequenceNumber": "7"},
        }
    )
    assert not closed.is_open and closed.parents == ()


# --- lineage ----------------------------------------------------------------------------------


def test_split_children_wait_for_the_parent() -> None:
    shards = [shard("s0", closed=True), shard("s1", "s0"), shard("s2", "s0"), shard("s3")]
    assert ids(ready_shards(shards, set())) == ["s0", "s3"]
    assert ids(ready_shards(shards, {"s0"})) == ["s1", "s2", "s3"]


def test_merge_child_waits_for_both_parents() -> None:
    shards = [shard("s0", closed=True), shard("s1", closed=True), shard("s2", "s0", "s1")]
    assert ids(ready_shards(shards, set())) == ["s0", "s1"]
    assert ids(ready_shards(shards, {"s0"})) == ["s1"]
    assert ids(ready_shards(shards, {"s1"})) == ["s0"]
    assert ids(ready_shards(shards, {"s0", "s1"})) == ["s2"]
    assert ids(ready_shards(shards, {"s0", "s1", "s2"})) == []


def test_trimmed_parents_do_not_block_children() -> None:
    # s0 was split into s1 and s2 and trimmed; s1 and s2 were merged into s3.
    shards = [shard("s1", "s0", closed=True), shard("s2", "s0", closed=True), shard("s3", "s1", "s2")]
    assert ids(ready_shards(shards, set())) == ["s1", "s2"]
    assert ids(ready_shards(shards, {"s1", "s2"})) == ["s3"]
    assert ids(ready_shards([shard("s3", "s1", "s2")], set())) == ["s3"]  # both parents trimmed


def test_shard_order_puts_parents_first_with_ties_by_id() -> None:
    # Ids deliberately sort against lineage: the child "a-child" sorts before its parent "z-parent".
    shards = [shard("a-child", "z-parent"), shard("z-parent", closed=True), shard("m-other")]
    assert ids(shard_order(shards)) == ["m-other", "z-parent", "a-child"]
    assert ids(ready_shards(shards, {"z-parent"})) == ["m-other", "a-child"]
    assert ids(children_of(shards, "z-parent")) == ["a-child"]


def test_shard_order_rejects_a_cycle_instead_of_dropping_shards() -> None:
    with pytest.raises(ConfigurationError, match="cycle"):
        shard_order([shard("a", "b"), shard("b", "a")])


@st.composite
def lineages(draw: st.DrawFn) -> list[Shard]:
    """Random reshard histories: start with k shards, then split or merge open ones."""
    counter = 0
    open_ids: list[str] = []
    out: dict[str, Shard] = {}
    for _ in range(draw(st.integers(1, 4))):
        sid = f"shardId-{counter:04d}"
        counter += 1
        out[sid] = shard(sid)
        open_ids.append(sid)
    for _ in range(draw(st.integers(0, 8))):
        if len(open_ids) >= 2 and draw(st.booleans()):
            i = draw(st.integers(0, len(open_ids) - 2))
            a, b = open_ids.pop(i), open_ids.pop(i)
            sid = f"shardId-{counter:04d}"
            counter += 1
            out[sid] = shard(sid, a, b)
            open_ids.insert(i, sid)
        else:
            i = draw(st.integers(0, len(open_ids) - 1))
            parent = open_ids.pop(i)
            for _ in range(2):
                sid = f"shardId-{counter:04d}"
                counter += 1
                out[sid] = shard(sid, parent)
                open_ids.insert(i, sid)
    shards = list(out.values())
    trimmed = draw(st.sets(st.sampled_from(sorted(out)), max_size=2))
    return [s for s in shards if s.shard_id not in trimmed]


@settings(max_examples=150, deadline=None)
@given(lineages(), st.randoms(use_true_random=False))
def test_processing_ready_shards_finishes_every_shard_parents_first(shards: list[Shard], rnd: Any) -> None:
    order = ids(shard_order(shards))
    assert sorted(order) == sorted(ids(shards))
    position = {sid: i for i, sid in enumerate(order)}
    present = set(order)
    for s in shards:
        assert all(position[p] < position[s.shard_id] for p in s.parents if p in present)
    assert ids(shard_order(list(reversed(shards)))) == order  # input order does not matter
    finished: set[str] = set()
    done: list[str] = []
    while True:
        ready = ready_shards(shards, finished)
        if not ready:
            break
        for s in ready:
            assert all(p in finished or p not in present for p in s.parents)
        pick = rnd.choice(ready).shard_id  # any ready shard may finish first
        finished.add(pick)
        done.append(pick)
    assert sorted(done) == sorted(present)


# --- ShardDiscovery over HTTP -----------------------------------------------------------------


@pytest.fixture
def kinesis(kinesis_resharding: LocalAWS) -> Any:
    return kinesis_resharding.client("kinesis", config=NO_BOTO_RETRIES)


def test_list_shards_paginates_with_next_token_alone(kinesis: Any) -> None:
    kinesis.create_stream(StreamName="many", ShardCount=23)
    faults = FaultInjector(kinesis)
    discovery = ShardDiscovery(kinesis, "many", page_size=4)
    shards = discovery.list_shards()
    assert ids(shards) == [f"shardId-{i:012d}" for i in range(23)]
    assert discovery.calls == 6 == faults.requests["ListShards"]
    assert all(s.is_open and not s.parents for s in shards)
    starts = [s.hash_key_range[0] for s in shards]
    assert starts == sorted(starts) and starts[0] == 0 and shards[-1].hash_key_range[1] == 2**128 - 1


def test_list_shards_is_cached_until_ttl_or_force(kinesis: Any) -> None:
    kinesis.create_stream(StreamName="cached", ShardCount=2)
    now = [0.0]
    discovery = ShardDiscovery(kinesis, "cached", cache_ttl=10, timer=lambda: now[0])
    first = discovery.list_shards()
    kinesis.split_shard(StreamName="cached", ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**126))
    assert discovery.list_shards() == first and discovery.calls == 1
    now[0] = 9.0
    assert discovery.list_shards() == first and discovery.calls == 1
    now[0] = 10.5
    assert len(discovery.list_shards()) == 4 and discovery.calls == 2
    kinesis.split_shard(StreamName="cached", ShardToSplit="shardId-000000000001", NewStartingHashKey=str(2**127 + 5))
    assert len(discovery.list_shards(force=True)) == 6 and discovery.calls == 3
    discovery.invalidate()
    assert len(discovery.list_shards()) == 6 and discovery.calls == 4


def test_missing_stream_raises_a_clear_error(kinesis: Any, kinesis_resharding: LocalAWS) -> None:
    with pytest.raises(StreamNotFoundError) as err:
        ShardDiscovery(kinesis, "no-such-stream").list_shards()
    message = str(err.value)
    assert "no-such-stream" in message and "us-east-1" in message
    assert kinesis_resharding.endpoint_url in message


def test_list_shards_retries_throttling(kinesis: Any) -> None:
    kinesis.create_stream(StreamName="throttled", ShardCount=5)
    faults = FaultInjector(kinesis)
    faults.fail("ListShards", "LimitExceededException", times=2)
    faults.fail("ListShards", "InternalFailure", status=500)
    shards = ShardDiscovery(kinesis, "throttled", page_size=2).list_shards()
    assert len(shards) == 5 and faults.injected["ListShards"] == 3


def test_list_shards_gives_up_after_the_retry_budget(kinesis: Any) -> None:
    kinesis.create_stream(StreamName="hot", ShardCount=1)
    faults = FaultInjector(kinesis)
    faults.fail("ListShards", "LimitExceededException", times=10)
    with pytest.raises(KinesisRetriesExhaustedError, match="ListShards on stream 'hot' failed 3 times"):
        ShardDiscovery(kinesis, "hot", max_attempts=3).list_shards()
    assert faults.injected["ListShards"] == 3


def test_expired_next_token_restarts_after_the_last_shard_seen(kinesis: Any) -> None:
    kinesis.create_stream(StreamName="slow", ShardCount=6)
    faults = FaultInjector(kinesis)
    discovery = ShardDiscovery(kinesis, "slow", page_size=2)
    calls = {"n": 0}

    def expire_second_page(request: Any, **_: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            faults.fail("ListShards", "ExpiredNextTokenException")

    kinesis.meta.events.register_first("before-send.kinesis.ListShards", expire_second_page)
    assert ids(discovery.list_shards()) == [f"shardId-{i:012d}" for i in range(6)]
    assert faults.injected["ListShards"] == 1


def test_discovery_follows_a_split_then_merge(kinesis: Any) -> None:
    kinesis.create_stream(StreamName="reshard", ShardCount=2)
    discovery = ShardDiscovery(kinesis, "reshard", cache_ttl=0)
    s0, s1 = discovery.list_shards()
    mid = (s0.hash_key_range[0] + s0.hash_key_range[1]) // 2
    kinesis.split_shard(StreamName="reshard", ShardToSplit=s0.shard_id, NewStartingHashKey=str(mid))
    kinesis.merge_shards(StreamName="reshard", ShardToMerge="shardId-000000000003", AdjacentShardToMerge=s1.shard_id)
    shards = discovery.list_shards()
    by_id = {s.shard_id: s for s in shards}
    assert by_id["shardId-000000000002"].parents == (s0.shard_id,)
    assert by_id["shardId-000000000004"].parents == ("shardId-000000000003", s1.shard_id)
    assert [s.shard_id for s in shards if s.is_open] == ["shardId-000000000002", "shardId-000000000004"]
    assert ids(ready_shards(shards, set())) == ["shardId-000000000000", "shardId-000000000001"]
    assert ids(ready_shards(shards, {"shardId-000000000000"})) == [
        "shardId-000000000001", "shardId-000000000002", "shardId-000000000003",
    ]
    finished = {"shardId-000000000000", "shardId-000000000001", "shardId-000000000003"}
    assert ids(ready_shards(shards, finished)) == ["shardId-000000000002", "shardId-000000000004"]


def test_discovery_rejects_bad_configuration(kinesis: Any) -> None:
    with pytest.raises(ConfigurationError, match="page_size"):
        ShardDiscovery(kinesis, "s", page_size=0)
    with pytest.raises(ConfigurationError, match="stream_name"):
        ShardDiscovery(kinesis, "")


def test_a_missing_stream_is_named_in_one_sentence() -> None:
    from botocore.exceptions import ClientError

    from kinesis.consumer.discovery.shards import stream_not_found

    error = ClientError({"Error": {"Code": "ResourceNotFoundException",
                                   "Message": "Stream orders under account 123 not found."}}, "ListShards")
    message = str(stream_not_found(object(), "orders", error))
    assert ".." not in message and "not found." in message and "create the stream" in message
