"""The end of a shard: the processor must checkpoint ``SHARD_END`` before the children start.

At the end of a closed shard the consumer tells the processor (``shard_ended``) with a
checkpointer on which ``checkpoint()`` records ``SHARD_END``. Only once that checkpoint is
written may the lease be released as ended (the child shards become ready); a processor that
did not checkpoint leaves the shard to be delivered again, with an error saying so.
"""

from __future__ import annotations

import logging

from kinesis.consumer.lease_checkpointer import LeaseCheckpointer
from kinesis.consumer.processor import RecordProcessor

log = logging.getLogger("kinesis.consumer.shard_consumer")
"""The shard consumer's logger: this line keeps the name operators filter on."""


def finish_shard(key: str, processor: RecordProcessor, checkpointer: LeaseCheckpointer) -> bool:
    """Tell the processor the shard ended; True if it checkpointed ``SHARD_END``."""
    checkpointer.mark_shard_end()
    processor.shard_ended(checkpointer)
    if checkpointer.shard_end_checkpointed:
        return True
    log.error(
        "%s: shard_ended() did not checkpoint; the shard will be delivered again "
        "and its children cannot start. Call checkpointer.checkpoint() in shard_ended.",
        key,
    )
    return False
