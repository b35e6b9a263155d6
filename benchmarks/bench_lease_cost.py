"""What the lease loop costs in DynamoDB, measured on moto and modelled at fleet scale.

Two parts:

1. **Measured** (moto server over HTTP, in-process members on a shared fake clock driven by a
   discrete-event loop, as in ``bench_leases.py``): steady state (no data, no membership
   change) of ``LeaseCoordinator`` members (StaticMembership, replicas=1, default timing) at
   200 and 2,000 leases with 20 members, with ``reads="scan"`` (today's default: a scan
   every round), ``reads="scoped"`` (no scan in steady state) and ``manifest`` (scoped reads with
   the Worker's shard manifest as the resource provider: one member lists a moto stream of that
   many shards and publishes the manifest, the others poll its head row, as a
   ``WorkerConfig(reads="scoped")`` does). Every DynamoDB call of every member is
   counted by operation, with its read and write capacity units computed from the items it
   returned or wrote (DynamoDB's item-size rules: 4 KB per RCU, a Scan or Query charged
   on the sum of its items per page, BatchGetItem and GetItem per item; 1 KB per WCU).
2. **Modelled**: a request-accounting model of the same loop, checked against part 1
   (requests and RCU within 10%), then run at 1,000 x 100, 10,000 x 1,000 and
   100,000 x 10,000 next to KCL 3.x's design (a leader scans the table every 20 s,
   workers query a key-only ``leaseOwner`` index every 10 s; renewals every 10/3 s) and
   all with the same item sizes (``docs/fleet-scale.md``).

    .venv/bin/python benchmarks/bench_lease_cost.py [--quick]

Writes benchmarks/results/lease_cost.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import platform
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_leases import SCAN, TICK, D, Scheduler  # noqa: E402
from benchmarks.report import write_json  # noqa: E402
from hashring import StaticMembership  # noqa: E402
from kinesis.consumer.discovery.manifest import ShardManifestSync  # noqa: E402
from kinesis.consumer.discovery.shards import ShardDiscovery  # noqa: E402
from kinesis.consumer.worker.config import StreamConfig  # noqa: E402
from kinesis.cost import Sizes, kcl3, scan_loop, scoped, scoped_worker  # noqa: E402
from kinesis.lease_loop.coordinator import LeaseCoordinator  # noqa: E402
from kinesis.lease_loop.membership import SessionMembership  # noqa: E402
from kinesis.lease_loop.table.leases import LeaseTable  # noqa: E402
from kinesis.lease_loop.table.model import SESSION_PREFIX  # noqa: E402
from kinesis.lease_loop.timing import FakeClock  # noqa: E402
from kinesis.testing import LocalAWS  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "lease_cost.json"
KB = 1024
RCU_BYTES = 4 * KB
SCAN_PAGE = 1024 * KB
SHARD_SYNC = 30.0  # WorkerConfig.shard_sync_interval's default (the manifest is polled every half of it)


# --- DynamoDB capacity accounting ------------------------------------------------------


def attribute_size(value: dict[str, Any]) -> int:
    """Bytes of one attribute value by DynamoDB's rules (strings UTF-8, numbers ~digits/2+1)."""
    (kind, v), = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "N":
        return (len(v.lstrip("-").replace(".", "").lstrip("0")) + 1) // 2 + 1
    if kind == "B":
        return len(v)
    if kind == "BOOL" or kind == "NULL":
        return 1
    if kind in ("SS", "NS", "BS"):
        return sum(attribute_size({kind[0]: x}) for x in v)
    if kind == "L":
        return 3 + sum(attribute_size(x) + 1 for x in v)
    if kind == "M":
        return 3 + sum(len(k.encode()) + attribute_size(x) + 1 for k, x in v.items())
    return 0


def item_size(item: dict[str, Any]) -> int:
    """An item's size: attribute names plus values."""
    return sum(len(name.encode()) + attribute_size(value) for name, value in item.items())


@dataclass
class Usage:
    """Requests and capacity units of one member, by operation."""

    requests: Counter[str]
    rcu: Counter[str]
    wcu: Counter[str]
    read_bytes: Counter[str]

    @classmethod
    def new(cls) -> Usage:
        return cls(Counter(), Counter(), Counter(), Counter())


