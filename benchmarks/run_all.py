"""Run every ``benchmarks/bench_*.py`` script, each in its own process, and summarise.

Each script prints its own tables and writes ``benchmarks/results/<name>.json``;
this runner streams their output, then prints one line per script: exit
status, wall time and the result files it wrote. Exits 1 if any script failed
or timed out.

    .venv/bin/python benchmarks/run_all.py            # all of them (make bench)
    .venv/bin/python benchmarks/run_all.py -k placement -k planner
    .venv/bin/python benchmarks/run_all.py --list
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"


@dataclass
class Outcome:
    script: str
    status: str
    seconds: float
    written: list[str]


SEPARATE = {"bench_peers.py"}
"""Run by their own make target (``make bench-peers`` installs the peers from PyPI), or when
named by a filter."""


def discover(filters: list[str]) -> list[Path]:
    """The bench_*.py scripts, sorted, whose names contain any of ``filters`` (without
    filters: all but :data:`SEPARATE`)."""
    scripts = sorted(HERE.glob("bench_*.py"))
    if filters:
        return [s for s in scripts if any(f in s.stem for f in filters)]
    return [s for s in scripts if s.name not in SEPARATE]


def _snapshot() -> dict[str, float]:
    if not RESULTS.is_dir():
        return {}
    return {p.name: p.stat().st_mtime for p in RESULTS.glob("*.json")}


def run_one(script: Path, timeout: float, console: Console) -> Outcome:
    console.rule(f"[bold]{script.name}")
    before = _snapshot()
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    started = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, timeout=timeout,
                              check=False)
        status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        status = f"timeout ({timeout:.0f} s)"
    seconds = time.perf_counter() - started
    after = _snapshot()
    written = sorted(n for n, m in after.items() if before.get(n) != m)
    return Outcome(script.name, status, seconds, written)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="filters", action="append", default=[],
                        help="only scripts whose name contains this (repeatable)")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds before a script is stopped (default 1800)")
    parser.add_argument("--list", action="store_true", help="list the scripts and exit")
    args = parser.parse_args(argv)
    console = Console()
    scripts = discover(args.filters)
    if not scripts:
        console.print(f"[red]no benchmarks/bench_*.py script matches {args.filters}[/red]")
        return 1
    if args.list:
        for s in scripts:
            console.print(s.name)
        return 0
    outcomes = [run_one(s, args.timeout, console) for s in scripts]
    table = Table(title="benchmarks")
    for col in ("script", "status", "seconds", "results written"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    for o in outcomes:
        table.add_row(o.script, o.status if o.status == "ok" else f"[red]{o.status}[/red]",
                      f"{o.seconds:.1f}", ", ".join(o.written) or "-")
    console.rule()
    console.print(table)
    return 0 if all(o.status == "ok" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
