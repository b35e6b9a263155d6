"""Shard discovery (ListShards, paginated and cached) and shard lineage.

After a reshard, a closed parent still holds records its children must not overtake: a child
is processed only once every parent has reached SHARD_END, or has been trimmed from the stream
(it is no longer listed). :func:`ready_shards` applies that rule; :func:`shard_order` gives a
deterministic topological order (parents before children, ties by shard id).
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError
from cachetools import TTLCache

from kinesis.aws_errors import error_code
from kinesis.consumer.retrieval.failures import call_with_retries
from kinesis.errors import (
    ConfigurationError,
    KinesisAccessDeniedError,
    KinesisHashRingError,
    StreamNotActiveError,
    StreamNotFoundError,
    access_denied_message,
    is_access_denied,
)


@dataclass(frozen=True)
class Shard:
    """One shard as ListShards describes it."""

    shard_id: str
    parent_shard_id: str | None
    adjacent_parent_shard_id: str | None
    starting_sequence_number: str
    ending_sequence_number: str | None
    hash_key_range: tuple[int, int]

    @property
    def parents(self) -> tuple[str, ...]:
        """The parent shard ids (none, one after a split, two after a merge)."""
        return tuple(p for p in (self.parent_shard_id, self.adjacent_parent_shard_id) if p)

    @property
    def is_open(self) -> bool:
        """True while the shard accepts writes (it has no ending sequence number)."""
        return self.ending_sequence_number is None

    @classmethod
    def from_api(cls, item: Mapping[str, Any]) -> Shard:
        """Build from one entry of ListShards' ``Shards``."""
        seq = item.get("SequenceNumberRange", {})
        keys = item["HashKeyRange"]
        return cls(
            shard_id=item["ShardId"],
            parent_shard_id=item.get("ParentShardId"),
            adjacent_parent_shard_id=item.get("AdjacentParentShardId"),
            starting_sequence_number=seq.get("StartingSequenceNumber", "0"),
            ending_sequence_number=seq.get("EndingSequenceNumber"),
            hash_key_range=(int(keys["StartingHashKey"]), int(keys["EndingHashKey"])),
        )


def _endpoint_of(client: Any) -> str:
    meta = getattr(client, "meta", None)
    region = getattr(meta, "region_name", None) or "?"
    endpoint = getattr(meta, "endpoint_url", None) or "?"
    return f"region {region}, endpoint {endpoint}"


def stream_not_found(client: Any, stream_name: str, exc: Exception | None = None) -> StreamNotFoundError:
    """The error for a missing stream, naming it and where we looked."""
    detail = f": {str(exc).rstrip('. ')}" if exc else ""  # the sentence ends once
    return StreamNotFoundError(
        f"Kinesis stream {stream_name!r} not found ({_endpoint_of(client)}){detail}. "
        "Check the stream name, the region and the credentials' account, or create the stream."
    )


def named_client_error(client: Any, stream_name: str, operation: str, exc: ClientError) -> KinesisHashRingError | None:
    """The named error for a Kinesis call's ``exc`` that no retry can fix, or None.

    ``ResourceNotFoundException``: :class:`StreamNotFoundError`; ``ResourceInUseException``
    (the stream is being created, deleted or updated): :class:`StreamNotActiveError`;
    ``AccessDeniedException``: :class:`KinesisAccessDeniedError` naming the IAM action.
    """
    code = error_code(exc) or ""
    if code == "ResourceNotFoundException":
        return stream_not_found(client, stream_name, exc)
    if code == "ResourceInUseException":
        return StreamNotActiveError(
            f"Kinesis stream {stream_name!r} is not ACTIVE ({_endpoint_of(client)}): {exc}. It is "
            "being created, deleted or updated: wait until DescribeStreamSummary reports ACTIVE, "
            "or recreate the stream if it was deleted."
        )
    if is_access_denied(exc):
        action = f"kinesis:{operation}"
        target = f"Kinesis stream {stream_name!r} ({_endpoint_of(client)})"
        return KinesisAccessDeniedError(access_denied_message(operation, target, action, exc), action)
    return None


