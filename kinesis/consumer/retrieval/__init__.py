"""Reading a shard: polling (GetRecords) and Enhanced Fan-Out (SubscribeToShard) behind one
interface, with positions, records and read failures.

* :mod:`.polling`: :class:`ShardReader` (GetShardIterator, then GetRecords with backoff and
  iterator recovery) and the :class:`BatchCursor` both readers share;
* :mod:`.fanout`: :class:`FanOutReader` (SubscribeToShard, renewed) and the registration of
  the stream's consumer;
* :mod:`.positions`: where a reader starts (checkpoints, initial positions);
* :mod:`.records`: the records a processor sees (KPL aggregates unpacked);
* :mod:`.readers`: the interface both readers present, and the choice between them;
* :mod:`.failures`: retries of transient Kinesis errors and what a consumer does after a
  failed read.
"""

from kinesis.consumer.retrieval.fanout import ConsumerRegistration, FanOutReader
from kinesis.consumer.retrieval.polling import MAX_GET_RECORDS_LIMIT, ShardReader, until_end
from kinesis.consumer.retrieval.positions import (
    LATEST,
    TRIM_HORIZON,
    Checkpoint,
    InitialPosition,
    Position,
)
from kinesis.consumer.retrieval.records import Record, aggregate
from kinesis.deprecation import moved

__all__ = [
    "LATEST",
    "MAX_GET_RECORDS_LIMIT",
    "TRIM_HORIZON",
    "Checkpoint",
    "ConsumerRegistration",
    "FanOutReader",
    "InitialPosition",
    "Position",
    "Record",
    "ShardReader",
    "aggregate",
    "until_end",
]

__getattr__ = moved(__name__, dict.fromkeys(("BatchReader", "make_reader"), "kinesis.consumer.retrieval.readers"))
# (the names of the 0.2 module kinesis.consumer.retrieval)
