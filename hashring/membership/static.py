"""A fixed member list, for tests, simple deployments and the simulator."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from hashring.errors import InvalidMembersError
from hashring.validation import check_members


class StaticMembership:
    """Members given by the caller; :meth:`set_members` replaces them atomically."""

    def __init__(self, members: Iterable[str], self_id: str):
        if not isinstance(self_id, str) or not self_id:
            raise InvalidMembersError(f"self_id must be a non-empty string, got {self_id!r}")
        self._self_id = self_id
        self._lock = threading.Lock()
        self._members = check_members(members)
        self._version = 0

    @property
    def self_id(self) -> str:
        return self._self_id

    @property
    def version(self) -> int:
        return self._version

    def members(self) -> tuple[str, ...]:
        return self._members

    def set_members(self, members: Iterable[str]) -> None:
        """Replace the member list; bumps ``version`` only if the list changed."""
        ordered = check_members(members)
        with self._lock:
            if ordered != self._members:
                self._members = ordered
                self._version += 1

    def __repr__(self) -> str:
        return f"StaticMembership(members={list(self._members)!r}, self_id={self._self_id!r})"
