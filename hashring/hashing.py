"""Stable 64-bit hashing of keys and members: part of the public contract.

Encoding (pinned by ``tests/data/golden_vectors.json``; never change it
without a major release):

* ``key_hash(consumer, shard)``: the bytes ``u32be(len(c)) + c + s`` where
  ``c`` and ``s`` are the UTF-8 encodings of the consumer name and the shard id
  (the length prefix makes the pair unambiguous whatever characters the names
  hold). The hash is the first 64-bit word of MurmurHash3_x64_128 with seed 0,
  read as an unsigned integer (``mmh3.hash64(data, seed=0, x64arch=True, signed=False)[0]``;
  pass the flags by keyword: mmh3 5.x ignores a positional ``signed``).
* ``string_key_hash(key)``: the same hash over the UTF-8 bytes of one opaque
  key string (the planner's keys, e.g. lease keys).
* ``member_hash(member)``: the same hash with seed 1 over the member's UTF-8 name.
* ``score(key_hash, member_hash)``: MurmurHash3's 64-bit finaliser ``fmix64``
  applied to ``key_hash XOR member_hash``. Rendezvous picks the highest score.

The keyspace is the full range ``[0, 2**64)``; ``range`` placement maps a hash
onto N members with multiply-shift (``(h * N) >> 64``), which has no modulo
bias: every member's range differs in size by at most one key in 2**64.
"""

from __future__ import annotations

import math
import struct

import mmh3
import numpy as np
import numpy.typing as npt

from hashring.errors import InvalidKeyError

MASK64 = (1 << 64) - 1
KEY_SEED = 0
MEMBER_SEED = 1
_FMIX_C1 = 0xFF51AFD7ED558CCD
_FMIX_C2 = 0xC4CEB9FE1A85EC53
_TWO_POW_53 = float(1 << 53)


def _require_str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidKeyError(
            f"{what} must be a str, got {type(value).__name__} {value!r}; "
            "convert it with str() before hashing"
        )
    return value


def hash64(data: bytes, seed: int = KEY_SEED) -> int:
    """First 64-bit word of MurmurHash3_x64_128 of ``data``, unsigned."""
    return int(mmh3.hash64(data, seed=seed, x64arch=True, signed=False)[0])


def key_bytes(consumer: str, shard: str) -> bytes:
    """The byte encoding of a (consumer, shard) key: ``u32be(len(c)) + c + s``."""
    c = _require_str(consumer, "consumer").encode("utf-8")
    s = _require_str(shard, "shard").encode("utf-8")
    return struct.pack(">I", len(c)) + c + s


def key_hash(consumer: str, shard: str) -> int:
    """The 64-bit hash of the (consumer name, shard id) key."""
    return hash64(key_bytes(consumer, shard))


def string_key_hash(key: str) -> int:
    """The 64-bit hash of one opaque key string (planner keys, lease keys)."""
    return hash64(_require_str(key, "key").encode("utf-8"))


def member_hash(member: str) -> int:
    """The 64-bit hash of a member name (seed 1, so it never equals a key hash)."""
    return hash64(_require_str(member, "member").encode("utf-8"), MEMBER_SEED)


def fmix64(x: int) -> int:
    """MurmurHash3's 64-bit finaliser: a bijection with full avalanche."""
    x ^= x >> 33
    x = (x * _FMIX_C1) & MASK64
    x ^= x >> 33
    x = (x * _FMIX_C2) & MASK64
    x ^= x >> 33
    return x


def score(khash: int, mhash: int) -> int:
    """Rendezvous score of a key for a member (higher wins)."""
    return fmix64(khash ^ mhash)


def weighted_score(raw: int, weight: float) -> float:
    """Weighted rendezvous score ``-w / ln(u)``, with ``u`` in (0, 1) from ``raw``.

    A member with weight ``w`` wins a share ``w / sum(w)`` of the keys.
    """
    u = ((raw >> 11) + 0.5) / _TWO_POW_53
    return -weight / math.log(u)


def fmix64_array(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Vectorised :func:`fmix64` (uint64 arithmetic wraps modulo 2**64)."""
    x = x ^ (x >> np.uint64(33))
    x *= np.uint64(_FMIX_C1)
    x ^= x >> np.uint64(33)
    x *= np.uint64(_FMIX_C2)
    x ^= x >> np.uint64(33)
    return x


def score_matrix(
    key_hashes: npt.NDArray[np.uint64], member_hashes: npt.NDArray[np.uint64]
) -> npt.NDArray[np.uint64]:
    """Scores of every key (rows) for every member (columns)."""
    return fmix64_array(key_hashes[:, None] ^ member_hashes[None, :])


def weighted_score_matrix(
    raw: npt.NDArray[np.uint64], weights: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """Vectorised :func:`weighted_score` over a raw score matrix."""
    u = ((raw >> np.uint64(11)).astype(np.float64) + 0.5) / _TWO_POW_53
    result: npt.NDArray[np.float64] = -weights[None, :] / np.log(u)
    return result


def range_index(khash: int, n: int) -> int:
    """Index of the member whose keyspace range holds ``khash`` (multiply-shift)."""
    return (khash * n) >> 64


def jump_bucket(khash: int, buckets: int) -> int:
    """Jump consistent hash (Lamping and Veach, 2014) of a 64-bit key."""
    b, j = -1, 0
    key = khash
    while j < buckets:
        b = j
        key = (key * 2862933555777941757 + 1) & MASK64
        j = int((b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return b
