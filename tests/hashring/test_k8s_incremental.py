"""Incremental views (one event at a time) agree with a full re-list after any event sequence.

The views are checked directly against a from-scratch computation (hypothesis), then
end to end: a watching membership against a poll-mode one after seeded random churn on
the fake API server.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hashring import KubernetesMembership
from hashring.membership.k8s_members import SortedMembers
from hashring.membership.k8s_pods import member_names
from hashring.membership.k8s_slices import SliceView
from hashring.membership.k8s_view import PodView
from tests.support.fake_k8s import FakeKubernetes
from tests.support.waiting import eventually

NS = "streaming"
NAMES = [f"pod-{i}" for i in range(8)]


def pod(name: str, ready: bool, terminating: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta,
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


pod_events = st.lists(st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
                                st.sampled_from(NAMES), st.booleans(), st.booleans()),
                      max_size=60)


@settings(max_examples=200, deadline=None)
@given(pod_events)
def test_pod_view_matches_a_full_recompute(events: list[tuple[str, str, bool, bool]]) -> None:
    view = PodView()
    pods: dict[str, dict[str, Any]] = {}
    for event, name, ready, terminating in events:
        before = view.members
        version = view.version
        obj = pod(name, ready, terminating)
        if event == "DELETED":
            pods.pop(name, None)
        else:
            pods[name] = obj
        view.apply(event, obj)
        assert view.members == member_names(pods.values())
        assert view.version == version + (view.members != before), "bump exactly on change"
    relisted = PodView()
    relisted.replace(pods.values(), "1")
    assert relisted.members == view.members


@settings(max_examples=100, deadline=None)
@given(pod_events, st.integers(min_value=0, max_value=9))
def test_statefulset_view_matches_a_full_recompute(
        events: list[tuple[str, str, bool, bool]], replicas: int) -> None:
    view = PodView("pod")
    pods: dict[str, dict[str, Any]] = {}
    for event, name, ready, terminating in events:
        obj = pod(name, ready, terminating)
        if event == "DELETED":
            pods.pop(name, None)
        else:
            pods[name] = obj
        view.apply(event, obj)
    view.set_replicas(replicas)
    assert view.members == member_names(pods.values(), statefulset="pod", replicas=replicas)


endpoint = st.tuples(st.sampled_from(NAMES),
                     st.sampled_from([None, True, False]),  # serving
                     st.sampled_from([None, True, False]),  # ready
                     st.sampled_from([None, False, True]))  # terminating
slice_events = st.lists(st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
                                  st.sampled_from(["s-a", "s-b", "s-c"]),
                                  st.lists(endpoint, max_size=6)),
                        max_size=40)


def slice_obj(name: str, endpoints: list[tuple[str, bool | None, bool | None, bool | None]]
              ) -> dict[str, Any]:
    eps = []
    for pod_name, serving, ready, terminating in endpoints:
        conditions = {k: v for k, v in (("serving", serving), ("ready", ready),
                                         ("terminating", terminating)) if v is not None}
        eps.append({"addresses": ["10.0.0.1"], "conditions": conditions,
                    "targetRef": {"kind": "Pod", "name": pod_name}})
    return {"metadata": {"name": name}, "endpoints": eps}


def reference(slices: dict[str, list[tuple[str, bool | None, bool | None, bool | None]]]
              ) -> tuple[str, ...]:
    """The rule, spelled out: serving somewhere (absent = ready, absent = true), never terminating."""
    serving, terminating = set(), set()
    for endpoints in slices.values():
        for name, s, r, t in endpoints:
            if t:
                terminating.add(name)
            elif (s if s is not None else (r if r is not None else True)):
                serving.add(name)
    return tuple(sorted(serving - terminating))


@settings(max_examples=200, deadline=None)
@given(slice_events)
def test_slice_view_matches_a_full_recompute(
        events: list[tuple[str, str, list[tuple[str, bool | None, bool | None, bool | None]]]]
) -> None:
    view = SliceView("svc")
    slices: dict[str, list[tuple[str, bool | None, bool | None, bool | None]]] = {}
    for event, name, endpoints in events:
        before, version = view.members, view.version
        if event == "DELETED":
            slices.pop(name, None)
        else:
            slices[name] = endpoints
        view.apply(event, slice_obj(name, endpoints))
        assert view.members == reference(slices)
        assert view.version == version + (view.members != before), "bump exactly on change"
    relisted = SliceView("svc")
    relisted.replace([slice_obj(n, e) for n, e in slices.items()], "1")
    assert relisted.members == view.members


def test_sorted_members_one_step_per_change() -> None:
    members = SortedMembers()
    with members.begin() as change:
        change.add("b")
        change.add("a")
    assert (members.members, members.version) == (("a", "b"), 1)
    with members.begin() as change:
        change.add("c")
        change.discard("c")  # back where it was
        change.add("a")  # already there
    assert (members.members, members.version) == (("a", "b"), 1)
    with members.begin() as change:
        change.discard("a")
        change.add("a")
        change.discard("a")
    assert (members.members, members.version) == (("b",), 2)
    assert not members.replace(["b"]) and members.version == 2
    assert members.replace(["c", "b", "c"]) and members.members == ("b", "c")
    assert "c" in members and "a" not in members and len(members) == 2


# -- end to end: a watching membership vs a fresh list -----------------------------------------


@pytest.fixture
def made() -> Iterator[list[KubernetesMembership]]:
    created: list[KubernetesMembership] = []
    yield created
    for m in created:
        m.close()


@pytest.mark.parametrize("mode", ["deployment", "endpointslice"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_watch_after_random_churn_equals_a_full_relist(
        fake_k8s: FakeKubernetes, made: list[KubernetesMembership], mode: str, seed: int
) -> None:
    rng = random.Random(seed)
    pods = fake_k8s.add_deployment("orders", replicas=6)
    fake_k8s.add_service("orders", {"app": "orders"}, max_per_slice=3)
    extra: dict[str, Any] = {"service": "orders"} if mode == "endpointslice" else {}
    watching = KubernetesMembership(mode, namespace=NS, pod_name=pods[0], watch=True, ttl=1.0,
                                    api_client=fake_k8s.api_client(), **extra)
    made.append(watching)
    assert watching.members() == tuple(sorted(pods))
    eventually(lambda: fake_k8s.open_watches == 1, what="the watch")
    v0 = watching.version
    live = list(pods)
    changes = 0
    expected = set(pods)
    for _ in range(40):
        op = rng.choice(["add", "ready", "unready", "terminate", "delete", "reslice"])
        if op == "add":
            live.append(fake_k8s.add_replicaset_pod("orders-5d8f7c9b6", ready=rng.random() < 0.5))
        elif op == "reslice" and mode == "endpointslice":
            fake_k8s.reslice("orders", rng.randint(1, 4))
        elif live and op in ("ready", "unready"):
            fake_k8s.set_ready(rng.choice(live), op == "ready")
        elif live and op == "terminate":
            fake_k8s.terminate(rng.choice(live))
        elif live and op == "delete":
            name = rng.choice(live)
            live.remove(name)
            fake_k8s.delete_pod(name)
        now = _members_now(fake_k8s)
        changes += now != expected
        expected = now
    eventually(lambda: set(watching.members()) == expected, what="the watch to catch up")
    # the watching pod itself may be gone by now: list the same pods without resolving it
    extra = extra or {"label_selector": "app=orders"}
    relisted = KubernetesMembership("endpointslice" if mode == "endpointslice" else
                                    "label_selector", namespace=NS, pod_name=pods[0],
                                    api_client=fake_k8s.api_client(), **extra)
    made.append(relisted)
    assert watching.members() == relisted.members() == tuple(sorted(expected))
    assert watching.version == v0 + changes, "one version step per real change, no more"


def _members_now(fake: FakeKubernetes) -> set[str]:
    """Ready, non-terminating pods, from the fake's own objects."""
    from kubernetes import client

    core = client.CoreV1Api(fake.api_client())
    pods = core.api_client.sanitize_for_serialization(
        core.list_namespaced_pod(NS, label_selector="app=orders").items)
    return set(member_names(pods))
