"""Worker processes balancing by load vs by count, on one moto server, in the same run.

16 shards, 4 Worker processes (the default SessionMembership, scoped reads), a processor whose
CPU cost is proportional to records (``--cost`` ms of CPU per record) and checkpoints every
batch. A writer puts records into every shard at one rate; once the members hold 4 shards
each, 4 shards turn hot at 8x that rate: 2 held by one member, 1 by each of two others (the
typical unlucky placement: 86% of random placements put two hot shards on one member). The
same run then goes on for ``--duration`` seconds, for ``balance="count"`` (today's default)
and ``balance="load"`` (``load_metric="cpu"``, ``load_balance_interval`` = ``--interval``,
shortened from the default minute so a run converges in minutes), each on its own stream.

Reported per mode, from each member's ``/status`` polled every 2 s: the busiest member's
records/s and CPU over the fleet's mean over the last minute (target <= 1.25 for load, on the
measure it balances: ``--metric cpu``, the default, or ``records``), the seconds from the hot
switch until every later 10 s window of that measure stays within 1.25 (converged),
hand-offs after the switch and in the last minute, and at the end every record written is
checked against the members' journals: duplicates and lost (target 0 and 0).

Writes benchmarks/results/load_workers.json.

    .venv/bin/python benchmarks/bench_load_workers.py [--duration 150] [--interval 10]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.moto_process import MotoProcess  # noqa: E402
from benchmarks.report import write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SHARDS, MEMBERS, HOT_FACTOR = 16, 4, 8
COLD_PER_TICK, TICK = 1, 0.2  # records per shard per writer tick: 5 records/s a cold shard
TARGET = 1.25
WINDOW = 10.0


# --- one member (a child process) -------------------------------------------------------


def member(args: argparse.Namespace) -> int:
    """Run one Worker until SIGTERM; then write what it processed to ``args.out``."""
    from kinesis import Checkpointer, Record, RecordProcessor, StreamConfig, Worker, WorkerConfig
    from kinesis.testing import client_for

    processed: list[tuple[str, str]] = []
    lock = threading.Lock()
    cost = args.cost / 1000

    class Burning(RecordProcessor):
        """Spends ``cost`` CPU seconds per record, notes it, checkpoints the batch."""

        def process_records(self, records: list[Record], checkpointer: Checkpointer,
                            millis_behind_latest: int | None = None) -> None:
            end = time.thread_time() + cost * len(records)
            while time.thread_time() < end:
                pass
            with lock:
                processed.extend((r.shard_id, r.sequence_number) for r in records)
            checkpointer.checkpoint()

    config = WorkerConfig(
        table_name=args.table, streams=[StreamConfig(args.stream, "bench", "TRIM_HORIZON")],
        worker_id=args.member, lease_duration=10.0, idle_backoff=0.2, shard_sync_interval=5.0,
        health_port=0, health_host="127.0.0.1", balance=args.mode, load_metric=args.metric,
        load_balance_interval=args.interval)
    worker = Worker(config, Burning, kinesis_client=client_for("kinesis", args.endpoint),
                    dynamodb_client=client_for("dynamodb", args.endpoint))
    worker.start()
    print(f"URL {worker.health_url}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    worker.stop(graceful=True)
    with lock:
        Path(args.out).write_text(json.dumps(processed))
    return 0


# --- the run ---------------------------------------------------------------------------


class Writer:
    """Puts records into every shard by its starting hash key; ``hot`` shards get 8x."""

    def __init__(self, client: Any, stream: str):
        self.client, self.stream = client, stream
        shards = client.list_shards(StreamName=stream)["Shards"]
        self.hash_keys = {s["ShardId"]: s["HashKeyRange"]["StartingHashKey"] for s in shards}
        self.hot: set[str] = set()
        self.written: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.wait(TICK):
            batch = [(shard, key) for shard, key in self.hash_keys.items()
                     for _ in range(COLD_PER_TICK * (HOT_FACTOR if shard in self.hot else 1))]
            answer = self.client.put_records(StreamName=self.stream, Records=[
                {"Data": f"r{i}-{j}".encode() * 8, "PartitionKey": "p", "ExplicitHashKey": key}
                for j, (_, key) in enumerate(batch)])
            self.written += [(r["ShardId"], r["SequenceNumber"]) for r in answer["Records"] if "SequenceNumber" in r]
            i += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def status(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/status", timeout=5) as answer:
        result: dict[str, Any] = json.loads(answer.read())
        return result


def run_mode(aws: MotoProcess, mode: str, args: argparse.Namespace, console: Console, tmp: Path) -> dict[str, Any]:
    stream, table = f"bench-load-{mode}", f"bench-load-leases-{mode}"
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName=stream, ShardCount=SHARDS)
    while kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamStatus"] != "ACTIVE":
        time.sleep(0.1)
    writer = Writer(kinesis, stream)
    names = [f"member-{i}" for i in range(MEMBERS)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = {n: subprocess.Popen(
        [sys.executable, __file__, "--member", n, "--endpoint", aws.endpoint_url, "--table", table,
         "--stream", stream, "--mode", mode, "--interval", str(args.interval), "--cost", str(args.cost),
         "--metric", args.metric,
         "--out", str(tmp / f"{mode}-{n}.json")], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        for n in names}
    urls = {}
    for n, p in procs.items():
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        if not line.startswith("URL "):
            raise SystemExit(f"{n} did not start: {line!r}")
        urls[n] = line.split(" ", 1)[1]
    samples: list[tuple[float, dict[str, dict[str, Any]]]] = []

    def poll() -> dict[str, dict[str, Any]]:
        got = {n: status(u) for n, u in urls.items()}
        samples.append((time.monotonic(), got))
        return got

    deadline = time.monotonic() + 120
    while True:
        got = poll()
        held = {n: sorted(s["held"]) for n, s in got.items()}
        if all(len(h) == SHARDS // MEMBERS for h in held.values()):
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"{mode}: members did not settle on 4 shards each: {held}")
        time.sleep(1.0)
    first, second, third = (held[n] for n in names[:3])
    hot = [k.rsplit("/", 1)[1] for k in (first[0], first[1], second[0], third[0])]
    writer.hot = set(hot)
    switched = time.monotonic()
    console.print(f"[dim]{mode}: hot shards {hot} (2 on {names[0]}); running {args.duration:g} s[/dim]")
    while time.monotonic() - switched < args.duration:
        time.sleep(2.0)
        poll()
    writer.stop()
    written = len(writer.written)
    deadline = time.monotonic() + 120
    while sum(s["records_processed"].get("bench/" + stream, 0) for s in poll().values()) < written:
        if time.monotonic() > deadline:
            break
        time.sleep(1.0)
    for p in procs.values():
        p.send_signal(signal.SIGTERM)
    for p in procs.values():
        p.wait(60)
    seen: Counter[tuple[str, str]] = Counter()
    for n in names:
        seen.update(tuple(x) for x in json.loads((tmp / f"{mode}-{n}.json").read_text()))
    return summarise(mode, args.metric, samples, switched, args.duration, hot, writer.written, seen)


def summarise(mode: str, metric: str, samples: list[tuple[float, dict[str, dict[str, Any]]]], switched: float,
              duration: float, hot: list[str], written: list[tuple[str, str]],
              seen: Counter[tuple[str, str]]) -> dict[str, Any]:
    def records(s: dict[str, Any]) -> int:
        return sum(s["records_processed"].values())

    after = [(t, got) for t, got in samples if switched <= t <= switched + duration]
    windows = []  # (start, busiest/mean of the balanced measure) over WINDOW-second windows
    for i, (t0, a) in enumerate(after):
        later = [(t, b) for t, b in after[i + 1:] if t - t0 >= WINDOW]
        if not later:
            break
        t1, b = later[0]
        if metric == "cpu":  # each member's CPU utilisation, averaged over the window's polls
            inside = [g for t, g in after[i + 1:] if t <= t1]
            shares = [sum(g[n]["cpu_utilisation"] or 0.0 for g in inside) / len(inside) for n in a]
        else:
            shares = [(records(b[n]) - records(a[n])) / (t1 - t0) for n in a]
        average = sum(shares) / len(shares)
        windows.append((t0 - switched, max(shares) / average if average > 0 else 0.0))
    converged = next((start for i, (start, _) in enumerate(windows)
                      if all(r <= TARGET for _, r in windows[i:])), None)
    last = [(t, got) for t, got in after if t >= switched + duration - 60]
    t0, a = last[0]
    t1, b = last[-1]
    rates = {n: (records(b[n]) - records(a[n])) / (t1 - t0) for n in a}
    cpu = {n: sum(g[n]["cpu_utilisation"] or 0.0 for _, g in last[1:]) / max(len(last) - 1, 1) for n in a}

    def handoffs(got: dict[str, dict[str, Any]]) -> int:
        return sum(s["lease_counters"].get("handoffs", 0) for s in got.values())

    mean_rate, mean_cpu = sum(rates.values()) / len(rates), sum(cpu.values()) / len(cpu)
    written_set = set(written)
    return {
        "mode": mode,
        "load_metric": metric,
        "hot_shards": hot,
        "busiest_records_over_mean": round(max(rates.values()) / mean_rate, 3),
        "busiest_cpu_over_mean": round(max(cpu.values()) / mean_cpu, 3) if mean_cpu > 0 else None,
        "records_per_s": {n: round(r, 1) for n, r in sorted(rates.items())},
        "cpu_utilisation": {n: round(c, 3) for n, c in sorted(cpu.items())},
        "converged_s": None if converged is None else round(converged + WINDOW, 1),
        "handoffs_after_switch": handoffs(after[-1][1]) - handoffs(after[0][1]),
        "handoffs_last_minute": handoffs(b) - handoffs(a),
        "takeovers": sum(s["lease_counters"].get("takeovers", 0) for s in b.values()),
        "written": len(written),
        "duplicates": sum(c - 1 for c in seen.values() if c > 1),
        "lost": len(written_set - set(seen)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=150.0, help="seconds after the hot switch")
    parser.add_argument("--interval", type=float, default=10.0, help="load_balance_interval")
    parser.add_argument("--cost", type=float, default=2.0, help="processor CPU ms per record")
    parser.add_argument("--metric", choices=("cpu", "records"), default="cpu",
                        help="load_metric of balance='load' (and the measure converged is judged by)")
    parser.add_argument("--out", type=Path, default=RESULTS / "load_workers.json")
    parser.add_argument("--member", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--table", help=argparse.SUPPRESS)
    parser.add_argument("--stream", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="count", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.member:
        return member(args)
    console = Console(width=max(Console().width, 160))
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-load-workers-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    with MotoProcess() as aws:
        modes = [run_mode(aws, mode, args, console, tmp) for mode in ("count", "load")]
    t = Table(title=f"{SHARDS} shards, {MEMBERS} Worker processes, 4 shards at {HOT_FACTOR}x, "
                    f"{args.cost:g} ms CPU per record, load_metric={args.metric}; last minute of {args.duration:g} s")
    for col in ("balance", "busiest/mean records/s", "busiest/mean CPU", "converged (s)",
                "hand-offs after switch", "in the last minute", "takeovers", "written", "duplicates", "lost"):
        t.add_column(col, justify="right")
    for m in modes:
        t.add_row(m["mode"], f"{m['busiest_records_over_mean']:.2f}",
                  "-" if m["busiest_cpu_over_mean"] is None else f"{m['busiest_cpu_over_mean']:.2f}",
                  "-" if m["converged_s"] is None else f"{m['converged_s']:.0f}", str(m["handoffs_after_switch"]),
                  str(m["handoffs_last_minute"]), str(m["takeovers"]), f"{m['written']:,}", str(m["duplicates"]),
                  str(m["lost"]))
    console.print(t)
    load = modes[1]
    write_json(args.out, {"python": platform.python_version(), "machine": platform.machine(),
                          "duration_s": args.duration, "load_balance_interval_s": args.interval,
                          "cpu_ms_per_record": args.cost, "load_metric": args.metric,
                          "target_busiest_over_mean": TARGET, "modes": modes,
                          "load_over_count_busiest": round(load["busiest_records_over_mean"]
                                                           / modes[0]["busiest_records_over_mean"], 3)})
    console.print(f"wrote {args.out}")
    balanced = load["busiest_cpu_over_mean"] if args.metric == "cpu" else load["busiest_records_over_mean"]
    ok = (balanced is not None and balanced <= TARGET and all(m["duplicates"] == 0 and m["lost"] == 0 for m in modes))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
