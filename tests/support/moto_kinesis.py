"""Test-only patch of moto 5.2.5's Kinesis backend so that resharding behaves as on AWS.

moto gets resharding wrong in ways that make a shard consumer untestable:

* after SplitShard, new writes still land in the closed parent (moto picks the first shard
  whose hash range holds the key, open or not, and its range check excludes the ending key);
* MergeShards copies the parents' records into the child, so a consumer that finishes the
  parents and then reads the child sees every record twice; it also never checks that the two
  shards are open and adjacent the way AWS does;
* GetRecords always returns a NextShardIterator, so a drained closed shard never reaches
  SHARD_END;
* ListShards rejects a follow-up call that passes only NextToken (the AWS rule), accepts
  StreamName together with NextToken (AWS refuses), and ignores ShardFilter.

Each fix below is named after the AWS behaviour it restores. They patch the in-process moto
classes, so they also apply to the in-thread ``ThreadedMotoServer`` that ``LocalAWS`` runs.
Use ``with kinesis_resharding(): ...`` (or the ``kinesis_resharding`` pytest fixture); the
originals are restored on exit. ``tests/test_moto_patch.py`` checks that plain moto still gets
each of these wrong, so we notice when moto fixes one and the patch can shrink.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any
from unittest import mock

from moto.core.responses import ActionResult
from moto.kinesis import models, responses
from moto.kinesis.exceptions import InvalidArgumentError, ResourceInUseError

ALL_FIXES = (
    "writes_go_to_open_shards",
    "resharding_leaves_records_in_parents",
    "closed_shard_reaches_shard_end",
    "list_shards_follows_aws_rules",
)


# --- writes_go_to_open_shards ------------------------------------------------------------


def _get_shard_for_key(self: models.Stream, partition_key: str, explicit_hash_key: str) -> Any:
    """AWS: a record goes to the one OPEN shard whose (inclusive) hash key range holds it."""
    if not isinstance(partition_key, str) or len(partition_key) > 256:
        raise InvalidArgumentError("partition_key")
    if explicit_hash_key:
        key = int(explicit_hash_key)
        if key >= 2**128:
            raise InvalidArgumentError("explicit_hash_key")
    else:
        key = int(models.md5_hash(partition_key.encode("utf-8")).hexdigest(), 16)
    for shard in self.shards.values():
        if shard.is_open and shard.starting_hash <= key <= shard.ending_hash:
            return shard
    return None


# --- resharding_leaves_records_in_parents ------------------------------------------------


def _now() -> float:
    return datetime.now(UTC).timestamp()


def _next_index(stream: models.Stream) -> int:
    return int(sorted(stream.shards.values(), key=attrgetter("_shard_id"))[-1]._shard_id) + 1


def _close(shard: models.Shard) -> None:
    shard.is_open = False
    shard.hr_closed_at = _now()  # type: ignore[attr-defined]


def _new_shard(index: int, start: int, end: int, parent: str, adjacent: str | None = None) -> Any:
    shard = models.Shard(index, start, end, parent=parent, adjacent_parent=adjacent)
    shard.hr_created_at = _now()  # type: ignore[attr-defined]
    return shard


def _split_shard(self: models.Stream, shard_to_split: str, new_starting_hash_key: str) -> None:
    """AWS: the parent closes and keeps its records; two empty children take new writes."""
    shard = self.shards[shard_to_split]
    new_start = int(new_starting_hash_key)
    if not shard.is_open:
        raise ResourceInUseError(f"Shard {shard_to_split} in stream {self.stream_name} is closed")
    if not shard.starting_hash < new_start <= shard.ending_hash:
        raise InvalidArgumentError(
            f"NewStartingHashKey {new_start} is not within the hash key range of {shard_to_split}"
        )
    index = _next_index(self)
    low = _new_shard(index, shard.starting_hash, new_start - 1, shard.shard_id)
    high = _new_shard(index + 1, new_start, shard.ending_hash, shard.shard_id)
    self.shards[low.shard_id] = low
    self.shards[high.shard_id] = high
    _close(shard)


def _merge_shards(self: models.Stream, shard_to_merge: str, adjacent_shard_to_merge: str) -> None:
    """AWS: both parents must be open and adjacent; they close with their records; the child is empty."""
    one, two = self.shards[shard_to_merge], self.shards[adjacent_shard_to_merge]
    if not (one.is_open and two.is_open):
        raise ResourceInUseError(
            f"Shards {shard_to_merge} and {adjacent_shard_to_merge} must both be open to merge"
        )
    if one.ending_hash + 1 != two.starting_hash and two.ending_hash + 1 != one.starting_hash:
        raise InvalidArgumentError(
            f"Shards {shard_to_merge} and {adjacent_shard_to_merge} are not adjacent"
        )
    child = _new_shard(
        _next_index(self),
        min(one.starting_hash, two.starting_hash),
        max(one.ending_hash, two.ending_hash),
        one.shard_id,
        two.shard_id,
    )
    self.shards[child.shard_id] = child
    _close(one)
    _close(two)


# --- closed_shard_reaches_shard_end -------------------------------------------------------


def _child_shards(stream: models.Stream, shard_id: str) -> list[dict[str, Any]]:
    return [
        {
            "ShardId": s.shard_id,
            "ParentShards": [p for p in (s.parent, s.adjacent_parent) if p],
            "HashKeyRange": {
                "StartingHashKey": str(s.starting_hash),
                "EndingHashKey": str(s.ending_hash),
            },
        }
        for s in stream.shards.values()
        if shard_id in (s.parent, s.adjacent_parent)
    ]


def _backend_get_records(
    self: models.KinesisBackend, stream_arn: str | None, shard_iterator: str, limit: int | None
) -> tuple[str | None, list[Any], int]:
    """AWS: once a closed shard is read to its end, NextShardIterator is absent (SHARD_END)."""
    stream_name, shard_id, last = models.decompose_shard_iterator(shard_iterator)
    stream = self.describe_stream(stream_arn=stream_arn, stream_name=stream_name)
    shard = stream.get_shard(shard_id)
    records, last_seq, millis = shard.get_records(last, limit)
    if not shard.is_open and int(last_seq) >= shard.get_max_sequence_number():
        return None, records, millis
    return models.compose_shard_iterator(stream_name, shard, last_seq), records, millis


def _response_get_records(self: responses.KinesisResponse) -> ActionResult:
    stream_arn = self._get_param("StreamARN")
    iterator = self._get_param("ShardIterator")
    nxt, records, millis = self.kinesis_backend.get_records(
        stream_arn, iterator, self._get_param("Limit")
    )
    body: dict[str, Any] = {
        "Records": [r.to_json() for r in records],
        "MillisBehindLatest": millis,
    }
    if nxt is not None:
        body["NextShardIterator"] = nxt
    else:
        stream_name, shard_id, _ = models.decompose_shard_iterator(iterator)
        stream = self.kinesis_backend.describe_stream(stream_arn=stream_arn, stream_name=stream_name)
        body["ChildShards"] = _child_shards(stream, shard_id)
    return ActionResult(body)


# --- list_shards_follows_aws_rules --------------------------------------------------------


def _encode_token(state: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(state).encode()).decode()


def _decode_token(token: str) -> dict[str, Any]:
    try:
        state: dict[str, Any] = json.loads(base64.urlsafe_b64decode(token.encode()))
        return state
    except ValueError as exc:
        raise InvalidArgumentError(f"Invalid NextToken {token!r}") from exc


def _as_epoch(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(str(value)).timestamp()


def _filtered(stream: models.Stream, shard_filter: dict[str, Any] | None) -> list[Any]:
    shards = sorted(stream.shards.values(), key=lambda s: s.shard_id)
    if not shard_filter:
        return shards
    kind = shard_filter.get("Type")
    born = stream.creation_datetime
    born_at = (born if born.tzinfo else born.replace(tzinfo=UTC)).timestamp()

    def created(shard: Any) -> float:
        return float(getattr(shard, "hr_created_at", born_at))

    def closed(shard: Any) -> float | None:
        return getattr(shard, "hr_closed_at", None)

    if kind == "AFTER_SHARD_ID":
        if not shard_filter.get("ShardId"):
            raise InvalidArgumentError("ShardFilter AFTER_SHARD_ID needs ShardId")
        return [s for s in shards if s.shard_id > shard_filter["ShardId"]]
    if kind in ("AT_TRIM_HORIZON", "FROM_TRIM_HORIZON"):
        return shards  # moto never trims
    if kind == "AT_LATEST":
        return [s for s in shards if s.is_open]
    if kind in ("AT_TIMESTAMP", "FROM_TIMESTAMP"):
        if "Timestamp" not in shard_filter:
            raise InvalidArgumentError(f"ShardFilter {kind} needs Timestamp")
        ts = _as_epoch(shard_filter["Timestamp"])
        open_at = [s for s in shards if created(s) <= ts and (closed(s) or ts + 1) > ts]
        if kind == "AT_TIMESTAMP":
            return open_at
        return [s for s in shards if s in open_at or created(s) > ts]
    raise InvalidArgumentError(f"Unknown ShardFilter type {kind!r}")


def _response_list_shards(self: responses.KinesisResponse) -> ActionResult:
    """AWS: follow-up pages pass NextToken alone; StreamName with NextToken is refused."""
    token = self._get_param("NextToken")
    stream_name = self._get_param("StreamName")
    stream_arn = self._get_param("StreamARN")
    max_results = int(self._get_param("MaxResults", 1000))
    if not 1 <= max_results <= 10000:
        raise InvalidArgumentError(f"MaxResults must be in 1..10000, got {max_results}")
    if token is not None:
        if stream_name or stream_arn or self._get_param("ExclusiveStartShardId"):
            raise InvalidArgumentError(
                "NextToken and StreamName (or StreamARN, ExclusiveStartShardId) cannot be "
                "provided together."
            )
        state = _decode_token(token)
    else:
        state = {
            "stream": stream_name,
            "arn": stream_arn,
            "after": self._get_param("ExclusiveStartShardId"),
            "filter": _jsonable(self._get_param("ShardFilter")),
        }
    stream = self.kinesis_backend.describe_stream(stream_arn=state["arn"], stream_name=state["stream"])
    shards = _filtered(stream, state["filter"])
    if state["after"]:
        shards = [s for s in shards if s.shard_id > state["after"]]
    page = shards[:max_results]
    body: dict[str, Any] = {"Shards": [s.to_json() for s in page]}
    if len(shards) > max_results:
        body["NextToken"] = _encode_token({**state, "after": page[-1].shard_id})
    return ActionResult(body)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, datetime):
        return value.timestamp()
    return value


# --- applying -----------------------------------------------------------------------------

_PATCHES: dict[str, list[tuple[Any, str, Callable[..., Any]]]] = {
    "writes_go_to_open_shards": [(models.Stream, "get_shard_for_key", _get_shard_for_key)],
    "resharding_leaves_records_in_parents": [
        (models.Stream, "split_shard", _split_shard),
        (models.Stream, "merge_shards", _merge_shards),
    ],
    "closed_shard_reaches_shard_end": [
        (models.KinesisBackend, "get_records", _backend_get_records),
        (responses.KinesisResponse, "get_records", _response_get_records),
    ],
    "list_shards_follows_aws_rules": [(responses.KinesisResponse, "list_shards", _response_list_shards)],
}


@contextmanager
def kinesis_resharding(fixes: Iterable[str] = ALL_FIXES) -> Iterator[tuple[str, ...]]:
    """Apply the named fixes (default: all) to moto's Kinesis backend; restore moto on exit."""
    chosen = tuple(fixes)
    unknown = sorted(set(chosen) - set(_PATCHES))
    if unknown:
        raise ValueError(f"unknown fixes {unknown}; choose from {list(ALL_FIXES)}")
    with ExitStack() as stack:
        for name in chosen:
            for owner, attribute, replacement in _PATCHES[name]:
                stack.enter_context(mock.patch.object(owner, attribute, replacement))
        yield chosen
