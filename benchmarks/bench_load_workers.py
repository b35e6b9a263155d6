"""Worker processes balancing by load vs by count, on one moto server, in the same run; with
``--with-kcl-rs``, kcl-rs (AWS KCL's Rust port) next to them.

16 shards, 4 Worker processes (the default SessionMembership, scoped reads), a processor whose
CPU cost is proportional to records (``--cost`` ms of CPU per record) and checkpoints every
batch. A writer puts records into every shard at one rate; once the members hold 4 shards
each, 4 shards turn hot at 8x that rate: 2 held by one member, 1 by each of two others (the
typical unlucky placement: 86% of random placements put two hot shards on one member). The
same run then goes on for ``--duration`` seconds, for ``balance="count"`` (today's default)
and ``balance="load"`` (``load_metric="cpu"``, ``load_balance_interval`` = ``--interval``,
shortened from the default minute so a run converges in minutes), each on its own stream.

``--with-kcl-rs`` adds a third fleet after those two, on its own stream: 4 kcl-rs members
(``peers/kcl_rs_member.py`` in its own venv: kcl-rs's defaults, count-based, POLLING,
TRIM_HORIZON; its processor burns the same ``--cost`` per record), the same writer and hot
switch. kcl-rs takes leases gradually (and syncs shards every 60 s), so it gets up to 300 s to
reach 4 shards a member; if it never does, the hot shards go by the placement it has (2 on the
member holding the most, 1 on each of the next two) and the result says so.

Every fleet is measured alike, sampled every 2 s: each member's CPU seconds
(``/proc/<pid>/stat``), records processed (ours: /status; kcl-rs: its ledger's ``R`` lines)
and shards held (ours: /status; kcl-rs: its lease table). Reported per fleet: the busiest
member's records/s and CPU over the fleet's mean over the last minute (target <= 1.25 for
load, on the measure it balances: ``--metric cpu``, the default, or ``records``), the seconds
from the hot switch until every later 10 s window of that measure stays within 1.25
(converged), hand-offs (a shard held by another member than in the previous sample) after the
switch and in the last minute, and, after a drain, every record written checked against what
the members processed (ours: their journals; kcl-rs: its ledgers): duplicates and lost (target
0 and 0 for ours). Per member and 10 s window: records/s, CPU and shards held, in the JSON
and a PNG next to it.

Writes benchmarks/results/load_workers.json (with ``--with-kcl-rs``: load_peers.json) and the
PNG of the same name.

    .venv/bin/python benchmarks/bench_load_workers.py [--duration 150] [--interval 10] [--with-kcl-rs]
"""

from __future__ import annotations

import argparse
import bisect
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
from kinesis.testing import FAKE_CREDENTIALS  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SHARDS, MEMBERS, HOT_FACTOR = 16, 4, 8
COLD_PER_TICK, TICK = 1, 0.2  # records per shard per writer tick: 5 records/s a cold shard
TARGET = 1.25
WINDOW = 10.0  # seconds a window of the series and of the convergence test spans
SAMPLE = 2.0  # seconds between samples of every member
PRE = 30.0  # seconds of the series before the hot switch
DRAIN = 180.0  # seconds at most to wait, after the writer stops, for every record to be processed


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


Sample = tuple[float, dict[str, dict[str, Any]]]
"""(monotonic time, member -> {"records": records processed so far, "cpu": CPU seconds so far
(``/proc/<pid>/stat``, None once it exited), "held": shard ids held, "status": our /status})."""


