"""Source offsets: a JSON dict keyed by ``"<stream>/<shardId>"``, keys in sorted order.

One entry per shard the query is reading::

    {"orders/shardId-000000000001": {"seq": "4959...", "sub": 0},          # after this record
     "orders/shardId-000000000002": {"from": "TRIM_HORIZON"},              # nothing read yet
     "orders/shardId-000000000003": {"from": "AT_TIMESTAMP", "ts": 1714...},
     "orders/shardId-000000000000": {"seq": "4959...", "sub": 3, "done": true}}

``seq``/``sub`` is the last user record delivered (KPL sub-records have ``sub`` > 0), so a
micro-batch reads the records strictly after its start entry up to and including its end entry.
``done`` marks a closed shard read to SHARD_END; it stays one batch so its children can start,
then leaves the offsets. In an *end* offset, ``resume`` names where the batch starts for a shard
that starts from an initial position, is not in the start offset (a new child) or that this
application just took over (group mode: the DynamoDB checkpoint). It is part of the logged end
offset, so a replay starts there too, whatever Spark passes as the start (Spark does not log
the initial offset: it calls ``initialOffset()`` again to replay the first batch).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from kinesis.consumer.discovery import Shard, ready_shards
from kinesis.consumer.retrieval import TRIM_HORIZON, Checkpoint, InitialPosition, Position
from kinesis.errors import InvalidSequenceNumberError
from spark_integration.errors import InvalidOffsetError, InvalidOffsetSequenceNumberError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def at_timestamp_ms(ms: int) -> Checkpoint:
    """The AT_TIMESTAMP position of ``ms`` milliseconds since the epoch (exact, no float)."""
    return Checkpoint.at_timestamp(_EPOCH + ms * _MS)


def timestamp_ms(pos: Checkpoint) -> int:
    """The milliseconds since the epoch of an AT_TIMESTAMP position (inverse of
    :func:`at_timestamp_ms`; a finer timestamp is cut to the millisecond)."""
    assert pos.timestamp is not None, pos
    return (pos.timestamp - _EPOCH) // _MS


def position_to_json(pos: Checkpoint) -> dict[str, Any]:
    """The JSON form of a position (see the module docstring)."""
    if pos.is_record:
        return {"seq": pos.sequence_number, "sub": pos.sub_sequence_number}
    if pos.timestamp is not None:
        return {"from": "AT_TIMESTAMP", "ts": timestamp_ms(pos)}
    if pos == TRIM_HORIZON:
        return {"from": "TRIM_HORIZON"}
    raise InvalidOffsetError(f"{pos} has no offset form: pin LATEST as AT_TIMESTAMP first")


def position_from_json(value: Any, where: str) -> Checkpoint:
    """Inverse of :func:`position_to_json`; ``where`` names the entry in error messages."""
    if not isinstance(value, Mapping):
        raise InvalidOffsetError(f"offset entry {where} must be an object, got {value!r}")
    try:
        if "seq" in value:
            return Position(value["seq"], value.get("sub", 0))
        kind = value.get("from")
        if kind == "TRIM_HORIZON":
            return TRIM_HORIZON
        if kind == "AT_TIMESTAMP":
            ts = value["ts"]
            if isinstance(ts, bool) or not isinstance(ts, int):
                raise TypeError(f"'ts' must be an int of milliseconds, got {ts!r}")
            return at_timestamp_ms(ts)
    except InvalidSequenceNumberError as exc:
        raise InvalidOffsetSequenceNumberError(f"offset entry {where}: {exc}") from exc
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise InvalidOffsetError(f"offset entry {where} is malformed: {value!r} ({exc})") from exc
    raise InvalidOffsetError(
        f"offset entry {where} has neither 'seq' nor a known 'from': {value!r}. Was the "
        "checkpoint written by another source? Start the query with a new checkpoint location."
    )


@dataclass(frozen=True)
class ShardOffset:
    """One shard's entry."""

    position: Checkpoint
    done: bool = False
    resume: Checkpoint | None = None

    def to_json(self) -> dict[str, Any]:
        out = position_to_json(self.position)
        if self.done:
            out["done"] = True
        if self.resume is not None:
            out["resume"] = position_to_json(self.resume)
        return out

    @classmethod
    def from_json(cls, value: Any, where: str) -> ShardOffset:
        pos = position_from_json(value, where)
        resume = value.get("resume")
        return cls(
            position=pos,
            done=bool(value.get("done", False)),
            resume=None if resume is None else position_from_json(resume, f"{where}.resume"),
        )


