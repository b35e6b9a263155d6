"""One type for a position in a shard (:class:`kinesis.Checkpoint`) and one validator of
sequence numbers (:mod:`kinesis.sequence_numbers`).

* the same bad sequence/sub-sequence number raises :class:`InvalidSequenceNumberError` with the
  validator's message from every entry point (constructors, checkpoint calls, the processor's
  and kclpy's checkpointers, a lease row, a Spark offset); the Spark source's options take no
  sequence numbers (``initialPosition`` is LATEST, TRIM_HORIZON or AT_TIMESTAMP only);
* lease rows and Spark offsets round-trip positions exactly, in their unchanged formats;
* ``Position``/``InitialPosition`` build checkpoints, and ordering spans sentinels and records.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import boto3
import pytest

import spark_integration.offsets as offsets
from kinesis import (
    LATEST,
    SHARD_END,
    TRIM_HORIZON,
    Checkpoint,
    InitialPosition,
    InvalidSequenceNumberError,
    Position,
)
from kinesis.consumer.kclpy import (
    ILLEGAL_ARGUMENT,
    KclpyCheckpointer,
    KclpyCheckpointError,
)
from kinesis.consumer.retrieval.positions import iterator_args
from kinesis.consumer.shard.processor import InMemoryCheckpointer
from kinesis.errors import (
    CheckpointError,
    ConfigurationError,
    CorruptLeaseError,
    InvalidCheckpointError,
)
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import Lease, LeaseState, lease_from_item, lease_to_item
from kinesis.sequence_numbers import check_sequence_number, check_sub_sequence_number
from spark_integration.errors import InvalidOffsetError
from spark_integration.offsets import (
    SourceOffset,
    at_timestamp_ms,
    position_from_json,
    position_to_json,
)

SEQ = "49590338271490256608559692538361571095921575989136588898"

# --- one validator, one error -----------------------------------------------------------------

BAD = {
    "letters": ("12a", 0),
    "empty": ("", 0),
    "200-digits": ("7" * 200, 0),
    "not-ascii": ("١٢", 0),
    "not-a-string": (12.0, 0),
    "negative-sub": ("5", -1),
    "sub-too-big": ("5", 10**20),
    "sub-a-string": ("5", "3"),
    "sub-a-bool": ("5", True),
}


def _expected(seq: Any, sub: Any) -> str:
    try:
        check_sequence_number(seq)
        check_sub_sequence_number(sub)
    except InvalidSequenceNumberError as exc:
        return str(exc)
    raise AssertionError(f"{seq!r}/{sub!r} is valid")


def _lease_row(seq_attr: str, sub_attr: str) -> Callable[[Any, Any], object]:
    """Parse a lease row whose ``seq_attr``/``sub_attr`` hold the values."""

    def parse(seq: Any, sub: Any) -> object:
        if not isinstance(seq, str) or isinstance(sub, bool) or not isinstance(sub, int):
            pytest.skip("a lease row's attributes are typed S and N")
        item = lease_to_item(Lease("orders/shardId-1", "m1", 3, Checkpoint("1")))
        item.update({seq_attr: {"S": seq}, sub_attr: {"N": str(sub)}})
        return lease_from_item(item)

    return parse


def _lease_table_checkpoint(seq: Any, sub: Any) -> None:
    if sub != 0:
        pytest.skip("LeaseTable.checkpoint takes a checkpoint or a sequence number string")
    table = LeaseTable(boto3.client("dynamodb", region_name="us-east-1"), "leases")
    table.checkpoint(Lease("orders/shardId-1", "m1", 3), seq)  # refused before any AWS call


def _processor_checkpointer(seq: Any, sub: Any) -> None:
    InMemoryCheckpointer("orders", "shardId-1").checkpoint(seq, sub)


def _kclpy_checkpointer(seq: Any, sub: Any) -> None:
    KclpyCheckpointer(InMemoryCheckpointer("orders", "shardId-1")).checkpoint(seq, sub)


def _spark_offset(seq: Any, sub: Any) -> None:
    SourceOffset.from_json(json.dumps({"orders/shardId-1": {"seq": seq, "sub": sub}}))


ENTRY_POINTS: dict[str, tuple[Callable[[Any, Any], object], type[Exception], str]] = {
    # name: (call, the entry point's own error type, how its message wraps the validator's)
    "Checkpoint": (lambda seq, sub: Checkpoint(seq, sub), InvalidCheckpointError, "{}"),
    "Position": (lambda seq, sub: Position(seq, sub), ConfigurationError, "{}"),
    "Position.from_dict": (
        lambda seq, sub: Position.from_dict({"sequence_number": seq, "sub_sequence_number": sub}),
        ConfigurationError, "{}",
    ),
    "LeaseTable.checkpoint": (_lease_table_checkpoint, InvalidCheckpointError, "{}"),
    "processor checkpointer": (_processor_checkpointer, CheckpointError, "{}"),
    "kclpy checkpointer": (_kclpy_checkpointer, KclpyCheckpointError, f"{ILLEGAL_ARGUMENT}: {{}}"),
    "lease row": (
        _lease_row("checkpoint", "checkpointSubSequenceNumber"), CorruptLeaseError,
        "lease row 'orders/shardId-1' is corrupt (bad checkpoint: {}); it is left untouched",
    ),
    "lease row pendingCheckpoint": (
        _lease_row("pendingCheckpoint", "pendingCheckpointSubSequenceNumber"), CorruptLeaseError,
        "lease row 'orders/shardId-1' is corrupt (bad pendingCheckpoint: {}); it is left untouched",
    ),
    "Spark offset": (_spark_offset, InvalidOffsetError, "offset entry orders/shardId-1: {}"),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("bad", list(BAD))
def test_a_bad_sequence_number_raises_the_same_error_from_every_entry_point(entry: str, bad: str) -> None:
    call, own_type, wrapping = ENTRY_POINTS[entry]
    seq, sub = BAD[bad]
    with pytest.raises(own_type) as info:  # callers' existing except clauses still catch it
        call(seq, sub)
    expected = _expected(seq, sub)
    assert wrapping.format(expected) in str(info.value)
    if wrapping == "{}":
        assert str(info.value) == expected
    # the one validator's error, raised as is or as the cause of the entry point's own error
    assert any(isinstance(e, InvalidSequenceNumberError) and expected in str(e)
               for e in (info.value, info.value.__cause__))


def test_the_validator_message_names_the_value_and_the_rule() -> None:
    assert _expected("12a", 0) == (
        f"a sequence number must be a string of 1 to 130 decimal digits, such as '{SEQ}', got '12a'"
    )
    assert _expected(12.0, 0).endswith("got float 12.0")
    assert _expected("7" * 200, 0).endswith("... (202 characters)")
    assert _expected("5", -1) == (
        "a sub-sequence number must be an int from 0 (a plain record) to 99999999999999999999, got int -1"
    )


def test_the_one_error_is_what_callers_already_catch() -> None:
    for base in (InvalidCheckpointError, ConfigurationError, CheckpointError, ValueError):
        assert issubclass(InvalidSequenceNumberError, base)


# --- one type ---------------------------------------------------------------------------------


def test_position_and_initial_position_build_checkpoints() -> None:
    assert type(Position("5", 1)) is Checkpoint and Position("5", 1) == Checkpoint("5", 1)
    assert InitialPosition.LATEST is LATEST and InitialPosition.TRIM_HORIZON is TRIM_HORIZON
    ts = datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert InitialPosition("AT_TIMESTAMP", ts) == InitialPosition.at_timestamp(ts) == Checkpoint.at_timestamp(ts)
    assert isinstance(Checkpoint("5"), Position) and not isinstance(Checkpoint("5"), InitialPosition)
    assert isinstance(LATEST, InitialPosition) and not isinstance(LATEST, Position)
    assert not isinstance(SHARD_END, Position | InitialPosition)
    with pytest.raises(InvalidSequenceNumberError):
        Position("LATEST")  # a Position is a record
    with pytest.raises(ConfigurationError, match="initial position must be"):
        InitialPosition("SHARD_END")  # type: ignore[arg-type]
    with pytest.raises(InvalidCheckpointError, match="timezone-aware"):
        InitialPosition.at_timestamp(datetime(2024, 5, 1))
    assert [(p.kind, p.is_record) for p in (Position("5"), LATEST, SHARD_END)] == [
        ("AFTER_SEQUENCE_NUMBER", True), ("LATEST", False), ("SHARD_END", False)]


def test_a_lease_checkpoint_is_the_readers_start_strictly_after_it() -> None:
    item = lease_to_item(Lease("orders/shardId-1", "m1", 3, Checkpoint(SEQ, 2)))
    start = lease_from_item(item).checkpoint
    assert iterator_args(start) == {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": SEQ}
    assert iterator_args(TRIM_HORIZON) == {"ShardIteratorType": "TRIM_HORIZON"}
    with pytest.raises(InvalidCheckpointError, match="not a start position"):
        iterator_args(SHARD_END)
    for gone in ("to_start_position",):
        assert not hasattr(Checkpoint, gone)
    for gone in ("Initial", "ShardPosition", "to_start", "after"):
        assert not hasattr(offsets, gone)


def test_ordering_spans_sentinels_and_records_and_initial_positions_tie_without_being_equal() -> None:
    ts = Checkpoint.at_timestamp(datetime(2024, 1, 1, tzinfo=UTC))
    ordered = [Checkpoint("0"), Checkpoint("0", 1), Position("9", 5), Position("10"), Position("10", 1),
               Checkpoint(SEQ), SHARD_END]
    assert sorted([SHARD_END, *reversed(ordered[:-1]), TRIM_HORIZON])[1:] == ordered
    for initial in (TRIM_HORIZON, LATEST, ts):
        assert initial < Checkpoint("0") and initial < SHARD_END
        assert initial <= TRIM_HORIZON <= initial  # initial positions tie...
    assert TRIM_HORIZON != LATEST and ts != LATEST and ts != TRIM_HORIZON  # ...but are not equal
    assert Position("007", 2) == Checkpoint("7", 2) and hash(Position("007", 2)) == hash(Checkpoint("7", 2))
    assert len({Position("7"), Checkpoint("07"), Checkpoint.of("7")}) == 1
    same_instant = Checkpoint.at_timestamp(datetime(2024, 1, 1, 1, tzinfo=timezone(timedelta(hours=1))))
    assert same_instant == ts and hash(same_instant) == hash(ts)


# --- round trips: lease rows and Spark offsets --------------------------------------------------

POSITIONS = [
    TRIM_HORIZON,
    LATEST,
    Checkpoint.at_timestamp(datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)),
    Checkpoint("0"),
    Position(SEQ, 3),
    SHARD_END,
]


@pytest.mark.parametrize("cp", POSITIONS, ids=str)
def test_lease_rows_round_trip_positions(cp: Checkpoint) -> None:
    state = LeaseState.SHARD_END if cp.is_shard_end else LeaseState.ACTIVE
    pending = Position(SEQ, 9) if cp < Position(SEQ, 9) else None
    lease = Lease("orders/shardId-1", "m1", 3, cp, state=state, pending_checkpoint=pending)
    again = lease_from_item(lease_to_item(lease))
    assert again == lease and again.checkpoint == cp and again.pending_checkpoint == pending


def test_lease_row_attributes_are_unchanged() -> None:
    item = lease_to_item(Lease("k", None, 0, Position(SEQ, 3), pending_checkpoint=Position(SEQ, 4)))
    assert {k: v for k, v in item.items() if k.startswith(("checkpoint", "pending"))} == {
        "checkpoint": {"S": SEQ},
        "checkpointSubSequenceNumber": {"N": "3"},
        "checkpointOrder": {"S": f"1:{int(SEQ):0130d}:{3:020d}"},
        "pendingCheckpoint": {"S": SEQ},
        "pendingCheckpointSubSequenceNumber": {"N": "4"},
    }
    at = lease_to_item(Lease("k", None, 0, Checkpoint.at_timestamp(datetime(2024, 5, 1, tzinfo=UTC))))
    assert (at["checkpoint"], at["checkpointTimestamp"], at["checkpointOrder"]["S"]) == (
        {"S": "AT_TIMESTAMP"}, {"S": "2024-05-01T00:00:00+00:00"}, f"0:{0:0130d}:{0:020d}")


GOLDEN_OFFSET = (
    '{"s/shardId-000000000000":{"seq":"' + SEQ + '","sub":3,"done":true,"resume":{"from":"TRIM_HORIZON"}},'
    '"s/shardId-000000000001":{"from":"AT_TIMESTAMP","ts":1714564800123},'
    '"s/shardId-000000000002":{"from":"TRIM_HORIZON"},'
    '"s/shardId-000000000003":{"seq":"7","sub":0,"resume":{"from":"AT_TIMESTAMP","ts":1699999999999}}}'
)


def test_spark_offsets_are_byte_for_byte_unchanged() -> None:
    offset = SourceOffset.from_json(GOLDEN_OFFSET)
    assert offset.dumps() == GOLDEN_OFFSET
    first = offset.shards["s/shardId-000000000000"]
    assert (first.position, first.done, first.resume) == (Position(SEQ, 3), True, TRIM_HORIZON)
    assert offset.shards["s/shardId-000000000001"].position == Checkpoint.at_timestamp(
        datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC))


@pytest.mark.parametrize("ms", [0, 1, 1714564800123, 1699999999999, 253402300799999])
def test_spark_timestamps_round_trip_to_the_millisecond(ms: int) -> None:
    pos = at_timestamp_ms(ms)
    assert position_to_json(pos) == {"from": "AT_TIMESTAMP", "ts": ms}
    assert position_from_json(position_to_json(pos), "k") == pos


@pytest.mark.parametrize("cp", [TRIM_HORIZON, Checkpoint("0"), Position(SEQ, 3)], ids=str)
def test_spark_json_round_trips_positions(cp: Checkpoint) -> None:
    assert position_from_json(json.loads(json.dumps(position_to_json(cp))), "k") == cp


def test_spark_offsets_hold_no_latest_or_shard_end() -> None:
    for cp in (LATEST, SHARD_END):
        with pytest.raises(InvalidOffsetError, match="no offset form"):
            position_to_json(cp)
    with pytest.raises(InvalidOffsetError, match="malformed"):
        position_from_json({"from": "AT_TIMESTAMP", "ts": "soon"}, "k")
