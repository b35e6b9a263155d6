"""Kubernetes membership: API pressure, hot-path cost, and rolling updates per mode.

Everything runs the official ``kubernetes`` client over HTTP against the fake API
server of the test suite (``tests/support/fake_k8s.py``) on 127.0.0.1.

1. API requests per member (process) per minute while 100 (consumer, shard) keys
   are each asked ``can_acquire_lease`` 1,000 times a second (100,000 calls/s):
   * poll mode (ttl 5 s, the default): 60 s of **simulated** time on the
     injectable clock, every call really made (6,000,000 calls);
   * watch mode: a **real-time** window (the watch needs real streams) with a
     short watch timeout so reconnects happen inside it, pods changing every
     second; calls as fast as one thread goes. The per-minute figure at the
     default settings is extrapolated from the measured requests per watch
     period: 60 / timeout_seconds watch requests (timeout = max_staleness / 2)
     plus the one initial list, both stated in the JSON;
   * baseline (same process): no cache, a list per call (Knock's procedure run
     on every decision), measured on 2,000 calls and extrapolated to the rate.
2. Hot path: ns per ``can_acquire_lease`` over KubernetesMembership (poll, cached)
   against StaticMembership with the same members (baseline).
3. A rolling update of a 10-pod Deployment (maxSurge 1, maxUnavailable 0: a new
   pod appears, becomes Ready, then an old pod terminates and is deleted; 40
   steps), once per mode (``replicaset`` = Knock, ``deployment``). At every step
   every existing pod refreshes its view and asks its own HashRing about 1,000
   keys (10 consumers x 100 shards). Counted: keys that more than one pod claims
   at some step (double ownership, which only the lease table's conditional
   writes then stop), keys nobody claims at some step, and ownership changes
   (a key's claimant set differs from the previous step).

Writes benchmarks/results/k8s.json; exits 1 if deployment mode ever shows a
double claim or poll mode breaks its request bound.

    .venv/bin/python benchmarks/bench_k8s.py [--quick]
"""

from __future__ import annotations

import argparse
import logging
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report import write_json  # noqa: E402
from hashring import HashRing, KubernetesMembership, StaticMembership  # noqa: E402
from tests.support.fake_k8s import FakeClock, FakeKubernetes  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
NS = "streaming"
KEYS = [(f"consumer-{i:03d}", "shardId-000000000000") for i in range(100)]
RATE = 1_000  # queries per key per second
TTL = 5.0
MAX_STALENESS = 60.0


def _membership(fake: FakeKubernetes, pod: str, mode: str = "deployment",
                **kw: Any) -> KubernetesMembership:
    return KubernetesMembership(mode, namespace=NS, pod_name=pod, api_client=fake.api_client(),
                                **kw)


def poll_mode(seconds: float) -> dict[str, Any]:
    """Simulated time: every call is made, the clock advances 1 ms per round of 100 keys."""
    with FakeKubernetes(NS) as fake:
        pods = fake.add_deployment("orders", replicas=5)
        clock = FakeClock()
        m = _membership(fake, pods[0], clock=clock, ttl=TTL, max_staleness=MAX_STALENESS)
        ring = HashRing(m)
        rounds = int(seconds * RATE)
        started = time.perf_counter()
        for r in range(rounds):
            if r % 10_000 == 5_000:  # a pod joins every 10 simulated seconds
                fake.add_replicaset_pod("orders-5d8f7c9b6", ready=True)
            for consumer, shard in KEYS:
                ring.can_acquire_lease(consumer, shard)
            clock.advance(1.0 / RATE)
        wall = time.perf_counter() - started
        lists, gets = fake.count("list"), fake.count("get")
        calls = rounds * len(KEYS)
        m.close()
    bound = seconds / TTL + 1
    return {
        "clock": "simulated (injectable clock), every call made",
        "simulated_seconds": seconds, "calls": calls, "wall_seconds": round(wall, 2),
        "ttl_seconds": TTL, "list_requests": lists, "one_time_get_requests": gets,
        "list_bound": bound, "within_bound": lists <= bound,
        "list_requests_per_minute": round(lists * 60.0 / seconds, 2),
        "note": "the one-time gets (own pod, ReplicaSet, Deployment) happen once per process",
        "members_at_end": 5 + sum(1 for r in range(rounds) if r % 10_000 == 5_000),
    }


