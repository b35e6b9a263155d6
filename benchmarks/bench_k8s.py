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

4. Fleet scale, at 1,000 and 10,000 pods (``--quick``: 1,000) of realistic size
   (~5 KB of JSON each) behind a headless Service:
   * one poll refresh of one pod (ttl 5 s): bytes on the wire, requests and the
     client CPU of the refreshing thread, for the list before this change (one
     unpaginated request, no gzip), paginated from the watch cache
     (``limit=500``, ``resourceVersion=0``) without and with gzip, and
     EndpointSlices; per pod per minute and for the whole fleet (N pods);
   * per watch event: JSON parse and view update (alone, and with the sorted
     tuple a reader then builds), for pod and EndpointSlice events, against the
     previous view that re-sorted every name per event (same process, same events);
   * wire bytes per change through a real watch on the fake server.

Writes benchmarks/results/k8s.json; exits 1 if deployment mode ever shows a
double claim, poll mode breaks its request bound, or a fleet-scale list or
watch misses members.

    .venv/bin/python benchmarks/bench_k8s.py [--quick] [--scale-only]
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import logging
import platform
import random
import statistics
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
from hashring.membership.k8s_api import KubeAPI  # noqa: E402
from hashring.membership.k8s_pods import is_member, pod_name  # noqa: E402
from hashring.membership.k8s_slices import MEMBER, TERMINATING, SliceView, parse_slice  # noqa: E402
from hashring.membership.k8s_view import PodView  # noqa: E402
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


# -- fleet scale: bytes and CPU per refresh, per-event cost, requests per pod ------------------

SCALE_TTL = 5.0  # the default ttl: one refresh per pod every 5 s in poll mode
LIST_VARIANTS = {  # name -> (mode, KubernetesMembership keyword arguments)
    "full list (before)": ("label_selector", {"page_size": None, "compress": False}),
    "paginated, rv=0": ("label_selector", {"page_size": 500, "compress": False}),
    "paginated, rv=0, gzip": ("label_selector", {"page_size": 500, "compress": True}),
    "endpointslices": ("endpointslice", {"page_size": 500, "compress": True}),
}


class ResortPodView:
    """The watch view before this change: every event re-sorts every member name (baseline)."""

    def __init__(self, pods: list[dict[str, Any]]):
        self.eligible = {pod_name(p): is_member(p) for p in pods}
        self.members = tuple(sorted(n for n, ok in self.eligible.items() if ok))
        self.version = 0

    def apply(self, event_type: str, pod: dict[str, Any]) -> None:
        name = pod_name(pod)
        if event_type == "DELETED":
            self.eligible.pop(name, None)
        else:
            self.eligible[name] = is_member(pod)
        members = tuple(sorted(n for n, ok in self.eligible.items() if ok))
        if members != self.members:
            self.members, self.version = members, self.version + 1


class ResortSliceView:
    """Slices without per-slice bookkeeping: every event recomputes every member (baseline)."""

    def __init__(self, slices: list[dict[str, Any]]):
        self.slices = {s["metadata"]["name"]: s for s in slices}
        self.members: tuple[str, ...] = ()
        self._recompute()

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.slices.pop(obj["metadata"]["name"], None)
        else:
            self.slices[obj["metadata"]["name"]] = obj
        self._recompute()

    def _recompute(self) -> None:
        serving, terminating = set(), set()
        for obj in self.slices.values():
            states, _ = parse_slice(obj)
            for name, state in states.items():
                if state == TERMINATING:
                    terminating.add(name)
                elif state == MEMBER:
                    serving.add(name)
        self.members = tuple(sorted(serving - terminating))


def _scale_fleet(n: int) -> tuple[FakeKubernetes, list[str]]:
    fake = FakeKubernetes(NS, realistic_pods=True, bookmark_interval=1.0).start()
    pods = fake.add_deployment("orders", replicas=n)
    fake.add_service("orders", {"app": "orders"})
    # The fake server's objects live in this process: keep the garbage collector from walking
    # them during the client's measurements (a separate API server would not be walked).
    gc.collect()
    gc.freeze()
    return fake, pods


