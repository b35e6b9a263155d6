"""The chaos run: Worker member processes on a moto server, a producer, faults drawn from a
seed, and the invariant check (``tests/chaos/invariants.py``).

Each member (``tests/chaos/chaos_member.py``) reaches DynamoDB and Kinesis through fault
proxies of its own (``tests/support/fault_proxy.py``), so a network fault hits one member.
Faults (one at a time; after each, the run waits until every record produced so far is
processed, so the next fault starts from a recovered fleet):

* ``kill``: SIGKILL a member, restart it under the same name at once;
* ``term``: SIGTERM a member (it hands every lease off and must exit 0), then restart it;
* ``pause``: SIGSTOP a member holding leases until every one of them is owned by someone
  else (it is past its lease), plus a random extra, then SIGCONT;
* ``dynamodb`` / ``kinesis``: for a window, a fraction of the member's DynamoDB (Kinesis)
  requests get a random fault (error, applied_then_error, applied_then_reset, reset, delay);
* ``flap``: a new member joins, takes leases, and leaves (SIGTERM) again;
* ``reshard``: split an open shard at the middle of its hash range, or merge two adjacent
  ones (the moto server process runs with ``tests/support/moto_kinesis.py``'s fixes).

Every wait is on a condition with a generous deadline; the fault windows (pause extra,
network windows) are the faults' own durations, drawn from the seed.
"""

from __future__ import annotations

import hashlib
import json
import random
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from examples.demo_fleet import Fleet, Producer, processed_keys
from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.testing import client_for
from tests.chaos.invariants import FaultRecord, LeaseRow, Report, TableSample, check
from tests.chaos.moto_resharding import ReshardingMoto
from tests.support.fault_proxy import KINDS, FaultProxy

ROOT = Path(__file__).resolve().parent.parent.parent
MEMBER_SCRIPT = Path(__file__).resolve().parent / "chaos_member.py"
STREAM, APPLICATION, TABLE = "chaos", "chaos-app", "chaos-leases"
FAULT_KINDS = ("kill", "term", "pause", "dynamodb", "kinesis", "flap", "reshard")


@dataclass(frozen=True)
class Profile:
    name: str
    shards: int
    members: int
    lease_duration: float
    rate: float
    """Records per second."""
    faults: int
    """Number of faults; the first ``len(FAULT_KINDS)`` are one of each kind (seeded order)."""
    network_rate: tuple[float, float]
    """Range of the fraction of requests faulted during a network fault window."""
    network_window: tuple[float, float]
    """Range of a network fault window, in lease durations."""
    stall_allowance: float
    """Seconds a loaded machine may add to a shard's stall bound."""
    step_timeout: float
    """Deadline of every wait (balance, recovery, takeover, exit)."""
    keyed: bool = False
    """Members run a keyed-parallel async processor (``chaos_member.py --keyed``)."""


FAST = Profile("fast", shards=16, members=4, lease_duration=3.0, rate=40.0, faults=7,
               network_rate=(0.2, 0.4), network_window=(1.5, 2.5), stall_allowance=12.0,
               step_timeout=90.0)
LONG = Profile("long", shards=24, members=5, lease_duration=3.0, rate=60.0, faults=40,
               network_rate=(0.1, 0.5), network_window=(1.0, 4.0), stall_allowance=12.0,
               step_timeout=120.0)
KEYED = Profile("keyed", shards=8, members=3, lease_duration=3.0, rate=80.0, faults=7,
                network_rate=(0.2, 0.4), network_window=(1.5, 2.5), stall_allowance=12.0,
                step_timeout=90.0, keyed=True)
PROFILES = {"fast": FAST, "long": LONG, "keyed": KEYED}


