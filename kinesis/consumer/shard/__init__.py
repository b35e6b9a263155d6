"""One held shard lease at work: the per-shard loop (:meth:`.consumer.ShardConsumer._loop`: read a
batch, deliver it, checkpoint, hand off or end the shard), the processor API it drives, its
retries and its checkpointers.
"""
