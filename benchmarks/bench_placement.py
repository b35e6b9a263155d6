"""Placement quality of every strategy: load balance and keys moved, against the optimum.

Runs the simulator (:mod:`hashring.simulate`) over K in {64, 400, 2000} and N in
{10, 20, 50}: every scenario (steady, scale-out, scale-in, crash,
rolling-deploy) for range (Knock), rendezvous, jump, a ketama ring (160 virtual
nodes), the balanced planner and ``stable_assignment``. Every figure is a ratio to the optimum
computed in the same run (the baseline). A second pass repeats steady,
scale-out and crash over several seeds (other pod names, another crashed pod)
to show how much a single run's figures depend on the draw.

Writes benchmarks/results/placement.json; exits 1 if the planner breaks the
issue's bounds (max - min <= 1, moved <= 1.05 x optimum on one join or leave)
or ``stable`` is ever unbalanced (max - min > 1).

    .venv/bin/python benchmarks/bench_placement.py [--seeds 10] [--plot out.png]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from hashring.sim.report import render_report
from hashring.simulate import DEFAULT_KEYS, DEFAULT_MEMBERS, SIM_STRATEGIES, run_grid

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report import write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def seed_sweep(keys: list[int], members: list[int], seeds: int) -> dict[str, Any]:
    """Mean (and spread) over seeds of the single-change figures, per strategy."""
    per: dict[str, dict[str, list[float]]] = {
        s: {"steady_spread": [], "join_moved_fraction": [], "join_moved_over_optimum": [],
            "crash_moved_over_optimum": []}
        for s in SIM_STRATEGIES
    }
    cells: dict[str, dict[str, dict[str, float]]] = {s: {} for s in SIM_STRATEGIES}
    for seed in range(seeds):
        report = run_grid(keys, members, ["steady", "scale-out", "crash"], seed=seed)
        for r in report.results:
            row = per[r.strategy]
            cell = cells[r.strategy].setdefault(f"K={r.keys},N={r.members}",
                                                {"join_moved_fraction": 0.0})
            if r.scenario == "steady":
                row["steady_spread"].append(r.spread)
            elif r.scenario == "scale-out":
                row["join_moved_fraction"].append(r.moved_fraction)
                cell["join_moved_fraction"] += r.moved_fraction / seeds
                if r.moved_over_optimum is not None:
                    row["join_moved_over_optimum"].append(r.moved_over_optimum)
            elif r.moved_over_optimum is not None:
                row["crash_moved_over_optimum"].append(r.moved_over_optimum)
    out: dict[str, Any] = {}
    for strategy, metrics in per.items():
        out[strategy] = {
            name: {"mean": round(statistics.fmean(v), 4), "min": round(min(v), 4),
                   "max": round(max(v), 4)}
            for name, v in metrics.items() if v
        }
        means = [c["join_moved_fraction"] for c in cells[strategy].values()]
        out[strategy]["join_moved_fraction_cell_means"] = {
            "min": round(min(means), 4), "max": round(max(means), 4)
        }
    return out


def sweep_table(sweep: dict[str, Any], seeds: int) -> Table:
    t = Table(title=f"over {seeds} seeds: mean (min..max) per strategy")
    for col in ("strategy", "steady max-min", "join moved", "join moved (cell means)",
                "join moved/opt", "crash moved/opt"):
        t.add_column(col, justify="left" if col == "strategy" else "right")

    def fmt(d: dict[str, float] | None, pct: bool = False) -> str:
        if not d:
            return "-"
        f = (lambda x: f"{100 * x:.1f}%") if pct else (lambda x: f"{x:.2f}")
        mean = f"{f(d['mean'])} " if "mean" in d else ""
        return f"{mean}({f(d['min'])}..{f(d['max'])})"

    for strategy, m in sweep.items():
        t.add_row(strategy, fmt(m.get("steady_spread")), fmt(m.get("join_moved_fraction"), True),
                  fmt(m.get("join_moved_fraction_cell_means"), True),
                  fmt(m.get("join_moved_over_optimum")), fmt(m.get("crash_moved_over_optimum")),
                  style={"balanced": "bold green", "stable": "green"}.get(strategy))
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds for the sensitivity pass")
    parser.add_argument("--out", type=Path, default=RESULTS / "placement.json")
    parser.add_argument("--plot", type=Path, default=None, help="also write a figure (PNG)")
    args = parser.parse_args(argv)
    console = Console(width=max(Console().width, 180))
    keys, members = list(DEFAULT_KEYS), list(DEFAULT_MEMBERS)

    started = time.perf_counter()
    report = run_grid(keys, members, seed=0)
    render_report(report, console)
    sweep = seed_sweep(keys, members, args.seeds) if args.seeds > 0 else {}
    if sweep:
        console.print(sweep_table(sweep, args.seeds))
    if args.plot is not None:
        from hashring.sim.plot import write_plot

        write_plot(report, args.plot)
        console.print(f"wrote {args.plot}")

    data = report.to_dict()
    data["baseline"] = "optimum of each scenario, computed in the same run (see hashring.simulate)"
    data["seed_sweep"] = {"seeds": args.seeds, "strategies": sweep}
    data["total_elapsed_s"] = round(time.perf_counter() - started, 3)
    write_json(args.out, data)
    console.print(f"wrote {args.out} ({data['total_elapsed_s']} s)")
    return 0 if all(c.passed for c in report.checks()) else 1


if __name__ == "__main__":
    sys.exit(main())