def shard_key(stream: str, shard_id: str) -> str:
    """The offset key of a shard."""
    return f"{stream}/{shard_id}"


def split_key(key: str) -> tuple[str, str]:
    """``(stream, shard_id)`` of an offset key."""
    stream, sep, shard = key.partition("/")
    if not sep or not stream or not shard:
        raise InvalidOffsetError(f"offset key {key!r} is not '<stream>/<shardId>'")
    return stream, shard


@dataclass(frozen=True)
class SourceOffset:
    """The whole offset: shard key -> :class:`ShardOffset`."""

    shards: Mapping[str, ShardOffset]

    def to_json(self) -> dict[str, Any]:
        """A dict with sorted keys, so equal offsets serialise identically."""
        return {k: self.shards[k].to_json() for k in sorted(self.shards)}

    def dumps(self) -> str:
        """Canonical JSON text."""
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def from_json(cls, value: Any) -> SourceOffset:
        if value is None:
            return cls({})
        if isinstance(value, str):
            value = json.loads(value)
        if not isinstance(value, Mapping):
            raise InvalidOffsetError(f"an offset must be a JSON object, got {value!r}")
        shards = {}
        for key in sorted(value):
            split_key(key)
            shards[key] = ShardOffset.from_json(value[key], key)
        return cls(shards)

    def without_resume(self) -> SourceOffset:
        """The same positions with every ``resume`` dropped (the next batch's view)."""
        return SourceOffset({k: replace(v, resume=None) for k, v in self.shards.items()})

    def batch_start(self, key: str, start: SourceOffset) -> Checkpoint | None:
        """Where this (end) offset's batch starts reading ``key``; None if it reads nothing."""
        entry = self.shards[key]
        if entry.resume is not None:
            return entry.resume
        begin = start.shards.get(key)
        if begin is not None:
            return begin.position
        return entry.position if isinstance(entry.position, InitialPosition) else None


def track(
    offset: SourceOffset,
    listing: Mapping[str, Iterable[Shard]],
    new_shard_start: Checkpoint,
    *,
    allowed: Iterable[str] | None = None,
    finished_elsewhere: Iterable[str] = (),
) -> tuple[SourceOffset, list[str]]:
    """Follow resharding: the shards to read next, and the keys that left because trimmed.

    Adds every listed shard whose parents are finished (in :func:`kinesis.consumer.discovery.shards.ready_shards`
    order) starting at ``new_shard_start``; drops ``done`` shards once all their listed children
    are tracked. A shard that is absent from the offsets counts as finished when one of its
    descendants is tracked (a child starts only after its parents finished). ``allowed``
    restricts which keys may be added (group mode: the leases this application holds), and
    ``finished_elsewhere`` names keys known to be finished by another reader (group mode: the
    lease table says SHARD_END).
    """
    keep = dict(offset.shards)
    allow = None if allowed is None else set(allowed)
    trimmed: list[str] = []
    elsewhere = set(finished_elsewhere)
    for stream in sorted(listing):
        shards = list(listing[stream])
        ids = {s.shard_id for s in shards}
        for key in sorted(k for k in keep if split_key(k)[0] == stream):
            if split_key(key)[1] not in ids:
                trimmed.append(key)
                del keep[key]
        tracked = {split_key(k)[1] for k in keep if split_key(k)[0] == stream}
        finished = {split_key(k)[1] for k, v in keep.items()
                    if v.done and split_key(k)[0] == stream}
        finished |= _finished_ancestors(shards, tracked)
        finished |= {split_key(k)[1] for k in elsewhere if split_key(k)[0] == stream}
        for shard in ready_shards(shards, finished):
            key = shard_key(stream, shard.shard_id)
            if key in keep or (allow is not None and key not in allow):
                continue
            keep[key] = ShardOffset(new_shard_start)
        tracked = {split_key(k)[1] for k in keep if split_key(k)[0] == stream}
        for key in sorted(k for k, v in keep.items() if v.done and split_key(k)[0] == stream):
            children = [s.shard_id for s in shards if split_key(key)[1] in s.parents]
            if children and all(c in tracked for c in children):
                del keep[key]
    return SourceOffset(keep), trimmed


def _finished_ancestors(shards: list[Shard], tracked: set[str]) -> set[str]:
    """Every listed ancestor of a tracked shard (all of them have reached SHARD_END)."""
    parents = {s.shard_id: s.parents for s in shards}
    out: set[str] = set()
    stack = [p for sid in tracked for p in parents.get(sid, ())]
    while stack:
        sid = stack.pop()
        if sid in out:
            continue
        out.add(sid)
        stack.extend(parents.get(sid, ()))
    return out
