"""The Kinesis consumer: shard discovery, readers, processors and the Worker that runs them
on the lease loop (``kinesis.lease_loop``)."""
