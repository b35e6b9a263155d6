"""The bounded batch reader: ``spark.read.format("kinesis")`` backfills up to "now".

Every listed shard (open and closed) is one range, read from TRIM_HORIZON or AT_TIMESTAMP up
to the records that arrived before the read was planned (the driver's clock at planning), or
SHARD_END, or the point where the shard is caught up. One ListShards call on the driver; one
GetShardIterator plus ceil(records / 10,000) GetRecords calls per shard on the executors, or
with ``consumerType=SubscribeToShard`` one subscription per shard.
"""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from kinesis.consumer.discovery.shards import ShardDiscovery, shard_order
from spark_integration.clients import client
from spark_integration.fanout_range import ensure_consumers
from spark_integration.options import KinesisOptions
from spark_integration.partitions import (
    ShardRange,
    ShardRangePartition,
    group_ranges,
    read_partition,
)


class KinesisBatchReader(DataSourceReader):
    """Reads every shard of the configured streams once."""

    def __init__(self, options: KinesisOptions):
        self.options = options

    def partitions(self) -> list[InputPartition]:
        until_ms = int(time.time() * 1000)
        kinesis = client("kinesis", self.options)
        ensure_consumers(kinesis, self.options)
        begin = self.options.first_start
        ranges: list[ShardRange] = []
        for stream in self.options.streams:
            shards = ShardDiscovery(kinesis, stream, cache_ttl=0).list_shards()
            ranges.extend(ShardRange(stream, s.shard_id, begin, None, until_ms)
                          for s in shard_order(shards))
        return list(group_ranges(ranges, self.options.shards_per_partition))

    def read(self, partition: InputPartition) -> Any:
        assert isinstance(partition, ShardRangePartition)
        return read_partition(partition, self.options)
