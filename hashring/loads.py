"""Load-aware placement: keys weigh what they cost, members carry what their capacity allows.

``balance_loads(members, keys, current_owners, loads, weights)`` is
:func:`hashring.plan_assignment` for skewed streams. ``loads`` maps keys to a measured load
(records/s, bytes/s or processor seconds/s: any non-negative number, in one unit); ``weights``
gives members capacities (equal by default), as in the count planner.

* **Weights.** A measured key weighs its load, an unmeasured one the median of the measured
  ones, and no key less than :data:`MIN_KEY_SHARE` of their mean (an idle shard still costs a
  poll loop). Without loads, or with every weight equal, the plan *is* ``plan_assignment``'s
  (max - min <= 1 on counts), so a fleet that measures nothing places keys exactly as before.
* **Fair shares.** Member ``m``'s fair share is ``capacity(m) x level``, the level being the
  load per unit of capacity once every *hot* key (one heavier than the fair share of the
  largest member left for it) has a member to itself: water-filling, heaviest key first.
  :func:`load_report` names the hot keys (the SDK logs them and suggests a split).
* **Sticky.** Current owners keep their keys; free keys (new, or held by a member that left)
  go heaviest first to the member whose share they fill least. Keys then move only to repair
  members *out of tolerance*: holding two keys or more above ``(1 + tolerance)`` x the fair
  share, or any below ``(1 - tolerance)`` x (a newcomer: it gets its share at once, by load).
  A repaired member is brought within half the tolerance (so it does not sit at the edge);
  members within tolerance are left alone, so noise under the tolerance moves nothing.
* **Greedy, each move the best.** The busiest giver gives the key that leaves the pair's
  larger share smallest to the least loaded member of each capacity class; a move is made
  only if that strictly lowers the busier of the two, so the sorted vector of shares falls
  and the loop ends.
* **Idempotent and deterministic.** A plan made from its own output, with the same loads,
  moves nothing; the result depends only on the sets of members and keys, the owners, the
  loads and the capacities (integer hashes break ties; every float is computed in one order),
  so members that plan from the same published baseline and loads make the same plan.

Cost (``benchmarks/bench_load_balance.py``): O(K log N) for free keys plus, per move, a scan of
the giver's keys; 100,000 Zipf-weighted keys over 10,000 members plan in seconds.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
from sortedcontainers import SortedList

from hashring.balance import (
    Assignment,
    Fleet,
    KeySet,
    collected,
    plan_assignment,
    prepared,
    with_backups,
)
from hashring.errors import InvalidLoadsError
from hashring.validation import check_weights

DEFAULT_TOLERANCE = 0.2
"""Keys move only while a member is above ``1 + tolerance`` (or below ``1 - tolerance``)
times its fair share."""
MIN_KEY_SHARE = 0.05
"""No key weighs less than this share of the mean measured load."""
SCALE = 2**40
"""The planner's integer weights sum to about this (exact sums: any order gives the same)."""
MARGIN = 1e-9
"""A move must lower the busier share by more than this fraction of it."""


def check_tolerance(tolerance: object) -> float:
    """``tolerance`` as a float in (0, 1); :class:`InvalidLoadsError` otherwise."""
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) \
            or not math.isfinite(tolerance) or not 0 < tolerance < 1:
        raise InvalidLoadsError(
            f"tolerance must be a number between 0 and 1 (0.2: keys move only while a member "
            f"is 20% above or below its fair share), got {tolerance!r}")
    return float(tolerance)


def key_weights(keys: Iterable[str], loads: Mapping[str, float] | None) -> list[float] | None:
    """Each key's weight, in ``keys``' order (see the module docs); None when no key is
    measured or every weight is equal (then counts balance, exactly as without loads)."""
    if loads is None:
        return None
    if not isinstance(loads, Mapping):
        raise InvalidLoadsError(
            f"loads must be a mapping of key to its measured load, got {type(loads).__name__}")
    keys = list(keys)
    measured: list[float] = []
    for k in keys:
        if k in loads:
            v = loads[k]
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise InvalidLoadsError(
                    f"the load of {k!r} must be a finite number >= 0, got {v!r}: "
                    "measure records/s, bytes/s or processor seconds/s")
            measured.append(float(v))
    if not measured:
        return None
    mean = math.fsum(measured) / len(measured)
    if mean <= 0:
        return None  # nothing moves: every measured key is idle
    floor, median = MIN_KEY_SHARE * mean, float(statistics.median(measured))
    out = [max(float(loads[k]), floor) if k in loads else max(median, floor) for k in keys]
    return None if min(out) == max(out) else out


