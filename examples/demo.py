"""Placement demo (stand-in until the lease-loop demo lands).

Five pods, 40 shards: shows how many leases each pod may acquire with the Knock
range split, with rendezvous, and with the balanced planner, and how many keys
move when a sixth pod joins. Exits non-zero if the planner is not balanced.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from hashring import HashRing, StaticMembership, plan_assignment

SHARDS = [f"shardId-{i:012d}" for i in range(40)]
PODS = [f"consumer-{i}" for i in range(5)]


def ring_counts(pods: list[str], strategy: str) -> dict[str, dict[str, bool]]:
    return {
        p: {s: HashRing(StaticMembership(pods, p), strategy).can_acquire_lease("orders", s)
            for s in SHARDS}
        for p in pods
    }


def main() -> int:
    console = Console()
    table = Table(title="leases per pod (40 shards, consumer 'orders')")
    table.add_column("strategy")
    for p in [*PODS, "consumer-5"]:
        table.add_column(p, justify="right")
    table.add_column("moved on join", justify="right")
    for strategy in ("range", "rendezvous"):
        before = ring_counts(PODS, strategy)
        after = ring_counts([*PODS, "consumer-5"], strategy)
        owner_before = {s: p for p, d in before.items() for s, ok in d.items() if ok}
        owner_after = {s: p for p, d in after.items() for s, ok in d.items() if ok}
        moved = sum(owner_before[s] != owner_after[s] for s in SHARDS)
        table.add_row(strategy, *(str(sum(after[p].values())) for p in after), str(moved))
    keys = [f"orders/{s}" for s in SHARDS]
    start = plan_assignment(PODS, keys)
    current = {k: start.owner(k) for k in keys}
    plan = plan_assignment([*PODS, "consumer-5"], keys, current)
    counts = plan.counts()
    table.add_row("balanced planner", *(str(counts[p]) for p in counts),
                  str(plan.moves_from(current)))
    console.print(table)
    ok = max(counts.values()) - min(counts.values()) <= 1
    console.print("[green]balanced[/]" if ok else "[red]NOT balanced[/]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
