"""The Structured Streaming reader of the ``kinesis`` source (micro-batch).

Exactly the same records on a replay: Spark writes a batch's end offset to its offset log
before the batch runs. ``latestOffset`` therefore fixes, on the driver, the last record each
shard contributes (see :mod:`spark_integration.probe`), and ``read`` stops exactly there. A
replay after a crash gets the same (start, end) pair from the log, hence the same records.
The records the driver read to fix the end travel to the executors inside the partitions when
the planned range is the one the driver read (:mod:`spark_integration.shipping`); any other
range, a replay after a restart in particular, is read from Kinesis by the executor.

Read limits (Spark 4.2+): ``latestOffset(start, limit)`` honours ``ReadMaxRows`` (the
``maxRecordsPerTrigger`` option, split evenly over the shards) together with the per-shard caps
``maxRecordsPerShard`` and ``maxBytesPerShard``; ``ReadAllAvailable`` (``Trigger.Once``) ignores
them all, as Spark asks.
``Trigger.AvailableNow`` reads up to the records that arrived before the query started.
On Spark 4.0/4.1 ``latestOffset()`` is called without a start: the reader tracks the start itself
and makes its end offsets self-contained (see ``_legacy_latest_offset``); only the per-shard caps
(``maxRecordsPerShard``, ``maxBytesPerShard``) apply there.

Group mode, stopping: PySpark ends the driver-side Python process that runs this reader with
SIGTERM when the query stops, without calling ``stop()``. The reader therefore handles SIGTERM
in that process (:mod:`spark_integration.sigterm`): it runs ``stop()``, which hands every lease
on with the last committed checkpoint, then terminates; a SIGTERM that arrives during a reader
call acts when the call returns.

The bounded batch reader: ``spark.read.format("kinesis")`` backfills up to "now".

Every listed shard (open and closed) is one range, read from TRIM_HORIZON or AT_TIMESTAMP up
to the records that arrived before the read was planned (the driver's clock at planning), or
SHARD_END, or the point where the shard is caught up. One ListShards call on the driver; one
GetShardIterator plus ceil(records / 10,000) GetRecords calls per shard on the executors, or
with ``consumerType=SubscribeToShard`` one subscription per shard.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from kinesis.consumer.discovery import Shard, ShardDiscovery, shard_order
from kinesis.consumer.retrieval import Checkpoint, InitialPosition
from kinesis.errors import KinesisHashRingError
from spark_integration.clients import client
from spark_integration.compat import (
    READ_LIMITS,
    ReadAllAvailable,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from spark_integration.data_loss import data_lost, describe
from spark_integration.fanout_range import ensure_consumers
from spark_integration.offsets import (
    ShardOffset,
    SourceOffset,
    at_timestamp_ms,
    shard_key,
    split_key,
    track,
)
from spark_integration.options import KinesisOptions
from spark_integration.partitions import (
    ShardRange,
    ShardRangePartition,
    group_ranges,
    read_partition,
)
from spark_integration.probe import Prober
from spark_integration.shipping import ReadAheadCache, encode
from spark_integration.sigterm import SigtermStop

log = logging.getLogger(__name__)

#: ``getDefaultReadLimit`` returns ReadMaxRows(this) when ``maxRecordsPerTrigger`` is unset, so
#: that a ReadAllAvailable from Spark (Trigger.Once) is told apart from the default.
UNBOUNDED_ROWS = 2**53
#: Shards the driver probes at the same time.
PROBE_THREADS = 8


def now_ms() -> int:
    """Wall-clock epoch milliseconds (what Kinesis arrival timestamps are compared with)."""
    return int(time.time() * 1000)


class KinesisStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("kinesis")``; see the module docstring for the guarantees."""

    def __init__(self, options: KinesisOptions):
        self.options = options
        self._state: _DriverState | None = None
        # group mode: SIGTERM (how PySpark ends this process on query.stop()) runs stop()
        self._sigterm = SigtermStop(self.stop, name=_describe(options))

    # Spark pickles the reader to run ``read`` on executors: ship only the options.
    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    def _stopped_by_sigterm(self) -> KinesisHashRingError:
        return KinesisHashRingError(
            f"{_describe(self.options)}: the reader was stopped by SIGTERM (its leases were "
            "handed on); restart the query to read again")

    @property
    def state(self) -> _DriverState:
        """Driver-side state (clients, shard discovery, probes, group session), made lazily."""
        if self._state is None:
            if self._sigterm.requested:
                raise self._stopped_by_sigterm()
            self._state = _DriverState(self.options)
            if self._state.group is not None:
                self._sigterm.install()
        return self._state

    # -- offsets -------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        with self._sigterm.busy():
            offset = self.state.initial_offset()
            if self.state.last_seen is None:
                self.state.last_seen = offset
            return offset.to_json()

    def getDefaultReadLimit(self) -> Any:
        if not READ_LIMITS:  # pragma: no cover - Spark < 4.2 never calls this
            return None
        return ReadMaxRows(self.options.max_records_per_trigger or UNBOUNDED_ROWS)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        with self._sigterm.busy():
            return self._latest_offset(start, limit)

    def _latest_offset(self, start: dict[str, Any] | None, limit: Any) -> dict[str, Any]:
        state = self.state
        if start is None:
            return self._legacy_latest_offset(state)
        begin = SourceOffset.from_json(start)
        end = state.next_offset(begin.without_resume(), limit)
        if end.dumps() == begin.without_resume().dumps():
            # Nothing new: hand Spark its start back unchanged (it may carry a ``resume``
            # from the batch that ended there), so it sees no new data and plans no batch.
            return start
        return end.to_json()

    def _legacy_latest_offset(self, state: _DriverState) -> dict[str, Any]:
        """Spark 4.0/4.1: ``latestOffset()`` gets no start, so the reader tracks it itself.

        End offsets are then self-contained (every entry that advanced names its start in
        ``resume``), so a batch never depends on the start Spark passes. After a restart the
        reader does not know where the query stands: it answers the empty offset once, Spark
        plans an empty batch ``partitions(start, {})``, and that start is the one it needed.
        """
        state.self_contained = True
        if state.last_seen is None:
            return {}
        begin = state.last_seen
        end = state.next_offset(begin.without_resume(), None)
        if end.dumps() == begin.without_resume().dumps():
            return begin.to_json()
        state.last_seen = end
        return end.to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        with self._sigterm.busy():
            self.state.available_now_ms = now_ms()

    # -- planning and reading -------------------------------------------------------------
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if self._sigterm.requested:  # stopped by SIGTERM: plan nothing that cannot commit
            raise self._stopped_by_sigterm()
        with self._sigterm.busy():
            return self._partitions(start, end)

    def _partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin = SourceOffset.from_json(start)
        stop = SourceOffset.from_json(end)
        if self._state is not None and self._state.self_contained:
            # Spark < 4.2: this is the batch that runs now; the next one starts at its end
            # (or, for the empty offset answered after a restart, at its start).
            self._state.last_seen = stop if stop.shards or not begin.shards else begin
        planned = plan_partitions(begin, stop, self.options.shards_per_partition,
                                  self.options.max_records_per_shard)
        if self._state is None:  # nothing read ahead in this process (e.g. after a restart)
            return planned
        return ship_partitions(planned, self._state.cache)

    def read(self, partition: InputPartition) -> Any:
        assert isinstance(partition, ShardRangePartition)
        return read_partition(partition, self.options)

    def commit(self, end: dict[str, Any]) -> None:
        # Spark commits batch N after it planned batch N + 1: never move ``last_seen`` here.
        with self._sigterm.busy():
            self.state.committed(SourceOffset.from_json(end))

    def stop(self) -> None:
        """Release the driver state; group mode: hand every lease on (idempotent)."""
        with self._sigterm.busy():
            if self._state is not None:
                state, self._state = self._state, None
                state.close()
            self._sigterm.uninstall()


