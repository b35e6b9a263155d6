"""The tables of docs/benchmarks.md, from a bench_peers.py result file.

    .venv/bin/python -m benchmarks.peers.markdown [benchmarks/results/peers.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _f(x: Any) -> str:
    return "never" if x is None else f"{x:g}" if isinstance(x, float | int) else str(x)


def lead_table(results: dict[str, Any]) -> str:
    out = ["| size | peer | cold: every shard processed | cold: all leases held | cold: balanced (stable) | "
           "join: newcomer's 1st lease | join: balanced (stable) | SIGTERM: victim's leases held again | "
           "SIGKILL: same | end balanced after SIGKILL | duplicates (by phase) | lost |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for size, runs in results["runs"].items():
        for name, r in runs.items():
            if "error" in r:
                out.append(f"| {size} | {name} | error: {r['error']} |" + " |" * 10)
                continue
            ph = r["phases"]
            rec = r.get("records")
            dups = "-" if rec is None else (f"{rec['duplicates']} ({', '.join(f'{k} {v}' for k, v in rec['duplicates_by_phase'].items())})"
                                             if rec["duplicates"] else "0")
            lost = "-" if rec is None else str(rec["lost"])
            cold, join, term, kill = ph["cold_start"], ph["join"], ph["sigterm"], ph["sigkill"]
            sim = " (simulated)" if rec is None else ""
            out.append(
                f"| {size} | {name}{sim} | {_f(cold.get('all_processed_s')) if rec else '-'} | "
                f"{_f(cold.get('all_owned_s'))} | {_f(cold.get('balanced_s'))} ({_f(cold.get('stable_s'))}) | "
                f"{_f(join.get('newcomer_first_lease_s'))} | {_f(join.get('balanced_s'))} ({_f(join.get('stable_s'))}) | "
                f"{_f(term.get('leases_back_s'))} | {_f(kill.get('leases_back_s'))} | "
                f"{'yes' if kill.get('stable_s') is not None else 'no'} | {dups} | {lost} |")
    return "\n".join(out)


def requests_table(results: dict[str, Any]) -> str:
    out = ["| size | peer | window | members | DynamoDB req/member/min (checkpoint writes apart) | "
           "Kinesis req/member/min | other | CPU % per member (mean) |", "|---|---|---|---|---|---|---|---|"]
    for size, runs in results["runs"].items():
        for name, r in runs.items():
            if "windows" not in r:
                continue
            for w in ("steady", "idle"):
                win = r["windows"][w]
                members = win["members"]
                n = max(1, len(members))
                ops: dict[str, dict[str, float]] = {}
                for m in members.values():
                    for service, by_op in m["requests_per_minute"].items():
                        for op, rate in by_op.items():
                            ops.setdefault(service, {}).setdefault(op, 0.0)
                            ops[service][op] += rate / n
                ddb = ops.pop("dynamodb", {})
                ckpt = ddb.pop("UpdateItem (checkpoint)", 0.0)
                kin = ops.pop("kinesis", {})

                def fmt(d: dict[str, float]) -> str:
                    total = sum(d.values())
                    return f"**{total:.0f}**: " + ", ".join(f"{op} {v:.0f}" for op, v in sorted(d.items())) if d else "0"

                other = "; ".join(f"{s}: {fmt(d)}" for s, d in sorted(ops.items())) or "-"
                out.append(f"| {size} | {name} | {w} ({win['seconds']:g} s) | {len(members)} | {fmt(ddb)} + "
                           f"checkpoints {ckpt:.0f} | {fmt(kin)} | {other} | {_f(win['mean_cpu_percent'])} |")
    return "\n".join(out)


def sims_table(results: dict[str, Any]) -> str:
    out = ["| size | loop | store requests/member/min (steady) | double-held lease-seconds | final leases per member |",
           "|---|---|---|---|---|"]
    for size, runs in results["runs"].items():
        for name, r in runs.items():
            if "records" in r or "error" in r:
                continue
            req = r.get("dynamodb_requests_per_member_per_minute_mean", r.get("store_requests_per_member_per_minute_mean"))
            dbl = r.get("double_held_lease_seconds", r.get("double_processing_partition_seconds"))
            out.append(f"| {size} | {name} | {_f(req)} | {_f(dbl)} | {r['final_counts']} |")
    return "\n".join(out)


def model_table(results: dict[str, Any]) -> str:
    rows = results["fleet_model"]
    loops = list(rows[0]["requests_per_member_per_minute"])
    out = ["| leases x members | " + " | ".join(loops) + " |", "|---" * (len(loops) + 1) + "|"]
    for r in rows:
        out.append(f"| {r['leases']:,} x {r['members']:,} | "
                   + " | ".join(f"{r['requests_per_member_per_minute'][x]:,.1f}" for x in loops) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    path = Path(args[0]) if args else ROOT / "benchmarks" / "results" / "peers.json"
    results = json.loads(path.read_text())
    for title, table in (("Lead table (seconds)", lead_table), ("Requests and CPU", requests_table),
                         ("Lease loops on a simulated clock", sims_table),
                         ("Fleet-scale model: requests per member per minute", model_table)):
        print(f"### {title}\n\n{table(results)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
