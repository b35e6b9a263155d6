"""Exact progress of one shard processed out of order: the watermark and the records beyond it.

Records of a shard are delivered in order and numbered from the lease's checkpoint (index 0
is the first record after it). They complete in any order. The *watermark* is the last record
of the completed prefix: every record up to it has completed, so it is what the lease may
checkpoint. Records that completed beyond it are kept as a bitmap over the window of records
after the watermark and written with the checkpoint (:func:`encode`), so the next owner, which
reads the same records in the same order from that checkpoint, skips exactly those.

The encoding (the lease row's ``completedBeyond``, a string)::

    1|<checkpoint seq>/<sub>|<first seq>/<sub>|<n>|<base64 of zlib(bitmap of n bits)>

``checkpoint`` is the checkpoint the set belongs to (``seq/sub``, or a sentinel's name such as
``TRIM_HORIZON`` or ``AT_TIMESTAMP@<ISO time>``) (written in the same conditional write; a
reader ignores a set whose checkpoint is not the row's, which a build that does not know the
attribute may have moved), ``first`` the record just after it (index 0: a reader that finds
another record there, because the retention period trimmed the shard, ignores the set), and
bit ``i`` says whether record ``i`` completed. Its size is bounded by the window: at most
``4 * ceil((ceil(n/8) + 16) / 3) + 150`` bytes (zlib adds at most 16 bytes to a bitmap this
small, base64 4 for 3), with ``n`` at most the shard's ``max_pending_records`` (10,000 by
default: under 1.9 KB; at most 100,000: one zlib block; DynamoDB's item limit is 400 KB). Ignoring a set only
means its records are delivered again (at-least-once), never that one is skipped.
"""

from __future__ import annotations

import base64
import logging
import zlib
from collections import deque
from dataclasses import dataclass

from kinesis.consumer.retrieval.positions import Checkpoint, Position

log = logging.getLogger(__name__)

VERSION = "1"
MAX_BITS = 1_000_000
"""Sets larger than this are refused when decoded (a corrupt row cannot make a reader allocate)."""

Key = tuple[str, int]
"""(sequence number, sub-sequence number): a record's place in its shard."""


@dataclass(frozen=True)
class CompletedSet:
    """Records completed beyond ``checkpoint``: bit ``i`` of ``bits`` is record ``i`` after it."""

    checkpoint: str
    """The checkpoint the set is relative to (:func:`checkpoint_label`)."""
    first: Key
    """The record at index 0 (checked by the reader before the set is used)."""
    bits: bytes
    count: int
    """The number of indexes the bitmap covers."""

    def completed(self, index: int) -> bool:
        return 0 <= index < self.count and bool(self.bits[index >> 3] >> (index & 7) & 1)

    @property
    def completed_count(self) -> int:
        return sum(bin(b).count("1") for b in self.bits)


def _key_text(key: Key | None) -> str:
    return "-" if key is None else f"{key[0]}/{key[1]}"


def _parse_key(text: str) -> Key | None:
    if text == "-":
        return None
    seq, _, sub = text.partition("/")
    if not seq.isdigit() or not sub.lstrip("-").isdigit():
        raise ValueError(f"not a position: {text!r}")
    return seq, int(sub)


def checkpoint_key(cp: Checkpoint | None) -> Key | None:
    """The key of a record checkpoint (None for a sentinel or no checkpoint)."""
    return (cp.sequence_number, cp.sub_sequence_number) if isinstance(cp, Position) else None


def checkpoint_label(cp: Checkpoint) -> str:
    """How a set names its checkpoint: ``seq/sub``, or the sentinel (with its time)."""
    key = checkpoint_key(cp)
    if key is not None:
        return _key_text(key)
    return cp.sequence_number + ("" if cp.timestamp is None else "@" + cp.timestamp.isoformat())


def encode(s: CompletedSet) -> str:
    """The ``completedBeyond`` string of ``s``."""
    payload = base64.b64encode(zlib.compress(s.bits, 6)).decode("ascii")
    return "|".join((VERSION, s.checkpoint, _key_text(s.first), str(s.count), payload))


