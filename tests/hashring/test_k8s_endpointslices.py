"""KubernetesMembership(mode="endpointslice") against the fake API server and its slice controller.

Poll-mode tests move a FakeClock; watch-mode tests wait on conditions (``eventually``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hashring import HashRing, KubernetesMembership
from hashring.errors import (
    KubernetesConfigurationError,
    KubernetesPermissionError,
    StaleMembershipError,
)
from hashring.membership.k8s_errors import NoEndpointSlicesError, ServiceNotFoundError
from tests.support.fake_k8s import FakeClock, FakeKubernetes
from tests.support.waiting import eventually

NS = "streaming"
TTL = 5.0
RS = "orders-5d8f7c9b6"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def made() -> Iterator[list[KubernetesMembership]]:
    created: list[KubernetesMembership] = []
    yield created
    for m in created:
        m.close()


@pytest.fixture
def make(fake_k8s: FakeKubernetes, clock: FakeClock,
         made: list[KubernetesMembership]) -> Callable[..., KubernetesMembership]:
    def build(pod: str, service: str = "orders", **kw: Any) -> KubernetesMembership:
        args: dict[str, Any] = {"namespace": NS, "pod_name": pod, "service": service,
                                "api_client": fake_k8s.api_client(), "ttl": TTL,
                                "max_staleness": 60.0, "clock": clock, "retry_backoff": 0.01}
        args.update(kw)
        m = KubernetesMembership("endpointslice", **args)
        made.append(m)
        return m
    return build


def fleet(fake: FakeKubernetes, replicas: int = 3, **service: Any) -> list[str]:
    pods = fake.add_deployment("orders", replicas=replicas)
    fake.add_service("orders", {"app": "orders"}, **service)
    return pods


def test_steady_state_reads_slices_only(fake_k8s: FakeKubernetes, clock: FakeClock,
                                        make: Callable[..., KubernetesMembership]) -> None:
    pods = fleet(fake_k8s)
    m = make(pods[0])
    assert m.members() == tuple(sorted(pods))
    assert m.target is not None and m.target.service == "orders"
    assert m.target.selector == "kubernetes.io/service-name=orders"
    v = m.version
    for _ in range(5):
        clock.advance(TTL)
        assert m.members() == tuple(sorted(pods))
    assert m.version == v
    assert fake_k8s.count("get", "services") == 1, "the Service is read once"
    assert fake_k8s.count("list", "endpointslices") == 6
    assert fake_k8s.count(resource="pods") == 0, "no pod is ever read"
    listed = fake_k8s.matching("list", "endpointslices")[0]
    assert listed.query["labelSelector"] == "kubernetes.io/service-name=orders"
    assert listed.query["resourceVersion"] == "0" and listed.query["limit"] == "500"


def test_scale_out_not_ready_terminating_and_scale_in(
        fake_k8s: FakeKubernetes, clock: FakeClock, make: Callable[..., KubernetesMembership]
) -> None:
    pods = fleet(fake_k8s, replicas=2)
    m = make(pods[0])
    v0 = m.version
    new = fake_k8s.add_replicaset_pod(RS, ready=False)
    clock.advance(TTL)
    assert m.members() == tuple(sorted(pods)) and m.version == v0, "not Ready: not a member"
    fake_k8s.set_ready(new)
    clock.advance(TTL)
    assert m.members() == tuple(sorted([*pods, new])) and m.version == v0 + 1
    fake_k8s.set_ready(pods[1], False)
    clock.advance(TTL)
    assert m.members() == tuple(sorted([pods[0], new])) and m.version == v0 + 2
    fake_k8s.set_ready(pods[1], True)
    fake_k8s.terminate(new)  # still Ready, but terminating: drops out at once
    clock.advance(TTL)
    assert m.members() == tuple(sorted(pods)) and m.version == v0 + 3, "one refresh, one step"
    fake_k8s.delete_pod(new)
    clock.advance(TTL)
    assert m.members() == tuple(sorted(pods)) and m.version == v0 + 3


def test_publish_not_ready_addresses_still_reads_readiness(
        fake_k8s: FakeKubernetes, make: Callable[..., KubernetesMembership]) -> None:
    pods = fleet(fake_k8s, publish_not_ready=True)
    fake_k8s.set_ready(pods[1], False)
    fake_k8s.terminate(pods[2])
    (slice_,) = fake_k8s.endpoint_slices("orders")
    conditions = {e["targetRef"]["name"]: e["conditions"] for e in slice_["endpoints"]}
    assert all(c["ready"] for c in conditions.values()), "ready is forced on by the Service"
    assert not conditions[pods[1]]["serving"] and conditions[pods[2]]["terminating"]
    assert make(pods[0]).members() == (pods[0],)


def test_split_slices_and_repacking_change_nothing(
        fake_k8s: FakeKubernetes, clock: FakeClock, make: Callable[..., KubernetesMembership]
) -> None:
    pods = fleet(fake_k8s, replicas=7, max_per_slice=2)
    assert len(fake_k8s.endpoint_slices("orders")) == 4
    m = make(pods[0], page_size=2)  # slices come in pages too
    assert m.members() == tuple(sorted(pods))
    v = m.version
    fake_k8s.reslice("orders", 5)  # merge: 2 slices of 5 and 2
    clock.advance(TTL)
    assert len(fake_k8s.endpoint_slices("orders")) == 2
    assert m.members() == tuple(sorted(pods)) and m.version == v
    fake_k8s.reslice("orders", 1)  # split: one slice per endpoint
    clock.advance(TTL)
    assert m.members() == tuple(sorted(pods)) and m.version == v


def test_an_endpoint_in_two_slices_counts_once(
        fake_k8s: FakeKubernetes, make: Callable[..., KubernetesMembership]) -> None:
    pods = fleet(fake_k8s)
    (managed,) = fake_k8s.endpoint_slices("orders")
    copy_ = {"metadata": {"name": "orders-copy", "labels": managed["metadata"]["labels"]},
             "addressType": "IPv6", "endpoints": managed["endpoints"]}
    fake_k8s.put_endpoint_slice(copy_)  # e.g. the IPv6 slice of a dual-stack Service
    m = make(pods[0])
    assert m.members() == tuple(sorted(pods))


def test_hostname_names_endpoints_without_a_pod_reference(
        fake_k8s: FakeKubernetes, make: Callable[..., KubernetesMembership]) -> None:
    fake_k8s.add_service("external", None)  # no selector: slices written by someone else
    fake_k8s.put_endpoint_slice({
        "metadata": {"name": "external-1", "labels": {"kubernetes.io/service-name": "external"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.1.0.1"], "hostname": "worker-a",
                       "conditions": {"ready": True}},
                      {"addresses": ["10.1.0.2"], "hostname": "worker-b",
                       "conditions": {"serving": False}},
                      {"addresses": ["10.1.0.3"], "hostname": "worker-c"}]})
    assert make("worker-a", service="external").members() == ("worker-a", "worker-c")


def test_malformed_slices_are_skipped_and_logged_once(
        fake_k8s: FakeKubernetes, clock: FakeClock, make: Callable[..., KubernetesMembership],
        caplog: pytest.LogCaptureFixture) -> None:
    pods = fleet(fake_k8s)
    labels = {"kubernetes.io/service-name": "orders"}
    fake_k8s.put_endpoint_slice({"metadata": {"name": "orders-bad1", "labels": labels},
                                 "endpoints": {"not": "a list"}})
    fake_k8s.put_endpoint_slice({"metadata": {"name": "orders-bad2", "labels": labels},
                                 "endpoints": [
                                     "garbage",
                                     {"addresses": ["10.9.9.9"]},  # names no pod
                                     {"targetRef": {"kind": "Pod", "name": "orders-extra"},
                                      "conditions": {"serving": "yes"}},
                                     {"targetRef": {"kind": "Pod", "name": "orders-fine"},
                                      "conditions": {"serving": True, "terminating": False}}]})
    caplog.set_level(logging.WARNING, logger="hashring.membership")
    m = make(pods[0])
    assert m.members() == tuple(sorted([*pods, "orders-fine"]))
    for _ in range(3):
        clock.advance(TTL)
        m.members()
    warnings = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(warnings) == 4, warnings
    assert any("orders-bad1: endpoints is dict, not a list" in w for w in warnings)
    assert any("endpoints[0]" in w and "not an object" in w for w in warnings)
    assert any("neither targetRef" in w for w in warnings)
    assert any("conditions.serving is 'yes'" in w for w in warnings)


def test_missing_service_is_named(fake_k8s: FakeKubernetes,
                                  make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=1)
    with pytest.raises(ServiceNotFoundError, match="Service 'orders' not found in namespace "
                       "'streaming'") as info:
        make(pods[0]).members()
    assert "examples/k8s/service.yaml" in str(info.value)


def test_service_without_slices_is_named(fake_k8s: FakeKubernetes,
                                         make: Callable[..., KubernetesMembership]) -> None:
    fake_k8s.add_service("orders", None)
    with pytest.raises(NoEndpointSlicesError, match="has no EndpointSlices") as info:
        make("orders-x").members()
    assert "selector" in str(info.value)


def test_deleted_service_serves_stale_then_names_it(
        fake_k8s: FakeKubernetes, clock: FakeClock, make: Callable[..., KubernetesMembership]
) -> None:
    pods = fleet(fake_k8s)
    m = make(pods[0], max_staleness=10.0)
    good = m.members()
    fake_k8s.delete_service("orders")
    clock.advance(TTL)
    assert m.members() == good, "the last good list, never an empty one"
    clock.advance(2 * TTL)
    with pytest.raises(StaleMembershipError) as info:
        m.members()
    assert isinstance(info.value.last_error, ServiceNotFoundError)


@pytest.mark.parametrize(("verb", "resource", "group"),
                         [("get", "services", ""), ("list", "endpointslices", "discovery.k8s.io")])
def test_forbidden_names_the_missing_rule(fake_k8s: FakeKubernetes,
                                          make: Callable[..., KubernetesMembership],
                                          verb: str, resource: str, group: str) -> None:
    pods = fleet(fake_k8s)
    fake_k8s.forbid(verb, resource)
    with pytest.raises(KubernetesPermissionError) as info:
        make(pods[0]).members()
    msg = str(info.value)
    assert f'{{apiGroups: ["{group}"], resources: ["{resource}"], verbs: ["{verb}"]}}' in msg
    assert "needs: get services, list endpointslices (discovery.k8s.io)" in msg


@pytest.mark.parametrize(("kw", "message"), [
    ({"service": None}, "needs service="),
    ({"service": "  "}, "needs service="),
    ({"service": "Orders_Consumer"}, "is not a Service name"),
    ({"label_selector": "app=x"}, "label_selector is only used with mode='label_selector'"),
])
def test_bad_arguments_are_named(fake_k8s: FakeKubernetes, kw: dict[str, Any],
                                 message: str) -> None:
    args: dict[str, Any] = {"namespace": NS, "pod_name": "p", "service": "orders",
                            "api_client": fake_k8s.api_client()}
    args.update(kw)
    with pytest.raises(KubernetesConfigurationError, match=message):
        KubernetesMembership("endpointslice", **args)
    with pytest.raises(KubernetesConfigurationError, match="service is only used with"):
        KubernetesMembership("deployment", namespace=NS, pod_name="p", service="orders",
                             api_client=fake_k8s.api_client())


# -- watch mode --------------------------------------------------------------------------------


def test_watch_follows_a_rolling_update(fake_k8s: FakeKubernetes,
                                        make: Callable[..., KubernetesMembership]) -> None:
    old = fake_k8s.add_deployment("orders", replicas=3, template_hash="aaaaaaaaa")
    fake_k8s.add_replicaset("orders", "bbbbbbbbb", replicas=0)
    fake_k8s.add_service("orders", {"app": "orders"}, max_per_slice=2)
    m = make(old[0], watch=True, ttl=1.0)
    ring = HashRing(m)
    assert m.members() == tuple(sorted(old))
    eventually(lambda: fake_k8s.open_watches == 1, what="the slice watch")
    watch = fake_k8s.matching("watch", "endpointslices")[0]
    assert watch.query["allowWatchBookmarks"].lower() == "true"
    v = m.version
    expected = set(old)
    for i, old_pod in enumerate(old):
        new = fake_k8s.add_replicaset_pod("orders-bbbbbbbbb", ready=False)
        fake_k8s.set_ready(new)
        expected.add(new)
        eventually(lambda: set(m.members()) == expected, what=f"new pod {i}")
        fake_k8s.terminate(old_pod)
        expected.discard(old_pod)
        eventually(lambda: set(m.members()) == expected, what=f"old pod {i} to leave")
        fake_k8s.delete_pod(old_pod)
    eventually(lambda: len(fake_k8s.endpoint_slices("orders")) >= 2, what="slices")
    assert m.version == v + 6, "one step per join and per leave"
    assert all(p.startswith("orders-bbbbbbbbb-") for p in m.members())
    assert ring.owners("c", "s")[0] in m.members()
    assert fake_k8s.count("list") == 1, "events only after the first list"


def test_watch_repacking_never_changes_the_members(
        fake_k8s: FakeKubernetes, make: Callable[..., KubernetesMembership]) -> None:
    pods = fleet(fake_k8s, replicas=6, max_per_slice=2)
    m = make(pods[0], watch=True, ttl=1.0)
    assert m.members() == tuple(sorted(pods))
    v = m.version
    eventually(lambda: fake_k8s.open_watches == 1, what="the slice watch")
    versions: set[int] = set()
    new = fake_k8s.reslice("orders", 4)
    fake_k8s.set_ready(pods[1], False)  # a real change after the repack, as a marker
    eventually(lambda: versions.add(m.version) or pods[1] not in m.members(),
               what="the marker change")
    assert m.version == v + 1, "the repack (duplicates, then deletions) changed nothing"
    assert len(new) == 2


def test_watch_survives_malformed_events(fake_k8s: FakeKubernetes,
                                         make: Callable[..., KubernetesMembership],
                                         caplog: pytest.LogCaptureFixture) -> None:
    pods = fleet(fake_k8s)
    m = make(pods[0], watch=True, ttl=1.0)
    assert m.members() == tuple(sorted(pods))
    eventually(lambda: fake_k8s.open_watches == 1, what="the slice watch")
    caplog.set_level(logging.WARNING, logger="hashring.membership")
    labels = {"kubernetes.io/service-name": "orders"}
    fake_k8s.put_endpoint_slice({"metadata": {"labels": labels}, "endpoints": []})  # no name
    fake_k8s.put_endpoint_slice({"metadata": {"name": "orders-odd", "labels": labels},
                                 "endpoints": 7})
    new = fake_k8s.add_replicaset_pod(RS, ready=True)
    eventually(lambda: new in m.members(), what="events after the malformed ones")
    assert sum("skipped" in r.getMessage() for r in caplog.records) == 2


def test_watch_relists_after_410(fake_k8s: FakeKubernetes,
                                 make: Callable[..., KubernetesMembership]) -> None:
    pods = fleet(fake_k8s)
    m = make(pods[0], watch=True, ttl=0.2)
    assert m.members() == tuple(sorted(pods))
    eventually(lambda: fake_k8s.open_watches == 1, what="the slice watch")
    fake_k8s.expire_watches()
    new = fake_k8s.add_replicaset_pod(RS, ready=True)
    eventually(lambda: fake_k8s.count("list", "endpointslices") == 2, what="a re-list")
    eventually(lambda: new in m.members(), what="the re-listed state")


def test_watch_forbidden_names_the_watch_rule(
        fake_k8s: FakeKubernetes, make: Callable[..., KubernetesMembership]) -> None:
    pods = fleet(fake_k8s)
    fake_k8s.forbid("watch", "endpointslices")
    clock = FakeClock()
    m = make(pods[0], watch=True, clock=clock, ttl=1.0, max_staleness=5.0)
    assert m.members() == tuple(sorted(pods))
    eventually(lambda: fake_k8s.count("watch") >= 2, what="a refused watch, then a retry")
    clock.advance(6.0)
    with pytest.raises(StaleMembershipError) as info:
        m.members()
    assert "lacks RBAC verb 'watch' on resource 'endpointslices'" in str(info.value.last_error)


def test_watch_sees_the_service_go_and_warns_once(
        fake_k8s: FakeKubernetes, make: Callable[..., KubernetesMembership],
        caplog: pytest.LogCaptureFixture) -> None:
    pods = fleet(fake_k8s)
    m = make(pods[0], watch=True, ttl=1.0)
    assert m.members() == tuple(sorted(pods))
    eventually(lambda: fake_k8s.open_watches == 1, what="the slice watch")
    caplog.set_level(logging.WARNING, logger="hashring.membership")
    fake_k8s.delete_service("orders")
    eventually(lambda: m.members() == (), what="no members without slices")
    assert HashRing(m).ready is False, "this pod is not listed: it takes nothing"
    gone = [r for r in caplog.records if "has no EndpointSlices any more" in r.getMessage()]
    assert len(gone) == 1
    fake_k8s.add_service("orders", {"app": "orders"})
    eventually(lambda: m.members() == tuple(sorted(pods)), what="the Service back")