def _refresh_cost(fake: FakeKubernetes, pod: str, mode: str, kw: dict[str, Any],
                  reps: int) -> dict[str, Any]:
    """One pod's poll refresh: bytes on the wire, requests, client CPU (the refreshing thread)."""
    clock = FakeClock()
    extra = {"service": "orders"} if mode == "endpointslice" else {"label_selector": "app=orders"}
    m = _membership(fake, pod, mode, clock=clock, ttl=SCALE_TTL, max_staleness=600.0,
                    **extra, **kw)
    m.members()  # resolve (the Service, in endpointslice mode) and the first list
    cpu, wall, sent, requests = [], [], [], []
    for _ in range(reps):
        clock.advance(SCALE_TTL)
        before = len(fake.requests)
        t_cpu, t_wall = time.thread_time(), time.perf_counter()
        members = m.members()
        cpu.append(time.thread_time() - t_cpu)
        wall.append(time.perf_counter() - t_wall)
        reqs = fake.requests[before:]
        sent.append(sum(r.bytes for r in reqs))
        requests.append(len(reqs))
    stats = m.api.stats
    m.close()
    json_per_list = stats.json_bytes / max(stats.lists, 1)
    return {"bytes_per_refresh": statistics.median(sent), "json_bytes_per_refresh":
            round(json_per_list), "requests_per_refresh": statistics.median(requests),
            "cpu_ms_per_refresh": round(min(cpu) * 1e3, 2),
            "cpu_ms_median": round(statistics.median(cpu) * 1e3, 2),
            "wall_ms_median": round(statistics.median(wall) * 1e3, 2),
            "members": len(members)}


def _event_cost(fake: FakeKubernetes, n: int, events: int) -> dict[str, Any]:
    """Per-event CPU: parse the event line, update the view; incremental vs a full re-sort."""
    api = KubeAPI(fake.api_client(), NS, "label_selector", watch=True, request_timeout=30.0,
                  retries=1, retry_backoff=0.1)
    pods, rv = api.list_pods("app=orders")
    slices, srv = api.list_endpoint_slices("kubernetes.io/service-name=orders")
    rng = random.Random(n)
    pod_lines, slice_lines = [], []
    for i in range(events):  # flip a random pod's readiness, as its pod and its slice say it
        p = copy.deepcopy(rng.choice(pods))
        ready = "False" if i % 2 == 0 else "True"
        for cond in p["status"]["conditions"]:
            if cond["type"] == "Ready":
                cond["status"] = ready
        pod_lines.append(json.dumps({"type": "MODIFIED", "object": p}))
        s = copy.deepcopy(rng.choice(slices))
        ep = rng.choice(s["endpoints"])
        ep["conditions"].update(ready=ready == "True", serving=ready == "True")
        slice_lines.append(json.dumps({"type": "MODIFIED", "object": s}))

    def run(view: Any, lines: list[str], read: bool = True) -> tuple[float, float]:
        for line in lines[:50]:  # warm up
            json.loads(line)
        t = time.perf_counter()
        for line in lines:
            json.loads(line)
        parse = (time.perf_counter() - t) / len(lines)
        parsed = [json.loads(line) for line in lines]
        t = time.perf_counter()
        for event in parsed:
            view.apply(event["type"], event["object"])
            if read:
                view.members  # noqa: B018 - what a reader does after a change (builds the tuple)
        return parse, (time.perf_counter() - t) / len(lines)

    def fresh_pods() -> PodView:
        view = PodView()
        view.replace(pods, rv)
        return view

    def fresh_slices() -> SliceView:
        view = SliceView("orders")
        view.replace(slices, srv)
        return view

    baseline_events = max(20, events // (10 if n >= 5000 else 2))
    pod_parse, pod_apply = run(fresh_pods(), pod_lines)
    _, pod_update_only = run(fresh_pods(), pod_lines, read=False)
    _, pod_resort = run(ResortPodView(pods), pod_lines[:baseline_events])
    slice_parse, slice_apply = run(fresh_slices(), slice_lines)
    _, slice_update_only = run(fresh_slices(), slice_lines, read=False)
    _, slice_resort = run(ResortSliceView(slices), slice_lines[:baseline_events])
    us = 1e6
    return {
        "events": events, "baseline_events": baseline_events,
        "pod_event_bytes": round(statistics.mean(len(x) for x in pod_lines)),
        "slice_event_bytes": round(statistics.mean(len(x) for x in slice_lines)),
        "note": "apply_us: the view update plus the sorted tuple a reader then builds (O(N) "
                "copy, once per change read); update_only_us: the O(log N) update alone; "
                "full_resort_apply_us: the previous view (re-sort every name per event)",
        "pod_watch": {"parse_us": round(pod_parse * us, 1), "apply_us": round(pod_apply * us, 2),
                      "update_only_us": round(pod_update_only * us, 2),
                      "full_resort_apply_us": round(pod_resort * us, 1),
                      "apply_ratio_to_resort": round(pod_apply / pod_resort, 4)},
        "endpointslice_watch": {"parse_us": round(slice_parse * us, 1),
                                "apply_us": round(slice_apply * us, 2),
                                "update_only_us": round(slice_update_only * us, 2),
                                "full_resort_apply_us": round(slice_resort * us, 1),
                                "apply_ratio_to_resort": round(slice_apply / slice_resort, 4)},
    }


def _watch_bytes(fake: FakeKubernetes, pods: list[str], mode: str, flips: int) -> dict[str, Any]:
    """Bytes a watching pod receives per change, end to end through the fake API server."""
    extra = {"service": "orders"} if mode == "endpointslice" else {"label_selector": "app=orders"}
    m = _membership(fake, pods[0], mode, watch=True, ttl=1.0, max_staleness=600.0, **extra)
    m.members()
    resource = "endpointslices" if mode == "endpointslice" else "pods"
    deadline = time.monotonic() + 30
    while fake.open_watches < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    before = fake.bytes_served("watch", resource)
    target = pods[1:flips + 1]
    for p in target:
        fake.set_ready(p, False)
    deadline = time.monotonic() + 60
    while any(p in m.members() for p in target) and time.monotonic() < deadline:
        time.sleep(0.01)
    ok = not any(p in m.members() for p in target)
    sent = fake.bytes_served("watch", resource) - before
    for p in target:
        fake.set_ready(p, True)
    m.close()
    deadline = time.monotonic() + 30
    while fake.open_watches and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"changes": flips, "seen": ok, "bytes_per_change": round(sent / flips)}


