"""Keyed-parallel processing: many records of a shard at once, in per-key order, with exact
checkpoints (:mod:`kinesis.consumer.keyed.runner`)."""
