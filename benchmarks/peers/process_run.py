"""One process peer's run: its own fresh moto, a producer, members as processes (each behind
its own counting proxy), the scenario's phases, and what the ledgers and proxies say.

Phases (same for every peer): ``cold_start`` (4 members start together), ``join`` (a 5th),
``sigterm`` and ``sigkill`` (the member holding the most leases, ties to the lowest name),
``steady`` (a fixed window with the producer on), ``idle`` (producer stopped, backlog
processed, then a fixed window) and ``drain`` (SIGTERM to all, then the audit).

A reaction phase ends when the fleet is balanced (every lease held by a running member,
max - min <= 1) and no lease has changed hands for ``settle_s``, or when no lease has
changed hands for ``quiet_s`` whatever the state (a peer that does not balance), or at
``timeout_s``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.moto_process import MotoProcess
from examples.demo_fleet import Produced, Producer, audit, read_ledgers
from kinesis.testing import FAKE_CREDENTIALS, client_for
from tests.support.fault_proxy import FaultProxy

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class PeerSpec:
    """How to run one peer's members and read its lease table."""

    name: str
    python: str
    script: Path
    extra_args: list[str] = field(default_factory=list)
    table: str = ""
    """Lease table name (``{app}`` is replaced by the application name)."""
    owner_attr: str = "leaseOwner"
    key_attr: str = "leaseKey"
    owner_after: str = ""
    """The owner attribute holds ``<prefix><owner_after><member>`` (async-kinesis: ``app/m1``)."""
    checkpoint_marker: bytes | None = None
    """A DynamoDB UpdateItem whose body contains this is counted as ``UpdateItem (checkpoint)``."""
    pass_table: bool = False
    """Give the member ``--table`` (our own member; the peers name their tables themselves)."""
    own_pythonpath: bool = False
    """Run with this repository on PYTHONPATH (only our own members: async-kinesis's package
    is also called ``kinesis``)."""
    settings: str = ""
    kubernetes: bool = False
    """Serve the members a Kubernetes API (the tests' fake API server, over HTTP): each
    member's pod is listed when it starts and deleted when it exits after a SIGTERM (a
    SIGKILLed member's pod stays listed, the worst case)."""


def cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class ProcessRun:
    def __init__(self, spec: PeerSpec, out_dir: Path, *, shards: int, members: int, rate: float,
                 settle_s: float, quiet_s: float, timeout_s: float, log: Callable[[str], None] = print):
        self.spec = spec
        self.out_dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        for old in out_dir.glob("*.ledger"):
            old.unlink()
        self.shards = shards
        self.n_members = members
        self.rate = rate
        self.settle_s = settle_s
        self.quiet_s = quiet_s
        self.timeout_s = timeout_s
        self.log = log
        self.stream = "bench"
        self.application = f"bench-{spec.name}"
        self.table = spec.table.format(app=self.application)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.proxies: dict[str, FaultProxy] = {}
        self.fates: dict[str, str] = {}
        self.timeline: list[tuple[float, dict[str, int]]] = []
        self.owner_samples: list[tuple[float, dict[str, str | None]]] = []
        self.phase_marks: list[tuple[str, float]] = []
        self._stop_sampling = threading.Event()
        self._lock = threading.Lock()
        self.t0 = time.monotonic()
        self.kube: Any = None

    def _serve_kubernetes(self) -> None:
        from tests.support.fake_k8s import FakeKubernetes

        self.kube = FakeKubernetes().start()
        (self.out_dir / "kubeconfig").write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
            f"clusters: [{{name: fake, cluster: {{server: '{self.kube.url}'}}}}]\n"
            "users: [{name: fake, user: {token: fake}}]\n"
            "contexts: [{name: fake, context: {cluster: fake, user: fake, namespace: default}}]\n")

    # --- members ---------------------------------------------------------------------------

    def _relabel(self, service: str, operation: str, body: bytes) -> str:
        marker = self.spec.checkpoint_marker
        if service == "dynamodb" and operation == "UpdateItem" and marker is not None and marker in body:
            return "UpdateItem (checkpoint)"
        return operation

    def start_member(self, name: str) -> None:
        proxy = FaultProxy(self.moto.endpoint_url, relabel=self._relabel).start()
        self.proxies[name] = proxy
        cmd = [self.spec.python, str(self.spec.script), "--endpoint", proxy.endpoint_url,
               "--stream", self.stream, "--application", self.application, "--member-id", name,
               "--out-dir", str(self.out_dir), *self.spec.extra_args]
        if self.kube is not None:
            self.kube.add_pod(name, {"app": "bench"})
            cmd += ["--kubeconfig", str(self.out_dir / "kubeconfig"), "--k8s-selector", "app=bench"]
        if self.spec.pass_table:
            cmd += ["--table", self.table]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(AWS_ACCESS_KEY_ID=FAKE_CREDENTIALS["aws_access_key_id"],
                   AWS_SECRET_ACCESS_KEY=FAKE_CREDENTIALS["aws_secret_access_key"],
                   AWS_DEFAULT_REGION="us-east-1", AWS_REGION="us-east-1", PYTHONUNBUFFERED="1")
        if self.spec.own_pythonpath:
            env["PYTHONPATH"] = str(ROOT)
        stderr = open(self.out_dir / f"{name}.stderr", "ab")  # noqa: SIM115 - owned by the child
        self.procs[name] = subprocess.Popen(cmd, env=env, stdout=stderr, stderr=stderr, cwd=str(ROOT))
        stderr.close()
        self.fates[name] = "running"

    def running(self) -> list[str]:
        return sorted(n for n, p in self.procs.items() if self.fates[n] == "running" and p.poll() is None)

    # --- observation -----------------------------------------------------------------------

    def owners(self) -> dict[str, str | None]:
        """Shard lease -> owner member (None if free), read straight from moto."""
        rows: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"TableName": self.table}
        while True:
            page = self.observer.scan(**kwargs)
            rows.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        out: dict[str, str | None] = {}
        for row in rows:
            key = row.get(self.spec.key_attr, {}).get("S", "")
            if not key or key.startswith("__") or "shardId-" not in key:
                continue
            if row.get("leaseState", {}).get("S") == "SHARD_END":
                continue
            owner = row.get(self.spec.owner_attr, {}).get("S")
            if owner and self.spec.owner_after:
                owner = owner.rsplit(self.spec.owner_after, 1)[-1]
            out[key] = owner or None
        return out

    def _sample(self) -> None:
        while not self._stop_sampling.wait(0.5):
            try:
                owners = self.owners()
            except Exception:  # the table may not exist yet
                continue
            t = time.monotonic() - self.t0
            counts = Counter(o for o in owners.values() if o is not None)
            with self._lock:
                self.owner_samples.append((t, owners))
                self.timeline.append((round(t, 2), {n: counts.get(n, 0) for n in sorted(self.procs)}))

    def latest(self) -> dict[str, str | None]:
        with self._lock:
            return dict(self.owner_samples[-1][1]) if self.owner_samples else {}

    def balanced(self, owners: dict[str, str | None]) -> bool:
        live = self.running()
        if len(owners) < self.shards or not live or any(o not in live for o in owners.values()):
            return False
        counts = Counter(owners.values())
        loads = [counts.get(n, 0) for n in live]
        return max(loads) - min(loads) <= 1

    def processed_shards(self) -> set[str]:
        shards = set()
        by_payload: dict[tuple[str, int], Produced] | None = None
        for path in self.out_dir.glob("*.ledger"):
            for line in path.read_text().splitlines():
                parts = line.split()
                if not parts or parts[0] != "R" or len(parts) != 7:
                    continue
                if parts[1] != "-":
                    shards.add(parts[1])
                    continue
                if by_payload is None:
                    by_payload = {(p.partition_key, p.n): p for p in self.producer.snapshot()}
                produced = by_payload.get((parts[4], int(parts[5])))
                if produced is not None:
                    shards.add(produced.shard_id)
        return shards

    def mark(self, phase: str) -> float:
        t = time.monotonic() - self.t0
        self.phase_marks.append((phase, round(t, 2)))
        return t

    def snapshot(self) -> tuple[float, dict[str, dict[tuple[str, str], int]], dict[str, float]]:
        cpu = {n: c for n, p in self.procs.items() if p.poll() is None and (c := cpu_seconds(p.pid)) is not None}
        return time.monotonic(), {n: p.counts() for n, p in self.proxies.items()}, cpu

    # --- waiting ---------------------------------------------------------------------------

    def wait_reaction(self, start: float, *, need: Callable[[dict[str, str | None]], bool] | None = None,
                      held: set[str] | None = None, newcomer: str | None = None) -> dict[str, Any]:
        """Poll the samples until balanced and quiet, or quiet, or the timeout (see module doc)."""
        held = held or set()
        first_balanced = all_owned = back = first_newcomer = need_met = None
        last_owners: dict[str, str | None] | None = None
        last_change = start
        while True:
            time.sleep(0.5)
            now = time.monotonic() - self.t0
            with self._lock:
                samples = [s for s in self.owner_samples if s[0] >= start]
            for t, owners in samples:
                if last_owners is not None and owners != last_owners:
                    last_change = max(last_change, t)
                last_owners = owners
            if samples:
                t, owners = samples[-1]
                live = set(self.running())
                if all_owned is None and len(owners) >= self.shards and all(o in live for o in owners.values()):
                    all_owned = t - start
                if first_balanced is None and self.balanced(owners):
                    first_balanced = t - start
                if back is None and held and all(owners.get(k) in live for k in held):
                    back = t - start
                if newcomer and first_newcomer is None and newcomer in owners.values():
                    first_newcomer = t - start
                if need is not None and need_met is None and need(owners):
                    need_met = t - start
                done_need = need is None or need_met is not None
                balanced_now = self.balanced(owners)
                if done_need and balanced_now and now - last_change >= self.settle_s:
                    break
                if done_need and now - max(last_change, start) >= self.quiet_s:
                    break
            if now - start >= self.timeout_s:
                break
        final = self.latest()
        result = {
            "all_owned_s": _r(all_owned), "balanced_s": _r(first_balanced),
            "stable_s": _r(last_change - start) if self.balanced(final) else None,
            "ended_balanced": self.balanced(final), "waited_s": _r(time.monotonic() - self.t0 - start),
            "final_counts": dict(Counter(o for o in final.values() if o is not None)),
        }
        if held:
            result["leases_back_s"] = _r(back)
        if newcomer:
            result["newcomer_first_lease_s"] = _r(first_newcomer)
        if need is not None:
            result["all_processed_s"] = _r(need_met)
        return result

    def most_loaded(self) -> tuple[str, set[str]]:
        owners = self.latest()
        live = self.running()
        counts = Counter(o for o in owners.values() if o in live)
        victim = sorted(live, key=lambda n: (-counts.get(n, 0), n))[0]
        return victim, {k for k, o in owners.items() if o == victim}

    # --- the scenario ----------------------------------------------------------------------

    def run(self, *, steady_s: float, idle_s: float) -> dict[str, Any]:
        phases: dict[str, Any] = {}
        windows: dict[str, Any] = {}
        produced: list[Produced] = []
        if self.spec.kubernetes:
            self._serve_kubernetes()
        with MotoProcess() as moto:
            self.moto = moto
            kinesis = client_for("kinesis", moto.endpoint_url)
            self.observer = client_for("dynamodb", moto.endpoint_url)
            kinesis.create_stream(StreamName=self.stream, ShardCount=self.shards)
            kinesis.get_waiter("stream_exists").wait(StreamName=self.stream, WaiterConfig={"Delay": 0.2})
            self.producer = Producer(kinesis, self.stream, rate=self.rate, keys=64, batch=10)
            sampler = threading.Thread(target=self._sample, daemon=True)
            try:
                self.t0 = time.monotonic()
                self.producer.start()
                sampler.start()
                start = self.mark("cold_start")
                names = [f"m{i}" for i in range(1, self.n_members + 1)]
                for name in names:
                    self.start_member(name)
                phases["cold_start"] = self.wait_reaction(
                    start, need=lambda _: len(self.processed_shards()) >= self.shards)
                self.log(f"  cold start: {phases['cold_start']}")
                newcomer = f"m{self.n_members + 1}"
                start = self.mark("join")
                self.start_member(newcomer)
                phases["join"] = self.wait_reaction(start, newcomer=newcomer)
                self.log(f"  join: {phases['join']}")
                for phase, sig in (("sigterm", signal.SIGTERM), ("sigkill", signal.SIGKILL)):
                    victim, held = self.most_loaded()
                    start = self.mark(phase)
                    self.procs[victim].send_signal(sig)
                    self.fates[victim] = "terminated" if sig == signal.SIGTERM else "killed"
                    phases[phase] = self.wait_reaction(start, held=held)
                    phases[phase].update(victim=victim, victim_leases=len(held))
                    try:
                        phases[phase]["victim_exit_code"] = self.procs[victim].wait(30)
                    except subprocess.TimeoutExpired:
                        self.procs[victim].kill()
                        phases[phase]["victim_exit_code"] = "did not exit in 30 s (killed)"
                    if self.kube is not None and sig == signal.SIGTERM:
                        self.kube.delete_pod(victim)
                    self.log(f"  {phase}: {phases[phase]}")
                self.mark("steady")
                windows["steady"] = self.window(steady_s)
                self.mark("catch_up")
                self.producer.stop()
                produced = self.producer.snapshot()
                caught = self.wait_caught_up(produced, timeout=120.0)
                phases["catch_up"] = {"caught_up_s": caught}
                self.mark("idle")
                windows["idle"] = self.window(idle_s)
                self.mark("drain")
                exits = self.stop_all()
                phases["drain"] = {"exit_codes": exits}
            finally:
                self._stop_sampling.set()
                if self.producer._thread.is_alive():
                    self.producer.stop()
                for p in self.procs.values():
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                for proxy in self.proxies.values():
                    proxy.stop()
                if self.kube is not None:
                    self.kube.stop()
        analysis = self.analyse(produced)
        return {"phases": phases, "windows": windows, "records": analysis,
                "phase_marks_s": dict(self.phase_marks), "timeline": self.timeline,
                "fates": self.fates}

    def window(self, seconds: float) -> dict[str, Any]:
        """Requests (by member, service, operation) and CPU per member over a fixed window."""
        t1, calls1, cpu1 = self.snapshot()
        time.sleep(seconds)
        t2, calls2, cpu2 = self.snapshot()
        minutes = (t2 - t1) / 60
        per_member: dict[str, Any] = {}
        for name in self.running():
            by_service: dict[str, dict[str, float]] = defaultdict(dict)
            before = calls1.get(name, {})
            for (service, op), count in sorted(calls2.get(name, {}).items()):
                diff = count - before.get((service, op), 0)
                if diff:
                    by_service[service][op] = round(diff / minutes, 1)
            cpu = None
            if name in cpu1 and name in cpu2:
                cpu = round((cpu2[name] - cpu1[name]) / (t2 - t1) * 100, 2)
            per_member[name] = {"requests_per_minute": dict(by_service), "cpu_percent": cpu}
        return {"seconds": round(t2 - t1, 1), "members": per_member, **summarise_window(per_member)}

    def wait_caught_up(self, produced: list[Produced], timeout: float) -> float | None:
        want = {(p.partition_key, p.n) for p in produced}
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if want <= self.processed_payloads():
                return round(time.monotonic() - start, 1)
            time.sleep(1.0)
        return None

    def processed_payloads(self) -> set[tuple[str, int]]:
        got = set()
        for path in self.out_dir.glob("*.ledger"):
            for line in path.read_text().splitlines():
                parts = line.split()
                if parts and parts[0] == "R" and len(parts) == 7:
                    got.add((parts[4], int(parts[5])))
        return got

    def stop_all(self) -> dict[str, Any]:
        running = self.running()
        for name in running:
            self.procs[name].send_signal(signal.SIGTERM)
            self.fates[name] = "stopped"
        out: dict[str, Any] = {}
        for name in running:
            try:
                out[name] = self.procs[name].wait(60)
            except subprocess.TimeoutExpired:
                self.procs[name].kill()
                out[name] = "did not exit in 60 s (killed)"
        return out

    # --- the audit ---------------------------------------------------------------------------

    def analyse(self, produced: list[Produced]) -> dict[str, Any]:
        """Normalise the ledgers (fill shard and sequence from the payload where a peer does
        not tell them), then :func:`examples.demo_fleet.audit` and duplicates per phase."""
        norm = self.out_dir / "normalised"
        norm.mkdir(exist_ok=True)
        for old in norm.glob("*.ledger"):
            old.unlink()
        by_payload = {(p.partition_key, p.n): p for p in produced}
        unresolved = 0
        for path in self.out_dir.glob("*.ledger"):
            lines = []
            for line in path.read_text().splitlines():
                parts = line.split()
                if parts and parts[0] == "R" and len(parts) == 7 and parts[1] == "-":
                    p = by_payload.get((parts[4], int(parts[5])))
                    if p is None:
                        unresolved += 1
                        continue
                    parts[1], parts[2] = p.shard_id, p.sequence_number
                lines.append(" ".join(parts))
            (norm / path.name).write_text("".join(x + "\n" for x in lines))
        killed = [n for n, f in self.fates.items() if f == "killed"]
        result = audit(produced, norm, killed=killed)
        events, _ = read_ledgers(norm)
        marks = sorted(((t, name) for name, t in self.phase_marks))
        t0_ns = time.time_ns() - int((time.monotonic() - self.t0) * 1e9)
        seen: set[tuple[str, str, int]] = set()
        dups: Counter[str] = Counter()
        for e in sorted((e for e in events if e.kind == "R"), key=lambda e: e.t):
            key = (e.shard_id, e.sequence_number, e.sub)
            if key in seen:
                t = (e.t - t0_ns) / 1e9
                phase = next((name for mt, name in reversed(marks) if mt <= t), "cold_start")
                dups[phase] += 1
            seen.add(key)
        return {
            "produced": result.produced, "processed": result.processed, "distinct": result.distinct,
            "lost": len(result.lost), "duplicates": sum(dups.values()), "duplicates_by_phase": dict(dups),
            "crash_duplicates": result.crash_duplicates, "other_duplicates": result.graceful_duplicates,
            "out_of_order": len(result.out_of_order), "overlaps": len(result.overlaps),
            "per_key_order_errors": result.per_key_order_errors, "unresolved_lines": unresolved,
            "records_by_member": result.records_by_member,
        }


def summarise_window(per_member: dict[str, Any]) -> dict[str, Any]:
    """Mean per member per minute by service (checkpoint writes apart) and mean CPU."""
    n = max(1, len(per_member))
    services: dict[str, float] = defaultdict(float)
    checkpoints = 0.0
    for m in per_member.values():
        for service, ops in m["requests_per_minute"].items():
            for op, rate in ops.items():
                if op == "UpdateItem (checkpoint)":
                    checkpoints += rate
                else:
                    services[service] += rate
    cpus = [m["cpu_percent"] for m in per_member.values() if m["cpu_percent"] is not None]
    return {
        "mean_per_member_per_minute": {s: round(v / n, 1) for s, v in sorted(services.items())},
        "mean_checkpoint_writes_per_member_per_minute": round(checkpoints / n, 1),
        "mean_cpu_percent": round(sum(cpus) / len(cpus), 2) if cpus else None,
    }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def dump(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1))
