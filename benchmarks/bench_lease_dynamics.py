"""End-to-end lease dynamics with real Worker processes, in units of lease_duration and ticks.

Members are ``examples/demo_member.py`` processes (a :class:`kinesis.Worker` with
:class:`kinesis.DynamoDBMembership`) against one moto server process over HTTP; every member
writes a ledger of what it processed (``I`` = a processor initialized on a shard, ``R`` = a
record processed) with ``time.time_ns()`` stamps, and its status (with its DynamoDB request
counts) twice a second. The coordinator-only dynamics (and the KCL / Event Hubs comparisons)
are in ``bench_leases.py``; these are the same figures through the whole worker.

Phase 1 (``--lease-duration``, default 10 s; tick = lease_duration / 3), 40 shards, producer on:

* join: a 6th member joins a balanced fleet of 5: seconds from its heartbeat row appearing in
  the table to the fleet being balanced again (target <= 2 ticks);
* SIGKILL: one member is killed: seconds until a new owner's processor is initialized on each
  of its shards (target <= lease_duration + 1 tick); the baseline is the lease duration itself,
  the least any expiry-based takeover needs;
* SIGTERM: one member is stopped gracefully: seconds until a new owner's processor is
  initialized on each of its shards (target <= 1 tick), and the duplicates this caused (0).

Phase 2 (production default lease_duration 10 s), 100 shards, no records: DynamoDB requests per
member per minute, with 4 members (25 leases each) and with 1 member holding all 100 leases,
against the expected ``ticks per minute x (leases held + 1 heartbeat + 3 scans)`` (a tick
and the two light rounds between ticks scan once each).

``--reads scoped`` runs phase 1 with ``WorkerConfig(reads="scoped")`` members (no table scans,
the shard manifest) whose membership is ``KubernetesMembership`` against the tests' fake API
server (``tests/support/fake_k8s.py``, the official client over HTTP): a member's pod is listed
before it starts; a SIGKILLed member's pod stays listed (the worst case: its watcher takes its
leases over at expiry) until the takeover is measured; a SIGTERMed member's pod leaves the list
at once, as a terminating pod does.

Writes benchmarks/results/lease_dynamics.json (``--reads scoped``: lease_dynamics_scoped.json).

    .venv/bin/python benchmarks/bench_lease_dynamics.py [--quick] [--reads scoped]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.moto_process import MotoProcess  # noqa: E402
from benchmarks.report import write_json  # noqa: E402
from examples.demo_fleet import Fleet, Producer, audit, processed_keys, read_ledgers  # noqa: E402
from kinesis.lease_loop.table.leases import LeaseTable  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
console = Console()


def first_inits_after(out_dir: Path, shards: set[str], after_ns: int, exclude: str) -> dict[str, int]:
    """Shard -> time_ns of the first processor initialization after ``after_ns`` by another member."""
    events, _ = read_ledgers(out_dir)
    out: dict[str, int] = {}
    for e in events:
        if e.kind == "I" and e.shard_id in shards and e.t > after_ns and e.member != exclude:
            out[e.shard_id] = min(out.get(e.shard_id, e.t), e.t)
    return out


def handoff_writes(log_path: Path) -> dict[str, int]:
    """Shard -> time_ns of the hand-off write, from a member's log ("handed <key> off to")."""
    out: dict[str, int] = {}
    for line in log_path.read_text().splitlines():
        if " handed " in line and " off to " in line:
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            key = line.split(" handed ", 1)[1].split(" off to ", 1)[0]
            out[key.rsplit("/", 1)[1]] = int(stamp * 1e9)
    return out


def wait(fleet: Fleet, pred: Any, what: str, timeout: float = 180.0, poll: float = 0.1) -> float:
    return fleet.wait_until(pred, timeout, what, poll=poll)


