"""A sorted member set updated one name at a time, with a version that moves only on change.

Watch events touch one member (a pod) or a few (an EndpointSlice): each add or
discard costs a binary search plus one ``list.insert``/``del`` (a memmove of N
pointers, microseconds at 10,000 members), never a re-sort of every name. The
sorted tuple that ``members`` hands out is built lazily, once per change that
is actually read, so a burst of events costs one tuple build, not one per event.
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_left
from collections.abc import Iterable

log = logging.getLogger(__name__)


class SortedMembers:
    """Sorted, deduplicated member names; ``version`` grows by one per real change.

    Mutators are meant to be called under the owning view's lock; ``members`` and
    ``version`` may be read from any thread.
    """

    def __init__(self) -> None:
        self._names: list[str] = []
        self._tuple: tuple[str, ...] | None = ()
        self._build = threading.Lock()
        self.version = 0

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        names = self._names
        i = bisect_left(names, name) if isinstance(name, str) else len(names)
        return i < len(names) and names[i] == name

    @property
    def members(self) -> tuple[str, ...]:
        """The sorted member names (built once per change, then shared)."""
        snapshot = self._tuple
        if snapshot is not None:
            return snapshot
        with self._build:
            if self._tuple is None:
                self._tuple = tuple(self._names)
            return self._tuple

    def begin(self) -> _Change:
        """Group adds and discards into one version step: ``with members.begin() as change:``."""
        return _Change(self)

    def replace(self, names: Iterable[str]) -> bool:
        """Make the set exactly ``names`` (a full re-list) in one version step; True if it changed."""
        new = sorted(set(names))
        if new == self._names:
            return False
        old = set(self._names)
        joined = sorted(set(new) - old)
        left = sorted(old - set(new))
        with self._build:
            self._names = new
            self._tuple = None
        self._bump(joined, left)
        return True

    def _add(self, name: str) -> bool:
        names = self._names
        i = bisect_left(names, name)
        if i < len(names) and names[i] == name:
            return False
        with self._build:
            names.insert(i, name)
            self._tuple = None
        return True

    def _discard(self, name: str) -> bool:
        names = self._names
        i = bisect_left(names, name)
        if i == len(names) or names[i] != name:
            return False
        with self._build:
            del names[i]
            self._tuple = None
        return True

    def _bump(self, joined: list[str], left: list[str]) -> None:
        self.version += 1
        if len(joined) + len(left) <= 20:
            log.info("kubernetes members changed (version %d, %d members): joined %s, left %s",
                     self.version, len(self._names), joined, left)
        else:
            log.info("kubernetes members changed (version %d, %d members): %d joined, %d left",
                     self.version, len(self._names), len(joined), len(left))


class _Change:
    """Adds and discards that become one version step (or none, if nothing changed)."""

    def __init__(self, members: SortedMembers):
        self._members = members
        self._net: dict[str, int] = {}  # +1 joined, -1 left, 0 back where it was

    def add(self, name: str) -> None:
        if self._members._add(name):
            self._net[name] = self._net.get(name, 0) + 1

    def discard(self, name: str) -> None:
        if self._members._discard(name):
            self._net[name] = self._net.get(name, 0) - 1

    def __enter__(self) -> _Change:
        return self

    def __exit__(self, *exc: object) -> None:
        joined = sorted(n for n, d in self._net.items() if d > 0)
        left = sorted(n for n, d in self._net.items() if d < 0)
        if joined or left:
            self._members._bump(joined, left)
