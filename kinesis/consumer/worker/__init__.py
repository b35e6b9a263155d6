"""The :class:`~.worker.Worker` process: its configuration, the parts built from it, the pool of
shard consumers it runs on held leases, and what it reports (health endpoints, metrics).
"""

from kinesis.deprecation import moved

__getattr__ = moved(__name__, dict.fromkeys(
    ("ProcessorFactory", "StreamConfig", "Worker", "WorkerConfig", "WorkerStatus", "lease_key", "parse_lease_key"),
    "kinesis.consumer.worker.worker"))  # the names of the 0.2 module kinesis.consumer.worker
