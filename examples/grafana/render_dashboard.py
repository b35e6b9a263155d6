"""Render kinesis-workers.json's panels from a real run, without Grafana: docs/dashboard.png.

A short run on the embedded AWS (moto): a stream of 8 shards with a backlog and a steady
producer, two Workers, a third that joins, then one that crashes. Every second each Worker's
``/metrics`` is scraped; each panel's queries are evaluated over the scrapes by
:func:`evaluate`, which understands the small PromQL subset the dashboard keeps to
(``sum``/``max`` [``by (label)``] over a metric or over ``rate``/``increase`` of a counter, and
a bare metric; ``tests/kinesis/consumer/test_dashboard.py`` holds the dashboard to it), and drawn with
matplotlib (the ``plot`` extra).

    .venv/bin/python examples/grafana/render_dashboard.py [--seconds 90] [--out docs/dashboard.png]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DASHBOARD = Path(__file__).resolve().parent / "kinesis-workers.json"

Scrape = dict[tuple[str, tuple[tuple[str, str], ...]], float]
"""One scrape of every Worker: (sample name, sorted labels) -> value."""

_QUERY = re.compile(
    r"^(?:(?P<agg>sum|max)(?: by \((?P<by>\w+)\))? ?\()?"
    r"(?:(?P<fn>rate|increase)\((?P<counter>\w+)\[(?P<window>\d+)(?P<unit>[smh])\]\)|(?P<metric>\w+))"
    r"(?(agg)\))$"
)


def parse(expr: str) -> dict[str, Any]:
    """The parts of a query in the dashboard's subset; ValueError names one outside it."""
    m = _QUERY.match(expr)
    if m is None:
        raise ValueError(f"query outside the renderer's PromQL subset: {expr!r}")
    parts = m.groupdict()
    if parts["window"] is not None:
        parts["window_s"] = int(parts["window"]) * {"s": 1, "m": 60, "h": 3600}[parts["unit"]]
    return parts


def metric_of(expr: str) -> str:
    parts = parse(expr)
    return str(parts["counter"] or parts["metric"])


def evaluate(expr: str, times: list[float], scrapes: list[Scrape]) -> dict[str, list[float]]:
    """Series (by label value, or one series "") of ``expr`` at each scrape."""
    parts = parse(expr)
    name, by = metric_of(expr), parts["by"]
    out: dict[str, list[float]] = defaultdict(lambda: [math.nan] * len(times))
    for i, (now, scrape) in enumerate(zip(times, scrapes, strict=True)):
        values: dict[tuple[tuple[str, str], ...], float] = {}
        for (sample, labels), value in scrape.items():
            if sample != name:
                continue
            if parts["fn"]:  # the counter's growth over the window, per second for rate
                # the oldest scrape in the window that has the series (it may start later)
                j = next((k for k in range(i) if now - times[k] <= parts["window_s"]
                          and (sample, labels) in scrapes[k]), i)
                if j == i:
                    continue
                before = scrapes[j][(sample, labels)]
                grown = max(0.0, value - before)
                values[labels] = grown / (now - times[j]) if parts["fn"] == "rate" else grown
            else:
                values[labels] = value
        groups: dict[str, list[float]] = defaultdict(list)
        for labels, value in values.items():
            key = dict(labels).get(by, "") if by else ""
            groups[key].append(value)
        for key, group in groups.items():
            out[key][i] = (sum(group) if parts["agg"] == "sum" else max(group)) if parts["agg"] else group[0]
    return dict(out)