class TimedProducer(Producer):
    """The demo's producer, also noting when each record's PutRecords call started."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.times: list[int] = []

    def _put(self, entries: list[tuple[str, int]]) -> None:
        started = time.time_ns()
        super()._put(entries)
        with self._lock:
            self.times += [started] * (len(self.produced) - len(self.times))

    def timed(self) -> tuple[list[Any], list[int]]:
        with self._lock:
            return list(self.produced), list(self.times)


class TableMonitor:
    """Scans the lease table every ``interval`` seconds (directly, no proxy): its history.

    The final read (``read()``) is taken once the fleet has stopped, so nothing is torn."""

    def __init__(self, table: LeaseTable, interval: float = 0.5):
        self.table = table
        self.interval = interval
        self.samples: list[TableSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="table-monitor", daemon=True)

    def start(self) -> TableMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def read(self) -> dict[str, LeaseRow]:
        return {k: LeaseRow(lease.owner, lease.counter, lease.checkpoint.order_key)
                for k, lease in self.table.scan().leases.items()}

    def _run(self) -> None:
        # moto applies an UpdateItem action by action, unlocked: a scan meeting a write half-way
        # sees a torn row (DynamoDB never shows one). Keep only rows two scans in a row agree on.
        while not self._stop.wait(self.interval):
            try:
                first = self.read()
                t = time.time_ns()
                second = self.read()
            except Exception:  # a missed sample only thins the history
                continue
            self.samples.append((t, {k: row for k, row in second.items() if first.get(k) == row}))


class ChaosFleet(Fleet):
    """The demo's fleet, each member behind its own DynamoDB and Kinesis fault proxies."""

    def __init__(self, endpoint_url: str, out_dir: Path, **kwargs: Any):
        super().__init__(endpoint_url, out_dir, **kwargs)
        self.proxies: dict[str, tuple[FaultProxy, FaultProxy]] = {}
        self.paused: set[str] = set()

    def proxies_of(self, name: str) -> tuple[FaultProxy, FaultProxy]:
        if name not in self.proxies:
            pair = (FaultProxy(self.endpoint_url, json_version="1.0"),
                    FaultProxy(self.endpoint_url, json_version="1.1"))
            for proxy in pair:
                # a client that gave up on a delayed answer is expected: no traceback
                proxy._server.handle_error = lambda *_: None  # type: ignore[method-assign]
                proxy.start()
            self.proxies[name] = pair
        return self.proxies[name]

    def member_command(self, name: str) -> list[str]:
        dynamodb, kinesis = self.proxies_of(name)
        return [
            sys.executable, str(MEMBER_SCRIPT),
            "--dynamodb-endpoint", dynamodb.endpoint_url, "--kinesis-endpoint", kinesis.endpoint_url,
            "--region", self.region, "--stream", self.stream, "--application", self.application,
            "--table", self.table_name, "--member-id", name, "--out-dir", str(self.out_dir),
            "--lease-duration", str(self.lease_duration), *self.member_args,
        ]

    def pause(self, name: str) -> None:
        self.members[name].process.send_signal(signal.SIGSTOP)
        self.paused.add(name)

    def resume(self, name: str) -> None:
        self.members[name].process.send_signal(signal.SIGCONT)
        self.paused.discard(name)

    def injected(self) -> dict[str, int]:
        """Network faults injected so far, by ``service:operation:kind``."""
        total: Counter[str] = Counter()
        for dynamodb, kinesis in self.proxies.values():
            for service, proxy in (("dynamodb", dynamodb), ("kinesis", kinesis)):
                for (op, kind), n in proxy.injected.items():
                    total[f"{service}:{op}:{kind}"] += n
        return dict(sorted(total.items()))

    def close(self) -> None:
        for name in list(self.paused):
            self.resume(name)
        super().close()
        for dynamodb, kinesis in self.proxies.values():
            dynamodb.stop()
            kinesis.stop()


@dataclass
class ChaosResult:
    profile: str
    seed: int
    report: Report
    faults: list[FaultRecord]
    seconds: float
    figures: dict[str, Any] = field(default_factory=dict)


def schedule(profile: Profile, rng: random.Random) -> list[str]:
    """One fault of each kind in a seeded order, then kinds drawn at random."""
    kinds = list(FAULT_KINDS)
    rng.shuffle(kinds)
    while len(kinds) < profile.faults:
        kinds.append(rng.choice(FAULT_KINDS))
    return kinds[: profile.faults]