class ShardDiscovery:
    """Lists a stream's shards with ListShards, paginated, cached for ``cache_ttl`` seconds.

    Thread-safe. ``page_size`` is ListShards' ``MaxResults`` (1..10000). Pagination follows
    the AWS rule: the first call names the stream; follow-up calls pass only ``NextToken``.
    Throttling and 5xx answers are retried with jittered exponential backoff. ``timer`` is
    the cache's clock (monotonic seconds).
    """

    def __init__(
        self,
        kinesis_client: Any,
        stream_name: str,
        *,
        cache_ttl: float = 30.0,
        page_size: int = 1000,
        max_attempts: int = 8,
        timer: Callable[[], float] = time.monotonic,
        retry_option: str = "ShardDiscovery(max_attempts=...)",
    ):
        if not stream_name:
            raise ConfigurationError("stream_name must be a non-empty string")
        if not 1 <= page_size <= 10000:
            raise ConfigurationError(f"page_size must be in 1..10000 (ListShards MaxResults), got {page_size}")
        if cache_ttl < 0:
            raise ConfigurationError(f"cache_ttl must be >= 0 seconds, got {cache_ttl}")
        self.client = kinesis_client
        self.stream_name = stream_name
        self.page_size = page_size
        self.max_attempts = max_attempts
        self.retry_option = retry_option
        self.calls = 0
        """ListShards pages fetched so far (for tests and metrics)."""
        self._cache: TTLCache[str, tuple[Shard, ...]] | None = (
            TTLCache(maxsize=1, ttl=cache_ttl, timer=timer) if cache_ttl > 0 else None
        )
        self._lock = threading.Lock()

    def list_shards(self, force: bool = False) -> list[Shard]:
        """Every shard of the stream (open and closed, not trimmed), sorted by shard id."""
        with self._lock:
            if self._cache is not None and not force:
                cached = self._cache.get(self.stream_name)
                if cached is not None:
                    return list(cached)
            shards = tuple(self._fetch())
            if self._cache is not None:
                self._cache[self.stream_name] = shards
            return list(shards)

    def invalidate(self) -> None:
        """Forget the cached listing (e.g. after a shard ended)."""
        with self._lock:
            if self._cache is not None:
                self._cache.clear()

    def _page(self, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        what = f"ListShards on stream {self.stream_name!r}"
        result: dict[str, Any] = call_with_retries(
            lambda: self.client.list_shards(MaxResults=self.page_size, **kwargs),
            what=what,
            max_attempts=self.max_attempts,
            budget_option=self.retry_option,
        )
        return result

    def _fetch(self) -> list[Shard]:
        found: dict[str, Shard] = {}
        try:
            page = self._page(StreamName=self.stream_name)
            while True:
                for item in page.get("Shards", []):
                    shard = Shard.from_api(item)
                    found[shard.shard_id] = shard
                token = page.get("NextToken")
                if not token or not page.get("Shards"):
                    break
                try:
                    page = self._page(NextToken=token)
                except ClientError as exc:
                    if error_code(exc) != "ExpiredNextTokenException" or not found:
                        raise
                    # The listing took longer than the token lives: continue after the last
                    # shard seen (shard ids grow monotonically, so nothing is skipped).
                    page = self._page(StreamName=self.stream_name, ExclusiveStartShardId=max(found))
        except ClientError as exc:
            named = named_client_error(self.client, self.stream_name, "ListShards", exc)
            if named is not None:
                raise named from exc
            raise
        return sorted(found.values(), key=lambda s: s.shard_id)



def shard_order(shards: Iterable[Shard]) -> list[Shard]:
    """Topological order: every listed parent before its children; ties by shard id.

    Parents that are not in ``shards`` (trimmed) are ignored. Deterministic for a given set.
    """
    by_id = {s.shard_id: s for s in shards}
    waiting = {sid: sum(1 for p in s.parents if p in by_id) for sid, s in by_id.items()}
    children: dict[str, list[str]] = {}
    for sid, s in by_id.items():
        for p in s.parents:
            if p in by_id:
                children.setdefault(p, []).append(sid)
    heap = [sid for sid, n in waiting.items() if n == 0]
    heapq.heapify(heap)
    out: list[Shard] = []
    while heap:
        sid = heapq.heappop(heap)
        out.append(by_id[sid])
        for child in children.get(sid, ()):
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(heap, child)
    if len(out) != len(by_id):  # a cycle: impossible in Kinesis, but never loop or drop shards
        cyclic = sorted(set(by_id) - {s.shard_id for s in out})
        raise ConfigurationError(f"shard lineage has a cycle among {cyclic}")
    return out


def ready_shards(shards: Iterable[Shard], finished: set[str] | frozenset[str]) -> list[Shard]:
    """The shards that may be processed now, in :func:`shard_order`.

    A shard is ready when it is not in ``finished`` (reached SHARD_END and checkpointed) and
    each of its parents is either finished or absent from ``shards`` (trimmed after retention).
    """
    listed = list(shards)
    present = {s.shard_id for s in listed}
    return [
        s
        for s in shard_order(listed)
        if s.shard_id not in finished
        and all(p in finished or p not in present for p in s.parents)
    ]


def children_of(shards: Iterable[Shard], shard_id: str) -> list[Shard]:
    """The listed shards that have ``shard_id`` as a parent, by shard id."""
    return sorted((s for s in shards if shard_id in s.parents), key=lambda s: s.shard_id)
