"""Exact progress of a shard processed out of order (kinesis.consumer.keyed.progress): the
watermark, the completed set written with it, and a resumed owner skipping exactly the records
that completed."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinesis import TRIM_HORIZON, Checkpoint, Position
from kinesis.consumer.keyed.progress import (
    CompletedSet,
    ShardProgress,
    checkpoint_label,
    decode,
    encode,
    usable,
)


def seq(i: int) -> str:
    return str(49_000_000_000_000_000_000 * 10**35 + i * 7)


def deliver_all(progress: ShardProgress, indexes: range) -> list[bool]:
    return [progress.deliver(seq(i), 0)[1] for i in indexes]


def test_the_watermark_moves_only_over_the_completed_prefix() -> None:
    p = ShardProgress(TRIM_HORIZON)
    deliver_all(p, range(5))
    p.complete(1)
    p.complete(2)
    assert p.watermark() == TRIM_HORIZON and p.pending == 5 and p.completed_beyond == 2
    p.complete(0)
    assert p.watermark() == Position(seq(2)) and p.pending == 2
    p.complete(4)
    checkpoint, completed = p.snapshot()
    assert checkpoint == Position(seq(2))
    assert completed is not None
    found = decode(completed)
    assert found.checkpoint == f"{seq(2)}/0" and found.first == (seq(3), 0)
    assert [found.completed(i) for i in range(3)] == [False, True, False]
    p.complete(3)
    assert p.snapshot() == (Position(seq(4)), None)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 300), data=st.data())
def test_a_resumed_owner_skips_exactly_the_records_that_completed(n: int, data: st.DataObject) -> None:
    """Any subset completed in any order: the next owner, reading the same records from the
    checkpoint written, is told 'completed' for exactly the completed records after it."""
    done = data.draw(st.sets(st.integers(0, n - 1)))
    order = data.draw(st.permutations(sorted(done)))
    first = ShardProgress(TRIM_HORIZON)
    deliver_all(first, range(n))
    for i in order:
        first.complete(i)
    checkpoint, completed = first.snapshot()
    start = 0 if checkpoint == TRIM_HORIZON else next(i for i in range(n) if Position(seq(i)) == checkpoint) + 1
    assert all(i in done for i in range(start))  # the checkpoint covers completed records only
    resumed = ShardProgress(checkpoint, usable(completed, checkpoint, "test"))
    skipped = {i for i, was_done in zip(range(start, n), deliver_all(resumed, range(start, n)), strict=True) if was_done}
    assert skipped == {i for i in done if i >= start}


def test_a_set_is_ignored_unless_it_belongs_to_the_checkpoint_and_its_first_record(caplog: pytest.LogCaptureFixture) -> None:
    p = ShardProgress(Position(seq(0)))
    deliver_all(p, range(1, 4))
    p.complete(1)
    checkpoint, completed = p.snapshot()
    assert completed is not None and checkpoint == Position(seq(0))
    # an older build moved the checkpoint without removing the set: it is not used
    assert usable(completed, Position(seq(1)), "k") is None
    # the shard was trimmed: another record is first after the checkpoint
    resumed = ShardProgress(checkpoint, usable(completed, checkpoint, "k"), where="k")
    assert resumed.deliver(seq(99), 0) == (0, False)
    assert resumed.deliver(seq(2), 0) == (1, False)  # the set was dropped: nothing is skipped
    assert "the set is ignored" in caplog.text


@pytest.mark.parametrize("text", ["garbage", "1|x|y|z|w", "1|-|12/0|5|!!!", "1|5/0|6/0|0|eJwDAAAAAAE=",
                                  "1|5/0|6/0|99999999|eJwDAAAAAAE=", "2|5/0|6/0|1|eJwDAAAAAAE="])
def test_a_corrupt_set_is_ignored_with_a_warning_and_nothing_is_skipped(text: str, caplog: pytest.LogCaptureFixture) -> None:
    assert usable(text, Position(seq(5)), "shard-7") is None
    assert "shard-7" in caplog.text and "delivered again" in caplog.text


def test_sentinel_checkpoints_name_their_kind_and_time() -> None:
    at = Checkpoint.at_timestamp(datetime(2026, 1, 2, tzinfo=UTC))
    assert checkpoint_label(TRIM_HORIZON) == "TRIM_HORIZON"
    assert checkpoint_label(at) == "AT_TIMESTAMP@2026-01-02T00:00:00+00:00"
    s = CompletedSet(checkpoint_label(TRIM_HORIZON), (seq(1), 0), b"\x02", 2)
    assert usable(encode(s), at, "k") is None and usable(encode(s), TRIM_HORIZON, "k") == s


def test_the_encoding_stays_within_its_stated_bound() -> None:
    """At most 4 * ceil((ceil(n/8) + 16) / 3) + 150 bytes for n records (random bits: zlib
    cannot help)."""
    rng = random.Random(7)
    for n in (1, 100, 10_000, 100_000):
        bits = bytes(rng.getrandbits(8) for _ in range((n + 7) // 8))
        text = encode(CompletedSet(f"{seq(n)}/0", (seq(n + 1), 0), bits, n))
        assert len(text) <= 4 * math.ceil((math.ceil(n / 8) + 16) / 3) + 150, (n, len(text))
        assert decode(text).bits == bits
