"""Paginated, cache-served, compressed lists: what the client sends and how the fake answers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from hashring import KubernetesMembership
from hashring.errors import KubernetesAPIError, KubernetesConfigurationError
from tests.support.fake_k8s import FakeClock, FakeKubernetes

NS = "streaming"
TTL = 5.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make(fake_k8s: FakeKubernetes, clock: FakeClock) -> Callable[..., KubernetesMembership]:
    def build(pod: str, mode: str = "deployment", **kw: Any) -> KubernetesMembership:
        args: dict[str, Any] = {"namespace": NS, "pod_name": pod, "api_client": fake_k8s.api_client(),
                                "ttl": TTL, "max_staleness": 60.0, "clock": clock,
                                "retry_backoff": 0.01}
        args.update(kw)
        return KubernetesMembership(mode, **args)
    return build


def test_poll_lists_in_pages_from_the_watch_cache(
        fake_k8s: FakeKubernetes, clock: FakeClock, make: Callable[..., KubernetesMembership]
) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=25)
    m = make(pods[0], page_size=10)
    assert m.members() == tuple(sorted(pods))
    lists = fake_k8s.matching("list", "pods")
    assert [r.status for r in lists] == [200, 200, 200]
    first, *rest = lists
    assert first.query["limit"] == "10"
    assert first.query["resourceVersion"] == "0", "served from the watch cache, not etcd"
    assert first.query["resourceVersionMatch"] == "NotOlderThan"
    assert "continue" not in first.query
    for page in rest:
        assert page.query["limit"] == "10" and page.query["continue"]
        assert "resourceVersion" not in page.query, "the token pins the snapshot"
        assert page.query["labelSelector"] == "app=orders"
    assert rest[0].query["continue"] != rest[1].query["continue"]
    assert m.api.stats.page_sizes == [10, 10, 5]
    clock.advance(TTL)
    assert m.members() == tuple(sorted(pods))
    assert fake_k8s.count("list", "pods") == 6


def test_pages_come_from_one_snapshot(fake_k8s: FakeKubernetes) -> None:
    """Pods added between two pages are not in that list (a consistent snapshot)."""
    pods = fake_k8s.add_deployment("orders", replicas=6)
    core = _core(fake_k8s)
    page = core.list_namespaced_pod(NS, label_selector="app=orders", limit=4,
                                    resource_version="0", resource_version_match="NotOlderThan")
    late = fake_k8s.add_replicaset_pod("orders-5d8f7c9b6", ready=True)
    rest = core.list_namespaced_pod(NS, label_selector="app=orders", limit=4,
                                    _continue=page.metadata._continue)
    names = [p.metadata.name for p in page.items + rest.items]
    assert names == sorted(pods) and late not in names
    assert rest.metadata.resource_version == page.metadata.resource_version
    assert rest.metadata._continue is None
    assert page.metadata.remaining_item_count == 2


def test_the_fake_answers_like_an_api_server(fake_k8s: FakeKubernetes) -> None:
    fake_k8s.add_deployment("orders", replicas=6)
    core = _core(fake_k8s)
    page = core.list_namespaced_pod(NS, limit=2, resource_version="0")
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_pod(NS, limit=2, _continue=page.metadata._continue,
                                 resource_version="105")
    assert bad.value.status == 400 and "not allowed when using continue" in str(bad.value.body)
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_pod(NS, resource_version_match="NotOlderThan")
    assert bad.value.status == 400
    fake_k8s.expire_continue_tokens()
    with pytest.raises(ApiException) as gone:
        core.list_namespaced_pod(NS, limit=2, _continue=page.metadata._continue)
    assert gone.value.status == 410 and "too old" in str(gone.value.body)


def test_older_api_servers_ignore_limit_for_resource_version_0(
        make: Callable[..., KubernetesMembership]) -> None:
    with FakeKubernetes(NS, legacy_watch_cache=True) as fake:
        pods = fake.add_deployment("orders", replicas=25)
        m = make(pods[0], page_size=10, api_client=fake.api_client())
        assert m.members() == tuple(sorted(pods))
        (only,) = fake.matching("list", "pods")
        assert only.query["limit"] == "10" and only.query["resourceVersion"] == "0"
        assert m.api.stats.page_sizes == [25], "one full page, no continue token"


def test_expired_continue_token_lists_again_from_scratch(
        fake_k8s: FakeKubernetes, make: Callable[..., KubernetesMembership],
        caplog: pytest.LogCaptureFixture) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=25)
    fake_k8s.fail(410, times=1, verb="list", query_has="continue")
    m = make(pods[0], page_size=10)
    caplog.set_level("INFO", logger="hashring.membership")
    assert m.members() == tuple(sorted(pods))
    seen = [("continue" in r.query, r.status) for r in fake_k8s.matching("list", "pods")]
    assert seen == [(False, 200), (True, 410), (False, 200), (True, 200), (True, 200)]
    assert m.api.stats.restarts == 1
    assert any("continue token expired" in r.message for r in caplog.records)


def test_continue_tokens_that_keep_expiring_fail_clearly(
        fake_k8s: FakeKubernetes, make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=25)
    fake_k8s.fail(410, verb="list", query_has="continue")
    with pytest.raises(KubernetesAPIError, match="continue token expired 4 times") as info:
        make(pods[0], page_size=10).members()
    assert "Raise page_size" in str(info.value)
    assert fake_k8s.count("list", "pods") == 8


def test_large_lists_come_gzipped(make: Callable[..., KubernetesMembership]) -> None:
    with FakeKubernetes(NS, realistic_pods=True) as fake:
        pods = fake.add_deployment("orders", replicas=60)
        m = make(pods[0], page_size=500, api_client=fake.api_client())
        assert m.members() == tuple(sorted(pods))
        (listed,) = fake.matching("list", "pods")
        assert listed.gzip
        stats = m.api.stats
        assert stats.json_bytes > 128 * 1024, "over the API server's compression threshold"
        assert stats.wire_bytes == listed.bytes < stats.json_bytes / 5
        plain = make(pods[0], compress=False, api_client=fake.api_client())
        assert plain.members() == tuple(sorted(pods))
        last = fake.matching("list", "pods")[-1]
        assert not last.gzip and last.bytes == plain.api.stats.json_bytes


def test_page_size_none_is_one_unpaginated_quorum_list(
        fake_k8s: FakeKubernetes, make: Callable[..., KubernetesMembership]) -> None:
    pods = fake_k8s.add_deployment("orders", replicas=25)
    assert make(pods[0], page_size=None).members() == tuple(sorted(pods))
    (only,) = fake_k8s.matching("list", "pods")
    assert set(only.query) == {"labelSelector"}


@pytest.mark.parametrize("bad", [0, -5, 2.5, True, "100"])
def test_bad_page_size_is_named(fake_k8s: FakeKubernetes,
                                make: Callable[..., KubernetesMembership], bad: object) -> None:
    with pytest.raises(KubernetesConfigurationError, match="page_size must be an int >= 1"):
        make("orders-x", page_size=bad)


def _core(fake: FakeKubernetes) -> Any:
    from kubernetes import client

    return client.CoreV1Api(fake.api_client())
