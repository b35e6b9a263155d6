"""A versioned document in the lease table, published by one member and read by all.

The document (for the Worker: a stream's shard manifest) is stored as a *head* row plus
immutable *chunk* rows, each under DynamoDB's 400 KB item limit:

* ``__manifest__#<name>``: the head: ``version``, ``chunks``, ``digest`` (sha256 of the
  payload), ``chunkId`` (a random id per publish; ``prevChunkId``: the previous version's),
  and the chore's fencing pair ``owner`` + ``counter`` (like a lease: every head write is
  conditional on the counter the writer read and adds one);
* ``__manifest__#<name>#<version>#<chunkId>#<i>``: chunk ``i`` of that version
  (zlib-compressed bytes; ``#<version>#<i>`` for a head written without a chunk id).

A publisher writes the chunks of the new version first, under a chunk id of its own (two
publishers racing for one version never overwrite each other's chunks, and the loser deletes
only its own), then the head (conditional on the counter it read), then deletes the chunks of
the version before the previous one (a reader that read the previous head can still read its
chunks). A publish that fails otherwise (throttled, timed out) deletes its chunks unless a
consistent read shows the head names them. The head format (chunk ids) is new in this
release, like the store itself. Readers poll the head (one small,
eventually consistent GetItem) and read chunks only when the version moves, with strongly
consistent reads (chunks are written before the head that names them, so a reader that sees
the head finds them). The owner renews the head (``counter + 1``) every tick; a head whose
counter did not move for a lease duration on the observer's clock belongs to a dead owner and
may be claimed, exactly as an expired lease. Reserved rows are skipped by every scan.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
import zlib
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import ClientError

from kinesis.aws_errors import error_code
from kinesis.errors import CorruptLeaseError, KinesisHashRingError
from kinesis.lease_loop.table import model as m
from kinesis.lease_loop.table.leases import LeaseTable

log = logging.getLogger(__name__)

PREFIX = "__manifest__#"
CHUNK_BYTES = 350_000
"""Payload bytes per chunk row (DynamoDB's item limit is 400 KB including attribute names)."""


class ManifestConflictError(KinesisHashRingError):
    """The head moved since the writer read it: another member owns or published it."""


class ManifestCorruptError(CorruptLeaseError):
    """A head or chunk row could not be parsed, or the chunks do not match the head's digest;
    ``item`` is the head row as read when the head itself is unreadable (else None)."""

    def __init__(self, key: str, reason: str, item: dict[str, Any] | None = None):
        super().__init__(key, reason)
        self.item = item


@dataclass(frozen=True)
class ManifestHead:
    """The head row: which version is current and who owns the chore (fenced by ``counter``)."""

    name: str
    version: int
    chunks: int
    digest: str
    owner: str
    counter: int
    chunk_id: str = ""
    """The id in this version's chunk keys ("": a head written without one)."""
    previous_chunk_id: str = ""
    """The previous version's chunk id (its chunks are deleted by the next publish)."""


class ManifestStore:
    """Head and chunks of one named document in ``table`` (thread-safe, like the table)."""

    def __init__(self, table: LeaseTable, name: str, *, chunk_bytes: int = CHUNK_BYTES):
        if not name or "#" in name:
            raise ValueError(f"manifest names are non-empty and have no '#', got {name!r}")
        if not 1 <= chunk_bytes <= CHUNK_BYTES:
            raise ValueError(f"chunk_bytes must be within 1..{CHUNK_BYTES}, got {chunk_bytes!r}")
        self.table = table
        self.name = name
        self.chunk_bytes = chunk_bytes
        self.head_key = f"{PREFIX}{name}"

    def chunk_key(self, version: int, chunk_id: str, i: int) -> str:
        """The key of chunk ``i`` of ``version`` published under ``chunk_id``."""
        return f"{self.head_key}#{version}#{chunk_id}#{i}" if chunk_id else f"{self.head_key}#{version}#{i}"

    # --- reads -----------------------------------------------------------------------

    def head(self, *, consistent: bool = False) -> ManifestHead | None:
        """The head row, ``None`` before the first publish."""
        item = self.table.call("get_item", Key={m.KEY: {"S": self.head_key}}, ConsistentRead=consistent).get("Item")
        return None if not item else self._parse_head(item)

    def read(self, head: ManifestHead) -> bytes:
        """The payload ``head`` names (its chunks, checked against its digest)."""
        if head.chunks == 0:
            return b""
        keys = [self.chunk_key(head.version, head.chunk_id, i) for i in range(head.chunks)]
        items = self.table.get_items(keys, consistent=True)
        parts = {k: bytes(item.get("data", {}).get("B", b"")) for k, item in items.items()}
        missing = [k for k in keys if k not in parts]
        if missing:
            raise ManifestConflictError(
                f"manifest {self.name!r} version {head.version}: chunk rows {missing[:3]} are gone "
                "(a newer version replaced it); read the head again"
            )
        try:
            payload = zlib.decompress(b"".join(parts[k] for k in keys))
        except zlib.error as exc:
            raise ManifestCorruptError(self.head_key, f"chunks do not decompress: {exc}") from exc
        if hashlib.sha256(payload).hexdigest() != head.digest:
            raise ManifestCorruptError(self.head_key, f"version {head.version}: chunks do not match the head's digest")
        return payload

    # --- writes (conditional on the head's counter) ----------------------------------

    def claim(self, owner: str, seen: ManifestHead | None, *, version: int = 0) -> ManifestHead:
        """Take the chore: write the head with ``owner`` (same version), conditional on ``seen``
        (``None``: no head yet; the new head starts at ``version``, for a head rebuilt after it
        was lost). Raises :class:`ManifestConflictError` if the head moved."""
        if seen is None:
            return self._put_head(ManifestHead(self.name, version, 0, _EMPTY_DIGEST, owner, 1), None)
        return self._put_head(replace(seen, owner=owner, counter=seen.counter + 1), seen)

    def claim_corrupt(self, owner: str, item: dict[str, Any], *, version: int) -> ManifestHead:
        """Replace an unreadable head row (``item``, as read) with a head of ``owner`` at
        ``version``, conditional on every attribute of ``item`` being unchanged (so a head
        someone repaired meanwhile stays). Raises :class:`ManifestConflictError` if it changed."""
        return self._put_head(ManifestHead(self.name, version, 0, _EMPTY_DIGEST, owner, 1), None, corrupt=item)

    def renew(self, head: ManifestHead) -> ManifestHead:
        """The owner's heartbeat: counter + 1, conditional on ``head``."""
        return self.claim(head.owner, head)

    def publish(self, head: ManifestHead, payload: bytes) -> ManifestHead:
        """Publish ``payload`` as version ``head.version + 1`` (``head`` as the owner last wrote
        it). Chunks first, then the head; chunks two versions old are deleted after."""
        data = zlib.compress(payload, 6)
        chunks = [data[i : i + self.chunk_bytes] for i in range(0, len(data), self.chunk_bytes)]
        version, chunk_id = head.version + 1, uuid.uuid4().hex[:12]
        new = ManifestHead(self.name, version, len(chunks), hashlib.sha256(payload).hexdigest(), head.owner,
                           head.counter + 1, chunk_id, head.chunk_id)
        try:
            for i, chunk in enumerate(chunks):
                key = self.chunk_key(version, chunk_id, i)
                self.table.call("put_item", Item={m.KEY: {"S": key}, "data": {"B": chunk}})
            written = self._put_head(new, head)
        except ManifestConflictError:
            self._delete_chunks(version, chunk_id, len(chunks))  # ours alone: the id is unique
            raise
        except Exception:  # throttled, timed out: no row may stay that no head names
            self._discard_unless_named(version, chunk_id, len(chunks))
            raise
        if head.version >= 2:
            self._delete_chunks(head.version - 1, head.previous_chunk_id, None)
        return written

    def _discard_unless_named(self, version: int, chunk_id: str, count: int) -> None:
        """After a publish failed: delete its chunks unless the head names them (the head write
        may have been applied); best effort, its own errors are logged."""
        try:
            current = self.head(consistent=True)
            if current is None or (current.version, current.chunk_id) != (version, chunk_id):
                self._delete_chunks(version, chunk_id, count)
        except Exception as exc:  # the publish's error is the one raised
            log.warning("manifest %r: chunks of a failed publish (version %d, id %s) may be left: %s",
                        self.name, version, chunk_id, exc)

    def _delete_chunks(self, version: int, chunk_id: str, count: int | None) -> None:
        """Delete the chunk rows of ``version`` (``count`` unknown: until one is missing)."""
        i = 0
        while count is None or i < count:
            key = {m.KEY: {"S": self.chunk_key(version, chunk_id, i)}}
            response = self.table.call("delete_item", Key=key, ReturnValues="ALL_OLD")
            if count is None and not response.get("Attributes"):
                return
            i += 1

    def _put_head(self, new: ManifestHead, seen: ManifestHead | None, *,
                  corrupt: dict[str, Any] | None = None) -> ManifestHead:
        item = {
            m.KEY: {"S": self.head_key},
            "version": {"N": str(new.version)},
            "chunks": {"N": str(new.chunks)},
            "digest": {"S": new.digest},
            "owner": {"S": new.owner},
            "counter": {"N": str(new.counter)},
        }
        for name, value in (("chunkId", new.chunk_id), ("prevChunkId", new.previous_chunk_id)):
            if value:
                item[name] = {"S": value}
        names: dict[str, str]
        if corrupt is not None:  # every attribute as read (the key's too: the row still exists)
            attributes = sorted(corrupt.items())
            names = {f"#a{i}": name for i, (name, _) in enumerate(attributes)}
            values = {f":a{i}": value for i, (_, value) in enumerate(attributes)}
            condition = " AND ".join(f"#a{i} = :a{i}" for i in range(len(attributes)))
        elif seen is None:
            condition, values, names = "attribute_not_exists(#k)", None, {"#k": m.KEY}
        else:
            condition, values, names = "#c = :c", {":c": {"N": str(seen.counter)}}, {"#c": "counter"}
        kwargs: dict[str, Any] = {"Item": item, "ConditionExpression": condition, "ExpressionAttributeNames": names}
        if values:
            kwargs["ExpressionAttributeValues"] = values
        try:
            self.table.call("put_item", **kwargs)
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            # A retried put whose first attempt was applied fails its condition on our own
            # write: the row then holds exactly what we wrote.
            current = self.head(consistent=True)
            if current == new:
                return new
            raise ManifestConflictError(
                f"manifest {self.name!r}: the head moved (now {current}); re-read it"
            ) from None
        return new

    def head_of(self, item: dict[str, Any]) -> ManifestHead:
        """The head row ``item`` as read elsewhere (say in a batch with other rows); raises
        :class:`ManifestCorruptError` if it cannot be parsed."""
        return self._parse_head(item)

    def _parse_head(self, item: dict[str, Any]) -> ManifestHead:
        try:
            return ManifestHead(
                self.name,
                int(item["version"]["N"]),
                int(item["chunks"]["N"]),
                item["digest"]["S"],
                item["owner"]["S"],
                int(item["counter"]["N"]),
                str(item.get("chunkId", {}).get("S", "")),
                str(item.get("prevChunkId", {}).get("S", "")),
            )
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise ManifestCorruptError(self.head_key, f"head row unreadable ({exc!r}): delete it to rebuild",
                                       dict(item)) from exc


_EMPTY_DIGEST = hashlib.sha256(b"").hexdigest()
