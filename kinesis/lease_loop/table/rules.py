"""The rules of the lease table's writes: what a write sets, on what condition, and what a
failed one means (no I/O).

Every write to a lease row is conditional on what the writer last saw: the owner and the
counter (and, for checkpoints, ``checkpointOrder <= new``). A checkpoint that goes
backwards is refused here, before any round trip. :mod:`kinesis.lease_loop.table.leases` sends
the writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kinesis.errors import (
    CheckpointRegressionError,
    ConfigurationError,
    InvalidCheckpointError,
    LeaseLostError,
)
from kinesis.lease_loop.table import model as m
from kinesis.lease_loop.table.model import Checkpoint, Lease, LeaseState, check_lease_key

CONDITION_NAMES = {
    "#o": m.OWNER,
    "#c": m.COUNTER,
    "#ord": m.CHECKPOINT_ORDER,
    "#inc": m.INCARNATION,
    "#hb": m.HEARTBEAT,
    "#tok": m.SESSION_TOKEN,
}
"""The attribute behind each ``#name`` placeholder a write condition may use."""


def num(value: int) -> dict[str, str]:
    """A DynamoDB number attribute."""
    return {"N": str(value)}


def check_member(member: object) -> str:
    """``member`` if it is a usable member id (a non-empty string)."""
    if not isinstance(member, str) or not member:
        raise ConfigurationError(f"a member id must be a non-empty string, got {member!r}")
    return member


def attributes_equal(expected: Mapping[str, dict[str, Any] | None]) -> tuple[str, dict[str, Any]]:
    """The condition "each ``#name`` placeholder's attribute equals its value" (``None``
    values left out), with its values: ``{"#tok": t, "#c": None}`` -> ``#tok = :tok``."""
    pairs = [(name, value) for name, value in expected.items() if value is not None]
    return (" AND ".join(f"{name} = :{name[1:]}" for name, _ in pairs),
            {f":{name[1:]}": value for name, value in pairs})


def unchanged_since(lease: Lease) -> tuple[str, dict[str, Any]]:
    """The condition "counter and owner are still what ``lease`` saw", with its values."""
    if lease.owner is None:
        return "#c = :c AND attribute_not_exists(#o)", {":c": num(lease.counter)}
    return "#c = :c AND #o = :o", {":c": num(lease.counter), ":o": {"S": lease.owner}}


def still_held(lease: Lease, new_checkpoint: Checkpoint | None) -> tuple[str, dict[str, Any]]:
    """The condition of a write by the holder: owner and counter are what ``lease`` saw (and,
    writing the checkpoint or a pending one, ``checkpointOrder <= new_checkpoint``)."""
    condition = "#o = :o AND #c = :c"
    values: dict[str, Any] = {":o": {"S": lease.owner}, ":c": num(lease.counter)}
    if new_checkpoint is not None:
        condition += " AND #ord <= :ord"
        values[":ord"] = {"S": new_checkpoint.order_string}
    return condition, values


def held_state(cp: Checkpoint, session: str | None) -> LeaseState:
    """The ``leaseState`` a write by a holder leaves: SHARD_END at the shard's end, else
    ACTIVE_SESSION under a session lease (``session``: the holder's token) or ACTIVE."""
    if cp.is_shard_end:
        return LeaseState.SHARD_END
    return LeaseState.ACTIVE_SESSION if session is not None else LeaseState.ACTIVE


def new_lease(
    key: str, parents: Iterable[str], checkpoint: Checkpoint | str, owner: str | None, token: str,
    session: str | None = None,
) -> Lease:
    """The row that creates lease ``key`` (held by ``owner`` under ``session`` at once, if given)."""
    check_lease_key(key)
    parents_t = tuple(parents)
    if any(not isinstance(p, str) or not p for p in parents_t):
        raise ConfigurationError(f"parents must be non-empty strings, got {parents_t!r}")
    cp = Checkpoint.of(checkpoint)
    return Lease(
        key=key,
        owner=owner,
        counter=1 if owner is not None else 0,
        checkpoint=cp,
        parents=parents_t,
        state=held_state(cp, session if owner is not None else None),
        write_token=token,
        session=session if owner is not None else None,
    )


def checkpoint_change(lease: Lease, cp: Checkpoint, session: str | None = None,
                      completed: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """The attributes a checkpoint to ``cp`` by the holder (under ``session``) sets and
    removes, with ``completed`` (records completed beyond it, encoded) or without (it is
    removed); refuses one behind ``lease``'s."""
    if cp < lease.checkpoint:
        raise CheckpointRegressionError(
            f"checkpoint {cp} for lease {lease.key!r} is behind the stored {lease.checkpoint}: "
            "checkpoints only move forward"
        )
    attrs: dict[str, Any] = dict(m.checkpoint_attributes(cp))
    attrs[m.OWNER_SWITCHES] = num(0)
    attrs[m.STATE] = {"S": held_state(cp, session).value}
    remove = [m.PENDING_CHECKPOINT, m.PENDING_SUB_SEQUENCE]  # a checkpoint supersedes it
    if completed is None:
        remove.append(m.COMPLETED)
    else:
        attrs[m.COMPLETED] = {"S": completed}
    if cp.timestamp is None:
        remove.append(m.CHECKPOINT_TS)
    if cp.arrival is None:
        remove.append(m.CHECKPOINT_ARRIVAL)
    return attrs, remove


def check_pending_checkpoint(lease: Lease, cp: Checkpoint) -> None:
    """Refuse a pending checkpoint that is a sentinel or behind ``lease``'s checkpoint."""
    if cp.is_initial or cp.is_shard_end:
        raise InvalidCheckpointError(
            f"a pending checkpoint is a sequence number, got {cp}: checkpoint SHARD_END directly"
        )
    if cp < lease.checkpoint:
        raise CheckpointRegressionError(
            f"pending checkpoint {cp} for lease {lease.key!r} is behind the stored checkpoint "
            f"{lease.checkpoint}: checkpoints only move forward"
        )


def explain_failure(lease: Lease, what: str, current: dict[str, Any] | None, cp: Checkpoint | None) -> Exception:
    """Why the holder's write ``what`` on ``lease`` failed, given the row as it is now.

    A checkpoint write (``cp`` set) that still holds the lease failed on the order: the
    stored checkpoint is ahead (:class:`CheckpointRegressionError`). Anything else means
    the lease moved or its row is gone (:class:`LeaseLostError`).
    """
    if current is None:
        return LeaseLostError(f"cannot {what} lease {lease.key!r}: the row was deleted")
    owner = current.get(m.OWNER, {}).get("S")
    counter = current.get(m.COUNTER, {}).get("N")
    if owner == lease.owner and counter == str(lease.counter) and cp is not None:
        stored = current.get(m.CHECKPOINT, {}).get("S")
        kind = "checkpoint" if what == "checkpoint" else "pending checkpoint"
        return CheckpointRegressionError(
            f"{kind} {cp} for lease {lease.key!r} is behind the stored checkpoint "
            f"{stored}: checkpoints only move forward"
        )
    return LeaseLostError(
        f"cannot {what} lease {lease.key!r}: {lease.owner!r} no longer holds it (now owner "
        f"{owner!r}, counter {counter}; expected counter {lease.counter}); stop processing it"
    )
