"""``python -m tests.fleetsim``: run the lease-protocol simulator over many seeds, or replay one.

    python -m tests.fleetsim --seeds 300 --jobs 2            # the fast profile (part of make test)
    python -m tests.fleetsim --seeds 10000 --jobs 2 --out benchmarks/results/fleet_sim.json
    python -m tests.fleetsim --seed 1234                     # replay one seed: its events and log
    python -m tests.fleetsim --membership session --seeds 300  # every member list kept by its members
    python -m tests.fleetsim --replay shrunk.json            # replay a saved (shrunk) scenario
    python -m tests.fleetsim --merge chunk_*.json --out long.json  # one report from runs in parts

A long profile can run in parts (``--start``/``--seeds`` ranges, each with ``--out``, on one
commit) and be merged: counts add up, worst recoveries take the maximum, the seed ranges are
listed (``--merge`` refuses ranges that overlap).

Processes run with ``PYTHONHASHSEED=0`` (re-executed if needed) so a seed replays exactly. A
failing seed prints its violations, the command that replays it and, with ``--shrink``, a
smaller scenario that still fails (saved next to ``--out`` as ``fleet_sim_failure_<seed>.json``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tests.fleetsim import bounds
from tests.fleetsim.runner import run, run_seed, shrink
from tests.fleetsim.schedule import KINDS, MEMBERSHIPS, Scenario, draw


def _reexec_with_fixed_hash_seed() -> None:
    if os.environ.get("PYTHONHASHSEED") != "0":
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        os.execvpe(sys.executable, [sys.executable, "-m", "tests.fleetsim", *sys.argv[1:]], env)


def summarise(results: list[dict[str, Any]], elapsed: float) -> dict[str, Any]:
    """The coverage report: schedules by disturbance kind and by membership, worst recovery per
    kind (D), failures."""
    by_kind: dict[str, int] = defaultdict(int)
    by_membership: dict[str, int] = defaultdict(int)
    worst: dict[str, float] = defaultdict(float)
    duplicates: dict[str, int] = defaultdict(int)
    for r in results:
        by_membership[r.get("membership", "static")] += 1
        for kind in r["kinds"]:
            by_kind[kind] += 1
            worst[kind] = max(worst[kind], r["recovery_d"])
        for cause, n in r["duplicates"].items():
            duplicates[cause] += n
    failed = [r for r in results if r["violations"]]
    return {
        "seeds": len(results),
        "failed": len(failed),
        "failing_seeds": [r["seed"] for r in failed][:50],
        "schedules_by_kind": {k: by_kind.get(k, 0) for k in KINDS},
        "schedules_by_membership": {m: by_membership.get(m, 0) for m in MEMBERSHIPS},
        "worst_recovery_d_by_kind": {k: round(worst.get(k, 0.0), 2) for k in KINDS},
        "bounds_d": bounds.table(bounds.Timing(3.0, 1, 12.0)),
        "bounds_d_replicas0": bounds.table(bounds.Timing(3.0, 0, 12.0)),
        "duplicates_by_cause": dict(duplicates),
        "elapsed_s": round(elapsed, 1),
        "schedules_per_minute": round(60 * len(results) / elapsed, 1) if elapsed else None,
        "cpu_s_per_schedule": round(sum(r["cpu_s"] for r in results) / max(1, len(results)), 3),
        "schedules_ending_on_a_load_plan": sum(1 for r in results if r.get("load_plans")),
    }


def merge(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One coverage report from reports of disjoint seed ranges (each with ``seed_range``)."""
    ranges = sorted(tuple(r["seed_range"]) for r in reports)
    for (_, end), (start, _) in itertools.pairwise(ranges):
        if start <= end:
            raise ValueError(f"seed ranges overlap: {ranges}")
    out: dict[str, Any] = {"seeds": 0, "failed": 0, "failing_seeds": [], "duplicates_by_cause": {}}
    for key in ("schedules_by_kind", "schedules_by_membership"):
        out[key] = {k: sum(r[key].get(k, 0) for r in reports) for k in reports[0][key]}
    out["worst_recovery_d_by_kind"] = {k: max(r["worst_recovery_d_by_kind"].get(k, 0.0) for r in reports)
                                       for k in reports[0]["worst_recovery_d_by_kind"]}
    for r in reports:
        out["seeds"] += r["seeds"]
        out["failed"] += r["failed"]
        out["failing_seeds"] += r["failing_seeds"]
        for cause, n in r["duplicates_by_cause"].items():
            out["duplicates_by_cause"][cause] = out["duplicates_by_cause"].get(cause, 0) + n
    out["failing_seeds"].sort()
    out["bounds_d"], out["bounds_d_replicas0"] = reports[0]["bounds_d"], reports[0]["bounds_d_replicas0"]
    out["elapsed_s"] = round(sum(r["elapsed_s"] for r in reports), 1)
    out["cpu_s_per_schedule"] = round(sum(r["cpu_s_per_schedule"] * r["seeds"] for r in reports) / max(1, out["seeds"]), 3)
    covered: list[list[int]] = []
    for start, end in ranges:  # adjacent parts make one range; what lies between two is a gap
        if covered and start == covered[-1][1] + 1:
            covered[-1][1] = end
        else:
            covered.append([start, end])
    out["seed_ranges"] = covered
    out["gaps"] = [[a[1] + 1, b[0] - 1] for a, b in itertools.pairwise(covered)]
    out["failures"] = [f for r in reports for f in r.get("failures", [])][:20]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fleetsim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="replay one seed and print its events, log and violations")
    parser.add_argument("--replay", type=Path, help="replay a saved scenario (JSON)")
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run (from --start)")
    parser.add_argument("--start", type=int, default=1, help="the first seed")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--kinds", default="", help="comma-separated disturbance kinds (default: all)")
    parser.add_argument("--reads", choices=("scan", "scoped"), help="every scenario reads this way")
    parser.add_argument("--provider", choices=("keys", "worker"), help="every scenario plans these keys")
    parser.add_argument("--membership", choices=MEMBERSHIPS,
                        help="every scenario's member list: kept by the world (static) or its members (session)")
    parser.add_argument("--balance", choices=("count", "load"), default="count",
                        help="load: members balance by skewed loads (scoped reads)")
    parser.add_argument("--profile", choices=("long", "fast"), default="long",
                        help="fast: fewer disturbances, a shorter quiet phase (the test suite's)")
    parser.add_argument("--out", type=Path, help="write the coverage report (JSON) here")
    parser.add_argument("--shrink", action="store_true", help="shrink the first failing scenario")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--save", type=Path, help="with --seed/--replay: save the scenario (JSON) here, with --note")
    parser.add_argument("--note", default="", help="what the saved scenario found")
    parser.add_argument("--merge", type=Path, nargs="+", help="merge these reports (--out) into one (with --out)")
    args = parser.parse_args(argv)
    if args.merge:
        merged = merge([json.loads(p.read_text()) for p in args.merge])
        if args.out:
            args.out.write_text(json.dumps(merged, indent=1) + "\n")
        print(json.dumps({k: merged[k] for k in ("seeds", "failed", "failing_seeds", "seed_ranges", "gaps")}))
        return 1 if merged["failed"] else 0
    console = Console(stderr=True)
    kinds = tuple(k for k in args.kinds.split(",") if k) or None
    fixed = {k: v for k, v in (("reads", args.reads), ("provider", args.provider),
                               ("membership", args.membership)) if v}
    if args.profile != "long":
        fixed["profile"] = args.profile
    if args.balance != "count":
        fixed["balance"] = args.balance

    if args.seed is not None or args.replay is not None:
        if args.replay is not None:
            scenario = Scenario.from_json(args.replay.read_text())
        else:
            scenario = draw(args.seed, **({"kinds": kinds} if kinds else {}), **fixed)
        print(scenario.to_json())
        if args.save:
            saved = {"found": args.note, **json.loads(scenario.to_json())}
            args.save.write_text(json.dumps(saved, indent=1, sort_keys=True) + "\n")
        result = run(scenario, trace=bool(os.environ.get("FLEETSIM_TRACE")))
        for line in result.pop("log"):
            print(line)
        print(json.dumps({k: v for k, v in result.items() if k != "counters"}, indent=1))
        return 1 if result["violations"] else 0

    seeds = range(args.start, args.start + args.seeds)
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    with Progress(TextColumn("fleet simulator"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, disable=args.quiet) as progress:
        task = progress.add_task("seeds", total=len(seeds))
        if args.jobs > 1:
            with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
                for result in pool.imap_unordered(_run_one, [(s, kinds, fixed) for s in seeds], chunksize=2):
                    results.append(result)
                    progress.advance(task)
        else:
            for s in seeds:
                results.append(_run_one((s, kinds, fixed)))
                progress.advance(task)
    results.sort(key=lambda r: r["seed"])
    report = summarise(results, time.monotonic() - started)
    memberships = ", ".join(f"{n} {m}" for m, n in report["schedules_by_membership"].items())
    table = Table(title=f"{report['seeds']} schedules ({memberships} membership), {report['failed']} failed, "
                        f"{report['schedules_per_minute']} per minute")
    table.add_column("disturbance")
    table.add_column("schedules", justify="right")
    table.add_column("worst recovery (D)", justify="right")
    table.add_column("bound (D, replicas 1)", justify="right")
    for kind in KINDS:
        table.add_row(kind, str(report["schedules_by_kind"][kind]), str(report["worst_recovery_d_by_kind"][kind]),
                      str(report["bounds_d"].get(kind, "")))
    console.print(table)
    failed = [r for r in results if r["violations"]]
    for r in failed[:5]:
        console.print(f"[red]seed {r['seed']}[/red] ({', '.join(r['kinds'])}): {r['violations'][0]}")
        console.print(f"  replay: PYTHONHASHSEED=0 python -m tests.fleetsim --seed {r['seed']}")
    if failed and args.shrink:
        first = Scenario.from_json(failed[0]["scenario"])
        small = shrink(first)
        path = (args.out.parent if args.out else Path(".")) / f"fleet_sim_failure_{small.seed}.json"
        path.write_text(small.to_json())
        console.print(f"shrunk to {len(small.events)} events, {small.keys} keys: "
                      f"python -m tests.fleetsim --replay {path}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        report["failures"] = [{"seed": r["seed"], "kinds": r["kinds"], "violations": r["violations"]}
                              for r in failed[:20]]
        report["seed_range"] = [args.start, args.start + args.seeds - 1]
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("seeds", "failed", "failing_seeds", "schedules_by_membership",
                                             "schedules_ending_on_a_load_plan", "schedules_per_minute")}))
    return 1 if failed else 0


def _run_one(job: tuple[int, tuple[str, ...] | None, dict[str, str]]) -> dict[str, Any]:
    seed, kinds, fixed = job
    try:
        result = run_seed(seed, kinds, **fixed)
    except Exception as exc:  # a crash of the simulated code is a failure of that seed
        import traceback

        scenario = draw(seed, **({"kinds": kinds} if kinds else {}), **fixed)
        return {"seed": seed, "kinds": [], "violations": [f"exception: {exc!r}\n{traceback.format_exc()}"],
                "recovery_d": 0.0, "duplicates": {}, "cpu_s": 0.0, "membership": scenario.membership,
                "scenario": scenario.to_json()}
    result.pop("log", None)
    return result


if __name__ == "__main__":
    _reexec_with_fixed_hash_seed()
    sys.exit(main())
