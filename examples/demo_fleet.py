"""A fleet of worker processes on a local AWS, and the audit of what they processed.

Used by ``examples/demo.py`` and by the end-to-end tests: a :class:`Producer` thread writes
records whose payload carries a per-partition-key counter, :class:`Fleet` starts, SIGKILLs
and SIGTERMs ``examples/demo_member.py`` processes, and :func:`audit` reads every member's
ledger and checks that nothing was lost, every shard was processed in order by one member
at a time, and which duplicates there were (see :class:`Audit`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kinesis.lease_loop import LeaseTable  # noqa: E402
from kinesis.testing import FAKE_CREDENTIALS  # noqa: E402

MEMBER_SCRIPT = Path(__file__).resolve().parent / "demo_member.py"


# --- producing ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Produced:
    shard_id: str
    sequence_number: str
    partition_key: str
    n: int


class Producer:
    """Writes ``rate`` records per second (PutRecords batches) until stopped or ``limit`` reached.

    Payload: ``{"pk": <partition key>, "n": <counter of that key>}``.
    """

    def __init__(self, client: Any, stream: str, *, rate: float = 100.0, keys: int = 64,
                 limit: int | None = None, batch: int = 25):
        self.client = client
        self.stream = stream
        self.rate = rate
        self.keys = [f"pk-{i:03d}" for i in range(keys)]
        self.limit = limit
        self.batch = batch
        self.produced: list[Produced] = []
        self.errors = 0
        self._next = Counter[str]()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def start(self) -> Producer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.produced)

    def snapshot(self) -> list[Produced]:
        with self._lock:
            return list(self.produced)

    def _run(self) -> None:
        i = 0
        interval = self.batch / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set() and (self.limit is None or i < self.limit):
            size = self.batch if self.limit is None else min(self.batch, self.limit - i)
            entries = []
            for j in range(size):
                pk = self.keys[(i + j) % len(self.keys)]
                n = self._next[pk]
                self._next[pk] += 1
                entries.append((pk, n))
            self._put(entries)
            i += size
            next_at += interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _put(self, entries: list[tuple[str, int]]) -> None:
        # Per-key order needs one key's records written in order: retry failed entries in
        # order before moving on (PutRecords may fail single entries under throttling).
        pending = entries
        while pending:
            records = [{"Data": json.dumps({"pk": pk, "n": n}).encode(), "PartitionKey": pk} for pk, n in pending]
            response = self.client.put_records(StreamName=self.stream, Records=records)
            retry = []
            with self._lock:
                for (pk, n), result in zip(pending, response["Records"], strict=True):
                    if "SequenceNumber" in result:
                        self.produced.append(Produced(result["ShardId"], result["SequenceNumber"], pk, n))
                    else:
                        self.errors += 1
                        retry.append((pk, n))
            pending = retry


# --- members -----------------------------------------------------------------------------


@dataclass
class Member:
    name: str
    process: subprocess.Popen[bytes]
    started_at: float
    fate: str = "running"
    """running, killed (SIGKILL), terminated (SIGTERM) or stopped (at the end)."""
    exit_code: int | None = None


class Fleet:
    """Member processes of one application on one stream, all writing into ``out_dir``."""

    def __init__(self, endpoint_url: str, out_dir: Path, *, stream: str, application: str,
                 table: str, lease_duration: float = 3.0, region: str = "us-east-1",
                 member_args: Iterable[str] = ()):
        self.endpoint_url = endpoint_url
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.stream = stream
        self.application = application
        self.table_name = table
        self.lease_duration = lease_duration
        self.region = region
        self.member_args = list(member_args)
        self.members: dict[str, Member] = {}
        from kinesis.testing import client_for

        self.table = LeaseTable(client_for("dynamodb", endpoint_url, region), table)

    # lifecycle
    def member_command(self, name: str) -> list[str]:
        """The command line of member ``name`` (a subclass may run another member script)."""
        return [
            sys.executable, str(MEMBER_SCRIPT),
            "--endpoint", self.endpoint_url, "--region", self.region,
            "--stream", self.stream, "--application", self.application, "--table", self.table_name,
            "--member-id", name, "--out-dir", str(self.out_dir),
            "--lease-duration", str(self.lease_duration), *self.member_args,
        ]

    def start_member(self, name: str) -> Member:
        cmd = self.member_command(name)
        env = {**os.environ, "AWS_ACCESS_KEY_ID": FAKE_CREDENTIALS["aws_access_key_id"],
               "AWS_SECRET_ACCESS_KEY": FAKE_CREDENTIALS["aws_secret_access_key"],
               "AWS_DEFAULT_REGION": self.region, "PYTHONUNBUFFERED": "1"}
        stderr = open(self.out_dir / f"{name}.stderr", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(cmd, env=env, stdout=stderr, stderr=stderr, cwd=str(ROOT))
        stderr.close()
        member = Member(name, proc, time.monotonic())
        self.members[name] = member
        return member

    def kill(self, name: str) -> None:
        """SIGKILL: no hand-off, no checkpoint; the leases expire and are taken over."""
        m = self.members[name]
        m.process.send_signal(signal.SIGKILL)
        m.exit_code = m.process.wait()
        m.fate = "killed"

    def terminate(self, name: str, *, wait: bool = True, timeout: float = 60.0) -> int | None:
        """SIGTERM: the member hands every lease off, then exits 0."""
        m = self.members[name]
        m.process.send_signal(signal.SIGTERM)
        m.fate = "terminated"
        if wait:
            m.exit_code = m.process.wait(timeout)
        return m.exit_code

    def stop_all(self, timeout: float = 60.0) -> dict[str, int | None]:
        """SIGTERM every running member and wait for all."""
        running = self.running()
        for name in running:
            self.members[name].process.send_signal(signal.SIGTERM)
            self.members[name].fate = "stopped"
        deadline = time.monotonic() + timeout
        for name in running:
            m = self.members[name]
            try:
                m.exit_code = m.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                m.process.kill()
                m.exit_code = m.process.wait()
        return {n: self.members[n].exit_code for n in running}

    def running(self) -> list[str]:
        return sorted(n for n, m in self.members.items() if m.fate == "running" and m.process.poll() is None)

    def dead(self) -> list[str]:
        """Members that exited although nobody stopped them (a crash of the demo itself)."""
        return sorted(n for n, m in self.members.items() if m.fate == "running" and m.process.poll() is not None)

    def close(self) -> None:
        for m in self.members.values():
            if m.process.poll() is None:
                m.process.kill()
                m.process.wait()

    # observation
    def owners(self) -> dict[str, str | None]:
        """Lease key -> owner, for the leases that are not finished (SHARD_END)."""
        return {k: v.owner for k, v in self.table.scan().leases.items() if not v.is_shard_end}

    def counts(self, members: Iterable[str] | None = None) -> dict[str, int]:
        owners = self.owners()
        names = list(members) if members is not None else self.running()
        counts = dict.fromkeys(names, 0)
        for owner in owners.values():
            if owner in counts:
                counts[owner] += 1
        return counts

    def balanced(self, members: Iterable[str] | None = None, *, shards: int | None = None) -> bool:
        """Every lease held by one of ``members`` (default: the running ones), max - min <= 1."""
        names = list(members) if members is not None else self.running()
        owners = self.owners()
        if not names or not owners or (shards is not None and len(owners) != shards):
            return False
        if any(o not in names for o in owners.values()):
            return False
        counts = self.counts(names)
        return max(counts.values()) - min(counts.values()) <= 1

    def status(self, name: str) -> dict[str, Any] | None:
        path = self.out_dir / f"{name}.status.json"
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return data

    def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str,
                   on_poll: Callable[[], None] | None = None, poll: float = 0.25) -> float:
        """Poll ``predicate`` until true; return the seconds it took. Raises TimeoutError."""
        start = time.monotonic()
        while True:
            if on_poll is not None:
                on_poll()
            if predicate():
                return time.monotonic() - start
            dead = self.dead()
            if dead:
                raise RuntimeError(f"member(s) {dead} exited unexpectedly while waiting for {what}; "
                                   f"see {self.out_dir}/<member>.log and .stderr")
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(poll)


# --- the audit ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    kind: str
    member: str
    shard_id: str
    t: int
    sequence_number: str = ""
    sub: int = 0
    partition_key: str = ""
    n: int = -1
    checkpoint: str = ""


def read_ledgers(out_dir: Path) -> tuple[list[Event], int]:
    """Every event of every member's ledger, and the number of unreadable (torn) lines."""
    events: list[Event] = []
    torn = 0
    for path in sorted(Path(out_dir).glob("*.ledger")):
        member = path.stem
        for line in path.read_text().splitlines():
            parts = line.split()
            try:
                if parts[0] == "R" and len(parts) == 7:
                    events.append(Event("R", member, parts[1], int(parts[6]), parts[2], int(parts[3]),
                                        parts[4], int(parts[5])))
                elif parts[0] == "I" and len(parts) == 4:
                    events.append(Event("I", member, parts[1], int(parts[3]), checkpoint=parts[2]))
                elif parts[0] in ("S", "E", "L") and len(parts) == 3:
                    events.append(Event(parts[0], member, parts[1], int(parts[2])))
                else:
                    torn += 1
            except (ValueError, IndexError):
                torn += 1
    return events, torn


