"""Argument checks shared by strategies, the planner and the ring."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping

from hashring.errors import (
    InvalidKeyError,
    InvalidMembersError,
    InvalidReplicasError,
    InvalidWeightsError,
)


def check_members(members: Iterable[str]) -> tuple[str, ...]:
    """Return the members sorted; reject empty lists, non-strings and duplicates."""
    if isinstance(members, str):
        raise InvalidMembersError(
            f"members must be a list of names, got the single string {members!r}; "
            "wrap it in a list"
        )
    listed = list(members)
    if not listed:
        raise InvalidMembersError("the member list is empty: pass at least one member name")
    for m in listed:
        if not isinstance(m, str) or not m:
            raise InvalidMembersError(
                f"member names must be non-empty strings, got {m!r}; fix the member list"
            )
    ordered = tuple(sorted(listed))
    dups = sorted({a for a, b in itertools.pairwise(ordered) if a == b})
    if dups:
        raise InvalidMembersError(
            f"duplicate member names {dups}: every member needs a unique id (e.g. the pod name)"
        )
    return ordered


def check_replicas(replicas: object, n_members: int | None = None) -> int:
    """Validate the number of backups; with ``n_members``, it must be < n_members."""
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise InvalidReplicasError(
            f"replicas must be an int (the number of backup owners), got {replicas!r}"
        )
    if replicas < 0:
        raise InvalidReplicasError(f"replicas must be >= 0, got {replicas}")
    if n_members is not None and replicas >= n_members:
        raise InvalidReplicasError(
            f"replicas={replicas} needs at least {replicas + 1} members but there are "
            f"{n_members}: lower replicas or add members"
        )
    return replicas


def check_weights(
    weights: Mapping[str, float] | None, members: tuple[str, ...]
) -> dict[str, float] | None:
    """Validate weights: every member needs a finite weight > 0; extra names are ignored."""
    if weights is None:
        return None
    if not isinstance(weights, Mapping):
        raise InvalidWeightsError(
            f"weights must be a mapping of member name to weight, got {type(weights).__name__}"
        )
    out: dict[str, float] = {}
    missing = [m for m in members if m not in weights]
    if missing:
        raise InvalidWeightsError(
            f"no weight for members {missing[:5]}: give every member a weight "
            "(or pass weights=None for equal weights)"
        )
    for m in members:
        w = weights[m]
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w <= 0:
            raise InvalidWeightsError(f"weight of {m!r} must be a finite number > 0, got {w!r}")
        out[m] = float(w)
    return out


def check_keys(keys: Iterable[str]) -> list[str]:
    """Validate planner keys: strings, no duplicates."""
    if isinstance(keys, str):
        raise InvalidKeyError(
            f"keys must be a collection of strings, got the single string {keys!r}; wrap it in a list"
        )
    listed = list(keys)
    for k in listed:
        if not isinstance(k, str):
            raise InvalidKeyError(
                f"keys must be strings, got {type(k).__name__} {k!r}; convert with str() "
                "or build lease keys as 'consumer/shard'"
            )
    if len(set(listed)) != len(listed):
        seen: set[str] = set()
        dups = sorted({k for k in listed if k in seen or seen.add(k)})  # type: ignore[func-returns-value]
        raise InvalidKeyError(f"duplicate keys {dups[:5]}: every key must appear once")
    return listed
