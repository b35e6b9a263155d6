"""``CoordinatorSettings``: a coordinator's arguments, checked once, defaults filled in.

The durations are checked by :class:`~kinesis.lease_loop.timing.LeaseTiming` (built
here from the keyword arguments unless one is given); everything else a
:class:`~kinesis.lease_loop.coordinator.LeaseCoordinator` takes is checked here, in the
order of its arguments, each error a :class:`~kinesis.errors.ConfigurationError` naming it.

``ResourceKeys``: the keys a member may plan, from its resource provider, checked.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Unpack

from hashring import HashRingError, Membership
from hashring.loads import check_tolerance
from hashring.validation import check_replicas
from kinesis.durations import check_seconds
from kinesis.errors import ConfigurationError, InvalidLeaseKeyError
from kinesis.lease_loop.lease_listener import LeaseListener, NullListener, ResourceProvider
from kinesis.lease_loop.membership import DynamoDBMembership, SessionMembership
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import Checkpoint, TableSnapshot, check_lease_key
from kinesis.lease_loop.timing import Durations, LeaseTiming

log = logging.getLogger(__name__)


def provider_of(resources: ResourceProvider | Iterable[str]) -> ResourceProvider:
    """``resources`` as a provider: a ``callable(snapshot) -> keys`` as is, a fixed collection
    of keys (checked now) as a callable returning it."""
    if callable(resources):
        return resources
    if isinstance(resources, Iterable) and not isinstance(resources, str):
        fixed = tuple(resources)
        for key in fixed:
            check_lease_key(key)
        return lambda _snapshot: fixed
    raise ConfigurationError("resources must be a callable(snapshot) -> keys, or a collection of lease keys")


class ResourceKeys:
    """The provider's answers, each checked once: bad keys are logged and counted, duplicates
    and keys of corrupt rows dropped."""

    def __init__(self, provider: ResourceProvider, member_id: str, count: Callable[[str], None]):
        self._provider = provider
        self._me = member_id
        self._count = count
        self._cache: tuple[Any, TableSnapshot, list[str]] | None = None

    def __call__(self, snapshot: TableSnapshot) -> list[str]:
        """The keys that may be planned now, in the provider's order."""
        listed = self._provider(snapshot)
        cached = self._cache
        if cached is not None and cached[0] is listed and cached[1] is snapshot:
            return cached[2]  # the same provider answer for the same snapshot: already checked
        keys = self._check(listed, snapshot)
        self._cache = (listed, snapshot, keys)
        return keys

    def _check(self, listed: Iterable[str], snapshot: TableSnapshot) -> list[str]:
        keys: list[str] = []
        seen: set[str] = set()
        for key in listed:
            try:
                check_lease_key(key)
            except InvalidLeaseKeyError as exc:
                self._count("lease_loop_errors")
                log.error("%s: resource provider returned a bad key: %s", self._me, exc)
                continue
            if key in seen or key in snapshot.corrupt:
                continue
            seen.add(key)
            keys.append(key)
        return keys


@dataclass(frozen=True)
class LoadBalancing:
    """Balance leases by what they cost, not by count (:func:`hashring.balance_loads`).

    ``source()`` returns what each lease this member holds costs (any non-negative number, one
    unit across the fleet: a Worker passes each shard's CPU seconds per second). It travels on
    the member's session row, written with one renewal every ``interval / 2``; the owner of the
    plan chore reads every member's at most once per ``interval`` and publishes a plan balanced
    by them when a member is out of ``tolerance`` (:meth:`~.plan.PublishedPlan.rebalance`).
    Scoped reads only (the published plan carries the loads)."""

    source: Callable[[], Mapping[str, float]]
    interval: float = 60.0
    tolerance: float = 0.2

    def __post_init__(self) -> None:
        if not callable(self.source):
            raise ConfigurationError(f"LoadBalancing.source must be callable, got {self.source!r}")
        check_seconds("load balance interval", self.interval)
        try:
            check_tolerance(self.tolerance)
        except HashRingError as exc:
            raise ConfigurationError(str(exc)) from None


