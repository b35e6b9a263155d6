"""The balanced, sticky planner: every member computes the same assignment.

``plan_assignment(members, keys, current_owners)`` gives each member a quota of
floor(K/N) or ceil(K/N) keys (largest remainders when weighted). Which members
get the larger quota is deterministic and prefers members that already hold
more keys. A current owner that is still a member keeps its most preferred keys
(highest rendezvous score ``fmix64(key_hash ^ member_hash)``) up to its quota;
every other key goes to the first member with room on its walk around the ring
of member points (:mod:`hashring.point_ring`). The free keys are placed in
rounds: each goes to the first member clockwise that still has room; a member
offered more keys than it has room for takes those first in key-hash order,
and the others walk on in the next round.

Consequences, proven by property tests in ``tests/hashring/test_balance.py``:

* deterministic: the result depends on the sets of members and keys and on the
  current owners, not on input order (pure integer hashing);
* unweighted, the largest and smallest loads differ by at most one key;
* keys move only away from over-quota or departed members, and only as many as
  the quotas need: one join moves exactly the newcomer's quota, one leave
  moves exactly the leaver's keys;
* backups are the next distinct members clockwise on the ring, never the primary.

Cost (``benchmarks/bench_planner.py``): no keys x members matrix. Placing a
key is a binary search over the points of the members that still have room,
so a fresh plan of 100,000 keys x 10,000 members takes about a second and
1,000,000 x 10,000 about ten; a call with the same inputs as one of the last
few returns the cached :class:`Assignment`.

This is placement version 2 (:data:`PLACEMENT_VERSION`; docs/placement-design.md says what
changed from version 1). Sticky keys never move between versions; free keys and backups
may be placed differently.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from threading import Lock
from types import MappingProxyType

import mmh3
import numpy as np
import numpy.typing as npt

from hashring.hashing import KEY_SEED, fmix64_array, member_hash
from hashring.point_ring import PointRing
from hashring.validation import check_keys, check_members, check_replicas, check_weights

PLACEMENT_VERSION = 2
"""Bumped whenever the planners place the same inputs differently (see README)."""

IntArray = npt.NDArray[np.int64]
U64Array = npt.NDArray[np.uint64]


@dataclass(frozen=True)
class Assignment:
    """The result of :func:`plan_assignment` or :func:`hashring.stable_assignment`."""

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
        if not self._by_member:  # built aside: a cached plan may be shared between threads
            built: dict[str, list[str]] = {}
            for key, owners in sorted(self.owners.items()):
                built.setdefault(owners[0], []).append(key)
            self._by_member.update(built)
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


# --- the shared machinery of both planners ---------------------------------------------


@dataclass(frozen=True)
class Fleet:
    """Sorted members, their hashes and their ring (cached per member list)."""

    members: tuple[str, ...]
    hashes: U64Array
    ring: PointRing
    index: dict[str, int]


@dataclass(frozen=True)
class KeySet:
    """Keys in processing order (key hash, then name) and their hashes."""

    keys: list[str]
    hashes: U64Array


_CACHE_SIZE = 4
_CACHE_KEYS = 2_000_000
_NEAR = 4
"""Member lists at most this many joins + leaves apart update a cached ring."""
_fleets: OrderedDict[tuple[str, ...], Fleet] = OrderedDict()
_plans: OrderedDict[Hashable, tuple[tuple[object, ...], Assignment]] = OrderedDict()
_key_sets: OrderedDict[Hashable, tuple[object, KeySet]] = OrderedDict()
_cache_lock = Lock()


def fleet_of(ordered: tuple[str, ...]) -> Fleet:
    """The :class:`Fleet` of a sorted, validated member tuple (small LRU cache; a
    member list a few members away from a cached one updates that one's ring)."""
    with _cache_lock:
        found = _fleets.get(ordered)
        if found is not None:
            _fleets.move_to_end(ordered)
            return found
        recent = list(_fleets.values())
    index = {m: i for i, m in enumerate(ordered)}
    near = None
    for old in reversed(recent):
        joined = [index[m] for m in ordered if m not in old.index]
        if len(joined) + len(old.members) - (len(ordered) - len(joined)) <= _NEAR:
            near = old
            break
    if near is None:
        hashes = np.fromiter((member_hash(m) for m in ordered), dtype=np.uint64,
                             count=len(ordered))
        ring = None
    else:
        known = near.hashes.tolist()
        hashes = np.fromiter(
            (known[near.index[m]] if m in near.index else member_hash(m) for m in ordered),
            dtype=np.uint64, count=len(ordered))
        old_to_new = np.array([index.get(m, -1) for m in near.members], dtype=np.int64)
        added = np.array(joined, dtype=np.int64)
        ring = near.ring.changed(old_to_new, added, hashes[added])
    fleet = Fleet(ordered, hashes, ring if ring is not None else PointRing(hashes), index)
    with _cache_lock:
        _fleets[ordered] = fleet
        while len(_fleets) > _CACHE_SIZE:
            _fleets.popitem(last=False)
    return fleet


def key_set(keys: Iterable[str]) -> KeySet:
    """Validate and hash the keys, in processing order (hash, then name on equal
    hashes); the last few key sets are cached."""
    try:
        fingerprint: Hashable = _fingerprint(keys)
    except TypeError:
        fingerprint = None
    if fingerprint is not None:
        with _cache_lock:
            hit = _key_sets.get(fingerprint)
            if hit is not None:
                _key_sets.move_to_end(fingerprint)
                return hit[1]
    key_list = check_keys(keys)
    raw = np.fromiter(
        (mmh3.hash64(k.encode("utf-8"), seed=KEY_SEED, x64arch=True, signed=False)[0]
         for k in key_list),
        dtype=np.uint64, count=len(key_list),
    )
    order = np.argsort(raw, kind="stable")
    hashes = raw[order]
    ordered = [key_list[i] for i in order.tolist()]
    if len(hashes) > 1 and bool((hashes[1:] == hashes[:-1]).any()):
        # Equal 64-bit hashes (practically never): those keys go in name order.
        ordered = [k for _, k in sorted(zip(hashes.tolist(), ordered, strict=True))]
    result = KeySet(ordered, hashes)
    if fingerprint is not None:
        with _cache_lock:
            _key_sets[fingerprint] = (keys, result)
            while len(_key_sets) > _CACHE_SIZE:
                _key_sets.popitem(last=False)
    return result


def quotas_for(
    members: tuple[str, ...],
    n_keys: int,
    held: IntArray,
    weights: Mapping[str, float] | None,
    hashes: U64Array,
) -> IntArray:
    """floor/ceil quotas; the extra keys go to the largest remainders, then to members
    holding more, then by member hash and name."""
    n = len(members)
    if weights is None:
        base, extra = divmod(n_keys, n)
        floors = np.full(n, base, dtype=np.int64)
        frac = [0.0] * n
    else:
        total = sum(weights.values())
        exact = [n_keys * weights[m] / total for m in members]
        floors = np.array([int(x) for x in exact], dtype=np.int64)
        frac = [x - int(x) for x in exact]
        extra = n_keys - int(floors.sum())
    if extra == 0:
        return floors
    if weights is None:
        # Members are sorted by name already: lexsort is stable, so name breaks the last ties.
        order = np.lexsort((hashes, -held))
    else:
        hs = hashes.tolist()
        order = np.array(sorted(range(n), key=lambda i: (-frac[i], -int(held[i]), hs[i], i)),
                         dtype=np.int64)
    quotas = floors.copy()
    quotas[order[:extra]] += 1
    return quotas


def keep_preferred(held_by: IntArray, khash: U64Array, mhash: U64Array, quotas: IntArray
                   ) -> IntArray:
    """Primary per key: each holder keeps its highest-scoring held keys up to its quota."""
    primary = np.full(len(held_by), -1, dtype=np.int64)
    rows = np.flatnonzero(held_by >= 0)
    if len(rows):
        who = held_by[rows]
        scores = fmix64_array(khash[rows] ^ mhash[who])
        order = np.lexsort((~scores, who))  # by holder, best score first
        who_sorted = who[order]
        rank = np.arange(len(order)) - np.searchsorted(who_sorted, who_sorted, side="left")
        keep = order[rank < quotas[who_sorted]]
        primary[rows[keep]] = who[keep]
    return primary


def fill(ring: PointRing, khash: U64Array, primary: IntArray, capacity: IntArray) -> IntArray:
    """Give every key with ``primary < 0`` the first member clockwise with room (in rounds)."""
    capacity = capacity.copy()
    rows = np.flatnonzero(primary < 0)
    while len(rows):
        target = ring.first(khash[rows], capacity > 0)
        order = np.argsort(target, kind="stable")  # by member, then key order
        t_sorted = target[order]
        rank = np.arange(len(order)) - np.searchsorted(t_sorted, t_sorted, side="left")
        ok = rank < capacity[t_sorted]
        primary[rows[order[ok]]] = t_sorted[ok]
        capacity -= np.bincount(t_sorted[ok], minlength=len(capacity))
        rows = np.sort(rows[order[~ok]])
    return primary


def with_backups(fleet: Fleet, keys: KeySet, primary: IntArray, replicas: int,
                 quotas: IntArray) -> Assignment:
    """Build the :class:`Assignment`: backups are the next distinct members clockwise."""
    names = np.array(fleet.members, dtype=object)
    columns = [names[primary]]
    if replicas:
        walk = fleet.ring.walk(keys.hashes, replicas + 1)
        # The first `replicas` members of each walk that are not the primary.
        first = np.argsort(walk == primary[:, None], axis=1, kind="stable")[:, :replicas]
        backups = np.take_along_axis(walk, first, axis=1)
        columns += [names[backups[:, j]] for j in range(replicas)]
    owners = dict(zip(keys.keys, zip(*columns, strict=True), strict=True))
    quota_map = dict(zip(fleet.members, quotas.tolist(), strict=True))
    return Assignment(fleet.members, MappingProxyType(owners), MappingProxyType(quota_map))


def prepared(
    members: Iterable[str], keys: Iterable[str], weights: Mapping[str, float] | None, replicas: int
) -> tuple[Fleet, KeySet, dict[str, float] | None]:
    """Validate the inputs both planners share; (the members' ring, the keys, the weights)."""
    ordered = check_members(members)
    ks = key_set(keys)
    check_replicas(replicas, len(ordered))
    return fleet_of(ordered), ks, check_weights(weights, ordered)


def balance_from(fleet: Fleet, keys: KeySet, held_by: IntArray,
                 weights: Mapping[str, float] | None, replicas: int) -> Assignment:
    """Quotas, then holders keep their preferred keys, then the rest walk the ring."""
    n = len(fleet.members)
    held = np.bincount(held_by[held_by >= 0], minlength=n).astype(np.int64)
    quotas = quotas_for(fleet.members, len(keys.keys), held, weights, fleet.hashes)
    primary = keep_preferred(held_by, keys.hashes, fleet.hashes, quotas)
    capacity = quotas - np.bincount(primary[primary >= 0], minlength=n)
    primary = fill(fleet.ring, keys.hashes, primary, capacity)
    return with_backups(fleet, keys, primary, replicas, quotas)


def _fingerprint(obj: object) -> Hashable:
    """O(1) identity for tuples and frozensets (kept alive by the cache), else a
    C-speed hash of the content."""
    if obj is None or isinstance(obj, int):
        return obj
    if not isinstance(obj, Collection):
        raise TypeError("an iterator has no fingerprint")
    if isinstance(obj, tuple | frozenset):
        return ("id", id(obj))
    if isinstance(obj, Mapping):
        return ("map", type(obj), len(obj), frozenset(obj.items()))
    return ("set", type(obj), len(obj), frozenset(obj))


def collected(items: Iterable[str]) -> Iterable[str]:
    """``items`` itself if it can be read twice, else its items in a list."""
    return items if isinstance(items, Collection) else list(items)


def cached(kind: str, *inputs: object) -> tuple[Hashable | None, Assignment | None]:
    """(cache key, cached plan) for these inputs; key None if they are not hashable."""
    try:
        key: Hashable = (kind, *(_fingerprint(x) for x in inputs))
    except TypeError:
        return None, None
    with _cache_lock:
        hit = _plans.get(key)
        if hit is not None:
            _plans.move_to_end(key)
            return key, hit[1]
    return key, None


def remember(key: Hashable | None, inputs: tuple[object, ...], plan: Assignment) -> None:
    """Cache ``plan`` (the inputs are kept alive so that identities stay valid); the
    oldest plans go first beyond :data:`_CACHE_SIZE` plans or :data:`_CACHE_KEYS` keys."""
    if key is None:
        return
    with _cache_lock:
        _plans[key] = (inputs, plan)
        _plans.move_to_end(key)
        while len(_plans) > 1 and (
            len(_plans) > _CACHE_SIZE
            or sum(len(p.owners) for _, p in _plans.values()) > _CACHE_KEYS
        ):
            _plans.popitem(last=False)


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
    members, keys = collected(members), collected(keys)
    inputs = (members, keys, current_owners, weights, replicas)
    cache_key, hit = cached("plan", *inputs)
    if hit is not None:
        return hit
    fleet, ks, w = prepared(members, keys, weights, replicas)
    held_by = np.full(len(ks.keys), -1, dtype=np.int64)
    if current_owners:
        lookup: defaultdict[str | None, int] = defaultdict(lambda: -1)
        lookup.update(fleet.index)
        holders = map(current_owners.get, ks.keys)
        held_by = np.fromiter(map(lookup.__getitem__, holders), dtype=np.int64,
                              count=len(ks.keys))
    plan = balance_from(fleet, ks, held_by, w, replicas)
    remember(cache_key, inputs, plan)
    return plan
