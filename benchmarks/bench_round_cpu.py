"""CPU of one member's lease-loop round at fleet scale, without DynamoDB in the way.

One ``LeaseCoordinator`` over a stub table (its reads return at once, the published plan's
rows are kept in memory: what is measured is the member's own work per round: checking keys, planning, choosing what to read, deciding), with
a static membership of N members and K keys, replicas 1. ``reads="scan"`` (today's default:
the round gets a K-row snapshot and re-plans from current owners) is the baseline, run in the
same process; ``reads="scoped"`` is measured after its start-up round. Issue 10's target: a
steady round under 0.1 s of CPU at 100,000 x 10,000.

    .venv/bin/python benchmarks/bench_round_cpu.py [--quick]

Writes benchmarks/results/round_cpu.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report import write_json  # noqa: E402
from hashring import StaticMembership, chore_owners  # noqa: E402
from kinesis.lease_loop.coordinator import LeaseCoordinator  # noqa: E402
from kinesis.lease_loop.plan import PLAN_CHORE  # noqa: E402
from kinesis.lease_loop.table.leases import LeaseTable  # noqa: E402
from kinesis.lease_loop.table.model import Lease, SessionRow, TableSnapshot  # noqa: E402
from kinesis.lease_loop.timing import FakeClock  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "round_cpu.json"


class StubTable(LeaseTable):
    """Answers at once: a snapshot of K rows held by their planned owners, or no rows."""

    def __init__(self, rows: dict[str, Lease]):
        super().__init__(object(), "stub-table")
        self.rows = rows
        self.items: dict[str, dict[str, Any]] = {}  # the published plan's head and chunks

    def call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        key = (kwargs.get("Key") or kwargs["Item"])["leaseKey"]["S"]
        if operation == "put_item":
            self.items[key] = kwargs["Item"]
            return {}
        if operation == "get_item":
            return {"Item": self.items[key]} if key in self.items else {}
        if operation == "delete_item":
            return {"Attributes": self.items.pop(key, {})}
        raise NotImplementedError(operation)

    def get_items(self, keys: Any, *, consistent: bool = False) -> dict[str, dict[str, Any]]:
        return {k: self.items[k] for k in keys if k in self.items}

    def scan(self, **_: Any) -> TableSnapshot:
        return TableSnapshot(self.rows, {}, {}, 0.0)

    def read_rows(self, keys: Any, members: Any, *, consistent: bool = False
                  ) -> tuple[dict[str, Lease | None], dict[str, SessionRow | None]]:
        return {k: self.rows.get(k) for k in keys}, {m: SessionRow(m, "t", 1) for m in members}

    def renew_session(self, member_id: str, token: str, previous: int | None, *, plan_version: int = 0,
                      **_: Any) -> SessionRow:
        return SessionRow(member_id, token, (previous or 0) + 1, plan_version)

    def create_lease_if_absent(self, key: str, **_: Any) -> Lease | None:
        return None

    def take(self, lease: Lease, owner: str, **_: Any) -> Lease | None:
        return None


def rounds(reads: str, k: int, n: int, count: int) -> dict[str, Any]:
    keys = tuple(f"app/orders/shardId-{i:012d}" for i in range(k))
    members = [f"member-{i:05d}" for i in range(n)]
    # the owner of the plan chore: it publishes the plan in its first round, so its later
    # rounds are the steady state of any member (plan = published baseline); a member alone on
    # a stub table would otherwise wait for a publish forever
    me = chore_owners(PLAN_CHORE, members)[0]
    others = [m for m in members if m != me]
    clock = FakeClock(0.0)
    # every row held by a member that is not me (steady state seen from a member holding nothing
    # it should not: rows of other members are left alone)
    rows = {key: Lease(key, others[i % len(others)], 7) for i, key in enumerate(keys)}
    coordinator = LeaseCoordinator(StubTable(rows), StaticMembership(members, me), keys, reads=reads,
                                   clock=clock, replicas=1)
    started = time.process_time()
    coordinator.tick()
    first = time.process_time() - started
    times = []
    for i in range(count):
        clock.advance(coordinator.scan_interval)
        started = time.process_time()
        coordinator.tick() if i % 3 == 2 else coordinator.refresh()
        times.append(time.process_time() - started)
    if coordinator.status().last_error is not None:  # a failing round would time nothing real
        raise RuntimeError(f"{reads} rounds failed: {coordinator.status().last_error}")
    if reads == "scoped" and coordinator.counters["plans_published"] != 1:
        raise RuntimeError("the measured member did not publish its plan once: not a steady state")
    return {"reads": reads, "keys": k, "members": n, "first_round_s": round(first, 3),
            "median_round_s": round(statistics.median(times), 4), "max_round_s": round(max(times), 4)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 x 1,000 only")
    args = parser.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    scales = [(10_000, 1_000)] if args.quick else [(10_000, 1_000), (100_000, 10_000)]
    results = []
    for k, n in scales:
        for reads, count in (("scan", 3), ("scoped", 12)):
            results.append(rounds(reads, k, n, count))
    table = Table(title="CPU seconds of one member's round (stub table)")
    for col in ("keys x members", "reads", "first round", "median round", "max round", "vs scan"):
        table.add_column(col, justify="right")
    for r in results:
        base = next(b for b in results if b["keys"] == r["keys"] and b["reads"] == "scan")
        table.add_row(f"{r['keys']:,} x {r['members']:,}", r["reads"], f"{r['first_round_s']:.3f}",
                      f"{r['median_round_s']:.4f}", f"{r['max_round_s']:.4f}",
                      f"{r['median_round_s'] / base['median_round_s']:.4f}x")
    Console(width=120).print(table)
    write_json(RESULTS, {"command": "benchmarks/bench_round_cpu.py" + (" --quick" if args.quick else ""),
                         "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