def scrape(urls: list[str]) -> Scrape:
    from prometheus_client.parser import text_string_to_metric_families

    found: Scrape = {}
    for url in urls:
        try:
            text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
        except OSError:
            continue  # a member that stopped
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def run(seconds: float) -> tuple[list[float], list[Scrape], list[tuple[float, str]]]:
    """The run (see the module docs): scrape times, scrapes and the events, by offset in s."""
    from kinesis import Record, RecordProcessor, StreamConfig, Worker, WorkerConfig
    from kinesis.consumer.shard.processor import Checkpointer
    from kinesis.testing import LocalAWS

    class Slow(RecordProcessor):
        """About 20 ms a record (50 a second per shard): the backlog takes a while to drain."""

        def process_records(self, records: list[Record], checkpointer: Checkpointer,
                            millis_behind_latest: int | None = None) -> None:
            time.sleep(0.02 * len(records))  # the work a record costs (a workload, not a wait)
            checkpointer.checkpoint()

    logging.basicConfig(level=logging.WARNING)
    with LocalAWS() as aws:
        kinesis = aws.client("kinesis")
        kinesis.create_stream(StreamName="orders", ShardCount=8)
        stop = threading.Event()

        def produce(n: int) -> None:
            for start in range(0, n, 250):
                kinesis.put_records(StreamName="orders", Records=[
                    {"Data": b"x" * 200, "PartitionKey": f"k{i}"} for i in range(start, min(n, start + 250))])

        produce(8000)  # a backlog: about 40 s of work for the fleet beside the steady flow

        def steady() -> None:
            while not stop.wait(0.5):
                produce(100)

        def worker(name: str) -> Worker:
            config = WorkerConfig("dashboard-leases", [StreamConfig("orders", "app", "TRIM_HORIZON")], worker_id=name,
                                  lease_duration=6.0, idle_backoff=0.2, shard_sync_interval=5.0, health_port=0,
                                  max_records=50)  # small reads: the read position lags as a backlog drains
            return Worker(config, Slow, kinesis_client=aws.client("kinesis"), dynamodb_client=aws.client("dynamodb"))

        workers = [worker("pod-a").start(), worker("pod-b").start()]
        producer = threading.Thread(target=steady, daemon=True)
        producer.start()
        events: list[tuple[float, str]] = []
        actions: dict[int, Callable[[], None]] = {
            int(seconds * 0.35): lambda: (workers.append(worker("pod-c").start()), events.append((0, "pod-c joins"))),
            int(seconds * 0.65): lambda: (workers[0].stop(graceful=False), events.append((0, "pod-a crashes"))),
        }
        urls = [w.health_url for w in workers]
        times: list[float] = []
        scrapes: list[Scrape] = []
        started = time.monotonic()
        for tick in range(int(seconds)):
            if tick in actions:
                actions[tick]()
                events[-1] = (time.monotonic() - started, events[-1][1])
                urls = [w.health_url or "" for w in workers if w.health_url]
            scrapes.append(scrape([u for u in urls if u]))
            times.append(time.monotonic() - started)
            time.sleep(max(0.0, started + tick + 1 - time.monotonic()))  # one scrape a second
        stop.set()
        for w in workers:
            w.stop()
    return times, scrapes, events


def render(times: list[float], scrapes: list[Scrape], events: list[tuple[float, str]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = json.loads(DASHBOARD.read_text())["panels"]
    rows = math.ceil(len(panels) / 2)
    fig, axes = plt.subplots(rows, 2, figsize=(14, 2.6 * rows), sharex=True)
    for ax, panel in zip(axes.flat, panels, strict=False):
        for target in panel["targets"]:
            for key, series in sorted(evaluate(target["expr"], times, scrapes).items()):
                label = target["legendFormat"].replace("{{" + (parse(target["expr"])["by"] or "") + "}}", key)
                ax.plot(times, [v if math.isfinite(v) else math.nan for v in series], label=label, linewidth=1.2)
        for at, what in events:
            ax.axvline(at, color="grey", linestyle=":", linewidth=1)
            ax.text(at, 1.0, " " + what, transform=ax.get_xaxis_transform(), fontsize=7, va="top", color="grey")
        ax.set_title(panel["title"], fontsize=10)
        ax.tick_params(labelsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper right", ncol=2)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("seconds", fontsize=8)
    fig.suptitle("kinesis-workers.json, rendered from a real run (embedded moto: backlog, a join, a crash)", fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    args = parser.parse_args(argv)
    times, scrapes, events = run(args.seconds)
    render(times, scrapes, events, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