def charge(usage: Usage, operation: str, params: dict[str, Any], parsed: dict[str, Any]) -> None:
    """Account one call (strongly consistent reads cost 1 RCU per 4 KB, eventual half)."""
    usage.requests[operation] += 1
    factor = 1.0 if params.get("ConsistentRead") else 0.5
    if operation in ("Scan", "Query"):
        size = sum(item_size(i) for i in parsed.get("Items", []))
        usage.read_bytes[operation] += size
        usage.rcu[operation] += factor * max(1, math.ceil(size / RCU_BYTES))
    elif operation == "GetItem":
        size = item_size(parsed.get("Item", {}))
        usage.read_bytes[operation] += size
        usage.rcu[operation] += factor * max(1, math.ceil(size / RCU_BYTES))
    elif operation == "BatchGetItem":
        for items in parsed.get("Responses", {}).values():
            for item in items:
                size = item_size(item)
                usage.read_bytes[operation] += size
                usage.rcu[operation] += factor * max(1, math.ceil(size / RCU_BYTES))
    elif operation in ("PutItem", "UpdateItem", "DeleteItem"):
        written = params.get("Item") or parsed.get("Attributes") or {}
        usage.wcu[operation] += max(1, math.ceil(item_size(written) / KB))


def metered_table(aws: LocalAWS, name: str, usage: Usage) -> LeaseTable:
    """A LeaseTable on its own client whose every call is charged to ``usage``."""
    client = aws.client("dynamodb")

    def keep_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["bench_params"] = dict(params)

    def after_call(model: Any, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        charge(usage, model.name, context.get("bench_params", {}), parsed)

    client.meta.events.register("provide-client-params.dynamodb", keep_params)
    client.meta.events.register("after-call.dynamodb", after_call)
    return LeaseTable(client, name)


# --- part 1: measured on moto -----------------------------------------------------------


def measure(aws: LocalAWS, n_keys: int, n_members: int, window: float, reads: str) -> dict[str, Any]:
    """Steady-state usage per member per minute of the loop with ``reads`` ("scan": a scan
    every round; "scoped": no scan in steady state; "manifest": scoped, keys from the shard
    manifest of a moto stream with ``n_keys`` shards; "default": the Worker's default, the
    manifest with the member list in the table, a SessionMembership), members listed by a
    StaticMembership except with "default"."""
    name = f"cost-{reads}-{n_keys}-{n_members}-{time.monotonic_ns()}"
    observer = LeaseTable.open(aws.client("dynamodb"), name)
    clock = FakeClock(0.0)
    scheduler = Scheduler(clock)
    keys = [f"app/orders/shardId-{i:012d}" for i in range(n_keys)]
    names = [f"member-{i:02d}" for i in range(n_members)]
    usages = {m: Usage.new() for m in names}
    coordinators: dict[str, LeaseCoordinator] = {}
    stream = StreamConfig(name, "app", "TRIM_HORIZON")
    if reads in ("manifest", "default"):
        aws.client("kinesis").create_stream(StreamName=name, ShardCount=n_keys)
    for i, member in enumerate(names):
        table = metered_table(aws, name, usages[member])
        membership: Any = SessionMembership(table, member, clock=clock) if reads == "default" \
            else StaticMembership(names, member)
        resources: Any = keys
        if reads in ("manifest", "default"):
            # one ListShards page (moto pages NextToken follow-ups unlike AWS; the tests patch that)
            discovery = ShardDiscovery(aws.client("kinesis"), name, cache_ttl=SHARD_SYNC, page_size=10000)
            resources = ShardManifestSync(
                table, [(stream, discovery)], member_id=member, membership=membership, lease_duration=D,
                tick_interval=TICK, shard_sync_interval=SHARD_SYNC, replicas=1, clock=clock,
            )
        coordinator = LeaseCoordinator(table, membership, resources, lease_duration=D, replicas=1, clock=clock,
                                       reads="scan" if reads == "scan" else "scoped")
        coordinators[member] = coordinator
        phase = i * TICK / n_members
        scheduler.every(f"{member}/tick", phase, TICK, coordinator.tick)
        for j in (1, 2):
            scheduler.every(f"{member}/scan{j}", phase + j * SCAN, TICK, coordinator.refresh)

    def settled() -> bool:
        counts = [len(c.held_keys()) for c in coordinators.values()]
        listed = all(len(c.membership.members()) == n_members for c in coordinators.values())
        return listed and sum(counts) == n_keys and max(counts) - min(counts) <= 1


    took = scheduler.run_until(settled, 20 * D)
    if took is None:
        raise RuntimeError(f"{n_keys} x {n_members} did not settle in 20 lease durations")
    scheduler.run_until(lambda: False, 2 * D)  # hand-offs finished, rows steady
    before = {m: (Counter(u.requests), Counter(u.rcu), Counter(u.wcu), Counter(u.read_bytes)) for m, u in usages.items()}
    scheduler.run_until(lambda: False, window)
    scale = 60.0 / window
    per_op: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for member, usage in usages.items():
        req0, rcu0, wcu0, bytes0 = before[member]
        for op in set(usage.requests) | set(req0):
            per_op[op]["requests"] += (usage.requests[op] - req0[op]) * scale / n_members
            per_op[op]["rcu"] += (usage.rcu[op] - rcu0[op]) * scale / n_members
            per_op[op]["wcu"] += (usage.wcu[op] - wcu0[op]) * scale / n_members
            per_op[op]["read_bytes"] += (usage.read_bytes[op] - bytes0[op]) * scale / n_members
    rows = observer.scan().leases
    lease_row = sum(item_size(_raw_item(observer, k)) for k in list(rows)[:20]) / min(20, len(rows))
    session_row = item_size(_raw_item(observer, SESSION_PREFIX + names[0]))
    for c in coordinators.values():
        c.stop(graceful=False)
    totals = {k: round(sum(v[k] for v in per_op.values()), 1) for k in ("requests", "rcu", "wcu", "read_bytes")}
    return {
        "reads": reads,
        "leases": n_keys,
        "members": n_members,
        "window_s": window,
        "settle_s": round(took, 1),
        "lease_row_bytes": round(lease_row),
        "session_row_bytes": session_row,
        "per_member_per_minute": {op: {k: round(x, 1) for k, x in v.items()} for op, v in sorted(per_op.items())},
        "per_member_per_minute_total": totals,
        "scans_per_member_per_minute": round(per_op.get("Scan", {}).get("requests", 0.0), 1),
    }


def _raw_item(table: LeaseTable, key: str) -> dict[str, Any]:
    response = table.client.get_item(TableName=table.table_name, Key={"leaseKey": {"S": key}}, ConsistentRead=True)
    return dict(response.get("Item", {}))


# --- part 2: the model (kinesis.cost) ------------------------------------------------------


SCALES = ((1_000, 100), (10_000, 1_000), (100_000, 10_000))


def model_table(sizes: Sizes) -> list[dict[str, Any]]:
    rows = []
    for k, n in SCALES:
        costs = {"current": scan_loop(k, n, sizes), "scoped": scoped(k, n, sizes),
                 "scoped_worker": scoped_worker(k, n, sizes),
                 "default_worker": scoped_worker(k, n, sizes, session_list=True),
                 "kcl3": kcl3(k, n, sizes),
                 # backup_check_interval = a tick instead of D/2 (docs/fleet-scale.md)
                 "scoped_worker_tick_check": scoped_worker(k, n, sizes, check=D / 3)}
        rows.append({
            "leases": k, "members": n,
            **{name: {"fleet": {f: round(v, 2) for f, v in asdict(c).items()},
                      "per_member": {f: round(v, 4) for f, v in c.per_member(n).items()}}
               for name, c in costs.items()},
            "fleet_rcu_vs_kcl3": {name: round(c.rcu / costs["kcl3"].rcu, 2) for name, c in costs.items()},
            "list_shards_per_s": {"scan": round(n / SHARD_SYNC, 2), "scoped_worker": round(1 / SHARD_SYNC, 3)},
        })
    return rows


# --- report ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller fleet and window (CI smoke)")
    parser.add_argument("--scan-large", action="store_true",
                        help="also measure the scan loop at the large size (slow: ~1 h on 2 cores; "
                             "by default the scan loop is measured at the small size and modelled above it)")
    parser.add_argument("--model-only", action="store_true",
                        help="reuse the measured part of the last results file; recompute the model")
    parser.add_argument("--only", default="",
                        help="comma-separated loops to measure again (scan, scoped, manifest, default); the "
                             "others' measurements are kept from the last results file")
    args = parser.parse_args(argv)
    only = [x for x in args.only.split(",") if x]
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from rich.console import Console
    from rich.table import Table

    console = Console(width=150)
    n_members = 10 if args.quick else 20
    sizes_measured = (100, 1000) if args.quick else (200, 2000)
    window = 30.0 if args.quick else 60.0
    measured: list[dict[str, Any]] = []
    if args.model_only:
        previous = json.loads(RESULTS.read_text())
        measured = previous["measured"]
        n_members = measured[0]["members"]
        args.quick = previous["command"].endswith("--quick")
    elif only:
        previous = json.loads(RESULTS.read_text())
        measured = [m for m in previous["measured"] if m["reads"] not in only]
    with contextlib.ExitStack() if args.model_only else LocalAWS() as aws:
        for reads in () if args.model_only else [r for r in ("scan", "scoped", "manifest", "default")
                                                  if not only or r in only]:
            for n_keys in sizes_measured:
                if reads == "scan" and n_keys != sizes_measured[0] and not (args.scan_large or args.quick):
                    continue
                started = time.perf_counter()
                result = measure(aws, n_keys, n_members, window, reads)
                result["wall_s"] = round(time.perf_counter() - started, 1)
                measured.append(result)
                console.print(f"measured {reads} {n_keys} x {n_members} in {result['wall_s']} s")
    sizes = Sizes(lease_row=measured[0]["lease_row_bytes"],
                  session_row=measured[0].get("session_row_bytes", Sizes.session_row))
    checks = []
    for m in measured:
        fn = {"scan": scan_loop, "scoped": scoped, "manifest": scoped_worker,
              "default": scoped_worker}[m["reads"]]
        # the measured window holds no backstop read of the plan (every 30 D)
        kwargs: dict[str, Any] = {"heartbeats": False} if m["reads"] == "scan" else {"recheck": None}
        if m["reads"] == "default":
            kwargs["session_list"] = True
        model = fn(m["leases"], m["members"], sizes, **kwargs).per_member(m["members"])
        got = m["per_member_per_minute_total"]
        checks.append({
            "reads": m["reads"], "leases": m["leases"], "members": m["members"],
            "requests_measured": got["requests"],
            "requests_model": round((model["read_requests"] + model["write_requests"]) * 60, 1),
            "rcu_measured": got["rcu"], "rcu_model": round(model["rcu"] * 60, 1),
        })
    for c in checks:
        c["requests_error"] = round(c["requests_model"] / c["requests_measured"] - 1, 3)
        c["rcu_error"] = round(c["rcu_model"] / c["rcu_measured"] - 1, 3) if c["rcu_measured"] else None
    modelled = model_table(sizes)

    t = Table(title=f"Measured on moto: per member per minute, steady state, {n_members} members")
    for col in ("reads", "leases", "operation", "requests", "RCU", "WCU", "read KB"):
        t.add_column(col, justify="right")
    for m in measured:
        for op, v in m["per_member_per_minute"].items():
            t.add_row(m["reads"], str(m["leases"]), op, f"{v['requests']:.1f}", f"{v['rcu']:.1f}",
                      f"{v['wcu']:.1f}", f"{v['read_bytes'] / KB:.1f}")
    console.print(t)
    growth = {}
    for reads in ("scan", "scoped", "manifest", "default"):
        pair = [m for m in measured if m["reads"] == reads]
        if len(pair) != 2:
            continue
        small, large = pair
        reads_small = small["per_member_per_minute_total"]["requests"] - sum(
            v["requests"] for op, v in small["per_member_per_minute"].items() if op in ("UpdateItem", "PutItem"))
        reads_large = large["per_member_per_minute_total"]["requests"] - sum(
            v["requests"] for op, v in large["per_member_per_minute"].items() if op in ("UpdateItem", "PutItem"))
        growth[reads] = {
            "read_requests_ratio": round(reads_large / reads_small, 2) if reads_small else None,
            "rcu_ratio": round(large["per_member_per_minute_total"]["rcu"] / small["per_member_per_minute_total"]["rcu"], 2),
            "scans_per_member_per_minute": [small["scans_per_member_per_minute"], large["scans_per_member_per_minute"]],
        }
        console.print(f"{reads}: per-member reads at {large['leases']} vs {small['leases']} leases: "
                      f"{growth[reads]['read_requests_ratio']}x requests, {growth[reads]['rcu_ratio']}x RCU "
                      f"(issue 10 target <= 1.2x); scans/member/min {growth[reads]['scans_per_member_per_minute']} (target 0)")
    v = Table(title="Model vs measured (per member per minute)")
    for col in ("loop, leases", "requests meas.", "requests model", "err", "RCU meas.", "RCU model", "err"):
        v.add_column(col, justify="right")
    for c in checks:
        rcu_err = "-" if c["rcu_error"] is None else f"{c['rcu_error']:+.1%}"
        v.add_row(f"{c['reads']} {c['leases']}", str(c["requests_measured"]), str(c["requests_model"]),
                  f"{c['requests_error']:+.1%}", str(c["rcu_measured"]), str(c["rcu_model"]), rcu_err)
    console.print(v)
    f = Table(title="Model at fleet scale: fleet RCU/s (WCU/s); reads as a multiple of KCL 3.x's")
    names = ("current", "scoped", "scoped_worker", "default_worker", "kcl3")
    for col in ("leases x members", "scan", "scoped coordinator", "scoped Worker", "default Worker", "KCL 3.x",
                "scan/KCL3", "scoped/KCL3", "Worker/KCL3", "default/KCL3"):
        f.add_column(col, justify="right")
    for r in modelled:
        f.add_row(f"{r['leases']:,} x {r['members']:,}",
                  *(f"{r[n]['fleet']['rcu']:,.1f} ({r[n]['fleet']['wcu']:,.0f})" for n in names),
                  *(f"{r['fleet_rcu_vs_kcl3'][n]:,.2f}" for n in ("current", "scoped", "scoped_worker",
                                                                   "default_worker")))
    console.print(f)
    write_json(RESULTS, {
        "machine": platform.platform(),
        "command": "benchmarks/bench_lease_cost.py" + (" --quick" if args.quick else ""),
        "lease_duration_s": D,
        "measured": measured,
        "model_check": checks,
        "growth_2000_vs_200": growth,
        "item_sizes": asdict(sizes),
        "modelled": modelled,
    })
    console.print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