class Fleet:
    """Four member processes on one stream, sampled alike whatever library they run."""

    mode = ""
    settle_timeout = 120.0
    """Seconds to wait for 4 shards a member before the hot switch."""
    strict_settle = True
    """Stop the run (instead of switching from the placement it has) if they never hold 4 each."""

    def __init__(self, aws: MotoProcess, stream: str, args: argparse.Namespace, tmp: Path):
        self.aws, self.stream, self.args, self.tmp = aws, stream, args, tmp
        self.names = [f"member-{i}" for i in range(MEMBERS)]
        self.procs: dict[str, subprocess.Popen[Any]] = {}

    def start(self) -> None:
        raise NotImplementedError

    def members(self) -> dict[str, dict[str, Any]]:
        """Per member: records processed so far and shards held (``records``, ``held``)."""
        raise NotImplementedError

    def processed(self) -> tuple[Counter[tuple[str, str]], list[str]]:
        """Times each (shard, sequence number) was processed, and notes on what is missing."""
        raise NotImplementedError

    def duplicates_before(self, wall_ns: int) -> int | None:
        """Duplicates processed before ``wall_ns`` (None: the members do not say when)."""
        return None

    def drained(self, written: set[tuple[str, str]], sample: Sample) -> bool:
        """Every record written has been processed (as far as ``sample`` and the ledgers tell)."""
        raise NotImplementedError

    def sample(self) -> Sample | None:
        from benchmarks.peers.process_run import cpu_seconds  # here: the members never need it

        try:
            got = self.members()
        except Exception as exc:  # a slow /status or Scan on a loaded machine: skip this sample
            print(f"  {self.mode}: sample skipped ({type(exc).__name__}: {exc})", flush=True)
            return None
        for name, proc in self.procs.items():
            got[name]["cpu"] = cpu_seconds(proc.pid) if proc.poll() is None else None
        return time.monotonic(), got

    def stop(self) -> dict[str, Any]:
        """SIGTERM every member, then their exit codes (killed after 60 s)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes: dict[str, Any] = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                codes[name] = "killed after 60 s"
        return codes


class OurFleet(Fleet):
    """Our Worker processes (this script's ``--member``), ``balance=mode``, read by /status."""

    def __init__(self, aws: MotoProcess, mode: str, args: argparse.Namespace, tmp: Path):
        super().__init__(aws, f"bench-load-{mode}", args, tmp)
        self.mode, self.table = mode, f"bench-load-leases-{mode}"
        self.urls: dict[str, str] = {}

    def start(self) -> None:
        args, env = self.args, dict(os.environ, PYTHONPATH=str(ROOT))
        self.procs = {n: subprocess.Popen(
            [sys.executable, __file__, "--member", n, "--endpoint", self.aws.endpoint_url, "--table", self.table,
             "--stream", self.stream, "--mode", self.mode, "--interval", str(args.interval),
             "--cost", str(args.cost), "--metric", args.metric, "--out", str(self.out(n))],
            stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT) for n in self.names}
        for n, p in self.procs.items():
            assert p.stdout is not None
            line = p.stdout.readline().strip()
            if not line.startswith("URL "):
                raise SystemExit(f"{n} did not start: {line!r}")
            self.urls[n] = line.split(" ", 1)[1]

    def out(self, name: str) -> Path:
        return self.tmp / f"{self.mode}-{name}.json"

    def members(self) -> dict[str, dict[str, Any]]:
        got = {n: status(u) for n, u in self.urls.items()}
        return {n: {"records": sum(s["records_processed"].values()),
                    "held": sorted(k.rsplit("/", 1)[1] for k in s["held"]), "status": s} for n, s in got.items()}

    def drained(self, written: set[tuple[str, str]], sample: Sample) -> bool:
        return sum(m["records"] for m in sample[1].values()) >= len(written)

    def processed(self) -> tuple[Counter[tuple[str, str]], list[str]]:
        seen: Counter[tuple[str, str]] = Counter()
        missing = []
        for n in self.names:
            if not self.out(n).exists():
                missing.append(f"{n}: no out file")
                continue
            seen.update((shard, sequence) for shard, sequence in json.loads(self.out(n).read_text()))
        return seen, missing


class KclRsFleet(Fleet):
    """kcl-rs members (``peers/kcl_rs_member.py`` in kcl-rs's own venv, its defaults, POLLING,
    TRIM_HORIZON): holdings from its lease table, records from its ledgers."""

    mode = "kcl-rs"
    settle_timeout = 300.0  # its shard sync is 60 s by default, and it takes leases gradually
    strict_settle = False

    def __init__(self, aws: MotoProcess, args: argparse.Namespace, tmp: Path):
        super().__init__(aws, "bench-load-kcl-rs", args, tmp)
        self.application = self.stream  # kcl-rs names its lease table after the application
        self.dir = tmp / "kcl-rs"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dynamodb = aws.client("dynamodb")
        self.offsets = dict.fromkeys(self.names, 0)
        self.partial = dict.fromkeys(self.names, b"")
        self.records: Counter[str] = Counter()
        self.seen: Counter[tuple[str, str]] = Counter()
        self.again_ns: list[int] = []  # when a record was processed once more (time.time_ns())

    def start(self) -> None:
        from benchmarks.peers import envs

        python = str(envs.ensure("kcl-rs"))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(AWS_ACCESS_KEY_ID=FAKE_CREDENTIALS["aws_access_key_id"],
                   AWS_SECRET_ACCESS_KEY=FAKE_CREDENTIALS["aws_secret_access_key"],
                   AWS_DEFAULT_REGION="us-east-1", AWS_REGION="us-east-1", PYTHONUNBUFFERED="1")
        for n in self.names:
            stderr = open(self.dir / f"{n}.stderr", "ab")  # noqa: SIM115 - the child's
            self.procs[n] = subprocess.Popen(
                [python, str(ROOT / "benchmarks" / "peers" / "kcl_rs_member.py"), "--endpoint", self.aws.endpoint_url,
                 "--stream", self.stream, "--application", self.application, "--member-id", n,
                 "--out-dir", str(self.dir), "--cost-ms", str(self.args.cost)],
                env=env, stdout=stderr, stderr=stderr, cwd=ROOT)
            stderr.close()

    def _read_ledgers(self) -> None:
        """The ``R`` lines written since the last call (a line not yet ended waits)."""
        for n in self.names:
            path = self.dir / f"{n}.ledger"
            if not path.exists():
                continue
            with path.open("rb") as f:
                f.seek(self.offsets[n])
                data = f.read()
            self.offsets[n] += len(data)
            lines = (self.partial[n] + data).split(b"\n")
            self.partial[n] = lines.pop()
            for line in lines:
                parts = line.split()
                if len(parts) == 7 and parts[0] == b"R":
                    self.records[n] += 1
                    key = (parts[1].decode(), parts[2].decode())
                    if key in self.seen:
                        self.again_ns.append(int(parts[6]))
                    self.seen[key] += 1

    def owners(self) -> dict[str, str | None]:
        """Shard -> lease owner, from kcl-rs's lease table (shard leases not at SHARD_END)."""
        out: dict[str, str | None] = {}
        kwargs: dict[str, Any] = {"TableName": self.application}
        while True:
            page = self.dynamodb.scan(**kwargs)
            for row in page.get("Items", []):
                key = row.get("leaseKey", {}).get("S", "")
                if "shardId-" in key and row.get("leaseState", {}).get("S") != "SHARD_END":
                    out[key] = row.get("leaseOwner", {}).get("S") or None
            if "LastEvaluatedKey" not in page:
                return out
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def members(self) -> dict[str, dict[str, Any]]:
        self._read_ledgers()
        try:
            owners = self.owners()
        except self.dynamodb.exceptions.ResourceNotFoundException:  # not created yet
            owners = {}
        return {n: {"records": self.records[n], "held": sorted(k for k, o in owners.items() if o == n)}
                for n in self.names}

    def drained(self, written: set[tuple[str, str]], sample: Sample) -> bool:
        return written <= self.seen.keys()

    def processed(self) -> tuple[Counter[tuple[str, str]], list[str]]:
        self._read_ledgers()
        return Counter(self.seen), []

    def duplicates_before(self, wall_ns: int) -> int | None:
        return sum(1 for t in self.again_ns if t < wall_ns)


def pick_hot(held: dict[str, list[str]], names: list[str]) -> dict[str, list[str]]:
    """The hot shards by member, 2 on one and 1 on each of two others: the first three names
    when every member holds 4, else the member holding the most and the next two."""
    order = names if all(len(held[n]) == SHARDS // MEMBERS for n in names) else \
        sorted(names, key=lambda n: (-len(held[n]), n))
    return {n: held[n][:k] for n, k in zip(order[:3], (2, 1, 1), strict=True) if held[n]}


def run_mode(aws: MotoProcess, fleet: Fleet, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName=fleet.stream, ShardCount=SHARDS)
    while kinesis.describe_stream_summary(StreamName=fleet.stream)["StreamDescriptionSummary"]["StreamStatus"] \
            != "ACTIVE":
        time.sleep(0.1)
    writer = Writer(kinesis, fleet.stream)
    samples: list[Sample] = []

    def take() -> Sample | None:
        got = fleet.sample()
        if got is not None:
            samples.append(got)
        return got

    started = time.monotonic()
    fleet.start()
    try:
        settled_s = None
        while True:
            got = take()
            if got and all(len(m["held"]) == SHARDS // MEMBERS for m in got[1].values()):
                settled_s = round(got[0] - started, 1)
                break
            if time.monotonic() - started > fleet.settle_timeout:
                held = {n: len(m["held"]) for n, m in samples[-1][1].items()} if samples else {}
                if fleet.strict_settle:
                    raise SystemExit(f"{fleet.mode}: members did not settle on 4 shards each: {held}")
                console.print(f"[yellow]{fleet.mode}: not 4 shards each after {fleet.settle_timeout:g} s "
                              f"({held}); the hot shards go by the placement it has[/yellow]")
                break
            time.sleep(SAMPLE)
        held = {n: m["held"] for n, m in samples[-1][1].items()}
        hot_by_member = pick_hot(held, fleet.names)
        hot = [shard for shards in hot_by_member.values() for shard in shards]
        writer.hot = set(hot)
        switched, switched_ns = time.monotonic(), time.time_ns()
        console.print(f"[dim]{fleet.mode}: hot shards {hot_by_member}; running {args.duration:g} s[/dim]")
        while (now := time.monotonic()) - switched < args.duration:
            time.sleep(SAMPLE - (now - switched) % SAMPLE)
            take()
        writer.stop()
        written = set(writer.written)
        drain_started, drained_s = time.monotonic(), None
        while time.monotonic() - drain_started < DRAIN:
            got = take()
            if got and fleet.drained(written, got):
                drained_s = round(time.monotonic() - drain_started, 1)
                break
            time.sleep(1.0)
    finally:
        writer.stop()
        exits = fleet.stop()
    seen, missing = fleet.processed()
    result = summarise(fleet.mode, args.metric, samples, switched, args.duration, writer.written, seen)
    result.update(hot_shards=hot, hot_by_member={n: len(h) for n, h in hot_by_member.items()},
                  four_each_before_switch=settled_s is not None,
                  settled_s=settled_s, placement_at_switch={n: len(h) for n, h in held.items()},
                  drained_s=drained_s, exit_codes=exits, duplicates_before_switch=fleet.duplicates_before(switched_ns),
                  **({"missing": missing} if missing else {}))
    return result


def at(samples: list[Sample], name: str, key: str, t: float) -> float | None:
    """A member's cumulative ``key`` at ``t``, linear between the samples either side."""
    times = [s[0] for s in samples]
    i = bisect.bisect_left(times, t)
    if i == len(times):
        return None
    t1, v1 = times[i], samples[i][1][name][key]
    if t1 == t:
        return float(v1) if v1 is not None else None
    if i == 0:
        return None
    t0, v0 = times[i - 1], samples[i - 1][1][name][key]
    if v0 is None or v1 is None:
        return None
    return float(v0 + (v1 - v0) * (t - t0) / (t1 - t0))


def series(samples: list[Sample], switched: float, duration: float) -> dict[str, Any]:
    """Per member, records/s, CPU utilisation (CPU seconds a second) and shards held (at its end)
    for every WINDOW-second window from PRE seconds before the hot switch to the end."""
    names = sorted(samples[0][1])
    starts = [k * WINDOW for k in range(-int(PRE // WINDOW), int(duration // WINDOW))]
    out: dict[str, Any] = {"window_s": WINDOW, "start_s": starts, "records_per_s": {}, "cpu_utilisation": {},
                           "shards_held": {}}
    for n in names:
        for key, field in (("records", "records_per_s"), ("cpu", "cpu_utilisation")):
            values = []
            for s in starts:
                a, b = at(samples, n, key, switched + s), at(samples, n, key, switched + s + WINDOW)
                values.append(None if a is None or b is None else round((b - a) / WINDOW, 3))
            out[field][n] = values
        held = []
        for s in starts:
            before = [g for t, g in samples if t <= switched + s + WINDOW]
            held.append(len(before[-1][n]["held"]) if before and samples[0][0] <= switched + s else None)
        out["shards_held"][n] = held
    return out


def owner_changes(samples: list[Sample]) -> list[tuple[float, str, str, str]]:
    """(time, shard, from, to) whenever a shard is held by a member other than the one that held
    it last (a hand-off, seen between consecutive samples, from a lease table or /status alike)."""
    last: dict[str, str] = {}
    changes = []
    for t, got in samples:
        holders: dict[str, list[str]] = {}
        for name, m in got.items():
            for shard in m["held"]:
                holders.setdefault(shard, []).append(name)
        for shard, names in sorted(holders.items()):
            if last.get(shard) in names:
                continue
            if shard in last:
                changes.append((t, shard, last[shard], min(names)))
            last[shard] = min(names)
    return changes


def summarise(mode: str, metric: str, samples: list[Sample], switched: float, duration: float,
              written: list[tuple[str, str]], seen: Counter[tuple[str, str]]) -> dict[str, Any]:
    end = switched + duration
    after = [(t, got) for t, got in samples if switched <= t <= end]
    key = "cpu" if metric == "cpu" else "records"
    windows = []  # (start, busiest/mean of the balanced measure) over WINDOW-second windows
    for i, (t0, a) in enumerate(after):
        later = [(t, b) for t, b in after[i + 1:] if t - t0 >= WINDOW]
        if not later:
            break
        t1, b = later[0]
        if any(a[n][key] is None or b[n][key] is None for n in a):
            continue
        shares = [(b[n][key] - a[n][key]) / (t1 - t0) for n in a]
        average = sum(shares) / len(shares)
        windows.append((t0 - switched, max(shares) / average if average > 0 else 0.0))
    converged = next((start for i, (start, _) in enumerate(windows)
                      if all(r <= TARGET for _, r in windows[i:])), None)
    last = [(t, got) for t, got in after if t >= end - 60]
    t0, a = last[0]
    t1, b = last[-1]
    rates = {n: (b[n]["records"] - a[n]["records"]) / (t1 - t0) for n in a}
    cpu = {n: (b[n]["cpu"] - a[n]["cpu"]) / (t1 - t0) for n in a}
    mean_rate, mean_cpu = sum(rates.values()) / len(rates), sum(cpu.values()) / len(cpu)
    changes = [c for c in owner_changes([s for s in samples if s[0] <= end]) if c[0] > switched]
    result: dict[str, Any] = {
        "mode": mode,
        "load_metric": metric if mode == "load" else None,
        "busiest_records_over_mean": round(max(rates.values()) / mean_rate, 3),
        "busiest_cpu_over_mean": round(max(cpu.values()) / mean_cpu, 3) if mean_cpu > 0 else None,
        "records_per_s": {n: round(r, 1) for n, r in sorted(rates.items())},
        "cpu_utilisation": {n: round(c, 3) for n, c in sorted(cpu.items())},
        "converged_s": None if converged is None else round(converged + WINDOW, 1),
        "handoffs_after_switch": len(changes),
        "handoffs_last_minute": sum(1 for c in changes if c[0] >= t0),
        "handoffs": [{"at_s": round(t - switched, 1), "shard": shard, "from": old, "to": new}
                     for t, shard, old, new in changes],
        "written": len(written),
        "processed": sum(seen.values()),
        "duplicates": sum(c - 1 for c in seen.values() if c > 1),
        "lost": len(set(written) - set(seen)),
        "series": series(samples, switched, duration),
    }
    if a[next(iter(a))].get("status"):  # ours: what the members report about themselves too

        def handoffs(got: dict[str, dict[str, Any]]) -> int:
            return sum(m["status"]["lease_counters"].get("handoffs", 0) for m in got.values())

        status_cpu = {n: sum(g[n]["status"]["cpu_utilisation"] or 0.0 for _, g in last[1:]) / max(len(last) - 1, 1)
                      for n in a}
        mean_status = sum(status_cpu.values()) / len(status_cpu)
        result["status"] = {
            "busiest_cpu_over_mean": round(max(status_cpu.values()) / mean_status, 3) if mean_status > 0 else None,
            "cpu_utilisation": {n: round(c, 3) for n, c in sorted(status_cpu.items())},
            "handoffs_after_switch": handoffs(after[-1][1]) - handoffs(after[0][1]),
            "handoffs_last_minute": handoffs(b) - handoffs(a),
            "takeovers": sum(m["status"]["lease_counters"].get("takeovers", 0) for m in b.values()),
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=150.0, help="seconds after the hot switch")
    parser.add_argument("--interval", type=float, default=10.0, help="load_balance_interval")
    parser.add_argument("--cost", type=float, default=2.0, help="processor CPU ms per record")
    parser.add_argument("--metric", choices=("cpu", "records"), default="cpu",
                        help="load_metric of balance='load' (and the measure converged is judged by)")
    parser.add_argument("--with-kcl-rs", action="store_true",
                        help="a third fleet: kcl-rs (its own venv, benchmarks/peers/.venvs/kcl-rs)")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON (a PNG of the same name next to it); default results/load_workers.json, "
                             "results/load_peers.json with --with-kcl-rs")
    parser.add_argument("--member", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--table", help=argparse.SUPPRESS)
    parser.add_argument("--stream", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="count", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.member:
        return member(args)
    out = args.out or RESULTS / ("load_peers.json" if args.with_kcl_rs else "load_workers.json")
    console = Console(width=max(Console().width, 160))
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-load-workers-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    console.print(f"[dim]members' files: {tmp}[/dim]")
    with MotoProcess() as aws:
        fleets: list[Fleet] = [OurFleet(aws, mode, args, tmp) for mode in ("count", "load")]
        if args.with_kcl_rs:
            fleets.append(KclRsFleet(aws, args, tmp))
        modes = [run_mode(aws, fleet, args, console) for fleet in fleets]
    t = Table(title=f"{SHARDS} shards, {MEMBERS} member processes, 4 shards at {HOT_FACTOR}x, "
                    f"{args.cost:g} ms CPU per record, load_metric={args.metric}; last minute of {args.duration:g} s")
    for col in ("fleet", "4 each at switch", "busiest/mean records/s", "busiest/mean CPU", "converged (s)",
                "hand-offs after switch", "in the last minute", "written", "duplicates", "lost"):
        t.add_column(col, justify="right")
    for m in modes:
        t.add_row(m["mode"], "yes" if m["four_each_before_switch"] else f"no {m['placement_at_switch']}",
                  f"{m['busiest_records_over_mean']:.2f}",
                  "-" if m["busiest_cpu_over_mean"] is None else f"{m['busiest_cpu_over_mean']:.2f}",
                  "-" if m["converged_s"] is None else f"{m['converged_s']:.0f}", str(m["handoffs_after_switch"]),
                  str(m["handoffs_last_minute"]), f"{m['written']:,}", str(m["duplicates"]), str(m["lost"]))
    console.print(t)
    count, load = modes[0], modes[1]
    result: dict[str, Any] = {
        "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
        "duration_s": args.duration, "load_balance_interval_s": args.interval, "cpu_ms_per_record": args.cost,
        "load_metric": args.metric, "target_busiest_over_mean": TARGET,
        "cpu_measure": "CPU seconds per second of each member process (/proc/<pid>/stat utime + stime), "
                       "sampled every 2 s",
        "modes": modes,
        "load_over_count_busiest": round(load["busiest_records_over_mean"] / count["busiest_records_over_mean"], 3)}
    if args.with_kcl_rs:
        from benchmarks.peers import envs

        result["kcl_rs"] = {"version": envs.installed_versions("kcl-rs").get("kcl-rs"),
                            "settings": "kcl-rs defaults (failover 10 s, shard sync 60 s, idle between reads "
                                        "1.5 s); POLLING, TRIM_HORIZON"}
    write_json(out, result)
    console.print(f"wrote {out}")
    try:
        from benchmarks.peers.plots import plot_load_series

        console.print(f"plot: {plot_load_series(modes, out.with_suffix('.png'), title=t.title or '')}")
    except ImportError as exc:
        console.print(f"no plot ({exc})")
    balanced = load["busiest_cpu_over_mean"] if args.metric == "cpu" else load["busiest_records_over_mean"]
    ours = [m for m in modes if m["mode"] in ("count", "load")]
    ok = (balanced is not None and balanced <= TARGET and all(m["duplicates"] == 0 and m["lost"] == 0 for m in ours))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