def summary(delays_s: list[float], unit: float) -> dict[str, float]:
    return {
        "max_s": round(max(delays_s), 2),
        "median_s": round(statistics.median(delays_s), 2),
        "max_units": round(max(delays_s) / unit, 2),
        "median_units": round(statistics.median(delays_s) / unit, 2),
    }


class Pods:
    """Scoped reads: the members' Kubernetes membership, served by the tests' fake API server
    (the official client over HTTP; pods labelled ``app=dyn``). Without ``scoped``, nothing."""

    def __init__(self, scoped: bool, out_dir: Path):
        self.fake: Any = None
        self.args: list[str] = []
        if scoped:
            from tests.support.fake_k8s import FakeKubernetes

            self.fake = FakeKubernetes().start()
            out_dir.mkdir(parents=True, exist_ok=True)
            kubeconfig = out_dir / "kubeconfig"
            kubeconfig.write_text(
                "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
                f"clusters: [{{name: fake, cluster: {{server: '{self.fake.url}'}}}}]\n"
                "users: [{name: fake, user: {token: fake}}]\n"
                "contexts: [{name: fake, context: {cluster: fake, user: fake, namespace: default}}]\n"
            )
            self.args = ["--reads", "scoped", "--kubeconfig", str(kubeconfig), "--k8s-selector", "app=dyn"]

    def add(self, name: str) -> None:
        if self.fake is not None:
            self.fake.add_pod(name, {"app": "dyn"})

    def remove(self, name: str) -> None:
        if self.fake is not None:
            self.fake.delete_pod(name)

    def close(self) -> None:
        if self.fake is not None:
            self.fake.stop()


