"""The rules of the lease table's writes, without DynamoDB: conditions, new rows, checkpoint
changes, and what a failed condition means."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kinesis.errors import (
    CheckpointRegressionError,
    ConfigurationError,
    InvalidCheckpointError,
    LeaseLostError,
)
from kinesis.lease_loop.table import model as m
from kinesis.lease_loop.table.model import SHARD_END, TRIM_HORIZON, Checkpoint, Lease, LeaseState
from kinesis.lease_loop.table.rules import (
    attributes_equal,
    check_member,
    check_pending_checkpoint,
    checkpoint_change,
    explain_failure,
    new_lease,
    still_held,
    unchanged_since,
)

HELD = Lease("app/orders/shardId-0", "a", 7, Checkpoint("100"))


def test_unchanged_since_asks_for_no_owner_when_the_lease_was_free() -> None:
    assert unchanged_since(Lease("k", None, 3)) == ("#c = :c AND attribute_not_exists(#o)", {":c": {"N": "3"}})
    assert unchanged_since(HELD) == ("#c = :c AND #o = :o", {":c": {"N": "7"}, ":o": {"S": "a"}})


def test_a_holders_write_is_fenced_by_owner_and_counter_and_a_checkpoint_also_by_its_order() -> None:
    assert still_held(HELD, None) == ("#o = :o AND #c = :c", {":o": {"S": "a"}, ":c": {"N": "7"}})
    cp = Checkpoint("200")
    condition, values = still_held(HELD, cp)
    assert condition == "#o = :o AND #c = :c AND #ord <= :ord"
    assert values[":ord"] == {"S": cp.order_string}


def test_a_new_lease_is_held_at_counter_1_by_its_owner_and_shard_end_sets_the_state() -> None:
    free = new_lease("k", ["p1"], TRIM_HORIZON, None, "tok")
    assert (free.owner, free.counter, free.parents, free.state, free.write_token) == (
        None, 0, ("p1",), LeaseState.ACTIVE, "tok")
    held = new_lease("k", (), SHARD_END, "a", "tok")
    assert (held.owner, held.counter, held.state) == ("a", 1, LeaseState.SHARD_END)
    with pytest.raises(ConfigurationError, match="parents must be non-empty strings"):
        new_lease("k", ["p1", ""], TRIM_HORIZON, None, "tok")


def test_a_checkpoint_change_resets_the_owner_switches_clears_the_pending_one_and_never_goes_back() -> None:
    attrs, remove = checkpoint_change(HELD, Checkpoint("200"))
    assert attrs[m.OWNER_SWITCHES] == {"N": "0"} and attrs[m.STATE] == {"S": LeaseState.ACTIVE.value}
    assert remove == [m.PENDING_CHECKPOINT, m.PENDING_SUB_SEQUENCE, m.COMPLETED, m.CHECKPOINT_TS,
                      m.CHECKPOINT_ARRIVAL]
    attrs, remove = checkpoint_change(HELD, Checkpoint("200"), completed="1|200/0|201/0|2|eJxjAgAAAwAD")
    assert attrs[m.COMPLETED] == {"S": "1|200/0|201/0|2|eJxjAgAAAwAD"} and m.COMPLETED not in remove
    arrived = datetime(2026, 11, 28, tzinfo=UTC)
    attrs, remove = checkpoint_change(HELD, Checkpoint("200", arrival=arrived))  # a record's, with its arrival
    assert attrs[m.CHECKPOINT_ARRIVAL] == {"M": {"at": {"S": arrived.isoformat()}, "of": {"S": "200/0"}}}
    assert m.CHECKPOINT_ARRIVAL not in remove
    with pytest.raises(InvalidCheckpointError, match="only a record position carries an arrival time"):
        Checkpoint("SHARD_END", arrival=arrived)
    attrs, _ = checkpoint_change(HELD, SHARD_END)
    assert attrs[m.STATE] == {"S": LeaseState.SHARD_END.value}
    with pytest.raises(CheckpointRegressionError, match="is behind the stored 100"):
        checkpoint_change(HELD, Checkpoint("99"))


def test_a_pending_checkpoint_is_a_sequence_number_not_behind_the_stored_one() -> None:
    check_pending_checkpoint(HELD, Checkpoint("100"))
    for sentinel in (TRIM_HORIZON, SHARD_END):
        with pytest.raises(InvalidCheckpointError, match="a pending checkpoint is a sequence number"):
            check_pending_checkpoint(HELD, sentinel)
    with pytest.raises(CheckpointRegressionError, match="pending checkpoint 99"):
        check_pending_checkpoint(HELD, Checkpoint("99"))


def row(owner: str, counter: int, checkpoint: str = "300") -> dict[str, dict[str, str]]:
    return {m.OWNER: {"S": owner}, m.COUNTER: {"N": str(counter)}, m.CHECKPOINT: {"S": checkpoint}}


def test_a_failed_condition_is_a_lost_lease_unless_the_holder_still_has_it_and_checkpointed_behind() -> None:
    gone = explain_failure(HELD, "renew", None, None)
    assert isinstance(gone, LeaseLostError) and "the row was deleted" in str(gone)
    moved = explain_failure(HELD, "checkpoint", row("b", 8), Checkpoint("200"))
    assert isinstance(moved, LeaseLostError) and "now owner 'b', counter 8; expected counter 7" in str(moved)
    behind = explain_failure(HELD, "checkpoint", row("a", 7), Checkpoint("200"))
    assert isinstance(behind, CheckpointRegressionError) and str(behind).startswith("checkpoint 200")
    pending = explain_failure(HELD, "prepare a checkpoint on", row("a", 7), Checkpoint("200"))
    assert isinstance(pending, CheckpointRegressionError) and str(pending).startswith("pending checkpoint 200")
    assert isinstance(explain_failure(HELD, "renew", row("a", 7), None), LeaseLostError)


@pytest.mark.parametrize("member", ["", None, 3])
def test_a_member_id_is_a_non_empty_string(member: object) -> None:
    with pytest.raises(ConfigurationError, match="a member id must be a non-empty string"):
        check_member(member)
    assert check_member("a") == "a"


def test_attributes_equal_leaves_out_unknown_values() -> None:
    assert attributes_equal({"#tok": {"S": "t"}, "#c": {"N": "4"}}) == (
        "#tok = :tok AND #c = :c", {":tok": {"S": "t"}, ":c": {"N": "4"}})
    assert attributes_equal({"#inc": {"S": "i"}, "#hb": None}) == ("#inc = :inc", {":inc": {"S": "i"}})


def test_a_checkpoints_arrival_is_read_back_and_an_unreadable_one_is_only_unknown() -> None:
    arrived = datetime(2026, 11, 28, 1, 2, 3, 456000, tzinfo=UTC)
    item = m.lease_to_item(Lease("app/s/k", "a", 3, Checkpoint("200", arrival=arrived)))
    assert m.lease_from_item(item).checkpoint.arrival == arrived
    moved = {**item, **m.checkpoint_attributes(Checkpoint("300"))}  # by a writer that does not know it
    assert moved[m.CHECKPOINT_ARRIVAL] == item[m.CHECKPOINT_ARRIVAL]  # left behind...
    assert m.lease_from_item(moved).checkpoint.arrival is None  # ...but not 300's arrival
    of = {"of": {"S": "200/0"}}
    for bad in ({"M": {**of, "at": {"S": "yesterday"}}}, {"M": {**of, "at": {"S": "2026-11-28T01:02:03"}}},
                {"S": arrived.isoformat()}, {"M": {"at": {"S": arrived.isoformat()}}}, {"N": "5"}):
        lease = m.lease_from_item({**item, m.CHECKPOINT_ARRIVAL: bad})  # not a corrupt row: the lease is usable
        assert lease.checkpoint == Checkpoint("200") and lease.checkpoint.arrival is None
