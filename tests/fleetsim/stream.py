"""A simulated Kinesis stream for ``worker`` scenarios: shards, their records, and resharding.

The members of a ``worker`` scenario plan the keys the Worker's own resource providers give
them (:class:`~kinesis.consumer.discovery.manifest.ShardManifestSync` with scoped reads,
:class:`~kinesis.consumer.discovery.sync.ShardSync` with scans), over a ListShards answered
here. Records arrive at a fixed rate on every open shard; a split closes a shard (its last
record is the one written before the split) and opens two children that start empty. A
member that has delivered a closed shard's last record checkpoints ``SHARD_END``, releases
the lease and asks its provider to list again, as the Worker's shard consumer does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kinesis.consumer.worker.config import StreamConfig

STREAM = "sim-stream"
APPLICATION = "sim-app"
SPEC = StreamConfig(STREAM, APPLICATION, initial_position="TRIM_HORIZON")
MAX_HASH = 2**128 - 1


@dataclass
class SimShard:
    shard_id: str
    opened: float
    parents: tuple[str, ...] = ()
    closed: float | None = None
    low: int = 0
    high: int = MAX_HASH

    def produced(self, now: float, rate: float) -> int:
        end = now if self.closed is None else min(now, self.closed)
        return max(0, int((end - self.opened) * rate))

    def api(self, rate: float) -> dict[str, Any]:
        item: dict[str, Any] = {
            "ShardId": self.shard_id,
            "HashKeyRange": {"StartingHashKey": str(self.low), "EndingHashKey": str(self.high)},
            "SequenceNumberRange": {"StartingSequenceNumber": "1"},
        }
        if self.parents:
            item["ParentShardId"] = self.parents[0]
        if len(self.parents) > 1:
            item["AdjacentParentShardId"] = self.parents[1]
        if self.closed is not None:
            item["SequenceNumberRange"]["EndingSequenceNumber"] = str(max(1, self.produced(self.closed, rate)))
        return item


class SimStream:
    """One stream's shards (see the module docs)."""

    def __init__(self, shards: int, rate: float):
        self.rate = rate
        self.shards: dict[str, SimShard] = {}
        self._next = 0
        width = (MAX_HASH + 1) // shards
        for i in range(shards):
            low = i * width
            self._add(0.0, (), low, MAX_HASH if i == shards - 1 else low + width - 1)

    def _add(self, now: float, parents: tuple[str, ...], low: int, high: int) -> SimShard:
        shard = SimShard(f"shardId-{self._next:012d}", now, parents, None, low, high)
        self._next += 1
        self.shards[shard.shard_id] = shard
        return shard

    def key(self, shard_id: str) -> str:
        return SPEC.lease_key(shard_id)

    def shard_of(self, key: str) -> SimShard:
        return self.shards[key[len(SPEC.key_prefix):]]

    def split(self, now: float, pick: int) -> SimShard | None:
        """Split an open shard (the ``pick``-th); the parent, or None if none is open."""
        open_ = sorted(s for s, shard in self.shards.items() if shard.closed is None)
        if not open_:
            return None
        parent = self.shards[open_[pick % len(open_)]]
        parent.closed = now
        middle = (parent.low + parent.high) // 2
        self._add(now, (parent.shard_id,), parent.low, middle)
        self._add(now, (parent.shard_id,), middle + 1, parent.high)
        return parent

    def last_record(self, shard: SimShard) -> int | None:
        """A closed shard's last sequence number (None while open)."""
        return None if shard.closed is None else shard.produced(shard.closed, self.rate)

    def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        """ListShards (one page: the simulated streams are small)."""
        return {"Shards": [s.api(self.rate) for _, s in sorted(self.shards.items())]}


class KinesisClient:
    """The ListShards a member's ShardDiscovery calls."""

    def __init__(self, stream: SimStream):
        self._stream = stream

    def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        return self._stream.list_shards(**kwargs)
