"""The DynamoDB bill of coordination: a request-accounting model of the lease loop and the Worker.

Steady state (no data, no membership change), whole fleet, per second: every request each
member makes to the lease table, with its read and write units by DynamoDB's item-size rules
(4 KB per read unit, half for an eventually consistent read, a Scan charged on the sum of its
items per 1 MB page; 1 KB per write unit). ``benchmarks/bench_lease_cost.py`` checks the model
against the requests counted on moto (within 10%) and runs it at fleet scale; ``hashring cost``
prints it for a user's fleet, in units and dollars, beside KCL 3.x's design.

* :func:`default_worker`: a Worker as configured by default (scoped reads, the member list kept
  in the table by ``SessionMembership``); :func:`scoped_worker`: with a membership kept outside
  the table (Kubernetes); :func:`scoped`: a ``LeaseCoordinator(reads="scoped")`` without the
  Worker's shard manifest; :func:`scan_loop`: ``reads="scan"``;
* :func:`kcl3`: KCL 3.x as documented (a leader scans the lease and worker-metrics tables every
  2 failover times, workers query a key-only ``leaseOwner`` index, every lease renewed every
  failover / 3);
* :func:`bill`: a cost per shard-hour, per member-hour and per month, at on-demand prices given
  as :class:`Prices`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

KB = 1024
READ_UNIT_BYTES = 4 * KB
SCAN_PAGE_BYTES = 1024 * KB
LEASE_DURATION = 10.0
"""The default lease duration (``WorkerConfig.lease_duration``, KCL's failover time), seconds."""
SHARD_SYNC_INTERVAL = 30.0
"""``WorkerConfig.shard_sync_interval``'s default (the shard manifest is polled every half of it)."""
HOURS_PER_MONTH = 730.0


@dataclass(frozen=True)
class Sizes:
    """Item sizes in bytes (lease and session rows as ``bench_lease_cost.py`` measured them on
    moto: ``item_sizes`` in its results; a test keeps the two equal)."""

    lease_row: int = 460
    member_row: int = 150
    index_entry: int = 100  # KCL 3.x key-only leaseOwner index entry (key + owner)
    head_row: int = 120  # a manifest's head row
    session_row: int = 87  # one per member
    metrics_row: int = 300  # KCL 3.x worker metrics row


@dataclass(frozen=True)
class Cost:
    """Per second, for the whole fleet."""

    read_requests: float
    rcu: float
    write_requests: float
    wcu: float
    scans: float

    def per_member(self, n: int) -> dict[str, float]:
        """The same figures per member (``n`` members)."""
        return {k: v / n for k, v in asdict(self).items()}


def scan_rcu(nbytes: float, consistent: bool) -> tuple[float, float]:
    """(requests, read units) of one paginated scan over ``nbytes`` of items."""
    pages = max(1, math.ceil(nbytes / SCAN_PAGE_BYTES))
    units = sum(math.ceil(min(SCAN_PAGE_BYTES, nbytes - p * SCAN_PAGE_BYTES) / READ_UNIT_BYTES) for p in range(pages))
    return pages, units * (1.0 if consistent else 0.5)


def write_units(size: int) -> int:
    """Write units of one write of an item of ``size`` bytes."""
    return max(1, math.ceil(size / KB))


def scan_loop(k: int, n: int, s: Sizes = Sizes(), lease: float = LEASE_DURATION, *,
              heartbeats: bool = True) -> Cost:
    """``reads="scan"``: every member scans the whole table (strongly consistent) every round
    (a tick and two light rounds per tick), renews its session row (session leases: no lease
    row) and, with a DynamoDBMembership, heartbeats every tick."""
    tick = lease / 3
    rounds = 3 / tick
    table_bytes = k * s.lease_row + n * s.session_row + (n * s.member_row if heartbeats else 0)
    pages, rcu = scan_rcu(table_bytes, consistent=True)
    sessions = n / tick
    heartbeat = n / tick if heartbeats else 0.0
    return Cost(n * rounds * pages, n * rounds * rcu, sessions + heartbeat,
                sessions * write_units(s.session_row) + heartbeat * write_units(s.member_row),
                n * rounds * pages)


def kcl3(k: int, n: int, s: Sizes = Sizes(), lease: float = LEASE_DURATION) -> Cost:
    """KCL 3.x as documented: a leader (elected through a lock table) scans the lease table
    (eventually consistent) and the worker-metrics table every 2 x failover time; every worker
    queries the key-only ``leaseOwner`` index for its own leases every failover time, renews
    each lease every failover / 3 and reports its metrics every 30 s."""
    assign = 2 * lease
    pages, rcu = scan_rcu(k * s.lease_row, consistent=False)
    mpages, mrcu = scan_rcu(n * s.metrics_row, consistent=False)
    own = k / n
    query_rcu = 0.5 * max(1, math.ceil(own * s.index_entry / READ_UNIT_BYTES))
    renew = k / (lease / 3)
    metrics = n / 30.0
    reads = (pages + mpages) / assign + n / lease
    return Cost(reads, (rcu + mrcu) / assign + n * query_rcu / lease, renew + metrics,
                renew * write_units(s.lease_row) + metrics * write_units(s.metrics_row), (pages + mpages) / assign)


def scoped(k: int, n: int, s: Sizes = Sizes(), lease: float = LEASE_DURATION, *,
           replicas: int = 1, check: float | None = None, sweep: float | None = None,
           session_list: bool = False, recheck: float | None = 30 * LEASE_DURATION) -> Cost:
    """``reads="scoped"``: no scan per round. Each member reads the session rows of its
    ``replicas`` predecessors (one BatchGetItem, eventually consistent; ``session_list``: the
    member list's head in the same request) every ``check`` (default ``lease / 2``); the only
    writes are session renewals, one per member per tick; every member re-reads the published
    plan's head every ``recheck`` (a backstop; None: left out); optionally two members sweep
    the table every ``sweep`` (off by default)."""
    tick = lease / 3
    # a check runs on the first round (a tick or a light round, lease / 9 apart) after it is due
    check = (lease / 2 if check is None else check) + lease / 18
    watched = min(max(replicas, 1), n - 1)  # with replicas=0, still the predecessor's session
    per_item = 0.5 * max(1, math.ceil(s.session_row / READ_UNIT_BYTES))
    head_item = 0.5 * max(1, math.ceil(s.head_row / READ_UNIT_BYTES))
    renew = n / tick
    renew_wcu = n / tick * write_units(s.session_row)
    batch = n * (1 if watched or session_list else 0) / check
    rcu = n * (watched * per_item + (head_item if session_list else 0.0)) / check
    rechecks = n / recheck if recheck else 0.0
    batch, rcu = batch + rechecks, rcu + 0.5 * rechecks
    if sweep is None:
        return Cost(batch, rcu, renew, renew_wcu, 0.0)
    pages, sweep_rcu = scan_rcu(k * s.lease_row + n * s.session_row, consistent=False)
    sweepers = min(2, n)
    return Cost(batch + sweepers * pages / sweep, rcu + sweepers * sweep_rcu / sweep,
                renew, renew_wcu, sweepers * pages / sweep)


def scoped_worker(k: int, n: int, s: Sizes = Sizes(), lease: float = LEASE_DURATION, *, streams: int = 1,
                  shard_sync: float = SHARD_SYNC_INTERVAL, poll: float | None = None,
                  sweep: float | None = None, check: float | None = None, session_list: bool = False,
                  recheck: float | None = 30 * LEASE_DURATION) -> Cost:
    """A Worker with scoped reads: :func:`scoped` plus the shard manifest of each stream: every
    member reads its head row (eventually consistent) every ``poll`` (default ``shard_sync /
    2``); the chore owner and its backup read it strongly consistent every tick, and the owner
    renews it every tick; nothing else in steady state (new versions only on resharding)."""
    tick = lease / 3
    base = scoped(k, n, s, lease, sweep=sweep, check=check, session_list=session_list, recheck=recheck)
    head_rcu = max(1, math.ceil(s.head_row / READ_UNIT_BYTES))
    polls = n * streams / (poll if poll is not None else shard_sync / 2)
    watchers = min(2, n) * streams / tick
    renew = streams / tick
    return Cost(base.read_requests + polls + watchers, base.rcu + 0.5 * head_rcu * polls + head_rcu * watchers,
                base.write_requests + renew, base.wcu + renew * write_units(s.head_row), base.scans)


def default_worker(k: int, n: int, s: Sizes = Sizes(), lease: float = LEASE_DURATION, *,
                   streams: int = 1) -> Cost:
    """A Worker with its defaults: scoped reads, the member list kept by ``SessionMembership``
    (its head read with the watched session rows)."""
    return scoped_worker(k, n, s, lease, streams=streams, session_list=True)


@dataclass(frozen=True)
class Prices:
    """DynamoDB on-demand prices, USD per million request units (defaults: us-east-1 since
    November 2024; pass your region's)."""

    read_per_million: float = 0.125
    write_per_million: float = 0.625


@dataclass(frozen=True)
class Bill:
    """What a fleet of ``members`` coordinating ``shards`` leases costs in steady state."""

    shards: int
    members: int
    rcu_per_s: float
    wcu_per_s: float
    requests_per_member_per_minute: float
    read_units_per_shard_hour: float
    write_units_per_shard_hour: float
    usd_per_shard_hour: float
    usd_per_member_hour: float
    usd_per_month: float


def bill(cost: Cost, shards: int, members: int, prices: Prices = Prices()) -> Bill:
    """The bill of ``cost`` (a fleet's steady state) at ``prices``: read units on demand are
    the model's read units (one per 4 KB strongly consistent, half eventually consistent)."""
    reads_h, writes_h = cost.rcu * 3600, cost.wcu * 3600
    usd_h = (reads_h * prices.read_per_million + writes_h * prices.write_per_million) / 1e6
    return Bill(shards, members, cost.rcu, cost.wcu,
                (cost.read_requests + cost.write_requests) / members * 60,
                reads_h / shards, writes_h / shards, usd_h / shards, usd_h / members, usd_h * HOURS_PER_MONTH)


def designs(shards: int, members: int, lease: float = LEASE_DURATION, *, streams: int = 1,
            sizes: Sizes = Sizes()) -> dict[str, Cost]:
    """The steady state of each design ``hashring cost`` compares, by name."""
    return {
        "default Worker": default_worker(shards, members, sizes, lease, streams=streams),
        "Worker, Kubernetes membership": scoped_worker(shards, members, sizes, lease, streams=streams),
        "scan loop (reads='scan')": scan_loop(shards, members, sizes, lease),
        "KCL 3.x (as documented)": kcl3(shards, members, sizes, lease),
    }