def phase_dynamics(aws: MotoProcess, out_dir: Path, lease: float, quick: bool, reads: str = "scan",
                   backup_check_interval: float | None = None, unlist_after: float | None = None) -> dict[str, Any]:
    shards, members = (20, 4) if quick else (40, 5)
    tick = lease / 3
    stream, table = "dyn", "dyn-leases"
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName=stream, ShardCount=shards)
    LeaseTable.open(aws.client("dynamodb"), table)
    producer = Producer(kinesis, stream, rate=60.0, keys=4 * shards).start()
    pods = Pods(reads == "scoped", out_dir)
    check_args = [] if backup_check_interval is None else ["--backup-check-interval", str(backup_check_interval)]
    fleet = Fleet(aws.endpoint_url, out_dir, stream=stream, application="dyn-app", table=table,
                  lease_duration=lease, member_args=["--idle-backoff", "2.0", *pods.args, *check_args])
    try:
        names = [f"member-{i}" for i in range(1, members + 1)]
        for n in names:
            pods.add(n)
            fleet.start_member(n)
        wait(fleet, lambda: fleet.balanced(shards=shards), f"{members} members to balance")
        time.sleep(2 * lease)  # steady state before measuring (not a synchronisation)

        # join (scan: from the newcomer's heartbeat row; scoped: from its first status report,
        # its pod listed before it started)
        newcomer = f"member-{members + 1}"
        pods.add(newcomer)
        fleet.start_member(newcomer)
        if reads == "scoped":
            wait(fleet, lambda: fleet.status(newcomer) is not None, "the newcomer's first status")
        else:
            wait(fleet, lambda: newcomer in fleet.table.scan().members, "the newcomer's heartbeat row")
        joined = time.monotonic()
        wait(fleet, lambda: fleet.balanced(shards=shards), "balance after the join")
        join_s = time.monotonic() - joined
        counts_after_join = fleet.counts()
        time.sleep(2 * lease)

        # SIGKILL
        victim = names[1]
        victim_shards = {k.rsplit("/", 1)[1] for k, o in fleet.owners().items() if o == victim}
        kill_ns = time.time_ns()
        fleet.kill(victim)
        unlist = None
        if unlist_after is not None:  # a failing readiness probe unlists the pod this long after the kill
            unlist = threading.Timer(unlist_after, pods.remove, (victim,))
            unlist.start()
        wait(fleet, lambda: len(first_inits_after(out_dir, victim_shards, kill_ns, victim)) == len(victim_shards),
             "new owners of the killed member's shards")
        kill_delays = [(t - kill_ns) / 1e9 for t in first_inits_after(out_dir, victim_shards, kill_ns, victim).values()]
        if unlist is not None:
            unlist.join()
        else:
            pods.remove(victim)  # scoped: the pod stayed listed (worst case) until now
        wait(fleet, lambda: fleet.balanced(shards=shards), "balance after the kill")
        time.sleep(2 * lease)

        # SIGTERM
        leaver = names[2]
        leaver_shards = {k.rsplit("/", 1)[1] for k, o in fleet.owners().items() if o == leaver}
        term_ns = time.time_ns()
        pods.remove(leaver)  # a terminating pod leaves the member list at once
        exit_code = fleet.terminate(leaver, wait=False)
        wait(fleet, lambda: len(first_inits_after(out_dir, leaver_shards, term_ns, leaver)) == len(leaver_shards),
             "new owners of the leaver's shards")
        inits = first_inits_after(out_dir, leaver_shards, term_ns, leaver)
        term_delays = [(t - term_ns) / 1e9 for t in inits.values()]
        exit_code = fleet.members[leaver].process.wait(60)
        written = handoff_writes(out_dir / f"{leaver}.log")
        adopt_delays = [(inits[s] - written[s]) / 1e9 for s in inits if s in written]
        wait(fleet, lambda: fleet.balanced(shards=shards), "balance after the SIGTERM")

        producer.stop()
        produced = producer.snapshot()
        wanted = {(p.shard_id, p.sequence_number) for p in produced}
        wait(fleet, lambda: wanted <= processed_keys(out_dir), "every record processed", poll=0.5)
        fleet.stop_all()
        result = audit(produced, out_dir, killed=[victim])
    finally:
        producer.stop()
        fleet.close()
        pods.close()
    return {
        "reads": reads,
        "backup_check_interval_s": backup_check_interval,
        "unlist_after_s": unlist_after,
        "shards": shards,
        "members": members,
        "lease_duration_s": lease,
        "tick_s": round(tick, 3),
        "join": {
            "seconds": round(join_s, 2),
            "ticks": round(join_s / tick, 2),
            "lease_durations": round(join_s / lease, 2),
            "target_ticks": 2,
            "counts_after": counts_after_join,
        },
        "sigkill_failover": {
            "leases": len(victim_shards),
            **{k.replace("units", "lease_durations"): v for k, v in summary(kill_delays, lease).items()},
            "target_lease_durations": round(1 + 1 / 3, 2),
            "baseline": "lease_duration (the least any expiry-based takeover needs)",
            "max_over_baseline": round(max(kill_delays) / lease, 2),
        },
        "sigterm_handoff": {
            "leases": len(leaver_shards),
            **{k.replace("units", "ticks"): v for k, v in summary(term_delays, tick).items()},
            "target_ticks": 1,
            "exit_code": exit_code,
            "from_handoff_write": summary(adopt_delays, tick) if adopt_delays else None,
        },
        "audit": {
            "produced": result.produced,
            "lost": len(result.lost),
            "graceful_duplicates": result.graceful_duplicates,
            "crash_duplicates": result.crash_duplicates,
            "overlaps": len(result.overlaps),
            "out_of_order": len(result.out_of_order),
            "ok": result.ok,
        },
    }


def requests_total(fleet: Fleet, name: str) -> tuple[int, int] | None:
    st = fleet.status(name)
    if st is None:
        return None
    return sum(int(v) for v in st.get("dynamodb_requests", {}).values()), int(st["time_ns"])


def window(fleet: Fleet, names: list[str], seconds: float) -> dict[str, float]:
    """DynamoDB requests per minute of each member over ``seconds`` (from their status files)."""
    start = {n: requests_total(fleet, n) for n in names}
    time.sleep(seconds)  # the measurement window itself
    out = {}
    for n in names:
        a, b = start[n], requests_total(fleet, n)
        assert a is not None and b is not None
        out[n] = (b[0] - a[0]) / ((b[1] - a[1]) / 1e9) * 60
    return out


