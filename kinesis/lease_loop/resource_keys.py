"""``ResourceKeys``: the keys a member may plan, from its resource provider, checked."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from kinesis.errors import ConfigurationError, InvalidLeaseKeyError
from kinesis.lease_loop.lease_listener import ResourceProvider
from kinesis.lease_loop.lease_model import TableSnapshot, check_lease_key

log = logging.getLogger("kinesis.lease_loop.coordinator")  # the lease loop logs as the coordinator


def provider_of(resources: ResourceProvider | Iterable[str]) -> ResourceProvider:
    """``resources`` as a provider: a ``callable(snapshot) -> keys`` as is, a fixed collection
    of keys (checked now) as a callable returning it."""
    if callable(resources):
        return resources
    if isinstance(resources, Iterable) and not isinstance(resources, str):
        fixed = tuple(resources)
        for key in fixed:
            check_lease_key(key)
        return lambda _snapshot: fixed
    raise ConfigurationError("resources must be a callable(snapshot) -> keys, or a collection of lease keys")


class ResourceKeys:
    """The provider's answers, each checked once: bad keys are logged and counted, duplicates
    and keys of corrupt rows dropped."""

    def __init__(self, provider: ResourceProvider, member_id: str, count: Callable[[str], None]):
        self._provider = provider
        self._me = member_id
        self._count = count
        self._cache: tuple[Any, TableSnapshot, list[str]] | None = None

    def __call__(self, snapshot: TableSnapshot) -> list[str]:
        """The keys that may be planned now, in the provider's order."""
        listed = self._provider(snapshot)
        cached = self._cache
        if cached is not None and cached[0] is listed and cached[1] is snapshot:
            return cached[2]  # the same provider answer for the same snapshot: already checked
        keys = self._check(listed, snapshot)
        self._cache = (listed, snapshot, keys)
        return keys

    def _check(self, listed: Iterable[str], snapshot: TableSnapshot) -> list[str]:
        keys: list[str] = []
        seen: set[str] = set()
        for key in listed:
            try:
                check_lease_key(key)
            except InvalidLeaseKeyError as exc:
                self._count("lease_loop_errors")
                log.error("%s: resource provider returned a bad key: %s", self._me, exc)
                continue
            if key in seen or key in snapshot.corrupt:
                continue
            seen.add(key)
            keys.append(key)
        return keys
