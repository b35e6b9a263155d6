"""The processor API: checkpoint rules (never backwards, never past delivery, SHARD_END, lost
lease) and the example processor end to end on the embedded moto server."""

from __future__ import annotations

import runpy

import pytest

from kinesis.consumer.retrieval.positions import SHARD_END, Position
from kinesis.consumer.retrieval.records import Record
from kinesis.consumer.shard.processor import (
    Checkpointer,
    InMemoryCheckpointer,
    PreparedCheckpointer,
    RecordProcessor,
)
from kinesis.errors import CheckpointError, LeaseLostError
from tests.support.paths import ROOT


def rec(seq: str, sub: int = 0) -> Record:
    return Record("s", "shard-0", seq, sub, "pk", b"x", None, None, sub > 0)


def test_checkpoint_without_argument_takes_the_last_delivered_record() -> None:
    cp = InMemoryCheckpointer("s", "shard-0")
    cp.checkpoint()  # nothing delivered yet: nothing written
    assert cp.history == []
    cp.record_delivered([rec("1"), rec("2"), rec("3")])
    cp.checkpoint()
    assert cp.history == [(Position("3"), False)] and cp.last_checkpoint == Position("3")
    cp.checkpoint()  # same position again: no write
    assert len(cp.history) == 1


def test_checkpoint_accepts_a_record_a_position_or_a_sequence_number() -> None:
    cp = InMemoryCheckpointer("s", "shard-0")
    cp.record_delivered([rec("5", 0), rec("5", 1), rec("5", 2), rec("6")])
    cp.checkpoint(rec("5", 1))
    cp.checkpoint(Position("5", 2))
    cp.checkpoint("6")
    assert [p for p, _ in cp.history] == [Position("5", 1), Position("5", 2), Position("6")]
    with pytest.raises(CheckpointError, match="a sequence number must be a string"):
        cp.checkpoint(6)  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match="takes a Record"):
        cp.checkpoint(SHARD_END)


def test_checkpoints_never_go_backwards_or_past_delivery() -> None:
    cp = InMemoryCheckpointer("s", "shard-0", last_checkpoint=Position("10"))
    cp.record_delivered([rec("11"), rec("12")])
    with pytest.raises(CheckpointError, match="before the last checkpoint"):
        cp.checkpoint("9")
    with pytest.raises(CheckpointError, match="largest position delivered"):
        cp.checkpoint("13")
    cp.checkpoint("12")
    with pytest.raises(CheckpointError, match="never go backwards"):
        cp.checkpoint("11")
    assert cp.history == [(Position("12"), False)]


def test_shard_end_checkpoint_marks_the_shard_finished() -> None:
    cp = InMemoryCheckpointer("s", "shard-0")
    cp.record_delivered([rec("1")])
    cp.checkpoint()
    cp.mark_shard_end()
    cp.checkpoint()
    assert cp.history == [(Position("1"), False), (Position("1"), True)]
    assert cp.shard_end_checkpointed
    empty = InMemoryCheckpointer("s", "shard-9")
    empty.mark_shard_end()
    empty.checkpoint()  # an empty closed shard can still be finished
    assert empty.history == [(None, True)] and empty.shard_end_checkpointed


def test_checkpoint_after_a_lost_lease_raises() -> None:
    cp = InMemoryCheckpointer("s", "shard-0")
    cp.record_delivered([rec("1")])
    cp.mark_lease_lost()
    with pytest.raises(LeaseLostError, match="shard-0"):
        cp.checkpoint()
    assert cp.history == []


def test_default_hooks_checkpoint_and_process_records_is_required() -> None:
    with pytest.raises(TypeError):
        RecordProcessor()  # type: ignore[abstract]

    class Minimal(RecordProcessor):
        def process_records(self, records: list[Record], checkpointer: Checkpointer,
                            millis_behind_latest: int | None = None) -> None:
            pass

    cp = InMemoryCheckpointer("s", "shard-0")
    assert isinstance(cp, Checkpointer)
    cp.record_delivered([rec("4")])
    Minimal().shutdown_requested(cp)
    cp.mark_shard_end()
    Minimal().shard_ended(cp)
    Minimal().lease_lost()
    assert cp.history == [(Position("4"), False), (Position("4"), True)]


def test_example_processor_counts_every_word_once() -> None:
    example = runpy.run_path(str(ROOT / "examples" / "processor_example.py"))
    totals = example["main"]()
    assert totals["the"] == 3
    assert totals["aggregated"] == 3  # one KPL record of three user records
    assert sum(totals.values()) == 4 + 5 + 2 + 3 * 4


# --- two-phase checkpoints --------------------------------------------------------------


def test_prepare_checkpoint_records_a_pending_checkpoint_and_commit_checkpoints_it() -> None:
    cp = InMemoryCheckpointer("s", "shard-0", last_checkpoint=Position("10"))
    cp.record_delivered([rec("11"), rec("12", 0), rec("12", 1)])
    prepared = cp.prepare_checkpoint()  # the last record delivered
    assert isinstance(prepared, PreparedCheckpointer) and prepared.pending_checkpoint == Position("12", 1)
    assert cp.prepared == [Position("12", 1)] and cp.pending_checkpoint == Position("12", 1)
    assert cp.history == [] and cp.last_checkpoint == Position("10")  # nothing committed yet
    assert cp.prepare_checkpoint("11").pending_checkpoint == Position("11")  # a record, a position...
    prepared.checkpoint()
    assert cp.history == [(Position("12", 1), False)] and cp.pending_checkpoint is None
    prepared.checkpoint()  # committing again does nothing
    assert len(cp.history) == 1


def test_prepare_checkpoint_follows_the_checkpoint_rules() -> None:
    cp = InMemoryCheckpointer("s", "shard-0", last_checkpoint=Position("10"))
    with pytest.raises(CheckpointError, match="before the last checkpoint"):
        cp.prepare_checkpoint("9")
    with pytest.raises(CheckpointError, match="largest position delivered"):
        cp.prepare_checkpoint("11")
    same = cp.prepare_checkpoint()  # nothing new delivered: the last checkpoint, no write
    assert same.pending_checkpoint == Position("10") and cp.prepared == []
    cp.record_delivered([rec("11"), rec("12")])
    stale = cp.prepare_checkpoint("11")
    cp.checkpoint("12")
    with pytest.raises(CheckpointError, match="before the last checkpoint"):
        stale.checkpoint()  # a later checkpoint was written meanwhile
    cp.mark_shard_end()
    with pytest.raises(CheckpointError, match="SHARD_END cannot be prepared"):
        cp.prepare_checkpoint()
    cp.mark_lease_lost()
    with pytest.raises(LeaseLostError):
        cp.prepare_checkpoint("12")
    fresh = InMemoryCheckpointer("s", "shard-1")
    with pytest.raises(CheckpointError, match="nothing was delivered"):
        fresh.prepare_checkpoint()