def fair_level(weights: Sequence[float], capacities: Sequence[float]) -> tuple[float, int]:
    """(level, hot keys): the load per unit of capacity of the members left once each key
    heavier than the fair share of the largest member left has a member to itself
    (water-filling, heaviest key first; at least one member is always left). Computed on
    the planner's integer weights (:func:`integer_weights`), so what is left is an exact
    difference, never a rounding residue."""
    ints, unit = integer_weights(weights)
    level, hot = _fair_level(ints, capacities)
    return level * unit, hot


def integer_weights(weights: Sequence[float]) -> tuple[list[int], float]:
    """Each weight scaled to an integer (all summing to about :data:`SCALE`; none below 1),
    and what one integer unit weighs: sums of them are the same in any order."""
    total = math.fsum(weights)
    if total <= 0:
        return [1] * len(weights), 0.0
    return [max(1, round(w / total * SCALE)) for w in weights], total / SCALE


def _fair_level(weights: Sequence[int], capacities: Sequence[float]) -> tuple[float, int]:
    ranked = sorted(weights, reverse=True)
    caps = sorted(capacities, reverse=True)
    total_w, total_c = sum(ranked), math.fsum(caps)
    used_w, used_c, hot = 0, 0.0, 0  # weights (exact) and capacities of the members given a hot key
    while hot < min(len(ranked), len(caps) - 1):
        rest_c = total_c - used_c
        if ranked[hot] * rest_c <= caps[hot] * (total_w - used_w):
            break
        used_w += ranked[hot]
        used_c += caps[hot]
        hot += 1
    rest_w, rest_c = total_w - used_w, total_c - used_c
    if rest_w <= 0:  # no more keys than hot ones: the lightest hot key sets the level
        return ranked[hot - 1] / caps[hot - 1], hot
    return rest_w / rest_c, hot


@dataclass(frozen=True)
class LoadReport:
    """How a plan spreads load: what :func:`load_report` returns."""

    member_loads: Mapping[str, float]
    """Each member's load (the sum of its keys' weights)."""
    fair_shares: Mapping[str, float]
    """What each member should carry: its capacity times the fair level."""
    hot_keys: tuple[str, ...]
    """Keys heavier than the fair share of the largest member left for them, heaviest
    first: each needs a member to itself, and splitting the shard would spread it."""
    member_keys: Mapping[str, int]
    """How many keys each member holds."""
    hot_shares: Mapping[str, float] = field(default_factory=dict)
    """Each hot key's weight over the fair share of the largest member."""

    def busiest(self) -> float:
        """The largest load / fair share over the members holding two keys or more (a
        member alone with one key cannot be relieved by any placement): 1.0 is perfect."""
        return max((self.member_loads[m] / f for m, f in self.fair_shares.items()
                    if self.member_keys[m] >= 2), default=0.0)


def load_report(plan: Assignment, loads: Mapping[str, float] | None,
                weights: Mapping[str, float] | None = None) -> LoadReport | None:
    """Each member's load and fair share under ``plan``, and the hot keys; None without
    loads (or with every weight equal: counts are the measure then)."""
    keys = list(plan.owners)
    w = key_weights(keys, loads)
    if w is None:
        return None
    checked = check_weights(weights, plan.members)
    caps = [checked[m] if checked is not None else 1.0 for m in plan.members]
    level, hot = fair_level(w, caps)
    member_loads = dict.fromkeys(plan.members, 0.0)
    for k, wk in zip(keys, w, strict=True):
        member_loads[plan.owners[k][0]] += wk
    by_weight = sorted(zip(w, keys, strict=True), key=lambda p: (-p[0], p[1]))
    largest = max(caps) * level
    return LoadReport(MappingProxyType(member_loads),
                      MappingProxyType({m: c * level for m, c in zip(plan.members, caps, strict=True)}),
                      tuple(k for _, k in by_weight[:hot]), MappingProxyType(plan.counts()),
                      MappingProxyType({k: wk / largest for wk, k in by_weight[:hot]}))


