"""bench_peers.py's figures (matplotlib, Agg): leases per member over time, one panel per
peer, and reaction times per peer; bench_load_workers.py's: load per member over time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def plot_all(results: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for size, runs in results["runs"].items():
        paths.append(_timelines(size, runs, out_dir / f"peers_leases_{size}.png"))
        paths.append(_reactions(size, runs, out_dir / f"peers_reactions_{size}.png"))
    return paths


def _timelines(size: str, runs: dict[str, Any], path: Path) -> Path:
    names = [n for n, r in runs.items() if r.get("timeline")]
    cols = 2
    rows = max(1, (len(names) + cols - 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(12, 2.6 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        r = runs[name]
        timeline = r["timeline"]
        members = sorted({m for _, counts in timeline for m in counts})
        ts = [t for t, _ in timeline]
        for m in members:
            ax.step(ts, [counts.get(m, 0) for _, counts in timeline], where="post", label=m, linewidth=1.2)
        for phase, t in (r.get("phase_marks_s") or {}).items():
            ax.axvline(t, color="grey", linestyle=":", linewidth=0.8)
            ax.text(t, ax.get_ylim()[1] * 0.95, phase, fontsize=6, rotation=90, va="top")
        sim = "" if r.get("phase_marks_s") else " (simulated clock)"
        ax.set_title(f"{name}{sim}", fontsize=9)
        ax.set_xlabel("s", fontsize=8)
        ax.set_ylabel("leases", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, ncol=5, loc="upper right")
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.suptitle(f"Leases per member over time, {size} (shards x members)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


REACTIONS = (("cold_start", "balanced_s", "cold start: balanced"), ("join", "balanced_s", "join: balanced"),
             ("sigterm", "leases_back_s", "SIGTERM: leases held again"),
             ("sigkill", "leases_back_s", "SIGKILL: leases held again"))


def _reactions(size: str, runs: dict[str, Any], path: Path) -> Path:
    names = [n for n, r in runs.items() if "phases" in r]
    fig, ax = plt.subplots(figsize=(12, 4))
    width = 0.8 / max(1, len(names))
    cap = 0.0
    for name in names:
        values = [runs[name]["phases"][p].get(k) for p, k, _ in REACTIONS]
        cap = max([cap, *(v for v in values if v is not None)])
    cap = cap * 1.1 or 1.0
    for i, name in enumerate(names):
        values = [runs[name]["phases"][p].get(k) for p, k, _ in REACTIONS]
        xs = [j + i * width for j in range(len(REACTIONS))]
        bars = ax.bar(xs, [cap if v is None else v for v in values], width, label=name,
                      hatch=None, alpha=0.9)
        for bar, v in zip(bars, values, strict=True):
            if v is None:
                bar.set_alpha(0.25)
                bar.set_hatch("//")
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), "never" if v is None else f"{v:g}",
                    ha="center", va="bottom", fontsize=6)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(REACTIONS))], [label for _, _, label in REACTIONS])
    ax.set_ylabel("seconds (hatched: not reached in the phase)")
    ax.set_title(f"Reaction times per peer, {size}", fontsize=10)
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


LOAD_ROWS = (("records_per_s", "records/s", 1.0), ("cpu_utilisation", "CPU, % of a core", 100.0),
             ("shards_held", "shards held", 1.0))
LOAD_TITLES = {"count": 'ours, balance="count"', "load": 'ours, balance="load"', "kcl-rs": "kcl-rs (its defaults)"}


def plot_load_series(modes: list[dict[str, Any]], path: Path, title: str = "") -> Path:
    """bench_load_workers.py's figure: one column per fleet; rows records/s, CPU and shards held
    per member per 10 s window, from before the hot switch (the dashed line at 0 s); a dotted
    line where a fleet converged."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(len(LOAD_ROWS), len(modes), figsize=(4.6 * len(modes), 8.0), squeeze=False,
                             sharex=True, sharey="row")
    for col, mode in enumerate(modes):
        s = mode["series"]
        hot = mode.get("hot_by_member", {})
        xs = [t + s["window_s"] for t in s["start_s"]]  # each value at its window's end
        for row, (field, label, scale) in enumerate(LOAD_ROWS):
            ax = axes[row][col]
            for i, (member, values) in enumerate(sorted(s[field].items())):
                name = f"{member} ({hot[member]} hot)" if hot.get(member) else member
                if field == "shards_held":  # offset a little, so equal counts do not hide each other
                    ys = [float("nan") if v is None else v + (i - 1.5) * 0.06 for v in values]
                    ax.step(xs, ys, where="post", label=name, linewidth=1.2)
                else:
                    ys = [float("nan") if v is None else v * scale for v in values]
                    ax.plot(xs, ys, marker=".", markersize=3, label=name, linewidth=1.2)
            ax.axvline(0, color="grey", linestyle="--", linewidth=0.8)
            if mode.get("converged_s") is not None:
                ax.axvline(mode["converged_s"], color="green", linestyle=":", linewidth=0.9)
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7)
            if col == 0:
                ax.set_ylabel(label, fontsize=8)
            if row == 0:
                converged = "" if mode.get("converged_s") is None else f", converged {mode['converged_s']:g} s"
                ax.set_title(f"{LOAD_TITLES.get(mode['mode'], mode['mode'])}\nbusiest/mean, last minute: records "
                             f"{mode['busiest_records_over_mean']:.2f}, CPU {mode['busiest_cpu_over_mean'] or 0:.2f}"
                             f"{converged}", fontsize=8)
            if row == len(LOAD_ROWS) - 1:
                ax.set_xlabel("s from the hot switch (end of each 10 s window)", fontsize=7)
                ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.28))
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
