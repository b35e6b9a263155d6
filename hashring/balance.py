"""The balanced, sticky planner: every member computes the same assignment.

``plan_assignment(members, keys, current_owners)`` gives each member a quota of
floor(K/N) or ceil(K/N) keys (largest remainders when weighted). Which members
get the larger quota is deterministic and prefers members that already hold
more keys. A current owner that is still a member keeps its most preferred keys
up to its quota; every other key goes to the member with the highest
rendezvous score that is still under quota (keys taken in key-hash order).

Consequences, proven by property tests in ``tests/test_balance.py``:

* deterministic: the result depends on the sets of members and keys and on the
  current owners, not on input order;
* unweighted, the largest and smallest loads differ by at most one key;
* keys move only away from over-quota or departed members, and only as many as
  the quotas need: one join moves exactly the newcomer's quota, one leave
  moves exactly the leaver's keys;
* backups are the next members in rendezvous order, distinct from the primary.

Scoring is vectorised with NumPy (10,000 keys x 1,000 members in well under a
second, see ``benchmarks/bench_planner.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hashring.hashing import (
    member_hash,
    score_matrix,
    string_key_hash,
    weighted_score_matrix,
)
from hashring.validation import check_keys, check_members, check_replicas, check_weights


@dataclass(frozen=True)
class Assignment:
    """The result of :func:`plan_assignment`."""

    members: tuple[str, ...]
    """The sorted members the plan was made for."""
    owners: Mapping[str, tuple[str, ...]]
    """For each key: the primary owner, then the backups."""
    quotas: Mapping[str, int]
    """How many keys each member was allotted."""
    _by_member: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)

    def owner(self, key: str) -> str:
        """The primary owner of ``key``."""
        return self.owners[key][0]

    def backups(self, key: str) -> tuple[str, ...]:
        """The backups of ``key``, in takeover order."""
        return self.owners[key][1:]

    def keys_of(self, member: str) -> list[str]:
        """The keys ``member`` is primary for, sorted."""
        if not self._by_member:
            for key, owners in sorted(self.owners.items()):
                self._by_member.setdefault(owners[0], []).append(key)
        return list(self._by_member.get(member, []))

    def counts(self) -> dict[str, int]:
        """Number of primary keys per member (every member listed, zeros included)."""
        out = dict.fromkeys(self.members, 0)
        for owners in self.owners.values():
            out[owners[0]] += 1
        return out

    def moves_from(self, current_owners: Mapping[str, str | None]) -> int:
        """How many keys have a primary different from ``current_owners``."""
        return sum(1 for k, o in self.owners.items() if current_owners.get(k) != o[0])


def _quotas(
    members: tuple[str, ...],
    n_keys: int,
    held: Mapping[str, int],
    weights: Mapping[str, float] | None,
    mhash: Mapping[str, int],
) -> dict[str, int]:
    """floor/ceil quotas; ties go to members holding more, then by member hash."""
    if weights is None:
        base, extra = divmod(n_keys, len(members))
        exact = dict.fromkeys(members, float(base))
        floors = dict.fromkeys(members, base)
        frac = dict.fromkeys(members, 0.0)
    else:
        total = sum(weights.values())
        exact = {m: n_keys * weights[m] / total for m in members}
        floors = {m: int(exact[m]) for m in members}
        frac = {m: exact[m] - floors[m] for m in members}
        extra = n_keys - sum(floors.values())
    order = sorted(members, key=lambda m: (-frac[m], -held.get(m, 0), mhash[m], m))
    quotas = dict(floors)
    for m in order[:extra]:
        quotas[m] += 1
    return quotas


def plan_assignment(
    members: Iterable[str],
    keys: Iterable[str],
    current_owners: Mapping[str, str | None] | None = None,
    weights: Mapping[str, float] | None = None,
    *,
    replicas: int = 0,
) -> Assignment:
    """Plan a balanced, sticky assignment of ``keys`` to ``members``.

    ``current_owners`` maps keys to their present holder (holders that are not
    members, and keys not in ``keys``, are ignored). ``weights`` gives members
    proportional shares. ``replicas`` backups are named for every key.
    """
    ordered = check_members(members)
    key_list = check_keys(keys)
    check_replicas(replicas, len(ordered))
    w = check_weights(weights, ordered)
    current = dict(current_owners or {})
    n = len(ordered)
    if not key_list:
        return Assignment(ordered, {}, dict.fromkeys(ordered, 0))

    # Keys in hash order (ties by name): the processing order is part of the contract.
    hashed = sorted((string_key_hash(k), k) for k in key_list)
    sorted_keys = [k for _, k in hashed]
    khash = np.fromiter((h for h, _ in hashed), dtype=np.uint64, count=len(hashed))
    mh = {m: member_hash(m) for m in ordered}
    mhash = np.fromiter((mh[m] for m in ordered), dtype=np.uint64, count=n)
    index = {m: i for i, m in enumerate(ordered)}
    warr = None if w is None else np.array([w[m] for m in ordered], dtype=np.float64)

    # Current holdings of live members, in key order.
    held_rows: dict[str, list[int]] = {}
    for row, k in enumerate(sorted_keys):
        o = current.get(k)
        if o is not None and o in index:
            held_rows.setdefault(o, []).append(row)
    quotas = _quotas(ordered, len(sorted_keys), {m: len(r) for m, r in held_rows.items()}, w, mh)

    primary = np.full(len(sorted_keys), -1, dtype=np.int64)
    capacity = np.array([quotas[m] for m in ordered], dtype=np.int64)
    for m, rows in held_rows.items():
        j = index[m]
        rows_arr = np.array(rows, dtype=np.int64)
        # Keep the most preferred keys (highest score for this member) up to quota.
        own_scores = score_matrix(khash[rows_arr], mhash[j : j + 1])[:, 0]
        keep = rows_arr[np.argsort(own_scores, kind="stable")[::-1][: quotas[m]]]
        primary[keep] = j
        capacity[j] -= len(keep)

    free = np.flatnonzero(primary < 0)
    need_full = replicas > 0
    prefs: npt.NDArray[np.float64] | npt.NDArray[np.uint64] | None = None
    if len(free) or need_full:
        rows_for = np.arange(len(sorted_keys)) if need_full else free
        raw = score_matrix(khash[rows_for], mhash)
        prefs = raw if warr is None else weighted_score_matrix(raw, warr)
    if len(free):
        assert prefs is not None
        sub = prefs[free] if need_full else prefs
        sub = sub.copy()
        floor_value = 0 if warr is None else -np.inf
        sub[:, capacity <= 0] = floor_value
        for i, key_row in enumerate(free.tolist()):
            col = int(np.argmax(sub[i]))
            primary[key_row] = col
            capacity[col] -= 1
            if capacity[col] == 0:
                sub[i + 1 :, col] = floor_value

    owners: dict[str, tuple[str, ...]] = {}
    if need_full:
        assert prefs is not None
        width = replicas + 1
        top = np.argpartition(prefs, n - width, axis=1)[:, n - width :]
        top_scores = np.take_along_axis(prefs, top, axis=1)
        top = np.take_along_axis(top, np.argsort(top_scores, axis=1)[:, ::-1], axis=1)
        for row, k in enumerate(sorted_keys):
            p = int(primary[row])
            backs = [int(j) for j in top[row] if int(j) != p][:replicas]
            owners[k] = (ordered[p], *(ordered[j] for j in backs))
    else:
        for row, k in enumerate(sorted_keys):
            owners[k] = (ordered[int(primary[row])],)
    return Assignment(ordered, owners, quotas)