def watch_mode(window: float, max_staleness: float) -> dict[str, Any]:
    """Real time: a short watch timeout so reconnects happen in the window; pods change."""
    timeout_seconds = max(1, int(max_staleness / 2))
    with FakeKubernetes(NS, bookmark_interval=1.0) as fake:
        pods = fake.add_deployment("orders", replicas=5)
        m = _membership(fake, pods[0], watch=True, ttl=1.0, max_staleness=max_staleness)
        ring = HashRing(m)
        ring.can_acquire_lease(*KEYS[0])  # initial list, watch starts
        stop = threading.Event()

        def churn() -> None:
            while not stop.wait(1.0):
                fake.add_replicaset_pod("orders-5d8f7c9b6", ready=True)

        churner = threading.Thread(target=churn, daemon=True)
        churner.start()
        calls = 0
        started = time.perf_counter()
        while time.perf_counter() - started < window:
            for consumer, shard in KEYS:
                ring.can_acquire_lease(consumer, shard)
            calls += len(KEYS)
        elapsed = time.perf_counter() - started
        stop.set()
        churner.join()
        pods_now = len(fake.pod_names())
        deadline = time.monotonic() + 5.0
        while len(m.members()) != pods_now and time.monotonic() < deadline:
            stop.wait(0.01)  # the last event may still be on its way
        seen = len(m.members())
        lists, gets, watches = fake.count("list"), fake.count("get"), fake.count("watch")
        m.close()
    default_timeout = max(1, int(MAX_STALENESS / 2))
    return {
        "clock": "real time window, extrapolated per minute",
        "window_seconds": round(elapsed, 2), "calls": calls,
        "calls_per_second": round(calls / elapsed),
        "watch_timeout_seconds": timeout_seconds,
        "list_requests": lists, "one_time_get_requests": gets, "watch_requests": watches,
        "watch_requests_per_timeout_period": round(watches / (elapsed / timeout_seconds), 2),
        "members_seen_at_end": seen, "pods_at_end": pods_now,
        "extrapolated_default": {
            "max_staleness_seconds": MAX_STALENESS, "watch_timeout_seconds": default_timeout,
            "watch_requests_per_minute": round(60.0 / default_timeout, 2),
            "one_time_requests": lists + gets,
            "note": "one list and the own-pod/owner gets at start, then one watch request "
                    "per timeout period (events and bookmarks add none); a 410 adds one list",
        },
    }


def naive_baseline(calls: int) -> dict[str, Any]:
    """No cache: list the pods on every decision (ttl far below the call interval)."""
    with FakeKubernetes(NS) as fake:
        pods = fake.add_deployment("orders", replicas=5)
        clock = FakeClock()
        m = _membership(fake, pods[0], clock=clock, ttl=1e-9, max_staleness=1.0)
        ring = HashRing(m)
        fake.reset_requests()
        for i in range(calls):
            clock.advance(1.0 / (RATE * len(KEYS)))
            ring.can_acquire_lease(*KEYS[i % len(KEYS)])
        lists = fake.count("list")
        m.close()
    per_call = lists / calls
    return {"calls": calls, "list_requests": lists, "requests_per_call": per_call,
            "requests_per_minute": round(per_call * RATE * len(KEYS) * 60)}


def hot_path(rounds: int) -> dict[str, Any]:
    """ns per can_acquire_lease: KubernetesMembership (cached) vs StaticMembership."""
    with FakeKubernetes(NS) as fake:
        pods = fake.add_deployment("orders", replicas=5)
        m = _membership(fake, pods[0], ttl=3600.0, max_staleness=7200.0)
        rings = {"kubernetes": HashRing(m),
                 "static": HashRing(StaticMembership(pods, pods[0]))}
        out: dict[str, float] = {}
        for _ in range(3):  # alternate, best of 3
            for name, ring in rings.items():
                for c, s in KEYS:
                    ring.can_acquire_lease(c, s)
                t = time.perf_counter()
                for _ in range(rounds):
                    for c, s in KEYS:
                        ring.can_acquire_lease(c, s)
                ns = (time.perf_counter() - t) / (rounds * len(KEYS)) * 1e9
                out[name] = min(out.get(name, ns), ns)
        m.close()
    return {"ns_per_call": {k: round(v) for k, v in out.items()},
            "ratio_to_static": round(out["kubernetes"] / out["static"], 2)}


