"""Load-aware planning (``hashring.balance_loads``) against the count planner, same run.

1. **Skewed fleet, by planning interval**: 16 shards, 4 members, 4 hot shards at 8x the
   others' rate. Busiest member's load over the mean, count plan (``plan_assignment``) vs load
   plan; moves to converge; moves per hour (one plan a minute, as the chore owner would) with
   steady loads, and with every shard's rate drawn afresh each interval within +/-20%
   (``--noise``; raw draws, no smoothing: a measured EWMA is calmer); a load shift (a cold
   shard turns hot) and how many intervals until the busiest is back within the tolerance.
   Targets: busiest / mean <= 1.25; 0 moves per hour in steady state.
2. **At scale** (one subprocess per case, its peak RSS the case's memory): 100,000 shards
   with Zipf-distributed loads (exponent ``s``, keys in random order) over 10,000 members,
   from the count plan: planner seconds, peak MB, busiest / fair share over members holding
   two keys or more (count plan vs load plan), hot shards (a member each), moves against a
   lower bound (each member above ``1 + tolerance`` x its share must lose at least the keys,
   heaviest first, that bring it within; each member below ``1 - tolerance`` must gain one);
   then a load shift (1% of the shards' loads drawn again) and a join, the same way.
   Targets: <= 10 s and <= 500 MB.

Writes benchmarks/results/load_balance.json.

    .venv/bin/python benchmarks/bench_load_balance.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import resource
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from hashring import Assignment, balance_loads, load_report, plan_assignment
from hashring.loads import DEFAULT_TOLERANCE, key_weights

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report import case_in_subprocess, write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
BUSIEST_TARGET = 1.25
SCALE_TARGET = (10.0, 500.0)  # seconds, MB
HOUR = 60  # planning intervals of a minute


def owners(plan: Assignment) -> dict[str, str]:
    return {k: o[0] for k, o in plan.owners.items()}


def busiest_over_mean(plan: Assignment, loads: Mapping[str, float]) -> float:
    per = dict.fromkeys(plan.members, 0.0)
    for k, o in plan.owners.items():
        per[o[0]] += loads[k]
    return max(per.values()) / (sum(per.values()) / len(per))


def lower_bound(plan: Assignment, loads: Mapping[str, float], tolerance: float) -> int:
    """Moves any plan needs from ``plan`` to bring every member within ``tolerance``."""
    report = load_report(plan, loads)
    if report is None:
        return 0
    w = dict(zip(plan.owners, key_weights(list(plan.owners), loads) or [], strict=True))
    out = under = 0
    for m, fair in report.fair_shares.items():
        held = sorted((w[k] for k in plan.keys_of(m)), reverse=True)
        load, cap = report.member_loads[m], (1 + tolerance) * fair
        if len(held) >= 2 and load > cap:
            for x in held:
                if load <= cap:
                    break
                load, out = load - x, out + 1
        elif load < (1 - tolerance) * fair:
            under += 1
    return max(out, under)


def skewed_fleet(noise: float, seed: int) -> dict[str, Any]:
    members = [f"pod-{i}" for i in range(4)]
    keys = [f"orders/shardId-{i:012d}" for i in range(16)]
    rates = {k: 8.0 if i < 4 else 1.0 for i, k in enumerate(keys)}
    counted = plan_assignment(members, keys)
    current = owners(counted)
    plan = balance_loads(members, keys, current, rates)
    out: dict[str, Any] = {
        "count_busiest_over_mean": round(busiest_over_mean(counted, rates), 3),
        "load_busiest_over_mean": round(busiest_over_mean(plan, rates), 3),
        "moves_to_converge": plan.moves_from(current),
    }
    rnd = random.Random(seed)
    steady = 0
    held = owners(plan)
    for _ in range(HOUR):
        again = balance_loads(members, keys, held, rates)
        steady += again.moves_from(held)
    out["moves_per_hour_steady"] = steady
    out["noise"] = noise
    for smoothing, alpha in (("raw", 1.0), ("ewma", 1 - math.exp(-1))):  # EWMA over a minute
        noisy, seen, mine = 0, dict(rates), dict(held)
        for _ in range(HOUR):
            drawn = {k: r * rnd.uniform(1 - noise, 1 + noise) for k, r in rates.items()}
            seen = {k: seen[k] + alpha * (drawn[k] - seen[k]) for k in keys}
            again = balance_loads(members, keys, mine, seen)
            noisy += again.moves_from(mine)
            mine = owners(again)
        out[f"moves_per_hour_noise_{smoothing}"] = noisy
    shifted = dict(rates) | {keys[-1]: 8.0}  # a cold shard turns hot
    before = busiest_over_mean(Assignment(tuple(members), {k: (o,) for k, o in held.items()}, {}), shifted)
    intervals, moved = 0, 0
    while intervals < 10:  # until an interval moves nothing
        again = balance_loads(members, keys, held, shifted)
        if again.moves_from(held) == 0:
            break
        intervals, moved = intervals + 1, moved + again.moves_from(held)
        held = owners(again)
    out["shift_busiest_over_mean_before"] = round(before, 3)
    out["shift_busiest_over_mean_after"] = round(busiest_over_mean(again, shifted), 3)
    out["shift_intervals"] = intervals
    out["shift_moves"] = moved
    out["meets_target"] = out["load_busiest_over_mean"] <= BUSIEST_TARGET and steady == 0
    return out


def seconds(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def run_case(n_keys: int, n_members: int, s: float, seed: int) -> dict[str, Any]:
    """One scale case; run in a fresh subprocess by :func:`main`."""
    members = [f"worker-{i:05d}" for i in range(n_members)]
    keys = [f"app/orders/shardId-{i:012d}" for i in range(n_keys)]
    rng = np.random.default_rng(seed)
    ranks = rng.permutation(n_keys) + 1
    loads = dict(zip(keys, (1000.0 / ranks**s).tolist(), strict=True))
    out: dict[str, Any] = {"keys": n_keys, "members": n_members, "zipf_s": s}
    out["count_s"], counted = seconds(lambda: plan_assignment(members, keys))
    current = owners(counted)
    out["load_s"], plan = seconds(lambda: balance_loads(members, keys, current, loads))
    report, before = load_report(plan, loads), load_report(counted, loads)
    assert report is not None and before is not None
    out["count_busiest_over_fair"] = round(before.busiest(), 3)
    out["load_busiest_over_fair"] = round(report.busiest(), 3)
    out["hot_keys"] = len(report.hot_keys)
    out["moves"] = plan.moves_from(current)
    out["moves_lower_bound"] = lower_bound(counted, loads, DEFAULT_TOLERANCE)
    held = owners(plan)
    out["again_s"], again = seconds(lambda: balance_loads(members, keys, held, loads))
    out["again_moves"] = again.moves_from(held)
    redrawn = rng.choice(n_keys, n_keys // 100, replace=False)
    shifted = dict(loads)
    for i, r in zip(redrawn.tolist(), (rng.permutation(n_keys)[: len(redrawn)] + 1).tolist(), strict=True):
        shifted[keys[i]] = 1000.0 / r**s
    out["shift_s"], moved = seconds(lambda: balance_loads(members, keys, held, shifted))
    out["shift_moves"] = moved.moves_from(held)
    out["shift_lower_bound"] = lower_bound(plan, shifted, DEFAULT_TOLERANCE)
    shift_report = load_report(moved, shifted)
    out["shift_busiest_over_fair"] = round(shift_report.busiest(), 3) if shift_report else None
    joined = [*members, "worker-new"]
    out["join_s"], after = seconds(lambda: balance_loads(joined, keys, held, loads))
    out["join_moves"] = after.moves_from(held)
    out["join_newcomer_keys"] = len(after.keys_of("worker-new"))
    out["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["meets_targets"] = (out["load_s"] <= SCALE_TARGET[0] and out["peak_mb"] <= SCALE_TARGET[1]
                            and out["again_moves"] == 0)
    return out


def in_subprocess(n_keys: int, n_members: int, s: float, seed: int) -> dict[str, Any]:
    return case_in_subprocess(__file__, f"{n_keys},{n_members},{s},{seed}", ROOT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="scale case 10,000 x 1,000 only")
    parser.add_argument("--noise", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS / "load_balance.json")
    args = parser.parse_args(argv)
    if args.case:
        k, n, s, seed = args.case.split(",")
        print(json.dumps(run_case(int(k), int(n), float(s), int(seed))))
        return 0
    console = Console(width=max(Console().width, 160))
    small = skewed_fleet(args.noise, args.seed)
    t = Table(title="16 shards, 4 members, 4 shards at 8x; one plan a minute")
    for col in ("busiest/mean count", "busiest/mean load", "moves to converge", "moves/h steady",
                f"moves/h +/-{args.noise:.0%} raw", "moves/h EWMA", "shift: busiest/mean before",
                "after", "intervals", "moves", f"<= {BUSIEST_TARGET}, 0 steady"):
        t.add_column(col, justify="right")
    t.add_row(f"{small['count_busiest_over_mean']:.2f}", f"{small['load_busiest_over_mean']:.2f}",
              str(small["moves_to_converge"]), str(small["moves_per_hour_steady"]),
              str(small["moves_per_hour_noise_raw"]), str(small["moves_per_hour_noise_ewma"]),
              f"{small['shift_busiest_over_mean_before']:.2f}",
              f"{small['shift_busiest_over_mean_after']:.2f}", str(small["shift_intervals"]),
              str(small["shift_moves"]), "yes" if small["meets_target"] else "NO")
    console.print(t)
    sizes = [(10_000, 1_000)] if args.quick else [(10_000, 1_000), (100_000, 10_000)]
    cases = [in_subprocess(k, n, s, args.seed) for k, n in sizes for s in (0.5, 1.0)]
    t = Table(title="Zipf loads at scale (one subprocess per row), from the count plan")
    for col in ("K", "N", "s", "count s", "load s", "busiest/fair count", "load", "hot", "moves/bound",
                "again moves", "1% shift moves/bound", "after", "join moves (newcomer)", "peak MB",
                "targets"):
        t.add_column(col, justify="right")
    for c in cases:
        t.add_row(f"{c['keys']:,}", f"{c['members']:,}", str(c["zipf_s"]), f"{c['count_s']:.2f}",
                  f"{c['load_s']:.2f}", f"{c['count_busiest_over_fair']:.2f}",
                  f"{c['load_busiest_over_fair']:.2f}", f"{c['hot_keys']:,}",
                  f"{c['moves']:,}/{c['moves_lower_bound']:,}", str(c["again_moves"]),
                  f"{c['shift_moves']:,}/{c['shift_lower_bound']:,}", f"{c['shift_busiest_over_fair']}",
                  f"{c['join_moves']} ({c['join_newcomer_keys']})", f"{c['peak_mb']:.0f}",
                  "yes" if c["meets_targets"] else "NO")
    console.print(t)
    write_json(args.out, {"python": platform.python_version(), "machine": platform.machine(),
                          "tolerance": DEFAULT_TOLERANCE, "targets": {
                              "busiest_over_mean": BUSIEST_TARGET,
                              "scale_seconds_and_mb": SCALE_TARGET},
                          "skewed_fleet": small, "scale": cases})
    console.print(f"wrote {args.out}")
    return 0 if small["meets_target"] and all(c["meets_targets"] for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