def fleet_scale(n: int, reps: int, events: int) -> dict[str, Any]:
    started = time.perf_counter()
    fake, pods = _scale_fleet(n)
    try:
        setup = time.perf_counter() - started
        refresh = {name: _refresh_cost(fake, pods[0], mode, kw, reps)
                   for name, (mode, kw) in LIST_VARIANTS.items()}
        per_minute = 60.0 / SCALE_TTL
        for row in refresh.values():
            row["bytes_per_pod_per_minute"] = round(row["bytes_per_refresh"] * per_minute)
            row["requests_per_pod_per_minute"] = row["requests_per_refresh"] * per_minute
            row["fleet_bytes_per_second"] = round(row["bytes_per_refresh"] * n / SCALE_TTL)
            row["fleet_cpu_cores"] = round(row["cpu_ms_per_refresh"] / 1e3 * n / SCALE_TTL, 1)
        with FakeKubernetes(NS, legacy_watch_cache=True, realistic_pods=True) as legacy:
            legacy.add_deployment("orders", replicas=min(n, 1000))
            lp = legacy.pod_names()[0]
            legacy_row = _refresh_cost(legacy, lp, "label_selector",
                                       {"page_size": 500, "compress": True}, 1)
        cost = _event_cost(fake, n, events)
        watch = {mode: _watch_bytes(fake, pods, mode, flips=20)
                 for mode in ("label_selector", "endpointslice")}
    finally:
        fake.stop()
        gc.unfreeze()
    return {"pods": n, "setup_seconds": round(setup, 1), "ttl_seconds": SCALE_TTL,
            "refresh": refresh,
            "legacy_server_requests_per_refresh_at_1000": legacy_row["requests_per_refresh"],
            "per_event": cost,
            "watch_bytes_per_change": {"pods": watch["label_selector"],
                                       "endpointslices": watch["endpointslice"]},
            "watch_requests_per_pod_per_minute": round(60.0 / (MAX_STALENESS / 2), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="20 simulated seconds in poll mode, a shorter watch window, "
                             "fleet scale at 1,000 pods only")
    parser.add_argument("--scale-only", action="store_true",
                        help="only the fleet-scale part (bytes, CPU, per-event cost)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("hashring.ring").setLevel(logging.ERROR)  # "not ready" during updates
    console = Console()
    poll_seconds, window = (20.0, 4.0) if args.quick else (60.0, 8.0)

    sizes, reps, events = ((1_000,), 2, 500) if args.quick else ((1_000, 10_000), 3, 2_000)
    scale = {str(n): fleet_scale(n, reps, events) for n in sizes}
    scale_ok = all(s["refresh"][v]["members"] == s["pods"] for s in scale.values()
                   for v in LIST_VARIANTS) and all(
        w["seen"] for s in scale.values() for w in s["watch_bytes_per_change"].values())
    _print_scale(console, scale)
    if args.scale_only:
        write_json(RESULTS / "k8s_scale.json", {"benchmark": "k8s_scale",
                                                "python": platform.python_version(),
                                                "scale": scale})
        console.print(f"wrote {RESULTS / 'k8s_scale.json'}")
        return 0 if scale_ok else 1

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
        "scale": scale,
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
    return 0 if ok and scale_ok else 1


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} KB"


def _print_scale(console: Console, scale: dict[str, Any]) -> None:
    t = Table(title=f"poll refresh, per pod (ttl {SCALE_TTL:g} s; realistic ~5 KB pods; "
                    "client CPU of the refreshing thread)")
    for col in ("pods", "list", "bytes/refresh", "JSON", "requests", "CPU ms", "per pod/min",
                "fleet bytes/s", "fleet CPU cores"):
        t.add_column(col)
    for s in scale.values():
        for name, row in s["refresh"].items():
            t.add_row(f"{s['pods']:,}", name, _mb(row["bytes_per_refresh"]),
                      _mb(row["json_bytes_per_refresh"]), f"{row['requests_per_refresh']:g}",
                      f"{row['cpu_ms_per_refresh']:g}",
                      f"{_mb(row['bytes_per_pod_per_minute'])}, "
                      f"{row['requests_per_pod_per_minute']:g} req",
                      _mb(row["fleet_bytes_per_second"]) + "/s", f"{row['fleet_cpu_cores']:g}")
    Console(width=160).print(t)
    e = Table(title="watch: per-event cost (parse + view update) vs a full re-sort per event")
    for col in ("pods", "mode", "event bytes", "parse us", "update us", "+ read us", "re-sort us",
                "update / re-sort", "wire bytes per change"):
        e.add_column(col)
    for s in scale.values():
        pe = s["per_event"]
        for label, key, size, wire in (
                ("pods", "pod_watch", pe["pod_event_bytes"], "pods"),
                ("endpointslices", "endpointslice_watch", pe["slice_event_bytes"],
                 "endpointslices")):
            row = pe[key]
            e.add_row(f"{s['pods']:,}", label, f"{size:,}", f"{row['parse_us']:g}",
                      f"{row['update_only_us']:g}", f"{row['apply_us']:g}",
                      f"{row['full_resort_apply_us']:g}",
                      f"{row['apply_ratio_to_resort']:.4f}",
                      f"{s['watch_bytes_per_change'][wire]['bytes_per_change']:,}")
    Console(width=160).print(e)
    console.print(f"watch modes: {next(iter(scale.values()))['watch_requests_per_pod_per_minute']:g}"
                  " watch requests per pod per minute (timeout max_staleness / 2 = 30 s), bytes "
                  "only for changes and bookmarks; API servers before 1.34 ignore limit for "
                  "resourceVersion=0 (1 request per refresh at 1,000 pods: "
                  f"{next(iter(scale.values()))['legacy_server_requests_per_refresh_at_1000']:g})")


if __name__ == "__main__":
    sys.exit(main())