def rolling_update(mode: str, pods_n: int = 10) -> dict[str, Any]:
    keys = [(f"consumer-{c}", f"shardId-{s:012d}") for c in range(10) for s in range(100)]
    with FakeKubernetes(NS) as fake:
        old = fake.add_deployment("orders", replicas=pods_n, template_hash="aaaaaaaaa")
        fake.add_replicaset("orders", "bbbbbbbbb", replicas=0)
        clock = FakeClock()
        rings: dict[str, HashRing] = {}
        members: list[KubernetesMembership] = []

        def join(pod: str) -> None:
            m = _membership(fake, pod, mode, clock=clock, ttl=TTL, max_staleness=MAX_STALENESS)
            members.append(m)
            rings[pod] = HashRing(m)

        for p in old:
            join(p)
        previous: dict[tuple[str, str], frozenset[str]] | None = None
        multi: set[tuple[str, str]] = set()
        orphan: set[tuple[str, str]] = set()
        changes = 0
        max_claimants = 0
        steps = 0

        def step() -> None:
            nonlocal previous, changes, max_claimants, steps
            clock.advance(TTL)  # every pod's view refreshes
            live = set(fake.pod_names())
            claims = {k: frozenset(p for p, r in rings.items()
                                   if p in live and r.can_acquire_lease(*k)) for k in keys}
            for k, owners in claims.items():
                max_claimants = max(max_claimants, len(owners))
                if len(owners) > 1:
                    multi.add(k)
                if not owners:
                    orphan.add(k)
                if previous is not None and previous[k] != owners:
                    changes += 1
            previous = claims
            steps += 1

        step()
        for old_pod in old:
            new = fake.add_replicaset_pod("orders-bbbbbbbbb", ready=False)
            join(new)
            step()
            fake.set_ready(new)
            step()
            fake.terminate(old_pod)
            step()
            fake.delete_pod(old_pod)
            step()
        for m in members:
            m.close()
    return {"mode": mode, "pods": pods_n, "keys": len(keys), "steps": steps - 1,
            "keys_double_claimed_at_some_step": len(multi),
            "max_claimants_of_a_key": max_claimants,
            "keys_unclaimed_at_some_step": len(orphan),
            "ownership_changes": changes,
            "ownership_changes_per_key": round(changes / len(keys), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="20 simulated seconds in poll mode, a shorter watch window")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("hashring.ring").setLevel(logging.ERROR)  # "not ready" during updates
    console = Console()
    poll_seconds, window = (20.0, 4.0) if args.quick else (60.0, 8.0)

    poll = poll_mode(poll_seconds)
    watch = watch_mode(window, max_staleness=4.0)
    naive = naive_baseline(500 if args.quick else 2_000)
    hot = hot_path(200 if args.quick else 1_000)
    rolling = {mode: rolling_update(mode) for mode in ("replicaset", "deployment")}

    poll_rpm = poll["list_requests_per_minute"]
    watch_rpm = watch["extrapolated_default"]["watch_requests_per_minute"]
    result = {
        "benchmark": "k8s",
        "python": platform.python_version(),
        "load": {"keys": len(KEYS), "queries_per_key_per_second": RATE,
                 "calls_per_second": RATE * len(KEYS)},
        "poll": poll,
        "watch": watch,
        "baseline_no_cache": naive,
        "ratios": {
            "poll_over_no_cache": poll_rpm / naive["requests_per_minute"],
            "watch_over_no_cache": watch_rpm / naive["requests_per_minute"],
            "watch_over_poll_lists": round(watch_rpm / poll["list_requests_per_minute"], 3),
        },
        "hot_path": hot,
        "rolling_update": rolling,
    }
    RESULTS.mkdir(exist_ok=True)
    write_json(RESULTS / "k8s.json", result)

    t = Table(title="Kubernetes API requests per member per minute "
                    f"({len(KEYS)} keys x {RATE}/s = {RATE * len(KEYS):,} calls/s)")
    for col in ("mode", "requests/min", "how measured", "vs no cache"):
        t.add_column(col)
    t.add_row("no cache (list per call)", f"{naive['requests_per_minute']:,}",
              f"{naive['calls']} calls, {naive['requests_per_call']:.2f} req/call", "1")
    t.add_row(f"poll, ttl {TTL:g} s", f"{poll_rpm:g} lists + {poll['one_time_get_requests']} "
              f"gets at start ({poll['list_requests']} lists in {poll_seconds:g} s)",
              f"simulated clock, {poll['calls']:,} calls",
              f"{result['ratios']['poll_over_no_cache']:.1e}")
    t.add_row(f"watch, timeout {watch['extrapolated_default']['watch_timeout_seconds']} s",
              f"{watch_rpm:g} + {watch['extrapolated_default']['one_time_requests']} at start",
              f"real {watch['window_seconds']} s window, timeout "
              f"{watch['watch_timeout_seconds']} s: {watch['watch_requests']} watches, "
              f"{watch['list_requests']} list", f"{result['ratios']['watch_over_no_cache']:.1e}")
    console.print(t)
    console.print(f"hot path: {hot['ns_per_call']['kubernetes']} ns/call over "
                  f"KubernetesMembership vs {hot['ns_per_call']['static']} ns over "
                  f"StaticMembership (x{hot['ratio_to_static']})")
    r = Table(title="rolling update of 10 pods (maxSurge 1), 1,000 keys, views refreshed per step")
    for col in ("mode", "keys double-claimed", "max claimants", "keys unclaimed",
                "ownership changes", "per key"):
        r.add_column(col)
    for mode, row in rolling.items():
        r.add_row(mode, str(row["keys_double_claimed_at_some_step"]),
                  str(row["max_claimants_of_a_key"]), str(row["keys_unclaimed_at_some_step"]),
                  str(row["ownership_changes"]), str(row["ownership_changes_per_key"]))
    console.print(r)
    console.print(f"wrote {RESULTS / 'k8s.json'}")
    ok = poll["within_bound"] and rolling["deployment"]["keys_double_claimed_at_some_step"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
