"""Rich tables for the simulator's results (``hashring simulate``, the placement benchmark)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from hashring.simulate import GridReport, ScenarioResult

REFERENCE_FIGURES = {
    "range": "max-min 9..40; join moves 38-46% of keys",
    "ketama": "max-min 8..37; ~1.2x optimum",
}
"""Figures the issue states for the baselines (measured elsewhere), shown for comparison."""

_CHANGE_TITLES = {
    "scale-out": "scale-out: one member joins (N -> N+1); optimum = floor(K/(N+1))",
    "scale-in": "scale-in: the youngest member leaves (N -> N-1); optimum = the leaver's keys",
    "crash": "crash: a random member vanishes; optimum = its keys",
}


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _span(values: Sequence[float] | None, kind: str = "float") -> str:
    if not values:
        return "-"
    lo, hi = values
    if kind == "int":
        return f"{int(lo)}..{int(hi)}"
    if kind == "pct":
        return f"{_pct(lo)}..{_pct(hi)}"
    return f"{lo:.2f}..{hi:.2f}"


def _style(r: ScenarioResult) -> str | None:
    return {"balanced": "bold green", "stable": "green"}.get(r.strategy)


def _grouped(rows: list[ScenarioResult]) -> list[tuple[ScenarioResult, bool]]:
    """Rows with a flag marking the last row of each (K, N) group."""
    out = []
    for i, r in enumerate(rows):
        last = i + 1 == len(rows) or (rows[i + 1].keys, rows[i + 1].members) != (r.keys, r.members)
        out.append((r, last))
    return out


def steady_table(rows: list[ScenarioResult]) -> Table:
    """Loads with no membership change."""
    t = Table(title="steady: keys per member")
    for col in ("K", "N", "strategy", "peak", "min", "avg", "peak/avg", "max-min"):
        t.add_column(col, justify="left" if col == "strategy" else "right")
    for r, last in _grouped(rows):
        t.add_row(str(r.keys), str(r.members), r.strategy, str(r.peak), str(r.minimum),
                  f"{r.average:.1f}", _fmt(r.peak_to_average), str(r.spread),
                  style=_style(r), end_section=last)
    return t


def change_table(scenario: str, rows: list[ScenarioResult]) -> Table:
    """Keys moved by one join or leave, against the optimum."""
    t = Table(title=_CHANGE_TITLES.get(scenario, scenario))
    for col in ("K", "N", "strategy", "moved", "moved %", "optimum", "optimum %",
                "moved/opt", "max-min after"):
        t.add_column(col, justify="left" if col == "strategy" else "right")
    for r, last in _grouped(rows):
        t.add_row(str(r.keys), str(r.members), r.strategy, str(r.moved), _pct(r.moved_fraction),
                  str(r.optimum), _pct(r.optimum_fraction), _fmt(r.moved_over_optimum),
                  str(r.spread), style=_style(r), end_section=last)
    return t


def rolling_table(rows: list[ScenarioResult]) -> Table:
    """Moves per key over a rolling deploy."""
    t = Table(title="rolling-deploy: moves per key (Deployment: maxSurge=1, maxUnavailable=0; "
                    "jump: StatefulSet pods restart in place)")
    for col in ("K", "N", "strategy", "workload", "moves/key", "optimum/key",
                "balanced opt/key", "moves/balanced opt", "worst max-min"):
        t.add_column(col, justify="left" if col in ("strategy", "workload") else "right")
    for r, last in _grouped(rows):
        t.add_row(str(r.keys), str(r.members), r.strategy, r.workload, _fmt(r.moved_fraction),
                  _fmt(r.optimum_fraction), _fmt(r.balanced_optimum_fraction),
                  _fmt(r.moved_over_balanced_optimum), str(r.worst_spread),
                  style=_style(r), end_section=last)
    return t


def summary_table(report: GridReport) -> Table:
    """Per strategy, the range over the grid of each headline figure."""
    t = Table(title=f"summary over K in {report.params['keys']}, N in {report.params['members']} "
                    "(min..max)")
    cols = ("strategy", "steady max-min", "steady peak/avg", "join moved", "join moved/opt",
            "leave moved/opt", "rolling moves/key", "rolling worst max-min", "issue's figures")
    for col in cols:
        t.add_column(col, justify="left" if col in ("strategy", "issue's figures") else "right")
    for strategy, s in report.summary().items():
        t.add_row(
            strategy,
            _span(s.get("steady_spread"), "int"),
            _span(s.get("steady_peak_to_average")),
            _span(s.get("join_moved_fraction"), "pct"),
            _span(s.get("join_moved_over_optimum")),
            _span(s.get("leave_moved_over_optimum")),
            _span(s.get("rolling_moves_per_key")),
            _span(s.get("rolling_worst_spread"), "int"),
            REFERENCE_FIGURES.get(strategy, ""),
            style={"balanced": "bold green", "stable": "green"}.get(strategy),
        )
    return t


def render_report(report: GridReport, console: Console, *, details: bool = True) -> None:
    """Print the per-scenario tables (if ``details``), the summary and the checks."""
    if details:
        for scenario in report.params["scenarios"]:
            rows = report.select(scenario=scenario)
            if scenario == "steady":
                console.print(steady_table(rows))
            elif scenario == "rolling-deploy":
                console.print(rolling_table(rows))
            else:
                console.print(change_table(scenario, rows))
    console.print(summary_table(report))
    for check in report.checks():
        mark = "[green]PASS[/green]" if check.passed else "[bold red]FAIL[/bold red]"
        console.print(f"{mark} {check.name}: {check.detail}")
    console.print(f"[dim]{len(report.results)} runs in {report.elapsed_s:.2f} s "
                  f"(seed {report.params['seed']}, ketama vnodes {report.params['vnodes']})[/dim]")
