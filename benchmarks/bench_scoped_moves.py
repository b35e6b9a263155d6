"""Keys moved by scoped lease loops on joins and leaves, against the optimum.

Real ``LeaseCoordinator(reads="scoped")`` members on one moto lease table (boto3 over HTTP),
driven tick by tick on a shared FakeClock (``tests/coordinator_fleet.py``): for each
keys-per-member ratio, a fleet of ``--members`` members settles (every key held, loads
within one, no hand-off pending, one baseline), then goes through a run of changes (joins
of new members and graceful leaves, alternating), settling after each. After each change
it counts the keys whose owner in the table changed, against the optimum (the newcomer's
keys once settled, or the leaver's), and the DynamoDB requests the fleet made to follow
the published plan (head reads, chunk reads, publishes).

Baseline in the same process: the same fleets and changes with the published plan turned
off (every member plans ``stable_assignment(members, keys)`` alone, the previous release's
scoped planner). Target (issue 10, item 5): moved <= 1.5x the optimum on one join or leave.

Also the plan's size at fleet scale (100,000 keys x 10,000 members; ``--quick``: 10,000 x
1,000): its payload, compressed size and chunk rows as ``ManifestStore`` stores them, and the
CPU of encoding + digest and of decoding it.

Writes benchmarks/results/scoped_moves.json.

    .venv/bin/python benchmarks/bench_scoped_moves.py [--quick]
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import sys
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report import write_json  # noqa: E402
from hashring import stable_assignment  # noqa: E402
from kinesis.lease_loop.plan import PublishedPlan, decode, encode  # noqa: E402
from kinesis.lease_loop.table.leases import LeaseTable  # noqa: E402
from kinesis.lease_loop.table.manifests import CHUNK_BYTES  # noqa: E402
from kinesis.testing import LocalAWS  # noqa: E402
from tests.coordinator_fleet import Fleet  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TARGET = 1.5


class Run:
    """One fleet on its own table; ``published=False`` turns the published plan off."""

    def __init__(self, aws: LocalAWS, name: str, keys: list[str], members: list[str], *, published: bool):
        self.calls: Counter[str] = Counter()
        self.plan_calls: Counter[str] = Counter()
        client = aws.client("dynamodb")
        client.meta.events.register("before-parameter-build.dynamodb", self._count)
        self.keys = keys
        self.published = published
        self.fleet = Fleet(LeaseTable.open(client, name), keys, [], reads="scoped")
        for member in members:
            self.add(member)

    def _count(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        self.calls[model.name] += 1
        text = str(params.get("Key") or params.get("Item") or params.get("RequestItems") or "")  # the API's params
        if "__manifest__#plan" in text:
            self.plan_calls[model.name] += 1

    def add(self, member: str) -> None:
        coordinator = self.fleet.add(member)
        if not self.published:  # the baseline: no store, so every plan is stable_assignment's
            coordinator._reads._planner.published = PublishedPlan(None, member)

    def settled(self) -> bool:
        fleet = self.fleet
        counts = fleet.counts()
        if sum(counts.values()) != len(self.keys) or max(counts.values()) - min(counts.values()) > 1:
            return False
        digests = set()
        for member in fleet.live():
            coordinator = fleet.coordinators[member]
            if coordinator.status().pending_handoffs:
                return False
            planner = coordinator._reads._planner
            if self.published:
                if planner.base is None or planner.published.pending(planner.base):
                    return False
                assert planner.published.baseline is not None
                digests.add(planner.published.baseline.digest)
        return len(digests) <= 1

    def settle(self, limit: int = 60) -> tuple[dict[str, str | None], int]:
        for rounds in range(limit):
            if self.settled():
                return self.fleet.table_owners(), rounds
            self.fleet.round()
        raise RuntimeError(f"not settled after {limit} rounds: {self.fleet.counts()}")


def run_changes(aws: LocalAWS, n: int, per_member: int, changes: int, *, published: bool) -> dict[str, Any]:
    keys = [f"shard-{i:05d}" for i in range(n * per_member)]
    members = [f"pod-{i:03d}" for i in range(n)]
    name = f"moves-{n}-{per_member}-{'published' if published else 'stable'}"
    run = Run(aws, name, keys, members, published=published)
    owners, _ = run.settle()
    listed = list(members)
    steps = []
    for step in range(changes):
        before_calls, before_plan = Counter(run.calls), Counter(run.plan_calls)
        if step % 2 == 0:
            name_ = f"new-{step:03d}"
            run.add(name_)
            listed.append(name_)
            kind = "join"
        else:
            name_ = sorted(listed)[(step * 7) % len(listed)]
            held = sum(1 for o in owners.values() if o == name_)
            listed.remove(name_)
            run.fleet.sync_membership(listed)
            run.fleet.coordinators[name_].stop(graceful=True, timeout=5)
            kind = "leave"
        new_owners, rounds = run.settle()
        optimum = sum(1 for o in new_owners.values() if o == name_) if kind == "join" else held
        moved = sum(1 for k in new_owners if owners.get(k) != new_owners[k])
        plan_calls = run.plan_calls - before_plan
        steps.append({
            "change": kind, "member": name_, "members_after": len(listed), "moved": moved, "optimum": optimum,
            "ratio": moved / optimum if optimum else None, "rounds_to_settle": rounds,
            "plan_requests": dict(plan_calls), "requests": sum((run.calls - before_calls).values()),
        })
        owners = new_owners
    total_moved = sum(s["moved"] for s in steps)
    total_optimum = sum(s["optimum"] for s in steps)
    ratios = [s["ratio"] for s in steps if s["ratio"] is not None]
    return {
        "members": n, "keys": len(keys), "keys_per_member": per_member, "published": published,
        "moved": total_moved, "optimum": total_optimum, "ratio": total_moved / total_optimum,
        "worst_step_ratio": max(ratios), "steps": steps,
        "takeovers": run.fleet.counter("takeovers"),
        "plan_requests_per_change_per_member": {
            op: sum(s["plan_requests"].get(op, 0) for s in steps) / len(steps) / n
            for op in ("GetItem", "BatchGetItem", "PutItem", "DeleteItem")
        },
    }


def plan_size(n_keys: int, n_members: int) -> dict[str, Any]:
    """The published plan of ``n_keys`` x ``n_members``: bytes, chunk rows and CPU."""
    plan = stable_assignment([f"consumer-{i:05d}" for i in range(n_members)],
                             [f"orders/shardId-{i:012d}" for i in range(n_keys)])
    started = time.process_time()
    payload = encode(plan)
    hashlib.sha256(payload).hexdigest()
    encode_s = time.process_time() - started
    compressed = zlib.compress(payload, 6)
    started = time.process_time()
    decode(zlib.decompress(compressed), "bench")
    decode_s = time.process_time() - started
    return {"keys": n_keys, "members": n_members, "payload_bytes": len(payload),
            "compressed_bytes": len(compressed), "chunk_rows": -(-len(compressed) // CHUNK_BYTES),
            "encode_and_digest_s": round(encode_s, 3), "decode_s": round(decode_s, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer ratios and changes (CI smoke)")
    parser.add_argument("--members", type=int, default=12)
    args = parser.parse_args()
    ratios = [2, 10] if args.quick else [2, 5, 10, 30]
    changes = 4 if args.quick else 8
    console = Console(width=170)
    results = []
    started = time.perf_counter()
    with LocalAWS() as aws:
        for per_member in ratios:
            for published in (True, False):
                result = run_changes(aws, args.members, per_member, changes, published=published)
                results.append(result)
    table = Table(title=f"keys moved over {changes} changes (joins and graceful leaves), {args.members} members")
    for column in ("K/N", "planner", "moved / optimum", "worst change", "rounds to settle (max)",
                   "plan reads per member per change (head, chunks)", "takeovers"):
        table.add_column(column)
    for r in results:
        reads = r["plan_requests_per_change_per_member"]
        table.add_row(
            str(r["keys_per_member"]), "published plan" if r["published"] else "stable_assignment (baseline)",
            f"{r['moved']} / {r['optimum']} = {r['ratio']:.2f}x", f"{r['worst_step_ratio']:.2f}x",
            str(max(s["rounds_to_settle"] for s in r["steps"])),
            f"{reads['GetItem']:.2f}, {reads['BatchGetItem']:.2f}" if r["published"] else "-",
            str(r["takeovers"]),
        )
    console.print(table)
    published = [r for r in results if r["published"]]
    ok = all(r["worst_step_ratio"] <= TARGET for r in published)
    console.print(f"target: every change <= {TARGET}x the optimum with the published plan: {'met' if ok else 'MISSED'}")
    size = plan_size(*((10_000, 1_000) if args.quick else (100_000, 10_000)))
    console.print(
        f"plan at {size['keys']:,} keys x {size['members']:,} members: {size['payload_bytes']:,} bytes of JSON, "
        f"{size['compressed_bytes']:,} compressed in {size['chunk_rows']} chunk rows; encode + digest "
        f"{size['encode_and_digest_s']} s, decode {size['decode_s']} s of CPU")
    path = write_json(RESULTS / "scoped_moves.json", {
        "command": "python benchmarks/bench_scoped_moves.py" + (" --quick" if args.quick else ""),
        "python": platform.python_version(), "seconds": round(time.perf_counter() - started, 1),
        "target": TARGET, "target_met": ok, "results": results, "plan_size": size,
    })
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