def _describe(options: KinesisOptions) -> str:
    group = options.group
    if group is None:
        return "kinesis source"
    return f"kinesis source {group.application_name}/{group.member_id}"


def plan_partitions(begin: SourceOffset, end: SourceOffset, per_partition: int,
                    limit: int) -> list[InputPartition]:
    """One range per shard that has records between ``begin`` and ``end``, grouped."""
    ranges = []
    for key in sorted(end.shards):
        start_pos = end.batch_start(key, begin)
        stop = end.shards[key].position
        if start_pos is None or not stop > start_pos:
            continue
        stream, shard_id = split_key(key)
        ranges.append(ShardRange(stream, shard_id, start_pos, stop,  # type: ignore[arg-type]
                                 limit=limit))
    return list(group_ranges(ranges, per_partition))


def ship_partitions(partitions: list[InputPartition],
                    cache: ReadAheadCache) -> list[InputPartition]:
    """Put the cached records of each range into its partition, within the partition's cap.

    A range is shipped only when the cache holds exactly its records (see
    :meth:`ReadAheadCache.take`); ranges that would take the partition's payload over
    ``maxShippedBytesPerPartition`` ship nothing and are read from Kinesis by the executor.
    """
    if not cache.enabled:
        return partitions
    out: list[InputPartition] = []
    for partition in partitions:
        assert isinstance(partition, ShardRangePartition)
        shipped: list[bytes | None] = []
        room = cache.max_bytes_per_partition
        for r in partition.ranges:
            shipped.append(None)
            if r.end is None:
                continue
            batch = cache.take(shard_key(r.stream, r.shard_id), r.begin, r.end)
            if batch is None:
                continue
            payload = encode(batch)
            if len(payload) > room:
                cache.stats.over_cap += 1
                continue
            room -= len(payload)
            shipped[-1] = payload
            cache.stats.shipped_ranges += 1
            cache.stats.shipped_records += batch.num_rows
            cache.stats.shipped_bytes += len(payload)
        out.append(ShardRangePartition(partition.index, partition.ranges, shipped))
    return out


