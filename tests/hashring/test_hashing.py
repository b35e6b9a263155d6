"""The key encoding and hash are a public contract: check them byte for byte."""

from __future__ import annotations

import struct

import mmh3
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hashring import InvalidKeyError, key_hash, member_hash, string_key_hash
from hashring.hashing import (
    fmix64,
    fmix64_array,
    jump_bucket,
    key_bytes,
    range_index,
    score,
    score_matrix,
)


def test_key_bytes_are_length_prefixed_utf8() -> None:
    assert key_bytes("orders", "shardId-000000000001") == (
        struct.pack(">I", 6) + b"orders" + b"shardId-000000000001"
    )
    # The length prefix makes ("ab", "c") and ("a", "bc") different keys.
    assert key_bytes("ab", "c") != key_bytes("a", "bc")
    assert key_hash("ab", "c") != key_hash("a", "bc")


def test_key_hash_is_first_word_of_murmur3_x64_128() -> None:
    data = key_bytes("orders", "shardId-000000000001")
    assert key_hash("orders", "shardId-000000000001") == mmh3.hash64(data, seed=0, x64arch=True, signed=False)[0]
    full = mmh3.hash128(data, seed=0, x64arch=True, signed=False)
    assert key_hash("orders", "shardId-000000000001") == full & ((1 << 64) - 1)


def test_member_hash_uses_seed_one() -> None:
    assert member_hash("pod-a") == mmh3.hash64(b"pod-a", seed=1, x64arch=True, signed=False)[0]
    assert member_hash("pod-a") != string_key_hash("pod-a")


@pytest.mark.parametrize("bad", [None, 1, b"bytes", ("t",)])
def test_non_string_keys_are_rejected(bad: object) -> None:
    with pytest.raises(InvalidKeyError, match="must be a str"):
        key_hash(bad, "s")  # type: ignore[arg-type]
    with pytest.raises(InvalidKeyError, match="must be a str"):
        key_hash("c", bad)  # type: ignore[arg-type]


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_vectorised_fmix_matches_scalar(x: int) -> None:
    arr = np.array([x], dtype=np.uint64)
    assert int(fmix64_array(arr)[0]) == fmix64(x)


@given(
    st.lists(st.integers(0, (1 << 64) - 1), min_size=1, max_size=5),
    st.lists(st.integers(0, (1 << 64) - 1), min_size=1, max_size=5),
)
def test_score_matrix_matches_scalar(keys: list[int], members: list[int]) -> None:
    mat = score_matrix(np.array(keys, dtype=np.uint64), np.array(members, dtype=np.uint64))
    for i, k in enumerate(keys):
        for j, m in enumerate(members):
            assert int(mat[i, j]) == score(k, m)


def test_range_index_has_no_modulo_bias() -> None:
    # Multiply-shift splits [0, 2**64) into N ranges whose sizes differ by <= 1.
    for n in (3, 7, 10, 1000):
        bounds = [-(-(i << 64) // n) for i in range(n + 1)]  # first hash of each range
        for i in range(n):
            assert range_index(bounds[i], n) == i
            assert range_index(bounds[i + 1] - 1, n) == i
        sizes = {bounds[i + 1] - bounds[i] for i in range(n)}
        assert max(sizes) - min(sizes) <= 1


def test_jump_is_uniform_and_monotone() -> None:
    assert jump_bucket(12345, 1) == 0
    counts = [0] * 10
    for k in range(20000):
        counts[jump_bucket(key_hash("c", str(k)), 10)] += 1
    assert max(counts) < 2200 and min(counts) > 1800
    # Monotone: growing the bucket count only moves keys to the new bucket.
    for k in range(0, 1 << 40, 1 << 33):
        for b in range(1, 30):
            before, after = jump_bucket(k, b), jump_bucket(k, b + 1)
            assert after in (before, b)
