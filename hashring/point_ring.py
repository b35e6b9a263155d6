"""The ring of member points the planners walk: a key's preference order over members.

Each member puts :data:`POINTS_PER_MEMBER` points on the 64-bit circle, point
``j`` (1-based) at ``fmix64(member_hash ^ (j * 0x9E3779B97F4A7C15 mod 2**64))``.
A key sits at its own hash; its preference order is the members met walking
clockwise (towards larger values, wrapping at 2**64) from there, each counted
once. Points are ordered by (value, member name), so equal values (never seen
in practice) still give one order.

Why a ring and not rendezvous over every member: a key's first choice is a
binary search (``log(N * points)``) instead of N hash evaluations, and "the
first member clockwise that still has room" is the same binary search over the
points of the members that still have room. Like rendezvous, a join or a leave
never reorders the other members in any key's preference order. Pure integer
arithmetic: every platform and process computes the same order.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hashring.hashing import MASK64, fmix64_array

POINTS_PER_MEMBER = 256
"""Points each member puts on the ring (part of the placement contract)."""
_GOLDEN = 0x9E3779B97F4A7C15
_SALTS = np.array([(j * _GOLDEN) & MASK64 for j in range(1, POINTS_PER_MEMBER + 1)],
                  dtype=np.uint64)
_WINDOW = 16

IntArray = npt.NDArray[np.int64]
U64Array = npt.NDArray[np.uint64]


def member_points(member_hashes: U64Array) -> U64Array:
    """The ring points of each member: shape (members, POINTS_PER_MEMBER)."""
    return fmix64_array(member_hashes[:, None] ^ _SALTS[None, :])


class PointRing:
    """The points of a sorted member list; members are referred to by index."""

    def __init__(self, member_hashes: U64Array):
        n = len(member_hashes)
        points = member_points(member_hashes).ravel()
        owner = np.repeat(np.arange(n, dtype=np.int64), POINTS_PER_MEMBER)
        order = np.argsort(points, kind="stable")  # equal values: member order (row-major)
        self.n = n
        self.points: U64Array = points[order]
        self.owner: IntArray = owner[order]

    def changed(self, old_to_new: IntArray, added: IntArray, added_hashes: U64Array
                ) -> PointRing | None:
        """This ring after a few members left or joined, without sorting it again.

        ``old_to_new`` maps each old member index to its new index (-1: left);
        ``added`` are the new indices of the joined members. None if a new point
        equals an existing one (then build the ring from scratch).
        """
        n = int(max(old_to_new.max(initial=-1), added.max(initial=-1))) + 1
        owner = old_to_new[self.owner]
        points = self.points
        if bool((old_to_new < 0).any()):
            stay = owner >= 0
            points, owner = points[stay], owner[stay]
        if len(added):
            new_points = member_points(added_hashes).ravel()
            new_owner = np.repeat(added, POINTS_PER_MEMBER)
            order = np.argsort(new_points, kind="stable")
            new_points, new_owner = new_points[order], new_owner[order]
            left = np.searchsorted(points, new_points, side="left")
            if bool((left != np.searchsorted(points, new_points, side="right")).any()) or bool(
                (new_points[1:] == new_points[:-1]).any()
            ):
                return None
            points = np.insert(points, left, new_points)
            owner = np.insert(owner, left, new_owner)
        ring = PointRing.__new__(PointRing)
        ring.n, ring.points, ring.owner = n, points, owner
        return ring

    def first(self, key_points: U64Array, open_members: npt.NDArray[np.bool_] | None = None
              ) -> IntArray:
        """Each key's first member clockwise, among ``open_members`` if given (not all False)."""
        points, owner = self.points, self.owner
        if open_members is not None and not bool(open_members.all()):
            keep = open_members[owner]
            points, owner = points[keep], owner[keep]
        idx = np.searchsorted(points, key_points, side="left")
        idx[idx == len(points)] = 0
        result: IntArray = owner[idx]
        return result

    def walk(self, key_points: U64Array, count: int) -> IntArray:
        """Each key's first ``count`` distinct members clockwise: shape (keys, count)."""
        count = min(count, self.n)
        out = np.empty((len(key_points), count), dtype=np.int64)
        if len(key_points) == 0 or count == 0:
            return out
        total = len(self.points)
        start = np.searchsorted(self.points, key_points, side="left")
        width = min(total, _WINDOW + 4 * count)
        pending = np.arange(len(key_points))
        while len(pending):
            cols = (start[pending, None] + np.arange(width)[None, :]) % total
            seen = self.owner[cols]
            done = np.ones(len(pending), dtype=bool)
            taken = np.zeros((len(pending), count), dtype=np.int64)
            mask = np.ones_like(seen, dtype=bool)
            for c in range(count):
                has = mask.any(axis=1)
                pos = np.argmax(mask, axis=1)
                pick = seen[np.arange(len(pending)), pos]
                taken[:, c] = pick
                done &= has
                mask &= seen != pick[:, None]
            out[pending[done]] = taken[done]
            pending = pending[~done]
            if width == total:
                break
            width = min(total, width * 4)
        return out