class _DriverState:
    """Everything the driver keeps between micro-batches."""

    def __init__(self, options: KinesisOptions):
        self.options = options
        self.kinesis = client("kinesis", options)
        ensure_consumers(self.kinesis, options)  # SubscribeToShard: fail now, not in a replay
        self.discovery = {
            s: ShardDiscovery(self.kinesis, s, cache_ttl=options.describe_shard_interval_s)
            for s in options.streams
        }
        self.read_ahead = ThreadPoolExecutor(max_workers=PROBE_THREADS,
                                             thread_name_prefix="kinesis-read-ahead")
        self.cache = ReadAheadCache(options.max_shipped_bytes_per_partition)
        self.prober = Prober(self.kinesis, batch_limit=min(10_000, options.max_records_per_shard),
                             read_ahead=self.read_ahead,
                             cache=self.cache if self.cache.enabled else None,
                             fail_on_data_loss=options.fail_on_data_loss)
        self.last_seen: SourceOffset | None = None
        self.initial: SourceOffset | None = None
        self.pool: ThreadPoolExecutor | None = None
        self.self_contained = False  # Spark < 4.2: every end entry names its start
        self.available_now_ms: int | None = None
        self.batches = 0
        self.group: Any = None
        if options.group is not None:
            from spark_integration.group import GroupSession

            self.group = GroupSession(options, self.kinesis, self.discovery)

    def listing(self, force: bool = False) -> dict[str, list[Shard]]:
        return {s: d.list_shards(force=force) for s, d in sorted(self.discovery.items())}

    def new_shard_start(self) -> Checkpoint:
        """Where a shard that appears later (a reshard's child) starts."""
        return self.options.first_start

    def initial_offset(self) -> SourceOffset:
        if self.initial is None:
            self.initial = self._initial_offset()
        return self.initial

    def _initial_offset(self) -> SourceOffset:
        if self.group is not None:
            return SourceOffset({})
        listing = self.listing(force=True)
        if self.options.initial_position == "LATEST":
            # Pinned as a timestamp, so a restart before the first commit loses nothing.
            pinned = at_timestamp_ms(now_ms())
            return SourceOffset({
                shard_key(stream, s.shard_id): ShardOffset(pinned)
                for stream, shards in listing.items() for s in shards if s.is_open
            })
        offset, _ = track(SourceOffset({}), listing, self.new_shard_start())
        return offset

    def next_offset(self, begin: SourceOffset, limit: Any) -> SourceOffset:
        """Track resharding, then probe each shard for this batch's end."""
        listing = self.listing()
        resume: dict[str, Any] = {}
        allowed = None
        finished_elsewhere: set[str] = set()
        if self.group is not None:
            view = self.group.plan(begin, listing)
            allowed, resume, finished_elsewhere = view.held, view.resume, view.finished
            begin = SourceOffset({k: v for k, v in begin.shards.items() if k in view.held})
        tracked, trimmed = track(begin, listing, self.new_shard_start(), allowed=allowed,
                                 finished_elsewhere=finished_elsewhere)
        for key in trimmed:
            if begin.shards[key].done:
                log.info("shard %s, read to its end, is no longer listed (trimmed after "
                         "retention); dropping it", key)
                continue
            stream, shard_id = split_key(key)
            data_lost(stream, shard_id, f"the shard is no longer listed (trimmed after "
                      f"retention) and its records after {describe(begin.shards[key].position)} "
                      "were not read; dropping it", fail=self.options.fail_on_data_loss, side="driver")
        order = _order(tracked, listing)
        per_shard, total = self._caps(limit)
        max_bytes = None if self._read_all(limit) else self.options.max_bytes_per_shard
        active = [k for k in order if not tracked.shards[k].done]
        budgets = _budgets(active, per_shard, total, self.batches)
        jobs = {}
        for key in order:
            entry = tracked.shards[key]
            if not entry.done:
                stream, shard_id = split_key(key)
                start_pos = resume.get(key, entry.position)
                jobs[key] = (stream, shard_id, start_pos, budgets[key], max_bytes)
        found = self._probe_all(jobs)
        shards: dict[str, ShardOffset] = {}
        for key in order:
            entry = tracked.shards[key]
            if entry.done:
                shards[key] = entry
                continue
            stream, _, start_pos, _, _ = jobs[key]
            result = found[key]
            # A batch that starts from an initial position names it in its end offset: Spark
            # logs only end offsets, and calls initialOffset() again (LATEST: a new "now")
            # when it replays the first batch.
            needs_resume = (self.self_contained or key in resume or key not in begin.shards
                            or isinstance(start_pos, InitialPosition))
            shards[key] = ShardOffset(
                result.position,
                done=result.shard_ended,
                resume=start_pos if needs_resume and result.position > start_pos else None,
            )
            if result.shard_ended:
                self.discovery[stream].invalidate()  # its children should show up now
        self.prober.forget(set(shards))
        self.batches += 1
        end = SourceOffset(shards)
        if self.group is not None:
            self.group.planned(end)
        return end

    def _probe_all(self, jobs: dict[str, tuple[str, str, Any, int | None, int | None]]
                   ) -> dict[str, Any]:
        """Probe every shard, several at a time (the calls are mostly waiting on the network)."""
        def one(key: str) -> Any:
            stream, shard_id, start_pos, budget, max_bytes = jobs[key]
            return self.prober.probe(key, stream, shard_id, start_pos, budget,
                                     until_ms=self.available_now_ms, max_bytes=max_bytes)

        if len(jobs) <= 1:
            return {key: one(key) for key in jobs}
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=PROBE_THREADS,
                                           thread_name_prefix="kinesis-probe")
        return dict(zip(jobs, self.pool.map(one, jobs), strict=True))

    @staticmethod
    def _read_all(limit: Any) -> bool:
        """True for ``ReadAllAvailable`` (``Trigger.Once``): every option cap is ignored."""
        return bool(READ_LIMITS and isinstance(limit, ReadAllAvailable))

    def _caps(self, limit: Any) -> tuple[int | None, int | None]:
        """(per-shard cap, total cap) for this batch's read limit."""
        if self._read_all(limit):
            return None, None
        per_shard = self.options.max_records_per_shard
        if READ_LIMITS and isinstance(limit, ReadMaxRows) and limit.max_rows < UNBOUNDED_ROWS:
            return per_shard, int(limit.max_rows)
        return per_shard, None

    def committed(self, end: SourceOffset) -> None:
        self.cache.committed(end)
        if self.group is not None:
            self.group.checkpoint(end)

    def close(self) -> None:
        self.cache.clear()
        self.read_ahead.shutdown(wait=False, cancel_futures=True)
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
        if self.group is not None:
            self.group.close()


def _order(offset: SourceOffset, listing: dict[str, list[Shard]]) -> list[str]:
    """The offset's keys, parents before children within each stream (then by key)."""
    rank: dict[str, int] = {}
    for stream, shards in listing.items():
        for i, s in enumerate(shard_order(shards)):
            rank[shard_key(stream, s.shard_id)] = i
    return sorted(offset.shards, key=lambda k: (split_key(k)[0], rank.get(k, -1), k))


def _budgets(keys: list[str], per_shard: int | None, total: int | None,
             rotation: int) -> dict[str, int | None]:
    """Records each shard may add: the per-shard cap, and a total split evenly.

    The remainder of an uneven split goes to shards in a rotating order, so with fewer rows
    than shards every shard still gets its turn.
    """
    if total is None or not keys:
        return {k: per_shard for k in keys}
    base, extra = divmod(total, len(keys))
    out: dict[str, int | None] = {}
    for i, key in enumerate(keys):
        share = base + (1 if (i - rotation) % len(keys) < extra else 0)
        out[key] = share if per_shard is None else min(per_shard, share)
    return out


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
