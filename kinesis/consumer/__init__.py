"""The Kinesis consumer: the Worker and everything it runs on the lease loop (:mod:`kinesis.lease_loop`).

* :mod:`.worker`: the :class:`~.worker.worker.Worker` process, its configuration
  (:mod:`.worker.config`), the parts built from it, the pool of shard consumers, health and
  metrics;
* :mod:`.shard`: one held shard at work: the per-shard loop
  (:meth:`.shard.consumer.ShardConsumer._loop`), the processor API, retries, checkpointers;
* :mod:`.retrieval`: reading a shard (polling and Enhanced Fan-Out over one batch cursor),
  positions, records, read failures;
* :mod:`.discovery`: which shards exist and are ready (ListShards, the shard sync, the shard
  manifest chore);
* :mod:`.kclpy`: running amazon-kclpy v3 processors on the Worker.
"""

from kinesis.deprecation import alias_modules

MOVED_MODULES = {
    "kinesis.consumer.aggregation": "kinesis.consumer.retrieval.records",
    "kinesis.consumer.batch_retries": "kinesis.consumer.shard.consumer",
    "kinesis.consumer.consumer_pool": "kinesis.consumer.worker.pool",
    "kinesis.consumer.consumer_registration": "kinesis.consumer.retrieval.fanout",
    "kinesis.consumer.fanout_reader": "kinesis.consumer.retrieval.fanout",
    "kinesis.consumer.health": "kinesis.consumer.worker.health",
    "kinesis.consumer.kclpy_adapter": "kinesis.consumer.kclpy",
    "kinesis.consumer.kclpy_checkpointer": "kinesis.consumer.kclpy",
    "kinesis.consumer.kclpy_inputs": "kinesis.consumer.kclpy",
    "kinesis.consumer.lease_checkpointer": "kinesis.consumer.shard.checkpointer",
    "kinesis.consumer.metrics": "kinesis.consumer.worker.metrics",
    "kinesis.consumer.positions": "kinesis.consumer.retrieval.positions",
    "kinesis.consumer.prepared_checkpointer": "kinesis.consumer.shard.processor",
    "kinesis.consumer.processing_failures": "kinesis.consumer.shard.failures",
    "kinesis.consumer.processor": "kinesis.consumer.shard.processor",
    "kinesis.consumer.processor_style": "kinesis.consumer.kclpy",
    "kinesis.consumer.read_failures": "kinesis.consumer.retrieval.failures",
    "kinesis.consumer.reader": "kinesis.consumer.retrieval.polling",
    "kinesis.consumer.records": "kinesis.consumer.retrieval.records",
    "kinesis.consumer.shard_consumer": "kinesis.consumer.shard.consumer",
    "kinesis.consumer.shard_end": "kinesis.consumer.shard.consumer",
    "kinesis.consumer.shard_manifest": "kinesis.consumer.discovery.manifest",
    "kinesis.consumer.shard_start": "kinesis.consumer.shard.consumer",
    "kinesis.consumer.shard_status": "kinesis.consumer.shard.consumer",
    "kinesis.consumer.shard_sync": "kinesis.consumer.discovery.sync",
    "kinesis.consumer.shards": "kinesis.consumer.discovery.shards",
    "kinesis.consumer.signals": "kinesis.consumer.worker.worker",
    "kinesis.consumer.throttling": "kinesis.consumer.retrieval.failures",
    "kinesis.consumer.worker_config": "kinesis.consumer.worker.config",
    "kinesis.consumer.worker_health": "kinesis.consumer.worker.health",
    "kinesis.consumer.worker_setup": "kinesis.consumer.worker.setup",
}
"""Modules of 0.2 and the module each moved or merged into (importable for one release)."""

alias_modules(MOVED_MODULES)
