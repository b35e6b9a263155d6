"""examples/k8s: valid manifests, env wiring, and a Role granting exactly what the code calls."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from hashring import KubernetesMembership
from hashring.membership.k8s_api import MODES, permissions
from tests.support.fake_k8s import FakeClock, FakeKubernetes
from tests.support.paths import ROOT
from tests.support.waiting import eventually

EXAMPLES = ROOT / "examples" / "k8s"


def docs() -> list[dict[str, Any]]:
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        with path.open() as f:
            out.extend(d for d in yaml.safe_load_all(f) if d)
    return out


def one(kind: str) -> dict[str, Any]:
    found = [d for d in docs() if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def role_grants() -> set[tuple[str, str, str]]:
    grants = set()
    for rule in one("Role")["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    grants.add((group, resource, verb))
    return grants


def exercise_every_mode(fake: FakeKubernetes) -> None:
    """Run each mode (and watch mode) against the fake cluster the way production does."""
    dep = fake.add_deployment("orders", replicas=2)
    sts = fake.add_statefulset("ledger", replicas=2)
    clock = FakeClock()
    common: dict[str, Any] = {"namespace": fake.namespace, "clock": clock, "ttl": 1.0}
    for mode, pod in (("deployment", dep[0]), ("replicaset", dep[1]), ("statefulset", sts[0])):
        m = KubernetesMembership(mode, pod_name=pod, api_client=fake.api_client(), **common)
        assert m.self_id in m.members()
        clock.advance(1.0)
        assert m.self_id in m.members()
    m = KubernetesMembership("label_selector", pod_name=dep[0], label_selector="app=orders",
                             api_client=fake.api_client(), **common)
    assert m.members() == tuple(sorted(dep))
    with KubernetesMembership("deployment", pod_name=dep[0], api_client=fake.api_client(),
                              watch=True, **common) as watching:
        assert watching.members() == tuple(sorted(dep))
        eventually(lambda: fake.count("watch") >= 1, what="the watch")
    fake.add_service("orders", {"app": "orders"})
    for watch in (False, True):
        with KubernetesMembership("endpointslice", service="orders", pod_name=dep[0],
                                  api_client=fake.api_client(), watch=watch,
                                  **common) as slices:
            assert slices.members() == tuple(sorted(dep))
    eventually(lambda: fake.count("watch", "endpointslices") >= 1, what="the slice watch")


def test_every_manifest_is_valid_yaml_with_names_in_one_namespace() -> None:
    all_docs = docs()
    assert {d["kind"] for d in all_docs} >= {
        "ServiceAccount", "Role", "RoleBinding", "Deployment", "StatefulSet", "Service"}
    for d in all_docs:
        assert d["apiVersion"] and d["metadata"]["name"]
        assert d["metadata"]["namespace"] == "streaming"


def test_role_grants_exactly_what_the_code_calls() -> None:
    with FakeKubernetes(namespace="streaming", rbac_rules=None) as fake:  # record, allow all
        exercise_every_mode(fake)
        used = fake.permissions_used()
    assert used == role_grants(), "the Role must grant exactly the calls the code makes"
    declared = {(group, resource, verb) for mode in MODES
                for verb, resource, group in permissions(mode, watch=True)}
    assert declared == used, "k8s_api.PERMISSIONS documents the calls the code makes"


def test_role_is_least_privilege() -> None:
    role = one("Role")
    assert role["kind"] == "Role", "namespace-scoped, not a ClusterRole"
    assert not any(d["kind"] in ("ClusterRole", "ClusterRoleBinding") for d in docs())
    text = yaml.safe_dump(role["rules"])
    assert "*" not in text
    writes = {"create", "update", "patch", "delete", "deletecollection"}
    assert not {verb for _, _, verb in role_grants()} & writes
    assert ("", "secrets", "get") not in role_grants()


def test_role_binding_ties_the_role_to_the_pods_service_account() -> None:
    sa, role, binding = one("ServiceAccount"), one("Role"), one("RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": sa["metadata"]["namespace"]}]
    for kind in ("Deployment", "StatefulSet"):
        assert one(kind)["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
def test_workloads_wire_pod_name_and_namespace_from_the_downward_api(kind: str) -> None:
    workload = one(kind)
    spec = workload["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    (container,) = spec["template"]["spec"]["containers"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
           for e in container["env"]}
    assert env["POD_NAME"] == "metadata.name"
    assert env["POD_NAMESPACE"] == "metadata.namespace"
    assert "readinessProbe" in container, "Ready decides membership"


def test_deployment_manifest_works_under_its_role(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example Deployment's pods, env set as the downward API would, under the example Role."""
    deployment = one("Deployment")
    namespace = deployment["metadata"]["namespace"]
    rules = one("Role")["rules"]
    with FakeKubernetes(namespace=namespace, rbac_rules=rules) as fake:
        pods = fake.add_deployment(deployment["metadata"]["name"],
                                   replicas=deployment["spec"]["replicas"],
                                   selector=deployment["spec"]["selector"])
        monkeypatch.setenv("POD_NAME", pods[0])
        monkeypatch.setenv("POD_NAMESPACE", namespace)
        m = KubernetesMembership(api_client=fake.api_client())
        assert (m.mode, m.self_id, m.namespace) == ("deployment", pods[0], namespace)
        assert m.members() == tuple(sorted(pods))
        assert {r.status for r in fake.requests} == {200}


def test_service_manifest_is_headless_and_selects_the_workloads_pods() -> None:
    service = one("Service")
    spec = service["spec"]
    assert spec["clusterIP"] == "None", "headless: no virtual IP, no kube-proxy rules"
    assert spec.get("publishNotReadyAddresses", False) is False
    for kind in ("Deployment", "StatefulSet"):
        labels = one(kind)["spec"]["template"]["metadata"]["labels"]
        assert spec["selector"].items() <= labels.items()


def test_endpointslice_mode_works_under_the_role(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example Service over the example Deployment's pods, env as the downward API sets it."""
    deployment, service = one("Deployment"), one("Service")
    namespace = deployment["metadata"]["namespace"]
    with FakeKubernetes(namespace=namespace, rbac_rules=one("Role")["rules"]) as fake:
        pods = fake.add_deployment(deployment["metadata"]["name"],
                                   replicas=deployment["spec"]["replicas"],
                                   selector=deployment["spec"]["selector"])
        fake.add_service(service["metadata"]["name"], service["spec"]["selector"])
        monkeypatch.setenv("POD_NAME", pods[0])
        monkeypatch.setenv("POD_NAMESPACE", namespace)
        with KubernetesMembership("endpointslice", service=service["metadata"]["name"],
                                  api_client=fake.api_client()) as m:
            assert m.members() == tuple(sorted(pods))
        assert {r.status for r in fake.requests} == {200}
        assert {r.resource for r in fake.requests} == {"services", "endpointslices"}, \
            "no pod is read"