class ChaosRun:
    def __init__(self, profile: Profile, seed: int, out_dir: Path, log: Callable[[str], None] = print):
        self.profile = profile
        self.seed = seed
        self.rng = random.Random(seed)
        self.out_dir = Path(out_dir)
        self.log = log
        self.faults: list[FaultRecord] = []
        self.violations: list[str] = []
        self.flaps = 0
        self.fleet: ChaosFleet | None = None
        self.producer: TimedProducer | None = None

    # --- helpers ------------------------------------------------------------------------

    def _wait(self, predicate: Callable[[], bool], what: str) -> float:
        assert self.fleet is not None
        return self.fleet.wait_until(predicate, self.profile.step_timeout, what, poll=0.25)

    def _caught_up(self) -> Callable[[], bool]:
        """A predicate: every record produced until now has been processed."""
        assert self.producer is not None and self.fleet is not None
        wanted = {(p.shard_id, p.sequence_number) for p in self.producer.snapshot()}
        out_dir = self.fleet.out_dir
        return lambda: wanted <= processed_keys(out_dir)

    def _recover(self, kind: str) -> float:
        """Wait until every shard has records produced after the fault and everything produced
        until then is processed: the whole stream progressed past the fault."""
        assert self.producer is not None
        producer = self.producer
        after = time.time_ns()
        started = time.monotonic()

        def fresh_everywhere() -> bool:
            produced, times = producer.timed()
            fresh = {p.shard_id for p, t in zip(produced, times, strict=True) if t >= after}
            return fresh >= self._fed_shards()

        self._wait(fresh_everywhere, f"records on every shard after {kind}")
        self._wait(self._caught_up(), f"recovery after {kind}")
        return time.monotonic() - started

    def _wait_up(self, name: str) -> None:
        """Wait until the (re)started member runs its worker and holds a lease (so it has
        installed its SIGTERM handler, and a later fault finds it working)."""
        fleet = self.fleet
        assert fleet is not None
        pid = fleet.members[name].process.pid

        def up() -> bool:
            st = fleet.status(name)
            return st is not None and st.get("pid") == pid and bool(st.get("held"))

        self._wait(up, f"{name} (pid {pid}) to run and hold a lease")

    def _open_shards(self) -> list[dict[str, Any]]:
        """The stream's open shards (ListShards straight to moto), by starting hash key."""
        assert self.producer is not None
        shards: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"StreamName": STREAM}
        while True:
            page = self.producer.client.list_shards(**kwargs)
            shards += page["Shards"]
            if not page.get("NextToken"):
                break
            kwargs = {"NextToken": page["NextToken"]}
        return sorted((s for s in shards if "EndingSequenceNumber" not in s["SequenceNumberRange"]),
                      key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))

    def _fed_shards(self) -> set[str]:
        """The open shards that receive records: one of the producer's keys hashes into each."""
        assert self.producer is not None
        hashes = [int(hashlib.md5(k.encode()).hexdigest(), 16) for k in self.producer.keys]
        return {s["ShardId"] for s in self._open_shards()
                if any(int(s["HashKeyRange"]["StartingHashKey"]) <= h <= int(s["HashKeyRange"]["EndingHashKey"])
                       for h in hashes)}

    def _reshard(self) -> dict[str, Any]:
        """Split a random open shard at the middle of its range, or merge two adjacent ones."""
        assert self.producer is not None
        client = self.producer.client
        shards = self._open_shards()
        ranges = [(int(s["HashKeyRange"]["StartingHashKey"]), int(s["HashKeyRange"]["EndingHashKey"]))
                  for s in shards]
        pairs = [i for i in range(len(shards) - 1) if ranges[i][1] + 1 == ranges[i + 1][0]]
        if pairs and (self.rng.random() < 0.5 or len(shards) > self.profile.shards + 2):
            i = self.rng.choice(pairs)
            client.merge_shards(StreamName=STREAM, ShardToMerge=shards[i]["ShardId"],
                                AdjacentShardToMerge=shards[i + 1]["ShardId"])
            return {"merge": [shards[i]["ShardId"], shards[i + 1]["ShardId"]]}
        i = self.rng.randrange(len(shards))
        lo, hi = ranges[i]
        client.split_shard(StreamName=STREAM, ShardToSplit=shards[i]["ShardId"],
                           NewStartingHashKey=str((lo + hi) // 2))
        return {"split": shards[i]["ShardId"]}

    def _members(self) -> list[str]:
        assert self.fleet is not None
        return [n for n in self.fleet.running() if n not in self.fleet.paused and not n.startswith("flap")]

    def _record(self, kind: str, member: str, t0: int, **detail: Any) -> FaultRecord:
        fault = FaultRecord(kind, member, t0, time.time_ns(), detail)
        self.faults.append(fault)
        self.log(f"  fault {len(self.faults)}: {kind} {member} ({fault.seconds:.1f} s) {detail or ''}")
        return fault

    # --- faults -------------------------------------------------------------------------

    def inject(self, kind: str) -> None:
        fleet = self.fleet
        assert fleet is not None
        profile = self.profile
        owners = fleet.owners()
        holding = sorted({o for o in owners.values() if o in self._members()})
        victim = self.rng.choice(holding or self._members())
        t0 = time.time_ns()
        if kind == "kill":
            fleet.kill(victim)
            fleet.start_member(victim)
            self._record(kind, victim, t0, leases=sum(1 for o in owners.values() if o == victim))
            self._wait_up(victim)
        elif kind == "term":
            code = fleet.terminate(victim, timeout=profile.step_timeout)
            self._record(kind, victim, t0, exit_code=code)
            if code != 0:
                self.violations.append(f"SIGTERM: {victim} exited {code} (a lease left behind); "
                                       f"see {fleet.out_dir}/{victim}.log")
            fleet.start_member(victim)
            self._wait_up(victim)
        elif kind == "pause":
            held = [k for k, o in owners.items() if o == victim]
            fleet.pause(victim)
            self._wait(lambda: all(fleet.owners().get(k) != victim for k in held),
                       f"the leases of paused {victim} to be taken over")
            extra = self.rng.uniform(0, profile.lease_duration)
            threading.Event().wait(extra)  # the pause's own length, drawn from the seed
            fleet.resume(victim)
            self._record(kind, victim, t0, leases=len(held), extra_s=round(extra, 2))
        elif kind in ("dynamodb", "kinesis"):
            proxy = fleet.proxies_of(victim)[0 if kind == "dynamodb" else 1]
            rate = self.rng.uniform(*profile.network_rate)
            window = self.rng.uniform(*profile.network_window) * profile.lease_duration
            before = sum(proxy.injected.values())
            proxy.randomly(self.rng.randrange(2**32), rate, KINDS)
            threading.Event().wait(window)  # the fault window's own length, drawn from the seed
            proxy.randomly(0, 0.0)
            self._record(kind, victim, t0, rate=round(rate, 2), window_s=round(window, 1),
                         injected=sum(proxy.injected.values()) - before)
        elif kind == "flap":
            self.flaps += 1
            name = f"flap{self.flaps}"
            fleet.start_member(name)
            self._wait_up(name)
            code = fleet.terminate(name, timeout=profile.step_timeout)
            self._record(kind, name, t0, exit_code=code)
            if code != 0:
                self.violations.append(f"flap: {name} exited {code} after SIGTERM; "
                                       f"see {fleet.out_dir}/{name}.log")
        elif kind == "reshard":
            detail = self._reshard()
            self._record(kind, "-", t0, **detail)
        else:
            raise ValueError(f"unknown fault kind {kind!r}")

    # --- the run ------------------------------------------------------------------------

    def run(self) -> ChaosResult:
        profile = self.profile
        started = time.monotonic()
        self.log(f"chaos profile {profile.name}, seed {self.seed} (replay: --chaos-seed={self.seed} "
                 f"or CHAOS_SEED={self.seed}), output {self.out_dir}")
        kinds = schedule(profile, self.rng)
        with ReshardingMoto() as moto:
            kinesis = client_for("kinesis", moto.endpoint_url)
            kinesis.create_stream(StreamName=STREAM, ShardCount=profile.shards)
            kinesis.get_waiter("stream_exists").wait(StreamName=STREAM)
            LeaseTable.open(client_for("dynamodb", moto.endpoint_url), TABLE)
            fleet = self.fleet = ChaosFleet(moto.endpoint_url, self.out_dir, stream=STREAM,
                                            application=APPLICATION, table=TABLE,
                                            lease_duration=profile.lease_duration,
                                            member_args=["--keyed"] if profile.keyed else [])
            monitor = TableMonitor(LeaseTable(client_for("dynamodb", moto.endpoint_url), TABLE))
            producer = self.producer = TimedProducer(kinesis, STREAM, rate=profile.rate, keys=128)
            try:
                producer.start()
                monitor.start()
                for i in range(profile.members):
                    fleet.start_member(f"m{i + 1}")
                took = self._wait(lambda: fleet.balanced(shards=profile.shards), "the fleet to balance")
                self._wait(self._caught_up(), "the fleet to catch up")
                steady_from = time.time_ns()
                self.log(f"  {profile.members} members balanced {profile.shards} shards in {took:.1f} s")
                for kind in kinds:
                    self.inject(kind)
                    self.log(f"    recovered in {self._recover(kind):.1f} s")
                open_shards = len(self._open_shards())
                took = self._wait(lambda: fleet.balanced(shards=open_shards), "the fleet to re-balance")
                self.log(f"  the fleet re-balanced in {took:.1f} s")
                producer.stop()
                took = self._wait(self._caught_up(), "the last records")
                exits = fleet.stop_all(profile.step_timeout)
                monitor.stop()
                final = monitor.read()
                injected = fleet.injected()
            finally:
                producer.stop()
                monitor.stop()
                fleet.close()
        produced, produced_at = producer.timed()
        report = check(self.out_dir, produced, produced_at, self.faults,
                       lease_duration=profile.lease_duration, stall_allowance=profile.stall_allowance,
                       table_samples=monitor.samples, final_table=final, steady_from=steady_from,
                       keyed=profile.keyed)
        report.violations += self.violations
        for name, code in exits.items():
            if code != 0:
                report.violations.append(f"stop: {name} exited {code} on the final SIGTERM")
        seconds = time.monotonic() - started
        figures = {
            "profile": profile.name,
            "seed": self.seed,
            "run_seconds": round(seconds, 1),
            "shards": profile.shards,
            "members": profile.members,
            "lease_duration_s": profile.lease_duration,
            "faults_by_type": dict(sorted(Counter(f.kind for f in self.faults).items())),
            "network_faults_injected": injected,
            "network_faults_injected_total": sum(injected.values()),
            **report.figures,
            "violations": len(report.violations),
            "faults": [{**asdict(f), "t0": None, "t1": None, "seconds": round(f.seconds, 2)}
                       for f in self.faults],
        }
        for f in figures["faults"]:
            del f["t0"], f["t1"]
        return ChaosResult(profile.name, self.seed, report, self.faults, seconds, figures)


def summary(result: ChaosResult) -> str:
    f = result.figures
    lines = [
        f"chaos {result.profile}: seed {result.seed}, {f['run_seconds']} s, {f['shards']} shards, "
        f"{f['members']} members, lease {f['lease_duration_s']} s",
        f"  faults: {f['faults_by_type']}; network faults injected: {f['network_faults_injected_total']}",
        f"  records: {f['records_produced']} produced, {f['records_processed']} processed, "
        f"{f['duplicates']} duplicates by cause {f['duplicates_by_cause']}",
        f"  longest stall of a shard: {f['longest_stall_s']} s = "
        f"{f['longest_stall_lease_durations']} lease durations (by fault: {f['longest_stall_during_fault_s']})",
        f"  checkpoints: {f['checkpoint_writes']} written, {f['checkpoint_writes_refused']} refused "
        f"(lease lost); tenures by end: {f['tenures_by_end']}",
        f"  invariant violations: {f['violations']}",
    ]
    return "\n".join(lines)


def write_json(result: ChaosResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {**result.figures, "violation_messages": result.report.violations}
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
