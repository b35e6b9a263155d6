"""Which shards exist and which are ready: ListShards and lineage (:mod:`.shards`), the
Worker's resource provider (:mod:`.sync`), and shard discovery as one member's chore under
scoped reads (:mod:`.manifest`).
"""

from kinesis.consumer.discovery.shards import Shard, ShardDiscovery, ready_shards, shard_order

__all__ = ["Shard", "ShardDiscovery", "ready_shards", "shard_order"]
