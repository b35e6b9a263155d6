"""A ketama hash ring: a comparison baseline for the simulator, not a public strategy.

Classic libketama ("consistent hashing with virtual nodes"), as memcached
clients and many lease balancers use it:

* each member gets ``vnodes`` points on a 32-bit circle: the MD5 digest of
  ``"<member>-<i>"`` for ``i = 0, 1, ...`` yields four little-endian 32-bit
  points per digest (160 points per member by default, as in libketama);
* a key's point is the first four bytes (little-endian) of the MD5 digest of
  the pinned key encoding :func:`hashring.hashing.key_bytes`;
* the owner is the member of the first point clockwise (``>=`` the key's
  point), wrapping around; equal points are ordered by member name.

Lookups are vectorised with :func:`numpy.searchsorted`. Ketama moves only the
newcomer's keys on a join and only the leaver's keys on a leave, but its loads
are uneven (its ranges are sums of ``vnodes`` random arcs), which is what the
simulator shows against the balanced planner.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from hashring.errors import ConfigurationError
from hashring.hashing import key_bytes
from hashring.validation import check_members

DEFAULT_VNODES = 160


def _md5(data: bytes) -> bytes:
    return hashlib.md5(data, usedforsecurity=False).digest()


def ketama_point(data: bytes) -> int:
    """The ketama point (32-bit, little-endian MD5 prefix) of raw key bytes."""
    return int.from_bytes(_md5(data)[:4], "little")


def ketama_key_points(consumer: str, shards: Iterable[str]) -> npt.NDArray[np.int64]:
    """Ketama points of the (consumer, shard) keys, in the order given."""
    return np.fromiter(
        (ketama_point(key_bytes(consumer, s)) for s in shards), dtype=np.int64
    )


def member_points(member: str, vnodes: int) -> list[int]:
    """The ``vnodes`` points of one member on the 32-bit circle."""
    points: list[int] = []
    i = 0
    while len(points) < vnodes:
        digest = _md5(f"{member}-{i}".encode())
        points.extend(int.from_bytes(digest[j : j + 4], "little") for j in (0, 4, 8, 12))
        i += 1
    return points[:vnodes]


def check_vnodes(vnodes: object) -> int:
    """Validate the number of virtual nodes per member."""
    if isinstance(vnodes, bool) or not isinstance(vnodes, int) or vnodes < 1:
        raise ConfigurationError(
            f"vnodes must be a positive int (virtual nodes per member), got {vnodes!r}; "
            f"libketama uses {DEFAULT_VNODES}"
        )
    return vnodes


class KetamaRing:
    """A ketama ring over a member list (members are sorted; names must be unique)."""

    def __init__(self, members: Sequence[str], vnodes: int = DEFAULT_VNODES):
        self.vnodes = check_vnodes(vnodes)
        self.members = check_members(members)
        pts: list[int] = []
        owner: list[int] = []
        for i, m in enumerate(self.members):
            pts.extend(member_points(m, vnodes))
            owner.extend([i] * vnodes)
        pts_arr = np.array(pts, dtype=np.int64)
        owner_arr = np.array(owner, dtype=np.int64)
        order = np.lexsort((owner_arr, pts_arr))  # by point, then member index
        self._points = pts_arr[order]
        self._owner = owner_arr[order]

    def owner_indices(self, key_points: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Index (into :attr:`members`) of the owner of each key point."""
        idx = np.searchsorted(self._points, key_points, side="left")
        idx[idx == len(self._points)] = 0
        result: npt.NDArray[np.int64] = self._owner[idx]
        return result

    def owner(self, consumer: str, shard: str) -> str:
        """The owner of one (consumer, shard) key."""
        point = np.array([ketama_point(key_bytes(consumer, shard))], dtype=np.int64)
        return self.members[int(self.owner_indices(point)[0])]
