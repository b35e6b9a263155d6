"""A matplotlib figure of the simulator's results (needs the ``plot`` extra).

matplotlib is imported only when a figure is drawn, and only through
:class:`matplotlib.figure.Figure` (no pyplot, no global backend switch): the
PNG is rendered by the Agg canvas, so it works on headless machines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hashring.errors import HashRingError
from hashring.simulate import GridReport, ScenarioResult


class PlotUnavailableError(HashRingError, ImportError):
    """matplotlib is not installed: install the ``plot`` extra."""


_PANELS: tuple[tuple[str, str, str, bool], ...] = (
    ("steady", "spread", "steady: max - min keys per member", False),
    ("scale-out", "moved_over_optimum", "one join: keys moved / optimum", True),
    ("crash", "moved_over_optimum", "one crash: keys moved / optimum", True),
    ("rolling-deploy", "moved_fraction", "rolling deploy: moves per key", True),
)


def require_matplotlib() -> None:
    """Raise :class:`PlotUnavailableError` (naming the ``plot`` extra) without matplotlib."""
    _import_figure()


def _import_figure() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise PlotUnavailableError(
            "plotting needs matplotlib, which is not installed: "
            "pip install 'kinesis-hashring[plot]' (or drop --plot)"
        ) from exc
    return Figure


def write_plot(report: GridReport, path: str | Path) -> Path:
    """Draw one bar-chart panel per scenario present and save it to ``path`` (PNG, SVG, ...)."""
    figure_cls = _import_figure()
    panels = [p for p in _PANELS if report.select(scenario=p[0])]
    if not panels:
        panels = [_PANELS[0]]
    strategies: list[str] = list(report.params["strategies"])
    cells = [(k, n) for k in report.params["keys"] for n in report.params["members"]]
    fig = figure_cls(figsize=(max(8.0, 1.1 * len(cells) + 3), 3.2 * len(panels)),
                     layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    width = 0.8 / max(1, len(strategies))
    for ax, (scenario, attr, title, log) in zip(axes, panels, strict=True):
        rows: dict[tuple[str, int, int], ScenarioResult] = {
            (r.strategy, r.keys, r.members): r for r in report.select(scenario=scenario)
        }
        for i, strategy in enumerate(strategies):
            values = []
            for k, n in cells:
                r = rows.get((strategy, k, n))
                v = None if r is None else getattr(r, attr)
                values.append(float("nan") if v is None else float(v))
            xs = [c + (i - (len(strategies) - 1) / 2) * width for c in range(len(cells))]
            ax.bar(xs, values, width=width, label=strategy)
        if attr != "spread":
            ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        if log:
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xticks(range(len(cells)), [f"K={k}\nN={n}" for k, n in cells])
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(strategies))
    fig.suptitle(f"placement by strategy (seed {report.params['seed']}; dashed: optimum)")
    out = Path(path)
    fig.savefig(out, dpi=100)
    return out