def decode(text: str) -> CompletedSet:
    """Parse a ``completedBeyond`` string; ValueError names what is wrong."""
    parts = text.split("|")
    if len(parts) != 5 or parts[0] != VERSION:
        raise ValueError(f"not a version-{VERSION} completed set ({len(parts)} fields, version {parts[0]!r})")
    count = int(parts[3])
    if not 0 < count <= MAX_BITS:
        raise ValueError(f"bitmap of {count} records is out of range (1..{MAX_BITS})")
    first = _parse_key(parts[2])
    if first is None:
        raise ValueError("the first record is missing")
    try:
        bits = zlib.decompress(base64.b64decode(parts[4], validate=True), bufsize=(count + 7) // 8)
    except (zlib.error, ValueError) as exc:
        raise ValueError(f"bitmap does not decode: {exc}") from None
    if len(bits) != (count + 7) // 8:
        raise ValueError(f"bitmap has {len(bits)} bytes for {count} records")
    if not parts[1]:
        raise ValueError("the checkpoint is missing")
    return CompletedSet(parts[1], first, bits, count)


def usable(text: str | None, checkpoint: Checkpoint, where: str) -> CompletedSet | None:
    """The completed set of a lease row, if it belongs to its ``checkpoint`` (else None, with
    a warning for a corrupt one: its records are delivered again, nothing is skipped)."""
    if not text:
        return None
    try:
        found = decode(text)
    except ValueError as exc:
        log.warning("%s: the lease's completedBeyond is unreadable and is ignored (its records are "
                    "delivered again): %s", where, exc)
        return None
    if found.checkpoint != checkpoint_label(checkpoint):
        log.info("%s: the lease's completed set belongs to checkpoint %s, not %s: ignored", where,
                 found.checkpoint, checkpoint_label(checkpoint))
        return None
    return found


class _Slot:
    __slots__ = ("done", "key")

    def __init__(self, key: Key):
        self.key = key
        self.done = False


class ShardProgress:
    """Which delivered records completed, and the watermark (not thread-safe: the caller locks).

    ``deliver`` numbers each record; ``complete`` marks one done and moves the watermark over
    the completed prefix. ``resume`` (the set the last owner wrote for the starting checkpoint)
    makes ``deliver`` report records that already completed.
    """

    def __init__(self, start: Checkpoint, resume: CompletedSet | None = None, where: str = ""):
        self.start = start
        self._watermark: Key | None = checkpoint_key(start)
        self._base = 0  # index of _window[0]
        self._window: deque[_Slot] = deque()  # one per record after the watermark
        self._next = 0  # index of the next record delivered
        self._resume = resume
        self._where = where
        self.resumed_skips = 0
        """Records reported as already completed by the last owner's set."""

    # --- delivery and completion ---------------------------------------------------------

    def deliver(self, sequence_number: str, sub_sequence_number: int) -> tuple[int, bool]:
        """Number the next record; True with it if the last owner's set says it completed."""
        index = self._next
        self._next += 1
        key = (sequence_number, sub_sequence_number)
        self._window.append(_Slot(key))
        resume = self._resume
        if resume is None:
            return index, False
        if index == 0 and key != resume.first:
            log.warning("%s: the first record after the checkpoint is %s, not %s as the completed set "
                        "says (the shard was trimmed?): the set is ignored", self._where, _key_text(key),
                        _key_text(resume.first))
            self._resume = None
            return index, False
        if index >= resume.count:
            self._resume = None  # past the set: nothing more to skip
            return index, False
        if resume.completed(index):
            self.resumed_skips += 1
            return index, True
        return index, False

    def complete(self, index: int) -> None:
        """Mark record ``index`` completed (once); the watermark moves over the completed prefix."""
        offset = index - self._base
        if offset < 0 or offset >= len(self._window):
            return  # already below the watermark, or never delivered
        self._window[offset].done = True
        window = self._window
        while window and window[0].done:
            self._watermark = window.popleft().key
            self._base += 1

    # --- what the checkpoint says --------------------------------------------------------

    @property
    def pending(self) -> int:
        """Records delivered after the watermark (the window, completed ones included)."""
        return len(self._window)

    @property
    def delivered(self) -> int:
        return self._next

    @property
    def completed_beyond(self) -> int:
        """Records completed after the watermark (not yet covered by a checkpoint)."""
        return sum(1 for slot in self._window if slot.done)

    def watermark(self) -> Checkpoint:
        """The checkpoint covering the completed prefix (the start while nothing completed)."""
        if self._watermark is None or self._watermark == checkpoint_key(self.start):
            return self.start
        return Position(*self._watermark)

    def snapshot(self) -> tuple[Checkpoint, str | None]:
        """(checkpoint, its ``completedBeyond`` string or None): what to write now."""
        checkpoint = self.watermark()
        window = self._window
        last = max((i for i, slot in enumerate(window) if slot.done), default=-1)
        if last < 0:
            return checkpoint, None
        count = last + 1
        bits = bytearray((count + 7) // 8)
        for i in range(count):
            if window[i].done:
                bits[i >> 3] |= 1 << (i & 7)
        return checkpoint, encode(CompletedSet(checkpoint_label(checkpoint), window[0].key, bytes(bits), count))