def processed_keys(out_dir: Path) -> set[tuple[str, str]]:
    """The distinct (shard, sequence number) pairs processed so far."""
    return {(e.shard_id, e.sequence_number) for e in read_ledgers(out_dir)[0] if e.kind == "R"}


@dataclass
class Audit:
    """What :func:`audit` found. ``ok`` is False if anything was lost or out of order, two
    members processed a shard at once, or a duplicate is not explained by a SIGKILL."""

    produced: int
    processed: int
    distinct: int
    lost: list[tuple[str, str]] = field(default_factory=list)
    out_of_order: list[str] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)
    crash_duplicates: int = 0
    """Records processed again after a SIGKILL: the killed member processed them after its
    last checkpoint (allowed: at-least-once)."""
    graceful_duplicates: int = 0
    """Any other record processed twice (must be zero: hand-offs duplicate nothing)."""
    per_key_order_errors: int = 0
    torn_lines: int = 0
    sessions: int = 0
    records_by_member: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.out_of_order or self.overlaps or self.graceful_duplicates
                    or self.per_key_order_errors)


def audit(produced: list[Produced], out_dir: Path, killed: Iterable[str] = ()) -> Audit:
    """Check the ledgers against what was produced (see :class:`Audit`)."""
    killed = set(killed)
    events, torn = read_ledgers(out_dir)
    records = [e for e in events if e.kind == "R"]
    result = Audit(len(produced), len(records), 0, torn_lines=torn)
    result.records_by_member = dict(Counter(e.member for e in records))
    seen: dict[tuple[str, str], Event] = {}
    for e in sorted(records, key=lambda e: e.t):
        key = (e.shard_id, e.sequence_number + "/" + str(e.sub))
        first = seen.get(key)
        if first is None:
            seen[key] = e
        elif first.member in killed:
            result.crash_duplicates += 1
        else:
            result.graceful_duplicates += 1
    result.distinct = len(seen)
    done = {(s, q.split("/")[0]) for s, q in seen}
    result.lost = sorted({(p.shard_id, p.sequence_number) for p in produced} - done)

    # 1. each member processes each shard in sequence order (its ledger is in processing order)
    by_member_shard: dict[tuple[str, str], list[Event]] = defaultdict(list)
    for e in events:
        by_member_shard[(e.member, e.shard_id)].append(e)
    intervals: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for (member, shard), evs in by_member_shard.items():
        session: list[Event] = []
        for e in [*evs, Event("I", member, shard, 0)]:  # a sentinel closes the last session
            if e.kind == "I":
                if session:
                    result.sessions += 1
                    keys = [(int(x.sequence_number), x.sub) for x in session]
                    if any(a >= b for a, b in pairwise(keys)):
                        result.out_of_order.append(f"{member} processed {shard} out of order")
                    intervals[shard].append((session[0].t, session[-1].t, member))
                session = []
            elif e.kind == "R":
                session.append(e)
    # 2. one member at a time per shard: processing sessions never overlap in time
    for shard, spans in intervals.items():
        spans.sort()
        for (_s1, e1, m1), (s2, _e2, m2) in pairwise(spans):
            if s2 <= e1 and m1 != m2:
                result.overlaps.append(f"{shard}: {m1} until {e1} and {m2} from {s2}")
    # 3. per partition key, the first processing of each record follows the key's counter
    first_by_key: dict[str, list[Event]] = defaultdict(list)
    for e in sorted(seen.values(), key=lambda e: e.t):
        first_by_key[e.partition_key].append(e)
    for evs in first_by_key.values():
        ns = [e.n for e in evs]
        result.per_key_order_errors += sum(1 for a, b in pairwise(ns) if b < a)
    return result


def takeovers_and_handoffs(fleet: Fleet) -> tuple[int, int]:
    """Sum of (takeovers incl. orphans, graceful hand-offs) over every member's last status. A
    take answered with an error (a loaded server's timeout) and found applied at the next round
    counts as ``recovered``, not under its own kind: counted here as a takeover too."""
    takeovers = handoffs = 0
    for name in fleet.members:
        st = fleet.status(name)
        if st is None:
            continue
        c = st.get("lease_counters", {})
        takeovers += int(c.get("takeovers", 0)) + int(c.get("orphans_taken", 0)) + int(c.get("recovered", 0))
        handoffs += int(c.get("handoffs", 0))
    return takeovers, handoffs
