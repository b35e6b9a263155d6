"""KubernetesMembership (poll mode) with the official client against the fake API server.

The TTL clock is a FakeClock: tests move time instead of sleeping.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from hashring import HashRing, KubernetesMembership, MembershipUnavailableError, Role
from hashring.errors import (
    KubernetesAPIError,
    KubernetesPermissionError,
    MembershipError,
    OwnPodNotFoundError,
    PodOwnerError,
    StaleMembershipError,
)
from tests.support.fake_k8s import FakeClock, FakeKubernetes
from tests.support.waiting import eventually

NS = "streaming"
TTL = 5.0
STALE = 30.0


def member_of(fake: FakeKubernetes, clock: FakeClock) -> Callable[..., KubernetesMembership]:
    def make(pod: str, mode: str = "deployment", **kw: Any) -> KubernetesMembership:
        args: dict[str, Any] = {"namespace": NS, "pod_name": pod, "api_client": fake.api_client(),
                                "ttl": TTL, "max_staleness": STALE, "clock": clock,
                                "retry_backoff": 0.01}
        args.update(kw)
        return KubernetesMembership(mode, **args)
    return make


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make(fake_k8s: FakeKubernetes, clock: FakeClock) -> Callable[..., KubernetesMembership]:
    return member_of(fake_k8s, clock)


def test_steady_state_lists_once_per_ttl_and_keeps_version(
        fake_k8s: FakeKubernetes, clock: FakeClock, make: Callable[..., KubernetesMembership]
) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=3)
    m = make(pods[1])
    assert m.members() == tuple(sorted(pods))
    v = m.version
    assert m.target is not None and m.target.selector == "app=orders"
    assert (m.target.replicaset, m.target.deployment) == ("orders-5d8f7c9b6", "orders")
    for _ in range(100):
        assert m.members() == tuple(sorted(pods))
    assert fake_k8s.count("list", "pods") == 1, "within one TTL every read is served from cache"
    for _ in range(5):
        clock.advance(TTL)
        assert m.members() == tuple(sorted(pods))
        assert m.version == v, "same members: the version must not change"
    assert fake_k8s.count("list", "pods") == 6
    # the own pod and its owners are looked up once and cached
    assert fake_k8s.count("get", "pods") == 1
    assert fake_k8s.count("get", "replicasets") == 1
    assert fake_k8s.count("get", "deployments") == 1


def test_scale_out_and_in(fake_k8s: FakeKubernetes, clock: FakeClock,
                          make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=2)
    m = make(pods[0])
    v0 = m.version
    rs = "orders-5d8f7c9b6"
    new = [fake_k8s.add_replicaset_pod(rs, ready=False) for _ in range(2)]
    clock.advance(TTL)
    assert m.members() == tuple(sorted(pods)), "pods that are not Ready are not members"
    assert m.version == v0
    fake_k8s.set_ready(new[0])
    assert m.members() == tuple(sorted(pods)), "cached until the TTL runs out"
    clock.advance(TTL)
    assert m.members() == tuple(sorted([*pods, new[0]]))
    assert m.version == v0 + 1
    fake_k8s.set_ready(new[1])
    clock.advance(TTL)
    assert m.members() == tuple(sorted([*pods, *new]))
    assert m.version == v0 + 2
    # scale in: the pod is terminating (still Ready) and must drop out at once
    fake_k8s.terminate(new[0])
    clock.advance(TTL)
    assert m.members() == tuple(sorted([*pods, new[1]]))
    assert m.version == v0 + 3
    fake_k8s.delete_pod(new[0])
    clock.advance(TTL)
    assert m.members() == tuple(sorted([*pods, new[1]]))
    assert m.version == v0 + 3, "deleting an already-terminating pod changes nothing"


def test_pod_not_ready_and_self_not_ready(fake_k8s: FakeKubernetes, clock: FakeClock,
                                          make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=3)
    fake_k8s.set_ready(pods[2], False)
    me = make(pods[2])
    ring = HashRing(me)
    assert pods[2] not in me.members()
    assert len(me.members()) == 2
    assert not ring.ready
    assert not any(ring.can_acquire_lease("orders-app", f"shardId-{i:012d}") for i in range(50))
    assert ring.role("orders-app", "shardId-000000000001") is Role.NOT_READY
    fake_k8s.set_ready(pods[2], True)
    clock.advance(TTL)
    assert ring.ready
    assert any(ring.can_acquire_lease("orders-app", f"shardId-{i:012d}") for i in range(50))


def test_rolling_update_deployment_mode_shares_one_view(
        fake_k8s: FakeKubernetes, clock: FakeClock, make: Callable[..., KubernetesMembership]
) -> None:
    """maxSurge=1, maxUnavailable=0: each step every live pod sees the same list."""
    old = fake_k8s.add_deployment("orders", replicas=3, template_hash="aaaaaaaaa")
    fake_k8s.add_replicaset("orders", "bbbbbbbbb", replicas=0)
    views: dict[str, KubernetesMembership] = {p: make(p) for p in old}
    rings = {p: HashRing(m) for p, m in views.items()}
    keys = [("orders-app", f"shardId-{i:012d}") for i in range(60)]

    def check_step() -> None:
        clock.advance(TTL)
        lists = {p: m.members() for p, m in views.items() if p in fake_k8s.pod_names()}
        assert len(set(lists.values())) == 1, f"views differ: {lists}"
        for key in keys:
            claimants = [p for p, r in rings.items()
                         if p in fake_k8s.pod_names() and r.can_acquire_lease(*key)]
            assert len(claimants) <= 1, f"{key} claimed by {claimants}"

    for old_pod in old:
        new = fake_k8s.add_replicaset_pod("orders-bbbbbbbbb", ready=False)
        views[new] = make(new)
        rings[new] = HashRing(views[new])
        check_step()
        assert new not in views[new].members()
        fake_k8s.set_ready(new)
        check_step()
        assert set(old) & set(views[new].members()), "the new pod sees the old ones too"
        fake_k8s.terminate(old_pod)
        check_step()
        assert old_pod not in views[new].members()
        fake_k8s.delete_pod(old_pod)
        check_step()
    final = views[fake_k8s.pod_names()[0]].members()
    assert all(p.startswith("orders-bbbbbbbbb-") for p in final) and len(final) == 3


def test_rolling_update_replicaset_mode_first_new_pod_is_alone(
        fake_k8s: FakeKubernetes, make: Callable[..., KubernetesMembership]) -> None:
    """The Knock procedure: the RS selector has pod-template-hash, so views split."""
    old = fake_k8s.add_deployment("orders", replicas=3, template_hash="aaaaaaaaa")
    fake_k8s.add_replicaset("orders", "bbbbbbbbb", replicas=0)
    new = fake_k8s.add_replicaset_pod("orders-bbbbbbbbb", ready=True)
    old_view, new_view = make(old[0], "replicaset"), make(new, "replicaset")
    assert new_view.members() == (new,), "the first new pod sees itself alone"
    assert old_view.members() == tuple(sorted(old))
    assert new_view.target is not None and "pod-template-hash=bbbbbbbbb" in new_view.target.selector
    new_ring, old_rings = HashRing(new_view), [HashRing(make(p, "replicaset")) for p in old]
    keys = [("orders-app", f"shardId-{i:012d}") for i in range(30)]
    assert all(new_ring.can_acquire_lease(*k) for k in keys), "alone, it claims every key"
    double = [k for k in keys if any(r.can_acquire_lease(*k) for r in old_rings)]
    assert len(double) == len(keys), "every key has two claimants during the update"
    # deployment mode on the same cluster: one shared view
    assert make(new).members() == make(old[0]).members() == tuple(sorted([*old, new]))


def test_statefulset_mode_uses_scale_subresource(
        fake_k8s: FakeKubernetes, clock: FakeClock, make: Callable[..., KubernetesMembership]
) -> None:
    pods = fake_k8s.add_statefulset("ledger", replicas=4)
    fake_k8s.add_pod("ledger-canary", {"app": "ledger"})  # matches the selector, not an ordinal
    m = make("ledger-1", "statefulset")
    ring = HashRing(m, strategy="jump")
    assert m.members() == tuple(pods)
    assert m.target is not None and m.target.statefulset == "ledger"
    owners_before = {i: ring.owners("c", f"s{i}")[0] for i in range(40)}
    # scale in to 3: ledger-3 is still Ready (the controller has not touched it yet)
    fake_k8s.scale_statefulset("ledger", 3)
    clock.advance(TTL)
    assert m.members() == ("ledger-0", "ledger-1", "ledger-2")
    owners_after = {i: ring.owners("c", f"s{i}")[0] for i in range(40)}
    moved = {i for i in owners_before if owners_before[i] != owners_after[i]}
    assert moved == {i for i, o in owners_before.items() if o == "ledger-3"}, \
        "jump: only ledger-3's keys move"
    assert fake_k8s.count("get", "statefulsets/scale") == 2  # resolve + the refresh
    assert fake_k8s.count("get", "statefulsets") == 0, "only the scale subresource is read"


def test_label_selector_mode_lists_only(fake_k8s: FakeKubernetes,
                                        make: Callable[..., KubernetesMembership]) -> None:
    a = fake_k8s.add_deployment("orders", replicas=2, template_hash="aaaaaaaaa")
    b = fake_k8s.add_statefulset("other", replicas=1)
    m = make(a[0], "label_selector", label_selector={"app": "orders"})
    assert m.members() == tuple(sorted(a))
    m2 = make(b[0], "label_selector", label_selector="app in (orders, other),!missing")
    assert m2.members() == tuple(sorted([*a, *b]))
    assert {(r.verb, r.resource) for r in fake_k8s.requests} == {("list", "pods")}


def test_deployment_selector_with_match_expressions(
        fake_k8s: FakeKubernetes, make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_deployment(
        "orders", replicas=2,
        selector={"matchLabels": {"app": "orders"},
                  "matchExpressions": [{"key": "pod-template-hash", "operator": "Exists"}]})
    m = make(pods[0])
    assert m.members() == tuple(sorted(pods))
    assert m.target is not None
    assert m.target.selector == "app=orders,pod-template-hash"


@pytest.mark.parametrize(
    ("setup", "mode", "message"),
    [
        ("statefulset", "deployment", "not a ReplicaSet"),
        ("deployment", "statefulset", "not a StatefulSet"),
        ("bare_rs", "deployment", "not a Deployment: use mode='replicaset'"),
    ],
)
def test_wrong_mode_for_the_controller(fake_k8s: FakeKubernetes,
                                       make: Callable[..., KubernetesMembership],
                                       setup: str, mode: str, message: str) -> None:
    if setup == "statefulset":
        pod = fake_k8s.add_statefulset("ledger", replicas=1)[0]
    elif setup == "deployment":
        pod = fake_k8s.add_deployment("orders", replicas=1)[0]
    else:
        pod = fake_k8s.add_replicaset(None, "ccccccccc", replicas=1, app="batch")[0]
    with pytest.raises(PodOwnerError, match=message):
        make(pod, mode).members()


def test_bare_replicaset_works_in_replicaset_mode(
        fake_k8s: FakeKubernetes, make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_replicaset(None, "ccccccccc", replicas=2, app="batch")
    assert make(pods[0], "replicaset").members() == tuple(sorted(pods))


def test_wrong_pod_name_is_a_clear_404(fake_k8s: FakeKubernetes,
                                       make: Callable[..., KubernetesMembership]) -> None:
    fake_k8s.add_deployment("orders", replicas=1)
    with pytest.raises(OwnPodNotFoundError, match="HOSTNAME/POD_NAME is probably wrong") as info:
        make("orders-typo").members()
    assert "'orders-typo'" in str(info.value) and "'streaming'" in str(info.value)


@pytest.mark.parametrize(
    ("verb", "resource", "group"),
    [("list", "pods", ""), ("get", "pods", ""), ("get", "replicasets", "apps"),
     ("get", "deployments", "apps")],
)
def test_forbidden_names_the_missing_rbac_rule(fake_k8s: FakeKubernetes,
                                               make: Callable[..., KubernetesMembership],
                                               verb: str, resource: str, group: str) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=1)
    fake_k8s.forbid(verb, resource)
    with pytest.raises(KubernetesPermissionError) as info:
        make(pods[0]).members()
    msg = str(info.value)
    assert f"lacks RBAC verb {verb!r} on resource {resource!r}" in msg
    assert f'{{apiGroups: ["{group}"], resources: ["{resource}"], verbs: ["{verb}"]}}' in msg
    assert "needs: get pods, list pods, get replicasets (apps), get deployments (apps)" in msg
    assert "cannot " + verb in msg, "the API server's own message is kept"
    assert (info.value.status, info.value.verb, info.value.resource) == (403, verb, resource)
    assert fake_k8s.count(verb, resource) == 1, "403 is not retried"


def test_unauthorized_mentions_the_token(fake_k8s: FakeKubernetes,
                                         make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=1)
    fake_k8s.fail(401)
    with pytest.raises(KubernetesPermissionError, match=r"401 Unauthorized.*token"):
        make(pods[0]).members()


def test_timeouts_are_retried_with_backoff(fake_k8s: FakeKubernetes,
                                           make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=2)
    # urllib3 itself retries a read timeout 3 times; 5 slow answers outlast that, so only
    # our own retry (tenacity) gets the list through. Every other answer (the gets, the
    # list that succeeds) must come within request_timeout: 0.5 s leaves a loaded machine
    # room (0.1 s did not), and the slow ones (1 s) can never make it in time.
    fake_k8s.fail(delay=1.0, times=5, verb="list")
    m = make(pods[0], request_timeout=0.5, retries=3)
    assert m.members() == tuple(sorted(pods))
    lists = [r.status for r in fake_k8s.requests if r.verb == "list"]
    assert lists[:5] == [0] * 5 and lists[-1] == 200


def test_server_errors_are_retried_then_reported(
        fake_k8s: FakeKubernetes, make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=2)
    fake_k8s.fail(503, times=2, verb="list")
    assert make(pods[0], retries=3).members() == tuple(sorted(pods))
    assert fake_k8s.count("list") == 3
    fake_k8s.fail(500, verb="list")
    with pytest.raises(KubernetesAPIError, match="after 2 attempts") as info:
        make(pods[1], retries=2).members()
    assert info.value.status == 500


def test_first_read_failure_raises_and_is_rate_limited(
        fake_k8s: FakeKubernetes, clock: FakeClock, make: Callable[..., KubernetesMembership]
) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=2)
    fake_k8s.fail(503, verb="list")
    m = make(pods[0], retries=1)
    for _ in range(20):
        with pytest.raises(KubernetesAPIError):
            m.members()
    assert fake_k8s.count("list") == 1, "a failing API is asked at most once per TTL"
    fake_k8s.clear_faults()
    clock.advance(TTL)
    assert m.members() == tuple(sorted(pods))


def test_short_outage_serves_stale_and_logs_transitions_once(
        fake_k8s: FakeKubernetes, clock: FakeClock, make: Callable[..., KubernetesMembership],
        caplog: pytest.LogCaptureFixture) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=3)
    m = make(pods[0], retries=2)
    ring = HashRing(m)
    good = m.members()
    v = m.version
    owned = [ring.can_acquire_lease("c", f"s{i}") for i in range(30)]
    caplog.set_level(logging.INFO, logger="hashring.membership")
    fake_k8s.fail(503)
    fake_k8s.terminate(pods[1])  # a change the stale view cannot see
    steps = int((STALE - TTL) / TTL)
    for _ in range(steps):
        clock.advance(TTL)
        for _ in range(50):
            assert m.members() == good, "serves the last good list, never an empty one"
            assert m.version == v
        assert [ring.can_acquire_lease("c", f"s{i}") for i in range(30)] == owned
    assert fake_k8s.count("list") == 1 + 2 * steps, "one refresh attempt (2 tries) per TTL"
    stale_logs = [r for r in caplog.records if "serving the last good member list" in r.message]
    assert len(stale_logs) == 1 and stale_logs[0].levelno == logging.WARNING
    fake_k8s.clear_faults()
    clock.advance(TTL)
    assert m.members() == tuple(sorted(set(pods) - {pods[1]}))
    assert m.version == v + 1
    for _ in range(3):
        clock.advance(TTL)
        m.members()
    recovered = [r for r in caplog.records if "recovered" in r.message]
    assert len(recovered) == 1


def test_long_outage_raises_after_max_staleness_then_recovers(
        fake_k8s: FakeKubernetes, clock: FakeClock, make: Callable[..., KubernetesMembership],
        caplog: pytest.LogCaptureFixture) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=3)
    m = make(pods[0], retries=1)
    ring = HashRing(m)
    assert ring.ready
    caplog.set_level(logging.INFO, logger="hashring.membership")
    fake_k8s.fail(503)
    clock.advance(STALE)
    assert m.members() == tuple(sorted(pods)), "exactly max_staleness old: still served"
    clock.advance(TTL)
    for _ in range(10):
        with pytest.raises(StaleMembershipError) as info:
            m.members()
        with pytest.raises(MembershipUnavailableError):
            ring.can_acquire_lease("c", "s1")
    err = info.value
    assert err.age > STALE and isinstance(err.last_error, KubernetesAPIError)
    assert "over max_staleness=30s" in str(err) and "503" in str(err)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, "one error log per transition, not per call"
    fake_k8s.clear_faults()
    clock.advance(TTL)
    assert m.members() == tuple(sorted(pods))
    assert ring.can_acquire_lease("c", "s1") in (True, False)


def test_forbidden_after_start_serves_stale(fake_k8s: FakeKubernetes, clock: FakeClock,
                                            make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=2)
    m = make(pods[0])
    good = m.members()
    fake_k8s.forbid("list", "pods")
    clock.advance(TTL)
    assert m.members() == good
    clock.advance(STALE)
    with pytest.raises(StaleMembershipError) as info:
        m.members()
    assert isinstance(info.value.last_error, KubernetesPermissionError)


def test_one_refresh_in_flight_however_many_threads(
        fake_k8s: FakeKubernetes, clock: FakeClock, make: Callable[..., KubernetesMembership]
) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=3)
    m = make(pods[0])
    threads_n = 16

    def hammer(results: list[object]) -> None:
        barrier = threading.Barrier(threads_n)

        def run() -> None:
            barrier.wait()
            try:
                results.append(m.members())
            except MembershipError as exc:  # pragma: no cover - reported below
                results.append(exc)

        threads = [threading.Thread(target=run) for _ in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)

    # first read: everyone waits for the one list
    fake_k8s.fail(delay=0.3, times=1, verb="list")
    first: list[object] = []
    hammer(first)
    assert first == [tuple(sorted(pods))] * threads_n
    assert fake_k8s.count("list") == 1
    # expired TTL, slow API: one refresh; the others serve the last list meanwhile
    new = fake_k8s.add_replicaset_pod("orders-5d8f7c9b6", ready=True)
    fake_k8s.fail(delay=0.3, times=1, verb="list")
    clock.advance(TTL)
    second: list[object] = []
    hammer(second)
    assert fake_k8s.count("list") == 2
    assert set(second) <= {tuple(sorted(pods)), tuple(sorted([*pods, new]))}
    assert m.members() == tuple(sorted([*pods, new]))


def test_request_bound_under_load(fake_k8s: FakeKubernetes, clock: FakeClock,
                                  make: Callable[..., KubernetesMembership]) -> None:
    """Many can_acquire_lease callers on many threads: <= 1 list per TTL window."""
    pods = fake_k8s.add_deployment("orders", replicas=5)
    m = make(pods[0])
    rings = [HashRing(m), HashRing(m, replicas=1), HashRing(m, strategy="range")]
    consumers = [f"consumer-{i}" for i in range(10)]
    shards = [f"shardId-{i:012d}" for i in range(10)]
    stop = threading.Event()
    calls = [0] * 8
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        ring = rings[n % len(rings)]
        try:
            while not stop.is_set():
                for c in consumers:
                    for s in shards:
                        ring.can_acquire_lease(c, s)
                        calls[n] += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    windows = 20
    try:
        added = _drive(fake_k8s, clock, m, calls, windows)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not errors
    assert sum(calls) > windows * 200
    elapsed = windows * TTL
    assert windows - 1 <= fake_k8s.count("list", "pods") <= elapsed / TTL + 1
    assert (fake_k8s.count("get", "pods"), fake_k8s.count("get", "replicasets"),
            fake_k8s.count("get", "deployments")) == (1, 1, 1)
    clock.advance(TTL)
    assert added == windows // 5
    assert len(m.members()) == 5 + added, "a refresh after the load sees every pod added"


def _drive(fake: FakeKubernetes, clock: FakeClock, m: KubernetesMembership, calls: list[int],
           windows: int) -> int:
    """Advance the fake clock a quarter TTL at a time, adding a Ready pod every 5 TTLs."""
    added = 0
    for i in range(windows * 4):
        if i % 20 == 10:
            fake.add_replicaset_pod("orders-5d8f7c9b6", ready=True)
            added += 1
        clock.advance(TTL / 4)
        done = sum(calls)
        # pace: 200 more calls, and no step while a due refresh is unfinished
        eventually(lambda done=done: sum(calls) >= done + 200 and (m.age or 0) < TTL,
                   what="callers")
    return added