def phase_requests(aws: MotoProcess, out_dir: Path, quick: bool) -> dict[str, Any]:
    shards, lease, seconds = (100, 10.0, 20.0 if quick else 60.0)
    tick = lease / 3
    stream, table = "req", "req-leases"
    aws.client("kinesis").create_stream(StreamName=stream, ShardCount=shards)
    LeaseTable.open(aws.client("dynamodb"), table)
    fleet = Fleet(aws.endpoint_url, out_dir, stream=stream, application="req-app", table=table,
                  lease_duration=lease, member_args=["--idle-backoff", "2.0"])
    ticks_per_min = 60 / tick
    try:
        names = [f"member-{i}" for i in range(1, 5)]
        for n in names:
            fleet.start_member(n)
        wait(fleet, lambda: fleet.balanced(shards=shards), "4 members to balance 100 leases", timeout=300, poll=0.5)
        time.sleep(tick)
        four = window(fleet, names, seconds)
        for n in names[1:]:
            fleet.terminate(n)
        wait(fleet, lambda: fleet.counts() == {names[0]: shards}, "one member to hold everything", timeout=120, poll=0.5)
        time.sleep(tick)
        one = window(fleet, names[:1], seconds)
        fleet.stop_all()
    finally:
        fleet.close()
    mean4 = statistics.mean(four.values())
    scans = 3  # the tick's scan and two light rounds (scan_interval = tick / 3)
    expected4 = ticks_per_min * (shards / 4 + 1 + scans)
    expected1 = ticks_per_min * (shards + 1 + scans)
    return {
        "shards": shards,
        "lease_duration_s": lease,
        "window_s": seconds,
        "four_members": {
            "leases_per_member": shards // 4,
            "requests_per_member_per_min": round(mean4, 1),
            "per_member": {k: round(v, 1) for k, v in four.items()},
            "expected_per_min": round(expected4, 1),
            "measured_over_expected": round(mean4 / expected4, 2),
        },
        "one_member_100_leases": {
            "requests_per_min": round(one[names[0]], 1),
            "expected_per_min": round(expected1, 1),
            "measured_over_expected": round(one[names[0]] / expected1, 2),
            "requests_per_lease_per_min": round(one[names[0]] / shards, 2),
        },
        "expected": "ticks per minute x (leases held + 1 heartbeat + 3 scans: the tick's and two light "
                    "rounds'); no records, so no checkpoints",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller fleet and shorter windows")
    parser.add_argument("--lease-duration", type=float, default=10.0,
                        help="phase 1 lease duration (default: the production default, 10 s)")
    parser.add_argument("--skip-requests", action="store_true", help="only phase 1")
    parser.add_argument("--reads", choices=("scan", "scoped"), default="scan",
                        help="scoped: WorkerConfig(reads='scoped') members with a Kubernetes membership "
                             "(the tests' fake API server); phase 1 only")
    parser.add_argument("--backup-check-interval", type=float, default=None,
                        help="with --reads scoped: seconds between samples of a watched member "
                             "(default: the Worker's, half a lease duration)")
    parser.add_argument("--unlist-after", type=float, default=None,
                        help="with --reads scoped: unlist the SIGKILLed member's pod this many seconds after "
                             "the kill (as a failing readiness probe would); default: once it is taken over")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: results/lease_dynamics.json (scoped: lease_dynamics_scoped.json)")
    args = parser.parse_args(argv)
    if args.backup_check_interval is not None and args.reads != "scoped":
        parser.error("--backup-check-interval needs --reads scoped")
    if args.unlist_after is not None and args.reads != "scoped":
        parser.error("--unlist-after needs --reads scoped")
    args.out_given = args.out
    if args.out is None:
        name = "lease_dynamics" if args.reads == "scan" else "lease_dynamics_scoped"
        if args.backup_check_interval is not None:
            name += f"_check_{args.backup_check_interval:g}s"
        if args.unlist_after is not None:
            name += f"_unlist_{args.unlist_after:g}s"
        args.out = RESULTS / f"{name}.json"
    if args.reads == "scoped":
        args.skip_requests = True
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    out_dir = Path(tempfile.mkdtemp(prefix="bench-lease-dynamics-"))
    data: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "quick": args.quick,
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "command": "python benchmarks/bench_lease_dynamics.py" + (" --quick" if args.quick else "")
        + (" --reads scoped" if args.reads == "scoped" else "")
        + (" --skip-requests" if args.skip_requests and args.reads != "scoped" else "")
        + (f" --backup-check-interval {args.backup_check_interval:g}" if args.backup_check_interval else "")
        + (f" --out {out_arg}" if (out_arg := getattr(args, "out_given", None)) else ""),
        "ledgers": str(out_dir),
    }
    with MotoProcess() as aws:
        console.print("[bold]phase 1[/]: join, SIGKILL, SIGTERM with worker processes")
        data["dynamics"] = dyn = phase_dynamics(aws, out_dir / "dynamics", args.lease_duration, args.quick,
                                                      args.reads, args.backup_check_interval, args.unlist_after)
        if not args.skip_requests:
            console.print("[bold]phase 2[/]: DynamoDB requests per member per minute")
            data["dynamodb_requests"] = phase_requests(aws, out_dir / "requests", args.quick)

    table = Table(title=f"lease dynamics through Worker processes, reads={args.reads} (lease_duration {dyn['lease_duration_s']:g} s, "
                        f"tick {dyn['tick_s']:g} s, {dyn['shards']} shards)")
    for col in ("figure", "measured", "target"):
        table.add_column(col, justify="left" if col == "figure" else "right")
    j, k, t = dyn["join"], dyn["sigkill_failover"], dyn["sigterm_handoff"]
    table.add_row(f"join of member {dyn['members'] + 1} -> balanced", f"{j['ticks']} ticks ({j['seconds']} s)", "<= 2 ticks")
    table.add_row("SIGKILL -> new owner processing (max / median)",
                  f"{k['max_lease_durations']} / {k['median_lease_durations']} x lease_duration",
                  f"<= {k['target_lease_durations']} x lease_duration")
    table.add_row("SIGTERM -> new owner processing (max / median)",
                  f"{t['max_ticks']} / {t['median_ticks']} ticks", "<= 1 tick")
    if t["from_handoff_write"]:
        h = t["from_handoff_write"]
        table.add_row("  of which hand-off write -> new owner processing",
                      f"{h['max_units']} / {h['median_units']} ticks", "<= 1 tick")
    a = dyn["audit"]
    table.add_row("duplicates from graceful hand-offs", str(a["graceful_duplicates"]), "0")
    table.add_row("lost / out of order / overlaps", f"{a['lost']} / {a['out_of_order']} / {a['overlaps']}", "0 / 0 / 0")
    if "dynamodb_requests" in data:
        r = data["dynamodb_requests"]
        f, o = r["four_members"], r["one_member_100_leases"]
        table.add_row(f"DynamoDB requests/member/min, 4 members x {f['leases_per_member']} leases (lease 10 s)",
                      f"{f['requests_per_member_per_min']} ({f['measured_over_expected']} x expected)",
                      f"~{f['expected_per_min']}")
        table.add_row("DynamoDB requests/min, 1 member x 100 leases (lease 10 s)",
                      f"{o['requests_per_min']} ({o['measured_over_expected']} x expected)", f"~{o['expected_per_min']}")
    console.print(table)
    data["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    console.print(f"load average {data['load_average_at_start']} -> {data['load_average_at_end']} on {os.cpu_count()} CPUs")
    write_json(args.out, data)
    return 0 if a["ok"] and a["graceful_duplicates"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
