"""Offsets of the ``kinesis`` source: canonical JSON and resharding (pure functions)."""

from __future__ import annotations

import json

import pytest

from kinesis.consumer.discovery.shards import Shard
from kinesis.consumer.retrieval.positions import TRIM_HORIZON, Position
from spark_integration.errors import InvalidOffsetError
from spark_integration.offsets import (
    ShardOffset,
    SourceOffset,
    at_timestamp_ms,
    track,
)

TRIM = TRIM_HORIZON


def shard(sid: int, *parents: int, closed: bool = False) -> Shard:
    names = [f"shardId-{p:012d}" for p in parents] + [None, None]
    return Shard(f"shardId-{sid:012d}", names[0], names[1], "1", "99" if closed else None, (0, 1))


def key(sid: int) -> str:
    return f"s/shardId-{sid:012d}"


def test_json_is_canonical_and_round_trips() -> None:
    a = SourceOffset({
        key(2): ShardOffset(at_timestamp_ms(1714564800123)),
        key(1): ShardOffset(Position("42", 3), done=True, resume=TRIM),
        key(0): ShardOffset(TRIM),
    })
    b = SourceOffset(dict(reversed(list(a.shards.items()))))
    assert a.dumps() == b.dumps()
    assert list(a.to_json()) == [key(0), key(1), key(2)]
    assert a.to_json()[key(1)] == {"seq": "42", "sub": 3, "done": True,
                                   "resume": {"from": "TRIM_HORIZON"}}
    again = SourceOffset.from_json(json.loads(a.dumps()))
    assert again.dumps() == a.dumps()
    assert again.without_resume().shards[key(1)].resume is None


@pytest.mark.parametrize("bad", [
    "[1, 2]",
    '{"noslash": {"seq": "1"}}',
    '{"s/shardId-1": {"from": "EARLIEST"}}',
    '{"s/shardId-1": {"seq": "abc"}}',
    '{"s/shardId-1": 5}',
])
def test_corrupt_offsets_are_rejected(bad: str) -> None:
    with pytest.raises((InvalidOffsetError, ValueError)):
        SourceOffset.from_json(bad)


def test_batch_start_uses_resume_then_start_then_initial() -> None:
    start = SourceOffset({key(0): ShardOffset(Position("5"))})
    end = SourceOffset({
        key(0): ShardOffset(Position("9")),
        key(1): ShardOffset(Position("3"), resume=TRIM),
        key(2): ShardOffset(TRIM),
    })
    assert end.batch_start(key(0), start) == Position("5")
    assert end.batch_start(key(1), start) == TRIM
    assert end.batch_start(key(2), start) == TRIM


def test_trim_horizon_starts_at_roots_only() -> None:
    listing = {"s": [shard(0, closed=True), shard(1, 0), shard(2, 0)]}
    offset, trimmed = track(SourceOffset({}), listing, TRIM)
    assert list(offset.shards) == [key(0)] and trimmed == []


def test_split_children_start_after_parent_is_done_and_parent_leaves() -> None:
    listing = {"s": [shard(0, closed=True), shard(1, 0), shard(2, 0)]}
    running = SourceOffset({key(0): ShardOffset(Position("7"))})
    same, _ = track(running, listing, TRIM)
    assert list(same.shards) == [key(0)]  # parent not done: children wait
    done = SourceOffset({key(0): ShardOffset(Position("9"), done=True)})
    nxt, _ = track(done, listing, TRIM)
    assert sorted(nxt.shards) == [key(1), key(2)]  # both children in, parent out
    assert nxt.shards[key(1)].position == TRIM
    # once the parent left, its children keep running (the parent counts as finished)
    later, _ = track(SourceOffset({key(1): ShardOffset(Position("3")),
                                   key(2): ShardOffset(TRIM)}), listing, TRIM)
    assert sorted(later.shards) == [key(1), key(2)]


def test_merge_child_waits_for_both_parents() -> None:
    listing = {"s": [shard(0, closed=True), shard(1, closed=True), shard(2, 0, 1)]}
    one_done = SourceOffset({key(0): ShardOffset(Position("4"), done=True),
                             key(1): ShardOffset(Position("8"))})
    nxt, _ = track(one_done, listing, TRIM)
    assert sorted(nxt.shards) == [key(0), key(1)]  # the done parent stays until the child starts
    both = SourceOffset({key(0): ShardOffset(Position("4"), done=True),
                         key(1): ShardOffset(Position("9"), done=True)})
    nxt, _ = track(both, listing, TRIM)
    assert list(nxt.shards) == [key(2)]


def test_latest_start_ignores_closed_ancestors_and_grandchildren_follow() -> None:
    listing = {"s": [shard(0, closed=True), shard(1, 0, closed=True), shard(2, 0),
                     shard(3, 1), shard(4, 1)]}
    # the query started with the open shards 2 and 1 (its parent 0 closed before the start)
    offset = SourceOffset({key(1): ShardOffset(Position("5"), done=True),
                           key(2): ShardOffset(Position("6"))})
    nxt, _ = track(offset, listing, TRIM)
    assert sorted(nxt.shards) == [key(2), key(3), key(4)]


def test_trimmed_shards_leave_and_are_reported() -> None:
    listing = {"s": [shard(1)]}
    offset = SourceOffset({key(0): ShardOffset(Position("5")), key(1): ShardOffset(TRIM)})
    nxt, trimmed = track(offset, listing, TRIM)
    assert list(nxt.shards) == [key(1)] and trimmed == [key(0)]


def test_allowed_and_finished_elsewhere_for_group_mode() -> None:
    listing = {"s": [shard(0, closed=True), shard(1, 0), shard(2)]}
    nxt, _ = track(SourceOffset({}), listing, TRIM, allowed={key(1), key(2)})
    assert list(nxt.shards) == [key(2)]  # shard 1 waits for its parent, shard 0 is not ours
    nxt, _ = track(SourceOffset({}), listing, TRIM, allowed={key(1), key(2)},
                   finished_elsewhere={key(0)})
    assert sorted(nxt.shards) == [key(1), key(2)]
