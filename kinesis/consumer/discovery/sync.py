"""Shard sync: the worker's resource provider for the lease coordinator.

Once per tick the coordinator hands over its fresh lease-table snapshot and asks which lease
keys may be planned now. For every configured stream, :class:`ShardSync`

1. lists the shards (:class:`~kinesis.consumer.discovery.shards.ShardDiscovery`: ListShards, paginated, cached for
   ``shard_sync_interval``; a failed listing falls back to the last good one, so a ListShards
   outage never makes the fleet drop its leases);
2. creates a lease row, with its parents recorded, for every shard that has none (parents
   first; a conditional put, so concurrent members never overwrite each other). The start
   checkpoint of a new row:

   * a shard whose parent already had a row (a split or merge while the application runs)
     starts at ``TRIM_HORIZON``, so no record written to the child is skipped;
   * otherwise (the stream's first rows, or parents trimmed) the stream's initial position:
     ``TRIM_HORIZON`` and ``AT_TIMESTAMP`` as given; for ``LATEST`` open shards start at
     ``LATEST`` and closed shards are marked ``SHARD_END`` (their history is skipped, as KCL
     does), which lets their open descendants start;

3. returns the keys of the shards that are *ready*: not finished (``SHARD_END``) and every
   parent finished or gone from the listing (trimmed) - :func:`~kinesis.consumer.discovery.shards.ready_shards`.
   Rows created in this call are planned from the next tick on (they are not in the
   snapshot yet). Keys that are no longer returned (finished or trimmed shards) are released
   by the coordinator.

Rows of finished shards are kept, also after the shard is trimmed from the stream: deleting
one is only safe once no member can still list the shard (a member with an older cached
listing would recreate the row at its start position and read the shard again).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from kinesis.consumer.discovery.shards import Shard, ShardDiscovery, ready_shards, shard_order
from kinesis.consumer.worker.config import StreamConfig
from kinesis.errors import KinesisHashRingError
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import (
    LATEST,
    SHARD_END,
    TRIM_HORIZON,
    Checkpoint,
    Lease,
    TableSnapshot,
)

log = logging.getLogger(__name__)


def initial_checkpoint(spec: StreamConfig, shard: Shard, parent_rows: bool) -> Checkpoint:
    """The checkpoint a new lease row of ``shard`` starts with (see the module docs)."""
    if parent_rows:
        return TRIM_HORIZON
    start = spec.start
    if start.kind == "TRIM_HORIZON":
        return TRIM_HORIZON
    if start.kind == "AT_TIMESTAMP":
        assert start.timestamp is not None
        return Checkpoint.at_timestamp(start.timestamp)
    return LATEST if shard.is_open else SHARD_END


class ShardSync:
    """Callable resource provider over several streams (see the module docs). Thread-safe."""

    def __init__(
        self,
        table: LeaseTable,
        streams: Iterable[tuple[StreamConfig, ShardDiscovery]],
    ):
        self.table = table
        self.streams = tuple(streams)
        self._last: dict[str, list[Shard]] = {}
        self._lock = threading.Lock()
        self.rows_created = 0
        self.listing_errors = 0

    def __call__(self, snapshot: TableSnapshot) -> list[str]:
        keys: list[str] = []
        with self._lock:
            for spec, discovery in self.streams:
                keys += self._stream_keys(spec, discovery, snapshot.leases)
        return keys

    def invalidate(self, stream: str | None = None) -> None:
        """Forget cached listings (after a shard ended, so its children are seen at once)."""
        for spec, discovery in self.streams:
            if stream is None or spec.stream == stream:
                discovery.invalidate()

    def shards(self, spec: StreamConfig) -> list[Shard]:
        """The last good listing of ``spec``'s stream (empty before the first)."""
        return list(self._last.get(spec.key_prefix, []))

    def _list(self, spec: StreamConfig, discovery: ShardDiscovery) -> list[Shard] | None:
        try:
            shards = discovery.list_shards()
        except (KinesisHashRingError, ClientError, BotoCoreError) as exc:
            self.listing_errors += 1
            log.warning("ListShards of stream %s failed (using the last listing): %s", spec.stream, exc)
            return self._last.get(spec.key_prefix)
        self._last[spec.key_prefix] = shards
        return shards

    def _stream_keys(
        self, spec: StreamConfig, discovery: ShardDiscovery, leases: Mapping[str, Lease]
    ) -> list[str]:
        shards = self._list(spec, discovery)
        if not shards:
            return []
        prefix = spec.key_prefix
        rows = {
            key[len(prefix) :]: lease
            for key, lease in leases.items()
            if key.startswith(prefix) and "/" not in key[len(prefix) :]
        }
        for shard in shard_order(shards):
            if shard.shard_id not in rows:
                self._create(spec, shard, parent_rows=any(p in rows for p in shard.parents))
        finished = {sid for sid, lease in rows.items() if lease.is_shard_end}
        return [spec.lease_key(s.shard_id) for s in ready_shards(shards, finished) if s.shard_id in rows]

    def _create(self, spec: StreamConfig, shard: Shard, *, parent_rows: bool) -> None:
        checkpoint = initial_checkpoint(spec, shard, parent_rows)
        parents = [spec.lease_key(p) for p in shard.parents]
        try:
            created: Any = self.table.create_lease_if_absent(
                spec.lease_key(shard.shard_id), parents=parents, checkpoint=checkpoint
            )
        except KinesisHashRingError as exc:
            log.warning("could not create the lease row of %s: %s", spec.lease_key(shard.shard_id), exc)
            return
        if created is not None:
            self.rows_created += 1
            log.info("created lease %s at %s (parents %s)", created.key, checkpoint, parents or "none")
