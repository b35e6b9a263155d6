"""Keyed parallelism: records/s of one shard for an I/O-bound processor, by ``max_in_flight``.

One moto server in its own process; one shard pre-filled with ``--records`` records of 1 KB
over 100 partition keys. Each case is a Worker (its defaults, TRIM_HORIZON, its own
application) in a fresh process, processing the first ``n`` records with a
:class:`kinesis.KeyedProcessor` whose every record waits 20 ms:

* ``sleep``: ``async def process`` awaiting ``asyncio.sleep(0.02)`` (the Worker's event loop);
* ``http``: a plain ``process`` doing a GET on a local HTTP server that answers after 20 ms
  (``urllib``, on the Worker's thread pool of ``keyed_threads = max_in_flight`` threads);

for ``max_in_flight`` 1 (sequential: today's processors), 8, 64 and 256. Per case: records/s
from the first record to the last, the ratio to the sequential rate, CPU per record of the
Worker process over that span, its peak RSS, the most records in flight and the deepest
pending window seen, and the per-key order checked on every record (a ledger per key: each
key's records complete in shard order, each once).

Writes benchmarks/results/keyed.json.

    .venv/bin/python benchmarks/bench_keyed.py [--records 12000] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report import write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
STREAM, KEYS, WAIT = "keyed", 100, 0.02
SETTINGS = (1, 8, 64, 256)


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- one case (a child process) -----------------------------------------------------------


def case(spec: dict[str, Any]) -> dict[str, Any]:
    from kinesis import KeyedProcessor, Record, StreamConfig, Worker, WorkerConfig
    from kinesis.testing import client_for

    n, inflight, mode, url = spec["n"], spec["inflight"], spec["mode"], spec.get("url")
    lock = threading.Lock()
    last: dict[str, int] = {}
    seen: set[str] = set()
    state = {"done": 0, "order_errors": 0, "duplicates": 0, "running": 0, "peak": 0, "first_cpu": 0.0,
             "first_t": 0.0, "last_cpu": 0.0, "last_t": 0.0}
    finished = threading.Event()

    def begin() -> None:
        with lock:
            state["running"] += 1
            state["peak"] = max(state["peak"], state["running"])
            if not state["first_t"]:
                state["first_t"], state["first_cpu"] = time.monotonic(), cpu()

    def end(record: Record) -> None:
        number = int(record.sequence_number)
        with lock:
            state["running"] -= 1
            if record.sequence_number in seen:
                state["duplicates"] += 1
            seen.add(record.sequence_number)
            if last.get(record.partition_key, -1) >= number:
                state["order_errors"] += 1
            last[record.partition_key] = number
            state["done"] += 1
            if state["done"] == n:
                state["last_t"], state["last_cpu"] = time.monotonic(), cpu()
                finished.set()

    if mode == "sleep":
        class Proc(KeyedProcessor):
            max_in_flight = inflight

            async def process(self, record: Record) -> None:
                begin()
                await asyncio.sleep(WAIT)
                end(record)
    else:
        class Proc(KeyedProcessor):  # type: ignore[no-redef]
            max_in_flight = inflight

            def process(self, record: Record) -> None:
                begin()
                with urllib.request.urlopen(url, timeout=10) as answer:
                    answer.read()
                end(record)

    endpoint = spec["endpoint"]
    config = WorkerConfig(table_name=f"keyed-{mode}-{inflight}", worker_id="bench",
                          streams=[StreamConfig(STREAM, f"keyed-{mode}-{inflight}", "TRIM_HORIZON")],
                          keyed_threads=max(inflight, 1))
    worker = Worker(config, Proc, kinesis_client=client_for("kinesis", endpoint),
                    dynamodb_client=client_for("dynamodb", endpoint))
    peak_pending = 0
    worker.start()
    try:
        while not finished.wait(0.2):
            for shard in worker.status().shards:
                if shard.keyed is not None:
                    peak_pending = max(peak_pending, shard.keyed.pending)
    finally:
        worker.stop(graceful=False)
    span = state["last_t"] - state["first_t"]
    return {"mode": mode, "max_in_flight": inflight, "records": n, "seconds": round(span, 2),
            "records_per_s": round((n - 1) / span, 1) if span > 0 else None,
            "cpu_us_per_record": round((state["last_cpu"] - state["first_cpu"]) / n * 1e6, 1),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "peak_in_flight": state["peak"], "peak_pending_window": peak_pending,
            "order_errors": state["order_errors"], "duplicates": state["duplicates"],
            "keys_seen": len(last)}


# --- the run ------------------------------------------------------------------------------


class Slow(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        time.sleep(WAIT)
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def fill(endpoint: str, records: int) -> None:
    from kinesis.testing import client_for

    kinesis = client_for("kinesis", endpoint)
    kinesis.create_stream(StreamName=STREAM, ShardCount=1)
    while kinesis.describe_stream_summary(StreamName=STREAM)["StreamDescriptionSummary"]["StreamStatus"] != "ACTIVE":
        time.sleep(0.1)
    payload = b"x" * 1000
    for start in range(0, records, 500):
        kinesis.put_records(StreamName=STREAM, Records=[
            {"Data": payload, "PartitionKey": f"key-{i % KEYS}"} for i in range(start, min(records, start + 500))])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=12_000, help="records in the shard (the larger cases' n)")
    parser.add_argument("--quick", action="store_true", help="sleep mode only, fewer records")
    parser.add_argument("--out", type=Path, default=RESULTS / "keyed.json")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(case(json.loads(args.case))), flush=True)
        return 0
    from rich.console import Console
    from rich.table import Table

    from benchmarks.moto_process import MotoProcess

    console = Console(width=max(Console().width, 150))
    records = 3000 if args.quick else args.records
    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    rows = []
    with MotoProcess() as aws:
        fill(aws.endpoint_url, records)
        for mode in ("sleep",) if args.quick else ("sleep", "http"):
            for inflight in SETTINGS:
                # ~5-10 s a case: the sequential rate is 50 records/s
                n = min(records, {1: 250, 8: 2000}.get(inflight, records))
                spec = {"n": n, "inflight": inflight, "mode": mode, "url": url, "endpoint": aws.endpoint_url}
                done = subprocess.run([sys.executable, __file__, "--case", json.dumps(spec)], capture_output=True,
                                      text=True, check=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
                row = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append(row)
                console.print(f"[dim]{mode} max_in_flight={inflight}: {row['records_per_s']} records/s[/dim]")
    server.shutdown()
    for row in rows:
        base = next(r for r in rows if r["mode"] == row["mode"] and r["max_in_flight"] == 1)["records_per_s"]
        row["over_sequential"] = round(row["records_per_s"] / base, 1)
    t = Table(title=f"One shard, 1 KB records over {KEYS} keys, every record waits {WAIT * 1000:.0f} ms")
    for col in ("processor", "max_in_flight", "records", "records/s", "x sequential", "CPU us/record",
                "peak RSS MiB", "peak in flight", "peak window", "order errors", "duplicates"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row("async sleep" if r["mode"] == "sleep" else "sync HTTP GET", str(r["max_in_flight"]),
                  f"{r['records']:,}", f"{r['records_per_s']:,.0f}", f"{r['over_sequential']:.1f}",
                  f"{r['cpu_us_per_record']:.0f}", f"{r['peak_rss_mib']:.0f}", str(r["peak_in_flight"]),
                  str(r["peak_pending_window"]), str(r["order_errors"]), str(r["duplicates"]))
    console.print(t)
    write_json(args.out, {"python": platform.python_version(), "machine": platform.machine(),
                          "cpus": os.cpu_count(), "records_in_shard": records, "keys": KEYS,
                          "wait_ms": WAIT * 1000, "command": "benchmarks/bench_keyed.py" + (" --quick" if args.quick else ""),
                          "cases": rows})
    console.print(f"wrote {args.out}")
    ok = all(r["order_errors"] == 0 and r["duplicates"] == 0 for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