@dataclass(frozen=True)
class CoordinatorSettings:
    """What a coordinator runs with (see :class:`~kinesis.lease_loop.coordinator.LeaseCoordinator`)."""

    timing: LeaseTiming
    replicas: int
    write_threads: int
    max_concurrent_handoffs: int
    reads: str
    sweep_interval: float
    backup_check_interval: float
    weights: dict[str, float] | None
    listener: LeaseListener
    resources: ResourceProvider
    initial_checkpoint: Checkpoint
    drive: DynamoDBMembership | None
    """The membership to heartbeat and feed the scan, if the coordinator drives one."""
    warmup_ticks: int
    load_balancing: LoadBalancing | None = None

    @classmethod
    def of(
        cls,
        table: LeaseTable,
        membership: Membership,
        resources: ResourceProvider | Iterable[str],
        listener: LeaseListener | None,
        *,
        lease_duration: float | None,
        max_concurrent_handoffs: int,
        replicas: int,
        weights: Mapping[str, float] | None,
        initial_checkpoint: Checkpoint | str,
        drive_membership: bool,
        warmup_ticks: int | None,
        write_threads: int,
        timing: LeaseTiming | None,
        reads: str,
        sweep_interval: float | None,
        backup_check_interval: float | None,
        load_balancing: LoadBalancing | None = None,
        **durations: Unpack[Durations],
    ) -> CoordinatorSettings:
        """Check the coordinator's arguments (``durations``: see :class:`~.timing.Durations`)."""
        if not isinstance(table, LeaseTable):
            raise ConfigurationError(f"table must be a LeaseTable, got {type(table).__name__}")
        if not isinstance(membership, Membership):
            raise ConfigurationError(
                f"membership must implement hashring.Membership (members(), self_id, version), "
                f"got {type(membership).__name__}"
            )
        _check_count("write_threads", write_threads)
        _check_count("max_concurrent_handoffs", max_concurrent_handoffs)
        replicas = check_replicas(replicas)
        if timing is None:
            timing = LeaseTiming.of(10.0 if lease_duration is None else lease_duration,
                                    replicas=replicas, **durations)
        elif not isinstance(timing, LeaseTiming):
            raise ConfigurationError(f"timing must be a LeaseTiming, got {type(timing).__name__}")
        elif any(v is not None for v in durations.values()) or lease_duration is not None:
            raise ConfigurationError(
                "pass either timing= or the durations (lease_duration, tick_interval, ...), not both"
            )
        if reads not in ("scan", "scoped"):
            raise ConfigurationError(f"reads must be 'scan' or 'scoped', got {reads!r}")
        sweep = math.inf if sweep_interval is None else check_seconds("sweep_interval", sweep_interval)
        backup_check = _seconds_or("backup_check_interval", backup_check_interval, timing.lease_duration / 2)
        if weights is not None:
            if not isinstance(weights, Mapping):
                raise ConfigurationError(f"weights must be a mapping of member -> weight, got {weights!r}")
            for member, w in weights.items():
                if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w <= 0:
                    raise ConfigurationError(f"weight of {member!r} must be a finite number > 0, got {w!r}")
        if listener is None:
            listener = NullListener()
        if not isinstance(listener, LeaseListener):
            raise ConfigurationError(
                "listener must have on_lease_acquired, on_lease_lost and on_handoff_requested"
            )
        provider = provider_of(resources)
        checkpoint = Checkpoint.of(initial_checkpoint)
        same_table = isinstance(membership, DynamoDBMembership) and membership.table.table_name == table.table_name
        if isinstance(membership, SessionMembership) and reads != "scoped":
            raise ConfigurationError(
                "a SessionMembership is read by scoped rounds (reads='scoped'); with reads='scan' "
                "use a DynamoDBMembership (heartbeat rows the scans carry)"
            )
        if isinstance(membership, SessionMembership) and membership.table.table_name != table.table_name:
            raise ConfigurationError(
                f"a SessionMembership of table {membership.table.table_name!r} cannot drive a coordinator of "
                f"table {table.table_name!r}: give both the same lease table"
            )
        drive = membership if drive_membership and same_table and isinstance(membership, DynamoDBMembership) else None
        if drive is not None and drive.member_timeout < 2 * timing.tick_interval:
            raise ConfigurationError(
                f"member_timeout ({drive.member_timeout:g} s) must be >= 2 ticks "
                f"({2 * timing.tick_interval:g} s): the coordinator heartbeats once per tick"
            )
        if reads == "scoped" and same_table:
            raise ConfigurationError(
                "reads='scoped' needs a membership that is not read from the lease table's scan "
                "(SessionMembership, KubernetesMembership or StaticMembership): a DynamoDBMembership "
                "in the lease table is fed by the scan this mode avoids"
            )
        if load_balancing is not None and (not isinstance(load_balancing, LoadBalancing) or reads != "scoped"):
            raise ConfigurationError(
                "load_balancing needs a LoadBalancing and reads='scoped' (the published plan carries the "
                f"loads), got {load_balancing!r} with reads={reads!r}")
        if warmup_ticks is None:
            warmup_ticks = 1 if drive is not None else 0
        if isinstance(warmup_ticks, bool) or not isinstance(warmup_ticks, int) or warmup_ticks < 0:
            raise ConfigurationError(f"warmup_ticks must be an int >= 0, got {warmup_ticks!r}")
        return cls(
            timing=timing, replicas=replicas, write_threads=write_threads,
            max_concurrent_handoffs=max_concurrent_handoffs, reads=reads, sweep_interval=sweep,
            backup_check_interval=backup_check, weights=dict(weights) if weights is not None else None,
            listener=listener, resources=provider, initial_checkpoint=checkpoint,
            drive=drive, warmup_ticks=warmup_ticks, load_balancing=load_balancing,
        )


def _check_count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be an int >= 1, got {value!r}")


def _seconds_or(name: str, value: float | None, default: float) -> float:
    return default if value is None else check_seconds(name, value)
