"""KubernetesMembership(watch=True): list, then watch; bookmarks, 410 Gone, reconnects.

Watch streams run in real time, so these tests wait on conditions with deadlines
(``eventually``); the TTL and staleness clock is a FakeClock where time must not matter.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hashring import HashRing, KubernetesMembership
from hashring.errors import KubernetesPermissionError, StaleMembershipError
from tests.support.fake_k8s import FakeClock, FakeKubernetes
from tests.support.waiting import eventually

NS = "streaming"


@pytest.fixture
def made() -> Iterator[list[KubernetesMembership]]:
    created: list[KubernetesMembership] = []
    yield created
    for m in created:
        m.close()


@pytest.fixture
def make(fake_k8s: FakeKubernetes,
         made: list[KubernetesMembership]) -> Callable[..., KubernetesMembership]:
    def build(pod: str, mode: str = "deployment", **kw: Any) -> KubernetesMembership:
        args: dict[str, Any] = {"namespace": NS, "pod_name": pod, "api_client": fake_k8s.api_client(),
                                "watch": True, "ttl": 1.0, "max_staleness": 60.0,
                                "retry_backoff": 0.05}
        args.update(kw)
        m = KubernetesMembership(mode, **args)
        made.append(m)
        return m
    return build


def test_watch_follows_events_without_polling(fake_k8s: FakeKubernetes,
                                              make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=3)
    clock = FakeClock()
    m = make(pods[0], clock=clock)
    ring = HashRing(m)
    assert m.members() == tuple(sorted(pods))
    v = m.version
    eventually(lambda: fake_k8s.count("watch") == 1, what="the watch to open")
    watch = next(r for r in fake_k8s.requests if r.verb == "watch")
    list_rv = next(r for r in fake_k8s.requests if r.verb == "list")
    assert watch.query["watch"] in ("true", "True")
    assert watch.query["allowWatchBookmarks"].lower() == "true"
    assert watch.query["labelSelector"] == "app=orders" == list_rv.query["labelSelector"]
    assert int(watch.query["resourceVersion"]) >= 100

    new = fake_k8s.add_replicaset_pod("orders-5d8f7c9b6", ready=False)
    fake_k8s.set_ready(new)
    eventually(lambda: new in m.members(), what="the new pod to join")
    assert m.version == v + 1, "not-Ready ADDED then Ready MODIFIED: one member change"
    fake_k8s.terminate(pods[1])
    eventually(lambda: pods[1] not in m.members(), what="the terminating pod to leave")
    assert m.version == v + 2
    fake_k8s.delete_pod(pods[1])
    fake_k8s.set_ready(pods[2], False)
    eventually(lambda: pods[2] not in m.members(), what="the unready pod to leave")
    assert m.version == v + 3
    assert m.members() == tuple(sorted([pods[0], new]))
    assert ring.owners("c", "s")[0] in m.members()
    # reads never touch the API: no list however often or late they come
    for _ in range(5):
        clock.advance(1.0)
        for _ in range(200):
            ring.can_acquire_lease("c", "s")
    assert fake_k8s.count("list") == 1
    assert fake_k8s.count("watch") == 1


def test_watch_relists_after_410_gone(fake_k8s: FakeKubernetes,
                                      make: Callable[..., KubernetesMembership],
                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hashring.membership")
    pods = fake_k8s.add_deployment("orders", replicas=3)
    m = make(pods[0], ttl=0.2, max_staleness=30.0)
    assert m.members() == tuple(sorted(pods))
    eventually(lambda: fake_k8s.open_watches == 1, what="the watch to open")
    fake_k8s.expire_watches()  # open watch gets ERROR 410; its resourceVersion is now too old
    new = fake_k8s.add_replicaset_pod("orders-5d8f7c9b6", ready=True)
    fake_k8s.terminate(pods[2])
    eventually(lambda: fake_k8s.count("list") == 2, what="a re-list")
    eventually(lambda: m.members() == tuple(sorted([pods[0], pods[1], new])),
               what="the re-listed state")
    assert any("410 Gone" in r.message for r in caplog.records)
    eventually(lambda: fake_k8s.count("watch") >= 2, what="the watch to resume")
    watches = [r for r in fake_k8s.requests if r.verb == "watch"]
    assert int(watches[1].query["resourceVersion"]) > int(watches[0].query["resourceVersion"])
    # a change after the re-list arrives through the new watch, without another list
    fake_k8s.terminate(pods[1])
    eventually(lambda: pods[1] not in m.members(), what="the event on the new watch")
    assert fake_k8s.count("list") == 2


def test_watch_resumes_from_bookmarks(fake_k8s: FakeKubernetes,
                                      make: Callable[..., KubernetesMembership]) -> None:
    fake_k8s.bookmark_interval = 0.1
    pods = fake_k8s.add_deployment("orders", replicas=2)
    # max_staleness 2 s: the server ends each watch after 1 s. Staleness is judged on a
    # FakeClock, so a loaded machine's slow reconnect cannot make members() fail.
    m = make(pods[0], clock=FakeClock(), ttl=1.0, max_staleness=2.0)
    assert m.members() == tuple(sorted(pods))
    eventually(lambda: fake_k8s.open_watches == 1, what="the watch to open")
    first_rv = int(next(r for r in fake_k8s.requests if r.verb == "watch").query["resourceVersion"])
    # pods of another app move the resourceVersion without events for this selector;
    # only a BOOKMARK can tell the watcher about it
    fake_k8s.add_statefulset("unrelated", replicas=2)
    latest = fake_k8s.resource_version
    assert latest > first_rv

    def resumed_past_latest() -> bool:
        # the watch that was open may end before it sends a bookmark (if this thread was slow
        # to get here): then a later watch gets one; each one resumes from where the last ended
        rvs = [int(r.query["resourceVersion"]) for r in fake_k8s.requests if r.verb == "watch"]
        return any(rv >= latest for rv in rvs[1:])

    eventually(resumed_past_latest, timeout=20, what="a watch resumed from a bookmark's resourceVersion")
    assert fake_k8s.count("watch") >= 2
    assert fake_k8s.count("list") == 1, "a server-ended watch resumes, it does not re-list"
    assert m.members() == tuple(sorted(pods))


def test_watch_reconnects_with_backoff(fake_k8s: FakeKubernetes,
                                       make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=2)
    fake_k8s.fail(503, verb="watch", times=3)
    m = make(pods[0])
    assert m.members() == tuple(sorted(pods))
    new = fake_k8s.add_replicaset_pod("orders-5d8f7c9b6", ready=True)
    eventually(lambda: new in m.members(), what="the event after reconnecting")
    statuses = [r.status for r in fake_k8s.requests if r.verb == "watch"]
    assert statuses[:4] == [503, 503, 503, 200]
    assert fake_k8s.count("list") == 1, "reconnects resume from the resourceVersion"


def test_watch_outage_longer_than_max_staleness(
        fake_k8s: FakeKubernetes, make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=2)
    m = make(pods[0], ttl=0.5, max_staleness=2.0)
    assert m.members() == tuple(sorted(pods))
    fake_k8s.fail(503)
    fake_k8s.expire_watches()  # drop the open watch: every reconnect now fails

    def raises_stale() -> bool:
        try:
            members = m.members()
        except StaleMembershipError:
            return True
        assert members == tuple(sorted(pods)), "stale data, never an empty list"
        return False

    eventually(raises_stale, timeout=10, what="StaleMembershipError")
    fake_k8s.clear_faults()
    eventually(lambda: not raises_stale(), timeout=10, what="recovery")
    new = fake_k8s.add_replicaset_pod("orders-5d8f7c9b6", ready=True)
    eventually(lambda: new in m.members(), what="events after recovery")


def test_watch_forbidden_names_the_watch_verb(fake_k8s: FakeKubernetes,
                                              make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=2)
    fake_k8s.forbid("watch", "pods")
    clock = FakeClock()
    m = make(pods[0], clock=clock, ttl=1.0, max_staleness=5.0)
    assert m.members() == tuple(sorted(pods))
    eventually(lambda: fake_k8s.count("watch") >= 2, what="a refused watch, then a retry")
    clock.advance(6.0)
    with pytest.raises(StaleMembershipError) as info:
        m.members()
    err = info.value.last_error
    assert isinstance(err, KubernetesPermissionError)
    assert "lacks RBAC verb 'watch' on resource 'pods'" in str(err)
    assert "list pods, get replicasets (apps), get deployments (apps), watch pods" in str(err)


def test_statefulset_watch_reads_scale_once_per_ttl(
        fake_k8s: FakeKubernetes, make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_statefulset("ledger", replicas=3)
    clock = FakeClock()
    m = make("ledger-0", "statefulset", clock=clock, ttl=1.0, max_staleness=60.0)
    assert m.members() == tuple(pods)
    fake_k8s.add_pod("ledger-3", {"app": "ledger"}, owner=("StatefulSet", "ledger"))
    fake_k8s.scale_statefulset("ledger", 4)
    eventually(lambda: "ledger-3" in fake_k8s.pod_names(), what="the pod")
    clock.advance(1.0)
    eventually(lambda: m.members() == ("ledger-0", "ledger-1", "ledger-2", "ledger-3"),
               what="scale-out through the watch and the scale")
    scale_reads = fake_k8s.count("get", "statefulsets/scale")
    for _ in range(100):
        m.members()
    assert fake_k8s.count("get", "statefulsets/scale") == scale_reads, "cached for one TTL"
    fake_k8s.scale_statefulset("ledger", 2)
    clock.advance(1.0)
    assert m.members() == ("ledger-0", "ledger-1"), "scale-in drops ordinals >= replicas"
    assert fake_k8s.count("list") == 1


def test_close_stops_the_watch(fake_k8s: FakeKubernetes,
                               make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=1)
    before = set(threading.enumerate())
    m = make(pods[0])
    m.members()
    eventually(lambda: fake_k8s.open_watches == 1, what="the watch to open")
    watch_threads = [t for t in set(threading.enumerate()) - before
                     if t.name == "hashring-k8s-watch"]
    assert len(watch_threads) == 1
    m.close()
    eventually(lambda: fake_k8s.open_watches == 0, what="the watch to close")
    eventually(lambda: not any(t.is_alive() for t in watch_threads), what="the thread to end")
    with pytest.raises(Exception, match="closed"):
        m.members()


def test_close_during_the_watch_request_still_closes_it(
        fake_k8s: FakeKubernetes, make: Callable[..., KubernetesMembership]) -> None:
    """close() while the watch request is in flight (no response object yet) still ends it."""
    pods = fake_k8s.add_deployment("orders", replicas=1)
    # headers come 2 s late: time enough for this thread to reach close() first even on a
    # loaded machine (0.5 s was not), and still far from the watch's 30 s timeout
    fake_k8s.fail(None, delay=2.0, verb="watch", times=1)
    m = make(pods[0])  # watch timeout_seconds is 30: the old stop() waited for that
    m.members()
    eventually(lambda: fake_k8s.count("watch") == 1, what="the watch request to arrive")
    assert fake_k8s.open_watches == 0, "the server is still holding the headers back"
    m.close()
    eventually(lambda: fake_k8s.open_watches == 0 and fake_k8s.count("watch") == 1,
               what="the late watch to be closed, not followed by another")
    assert not any(t.name == "hashring-k8s-watch" and t.is_alive() for t in threading.enumerate())