def balance_loads(
    members: Iterable[str],
    keys: Iterable[str],
    current_owners: Mapping[str, str | None] | None = None,
    loads: Mapping[str, float] | None = None,
    weights: Mapping[str, float] | None = None,
    *,
    replicas: int = 0,
    tolerance: float = DEFAULT_TOLERANCE,
) -> Assignment:
    """Plan an assignment of ``keys`` to ``members`` that balances ``loads`` (see the module
    docs); ``Assignment.quotas`` holds the key counts. Without loads, ``plan_assignment``."""
    members, keys = collected(members), collected(keys)
    tol = check_tolerance(tolerance)
    fleet, ks, caps = prepared(members, keys, weights, replicas)
    w = key_weights(ks.keys, loads)
    if w is None:
        return plan_assignment(members, keys, current_owners, weights, replicas=replicas)
    capacities = [caps[m] for m in fleet.members] if caps is not None else [1.0] * len(fleet.members)
    primary = np.array(_Balancer(fleet, ks, w, capacities, current_owners or {}, tol).run(), dtype=np.int64)
    counts = np.bincount(primary, minlength=len(fleet.members)).astype(np.int64)
    return with_backups(fleet, ks, primary, replicas, counts)


class _Balancer:
    """One planning run: member loads, heaps of givers and of takers, the greedy moves.

    Weights are integers (each key's weight scaled so that all of them sum to about 2**40),
    so a member's load is the same whatever order its keys came and went in: a plan made
    from this run's output computes the very loads this run ended with, and a move is made
    only if it lowers the busier share by more than :data:`MARGIN` (an exact mirror swap,
    or a rounding, never counts as a gain). Each member's keys are kept sorted by weight, so
    the best key to move is found by bisection next to the weight that would even the pair."""

    def __init__(self, fleet: Fleet, ks: KeySet, weights: list[float], capacities: list[float],
                 current: Mapping[str, str | None], tol: float):
        w, _ = integer_weights(weights)
        self.w = w
        self.tol = tol
        level, _ = _fair_level(w, capacities)
        self.fair = [c * level for c in capacities]
        self.ties = [int(h) for h in fleet.hashes.tolist()]
        n = len(fleet.members)
        self.load = [0] * n
        self.held: list[SortedList] = [SortedList() for _ in range(n)]  # (weight, key index)
        self.stamp = [0] * n
        self.owner = [-1] * len(ks.keys)
        index = fleet.index
        free = []
        for j, k in enumerate(ks.keys):
            i = index.get(current.get(k) or "", -1)
            if i < 0:
                free.append(j)
            else:
                self._give(j, i)
        # takers: one heap per capacity class, least loaded first
        classes = sorted(set(capacities), reverse=True)
        self.class_of = [classes.index(c) for c in capacities]
        self.takers: list[list[tuple[int, int, int, int]]] = [[] for _ in classes]
        for i in range(n):
            self._push_taker(i)
        free.sort(key=lambda j: (-w[j], j))  # heaviest first; key-hash order breaks ties
        for j in free:
            self._place(j)

    def _give(self, j: int, i: int) -> None:
        self.owner[j] = i
        self.held[i].add((self.w[j], j))
        self.load[i] += self.w[j]
        self.stamp[i] += 1

    def _take(self, j: int, i: int) -> None:
        self.held[i].remove((self.w[j], j))
        self.load[i] -= self.w[j]
        self.stamp[i] += 1

    def _push_taker(self, i: int) -> None:
        heapq.heappush(self.takers[self.class_of[i]], (self.load[i], self.ties[i], i, self.stamp[i]))

    def _top(self, c: int, skip: int = -1) -> int:
        """The least loaded member of class ``c`` (stale entries dropped), other than ``skip``
        (-1 if ``skip`` is the least loaded: nobody in its class is lighter)."""
        heap = self.takers[c]
        while heap and heap[0][3] != self.stamp[heap[0][2]]:
            heapq.heappop(heap)
        if not heap or heap[0][2] == skip:
            return -1
        return heap[0][2]

    def ratio(self, i: int) -> float:
        return self.load[i] / self.fair[i]

    def _place(self, j: int) -> None:
        """A free key goes to the member whose share it fills least."""
        best, best_r = -1, math.inf
        for c in range(len(self.takers)):
            i = self._top(c)
            if i >= 0 and (r := (self.load[i] + self.w[j]) / self.fair[i]) < best_r:
                best, best_r = i, r
        self._give(j, best)
        self._push_taker(best)

    def _lightest(self) -> int:
        """The member with the smallest share (ties: the first capacity class)."""
        best, best_r = -1, math.inf
        for c in range(len(self.takers)):
            i = self._top(c)
            if i >= 0 and self.ratio(i) < best_r:
                best, best_r = i, self.ratio(i)
        return best

    def _out_of_tolerance(self, i: int) -> bool:
        """Above ``1 + tolerance`` with two keys or more, or below ``1 - tolerance``."""
        r = self.ratio(i)
        return (r > 1 + self.tol and len(self.held[i]) >= 2) or r < 1 - self.tol

    def _best_move(self, b: int) -> tuple[int, int] | None:
        """(key, taker) whose move from ``b`` leaves the larger of the two shares smallest,
        if that is below ``b``'s share now by more than :data:`MARGIN`. The larger share is
        smallest for the key nearest the weight that evens the pair, so only the keys next
        to it (the lightest key of each weight) are tried."""
        rb, fb, lb = self.ratio(b), self.fair[b], self.load[b]
        held = self.held[b]
        best: tuple[float, int, int] | None = None
        for c in range(len(self.takers)):
            t = self._top(c, skip=b)
            if t < 0:
                continue
            lt, ft = self.load[t], self.fair[t]
            even = (lb * ft - lt * fb) / (fb + ft)  # the weight that leaves both shares equal
            at = held.bisect_left((math.ceil(even), -1))
            for pos in (at, at - 1):
                if not 0 <= pos < len(held):
                    continue
                wj = held[pos][0]
                wj, j = held[held.bisect_left((wj, -1))]  # the first key of that weight
                after = max((lb - wj) / fb, (lt + wj) / ft)
                if after < rb * (1 - MARGIN) and (best is None or (after, j) < best[:2]):
                    best = (after, j, t)
        return None if best is None else (best[1], best[2])

    def run(self) -> list[int]:
        """The greedy moves (see the module docs); the owner index of every key."""
        flagged = {i for i in range(len(self.load)) if self._out_of_tolerance(i)}
        if flagged:
            self._rebalance(flagged)
        return self.owner

    def _rebalance(self, flagged: set[int]) -> None:
        """Members out of tolerance (``flagged``, and any that fall out on the way) are
        repaired to within half of it: a flagged giver gives while above ``1 + tol/2``, the
        lightest member takes while flagged and below ``1 - tol/2``. Others are left alone,
        so a plan within tolerance moves nothing, and the plan made from this one's output
        finds every member in tolerance or none of these moves possible."""
        hi, lo = 1 + self.tol / 2, 1 - self.tol / 2
        givers = [(-self.ratio(i), self.ties[i], i, self.stamp[i]) for i in range(len(self.load)) if self.held[i]]
        heapq.heapify(givers)
        waiting: list[int] = []  # givers with nothing to do, or no move that helps, for now
        while givers:
            _, _, b, stamp = heapq.heappop(givers)
            if stamp != self.stamp[b]:
                continue
            lightest = self._lightest()
            if not ((b in flagged and self.ratio(b) > hi)
                    or (lightest in flagged and self.ratio(lightest) < lo)):
                waiting.append(b)
                continue
            move = self._best_move(b)
            if move is None:
                waiting.append(b)
                continue
            j, t = move
            lighter = self.load[b] - self.w[j]
            top = self._top(self.class_of[b])
            released = lighter < self.load[top]  # b is its class's lightest: fits get easier
            self._take(j, b)
            self._give(j, t)
            for i in (b, t):
                self._push_taker(i)
                if self._out_of_tolerance(i):
                    released |= i not in flagged  # a new repair: every giver may help
                    flagged.add(i)
                if self.held[i]:
                    heapq.heappush(givers, (-self.ratio(i), self.ties[i], i, self.stamp[i]))
            if released:
                for i in waiting:
                    heapq.heappush(givers, (-self.ratio(i), self.ties[i], i, self.stamp[i]))
                waiting.clear()
