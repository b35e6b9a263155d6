"""The end-to-end demo: a fleet of Kinesis worker processes sharing one stream.

    make demo                       # or: .venv/bin/python examples/demo.py [--quick]

1. starts an embedded AWS (moto server on 127.0.0.1), creates a 16-shard stream and the
   DynamoDB lease table, and starts a producer (records carry a per-partition-key counter);
2. starts 4 member processes (``examples/demo_member.py``: a :class:`kinesis.Worker` with
   :class:`kinesis.DynamoDBMembership`), which balance the 16 leases 4/4/4/4 without racing;
3. scales out by one member (graceful hand-offs, no duplicates), SIGKILLs one member (its
   leases expire and are taken over from their checkpoints), and SIGTERMs another (it hands
   every lease off before it exits);
4. stops the producer, waits until every record is processed, stops the fleet, and audits
   every member's ledger: nothing lost, each shard in order and by one member at a time,
   duplicates only where the SIGKILL allows them (records after the killed member's last
   checkpoint). It exits 1 if anything is lost, out of order, overlapping, or duplicated by
   a graceful hand-off.

A live table (rich) shows leases and progress per member; without a terminal it prints one
line per step instead. ``--quick`` (or ``KINESIS_DEMO_QUICK=1``) runs a smaller fleet, for tests.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.demo_fleet import (  # noqa: E402
    Audit,
    Fleet,
    Producer,
    audit,
    processed_keys,
    takeovers_and_handoffs,
)
from hashring import plan_assignment  # noqa: E402
from kinesis.lease_loop import LeaseTable  # noqa: E402
from kinesis.testing import LocalAWS  # noqa: E402

STREAM = "demo-orders"
APPLICATION = "demo-app"
TABLE = "demo-app-leases"


@dataclass(frozen=True)
class Settings:
    shards: int
    members: int
    lease_duration: float
    rate: float
    """Records per second."""
    pause: float
    """Seconds of steady processing between the steps."""
    step_timeout: float


FULL = Settings(shards=16, members=4, lease_duration=3.0, rate=80.0, pause=6.0, step_timeout=60.0)
QUICK = Settings(shards=8, members=3, lease_duration=2.0, rate=60.0, pause=1.0, step_timeout=60.0)


class View:
    """The live table (or plain lines without a terminal)."""

    def __init__(self, console: Console, fleet: Fleet, producer: Producer, settings: Settings):
        self.console = console
        self.fleet = fleet
        self.producer = producer
        self.settings = settings
        self.steps: list[tuple[str, str]] = []
        self.live: Live | None = None
        self._last_plain = 0.0
        self.processed = 0

    def step(self, text: str, result: str = "") -> None:
        self.steps.append((text, result))
        if self.live is None:
            self.console.print(f"[bold]{text}[/] {result}")
        self.refresh(force=True)

    def finish_step(self, result: str) -> None:
        text, _ = self.steps[-1]
        self.steps[-1] = (text, result)
        if self.live is None:
            self.console.print(f"  -> {result}")
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> None:
        self.processed = len(processed_keys(self.fleet.out_dir))
        if self.live is not None:
            self.live.update(self.render())
        elif force or time.monotonic() - self._last_plain > 5:
            self._last_plain = time.monotonic()
            counts = self.fleet.counts()
            self.console.print(
                f"  produced {self.producer.count}, processed {self.processed}; leases {counts}"
            )

    def render(self) -> Any:
        table = Table(title=f"stream {STREAM}: {self.settings.shards} shards, lease table {TABLE}")
        for col in ("member", "state", "leases", "records", "hand-offs", "takeovers"):
            table.add_column(col, justify="left" if col in ("member", "state") else "right")
        owners = self.fleet.owners()
        for name, m in sorted(self.fleet.members.items()):
            st = self.fleet.status(name) or {}
            c = st.get("lease_counters", {})
            held = sum(1 for o in owners.values() if o == name) if m.fate == "running" else 0
            records = sum(int(v) for v in st.get("records_processed", {}).values())
            state = {"running": st.get("state", "starting"), "killed": "[red]SIGKILLed[/]",
                     "terminated": "[yellow]SIGTERMed[/]", "stopped": "stopped"}[m.fate]
            table.add_row(name, state, "#" * held + f" {held}", str(records),
                          str(c.get("handoffs", 0)), str(int(c.get("takeovers", 0)) + int(c.get("orphans_taken", 0))))
        lines = [Text(f"produced {self.producer.count}  processed {self.processed}")]
        lines += [Text.from_markup(f"[bold]{t}[/] {r}") for t, r in self.steps[-8:]]
        return Group(table, *lines)


def in_leases(seconds: float, settings: Settings) -> str:
    return f"{seconds:.1f} s = {seconds / settings.lease_duration:.2f} x lease_duration"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Kinesis worker fleet demo on an embedded AWS")
    parser.add_argument("--quick", action="store_true", default=os.environ.get("KINESIS_DEMO_QUICK") == "1",
                        help="a smaller, faster run (also KINESIS_DEMO_QUICK=1)")
    parser.add_argument("--out-dir", type=Path, default=None, help="where members write ledgers and logs")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    console = Console()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="kinesis-demo-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    console.print(f"[bold]kinesis-hashring demo[/]: {settings.members} members, {settings.shards} shards, "
                  f"lease_duration {settings.lease_duration:g} s; ledgers and logs in {out_dir}")

    with LocalAWS() as aws:
        kinesis = aws.client("kinesis")
        kinesis.create_stream(StreamName=STREAM, ShardCount=settings.shards)
        kinesis.get_waiter("stream_exists").wait(StreamName=STREAM, WaiterConfig={"Delay": 0.2})
        LeaseTable.open(aws.client("dynamodb"), TABLE)
        producer = Producer(kinesis, STREAM, rate=settings.rate).start()
        fleet = Fleet(aws.endpoint_url, out_dir, stream=STREAM, application=APPLICATION, table=TABLE,
                      lease_duration=settings.lease_duration)
        view = View(console, fleet, producer, settings)
        try:
            if console.is_terminal:
                with Live(view.render(), console=console, refresh_per_second=4, transient=False) as live:
                    view.live = live
                    result = run(fleet, producer, view, settings)
                    view.live = None
            else:
                result = run(fleet, producer, view, settings)
        except (TimeoutError, RuntimeError) as exc:
            console.print(f"[red]demo failed: {exc}[/]")
            return 1
        finally:
            producer.stop()
            fleet.close()
    return report(console, result, settings)


@dataclass
class Result:
    audit: Audit
    killed: str
    terminated: str
    terminated_exit: int | None
    final_exits: dict[str, int | None]
    final_counts: dict[str, int]
    takeovers: int
    handoffs: int
    timings: dict[str, float]
    first_backup_takeovers: tuple[int, int]


def run(fleet: Fleet, producer: Producer, view: View, s: Settings) -> Result:
    def wait(pred: Any, what: str) -> float:
        return fleet.wait_until(pred, s.step_timeout, what, on_poll=view.refresh)

    def settle(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            view.refresh()
            time.sleep(0.25)

    timings: dict[str, float] = {}
    names = [f"member-{i}" for i in range(1, s.members + 1)]
    view.step(f"start {s.members} members")
    for name in names:
        fleet.start_member(name)
    timings["start"] = wait(lambda: fleet.balanced(shards=s.shards), "the first members to balance")
    view.finish_step(f"balanced {fleet.counts()} after {in_leases(timings['start'], s)} (incl. process start)")
    settle(s.pause)

    newcomer = f"member-{s.members + 1}"
    view.step(f"scale out: start {newcomer}")
    fleet.start_member(newcomer)
    wait(lambda: fleet.status(newcomer) is not None and fleet.status(newcomer).get("ready"), "the newcomer to be ready")  # type: ignore[union-attr]
    timings["scale_out"] = wait(lambda: fleet.balanced(shards=s.shards), "balance after scale-out")
    view.finish_step(f"balanced {fleet.counts()} {in_leases(timings['scale_out'], s)} after it was ready")
    settle(s.pause)

    victim = names[1]
    owners = fleet.owners()
    members = fleet.running()
    plan = plan_assignment(members, list(owners), {k: o for k, o in owners.items() if o}, replicas=1)
    victim_keys = [k for k, o in owners.items() if o == victim]
    backups = {k: plan.backups(k)[0] for k in victim_keys}
    view.step(f"SIGKILL {victim} (holds {len(victim_keys)} leases)")
    kill_t = time.time_ns()
    fleet.kill(victim)
    timings["failover"] = wait(lambda: all(fleet.owners().get(k) not in (None, victim) for k in victim_keys),
                               "the killed member's leases to be taken over")
    takers = first_takers(fleet.out_dir, victim_keys, kill_t)
    by_backup = sum(1 for k in victim_keys if takers.get(k) == backups[k])
    view.finish_step(f"its leases taken over {in_leases(timings['failover'], s)} after the kill "
                     f"({by_backup}/{len(victim_keys)} by the planned first backup)")
    timings["rebalance_after_kill"] = wait(lambda: fleet.balanced(shards=s.shards), "balance after the kill")
    settle(s.pause)

    leaver = names[2] if len(names) > 2 else newcomer
    view.step(f"SIGTERM {leaver} (graceful: hand every lease off, then exit)")
    t0 = time.monotonic()
    exit_code = fleet.terminate(leaver, wait=True, timeout=s.step_timeout)
    timings["sigterm_exit"] = time.monotonic() - t0
    timings["scale_in"] = timings["sigterm_exit"] + wait(
        lambda: fleet.balanced(shards=s.shards), "balance after the SIGTERM")
    view.finish_step(f"exit code {exit_code} after {in_leases(timings['sigterm_exit'], s)}; "
                     f"balanced {fleet.counts()}")
    settle(s.pause)

    view.step("stop the producer; wait until every record is processed")
    producer.stop()
    produced = producer.snapshot()
    wanted = {(p.shard_id, p.sequence_number) for p in produced}
    timings["drain"] = wait(lambda: wanted <= processed_keys(fleet.out_dir), "every record to be processed")
    view.finish_step(f"{len(produced)} records processed")
    final_counts = fleet.counts()
    view.step("stop the fleet (SIGTERM)")
    final_exits = fleet.stop_all(timeout=s.step_timeout)
    view.finish_step(f"exit codes {final_exits}")
    takeovers, handoffs = takeovers_and_handoffs(fleet)
    return Result(audit(produced, fleet.out_dir, killed=[victim]), victim, leaver, exit_code, final_exits,
                  final_counts, takeovers, handoffs, timings, (by_backup, len(victim_keys)))


def first_takers(out_dir: Path, keys: list[str], after_ns: int) -> dict[str, str]:
    """Lease key -> the first member that initialized its shard after ``after_ns``."""
    from examples.demo_fleet import read_ledgers

    events, _ = read_ledgers(out_dir)
    firsts: dict[str, tuple[int, str]] = {}
    for e in events:
        if e.kind == "I" and e.t > after_ns:
            key = f"{APPLICATION}/{STREAM}/{e.shard_id}"
            if key in keys and (key not in firsts or e.t < firsts[key][0]):
                firsts[key] = (e.t, e.member)
    return {k: m for k, (_, m) in firsts.items()}


def report(console: Console, r: Result, s: Settings) -> int:
    a = r.audit
    counts = list(r.final_counts.values())
    spread = max(counts) - min(counts) if counts else 0
    table = Table(title="demo result")
    table.add_column("check")
    table.add_column("value", justify="right")
    table.add_column("ok")

    def row(name: str, value: object, ok: bool | None = None) -> None:
        table.add_row(name, str(value), "" if ok is None else ("[green]yes[/]" if ok else "[red]NO[/]"))

    row("records produced", a.produced)
    row("records processed (distinct)", a.distinct, a.distinct >= a.produced)
    row("lost", len(a.lost), not a.lost)
    row("out of order (per shard)", len(a.out_of_order) + a.per_key_order_errors,
        not a.out_of_order and not a.per_key_order_errors)
    row("two members on one shard at once", len(a.overlaps), not a.overlaps)
    row("duplicates after SIGKILL (at-least-once)", a.crash_duplicates)
    row("duplicates from graceful hand-offs", a.graceful_duplicates, a.graceful_duplicates == 0)
    row("graceful hand-offs", r.handoffs)
    row("takeovers (after the SIGKILL)", r.takeovers)
    row("balance before the final stop (max - min)", f"{spread} {r.final_counts}", spread <= 1)
    row(f"SIGTERMed {r.terminated} exit code", r.terminated_exit, r.terminated_exit == 0)
    row("final stop exit codes", r.final_exits, all(c == 0 for c in r.final_exits.values()))
    row("join -> balanced", in_leases(r.timings["scale_out"], s))
    row("SIGKILL -> leases taken over", in_leases(r.timings["failover"], s))
    row("taken over by the planned first backup", f"{r.first_backup_takeovers[0]}/{r.first_backup_takeovers[1]}")
    row("SIGTERM -> member exited", in_leases(r.timings["sigterm_exit"], s))
    console.print(table)
    ok = (a.ok and a.distinct >= a.produced and spread <= 1 and r.terminated_exit == 0
          and all(c == 0 for c in r.final_exits.values()))
    for problem in (a.lost[:5], a.out_of_order[:5], a.overlaps[:5]):
        for p in problem:
            console.print(f"[red]{p}[/]")
    console.print("[green bold]DEMO OK[/]: nothing lost, order kept, no duplicates from graceful hand-offs"
                  if ok else "[red bold]DEMO FAILED[/]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
