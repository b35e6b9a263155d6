"""KubernetesMembership without an API server: argument checks, config sources, pod rules."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kubernetes import client

import hashring
from hashring import ConfigurationError, KubernetesMembership
from hashring.errors import KubernetesConfigurationError, KubernetesNotInstalledError
from hashring.membership import k8s_config
from hashring.membership.k8s_pods import (
    controller_of,
    is_member,
    member_names,
    selector_string,
    statefulset_ordinal,
)
from tests.support.paths import ROOT


def pod(name: str, ready: bool = True, deleting: bool = False,
        conditions: bool = True) -> dict[str, object]:
    meta: dict[str, object] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, object] = {"phase": "Running"}
    if conditions:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True" if ready else "False"},
        ]
    return {"metadata": meta, "status": status}


def test_member_rule_is_ready_and_not_terminating() -> None:
    assert is_member(pod("a"))
    assert not is_member(pod("a", ready=False))
    assert not is_member(pod("a", deleting=True)), "a terminating pod must drop out at once"
    assert not is_member(pod("a", conditions=False)), "no Ready condition yet: not a member"
    assert member_names([pod("c"), pod("a"), pod("b", ready=False), pod("d", deleting=True)]) \
        == ("a", "c")


def test_statefulset_members_by_ordinal_and_scale() -> None:
    assert statefulset_ordinal("web-12", "web") == 12
    assert statefulset_ordinal("web-01", "web") is None  # not how StatefulSets name pods
    assert statefulset_ordinal("webx-1", "web") is None
    assert statefulset_ordinal("web-canary-1", "web") is None
    pods = [pod("web-0"), pod("web-1"), pod("web-2"), pod("other-0")]
    assert member_names(pods, statefulset="web") == ("web-0", "web-1", "web-2")
    assert member_names(pods, statefulset="web", replicas=2) == ("web-0", "web-1")


def test_selector_string_from_models_and_json() -> None:
    model = client.V1LabelSelector(
        match_labels={"tier": "stream", "app": "orders"},
        match_expressions=[
            client.V1LabelSelectorRequirement(key="env", operator="In", values=["prod", "canary"]),
            client.V1LabelSelectorRequirement(key="track", operator="NotIn", values=["old"]),
            client.V1LabelSelectorRequirement(key="owner", operator="Exists"),
            client.V1LabelSelectorRequirement(key="debug", operator="DoesNotExist"),
        ],
    )
    expected = "app=orders,tier=stream,env in (canary,prod),track notin (old),owner,!debug"
    assert selector_string(model) == expected
    as_json = {"matchLabels": {"app": "orders", "tier": "stream"},
               "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "canary"]},
                                    {"key": "track", "operator": "NotIn", "values": ["old"]},
                                    {"key": "owner", "operator": "Exists"},
                                    {"key": "debug", "operator": "DoesNotExist"}]}
    assert selector_string(as_json) == expected
    with pytest.raises(ValueError, match="operator"):
        selector_string({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]})


def test_controller_owner_reference() -> None:
    refs = [{"kind": "Node", "name": "n", "controller": False},
            {"kind": "ReplicaSet", "name": "web-abc", "controller": True}]
    assert controller_of(refs) == ("ReplicaSet", "web-abc")
    assert controller_of([{"kind": "ReplicaSet", "name": "x"}]) is None
    assert controller_of(None) is None


def build(**kw: object) -> KubernetesMembership:
    args: dict[str, object] = {"namespace": "ns", "pod_name": "p", "api_client": client.ApiClient()}
    args.update(kw)
    return KubernetesMembership(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "daemonset"}, "unknown mode 'daemonset'"),
        ({"mode": "label_selector"}, "needs label_selector="),
        ({"mode": "label_selector", "label_selector": "  "}, "needs label_selector="),
        ({"mode": "label_selector", "label_selector": {"app": 3}}, "string values"),
        ({"label_selector": "app=x"}, "only used with mode='label_selector'"),
        ({"ttl": 0}, "ttl must be a number of seconds > 0"),
        ({"ttl": float("nan")}, "ttl must be"),
        ({"ttl": 10, "max_staleness": 5}, "must be at least ttl"),
        ({"retries": 0}, "retries must be an int >= 1"),
        ({"retry_backoff": -1}, "retry_backoff"),
        ({"request_timeout": "5"}, "request_timeout"),
        ({"watch": "yes"}, "watch must be True or False"),
        ({"kubeconfig": "/nonexistent"}, "not both"),
        ({"namespace": ""}, "namespace must be a non-empty string"),
        ({"pod_name": ""}, "pod_name must be a non-empty pod name"),
    ],
)
def test_bad_arguments_raise_configuration_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(KubernetesConfigurationError, match=message) as info:
        build(**kwargs)
    assert isinstance(info.value, ConfigurationError) and isinstance(info.value, ValueError)


def test_pod_name_and_namespace_sources(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.setenv("HOSTNAME", "from-hostname")
    ns_file = tmp_path / "namespace"
    ns_file.write_text("from-file\n")
    monkeypatch.setattr(k8s_config, "SERVICE_ACCOUNT_NAMESPACE", ns_file)
    m = KubernetesMembership(api_client=client.ApiClient())
    assert (m.self_id, m.namespace) == ("from-hostname", "from-file")
    monkeypatch.setenv("POD_NAME", "from-downward-api")
    monkeypatch.setenv("POD_NAMESPACE", "from-env")
    m = KubernetesMembership(api_client=client.ApiClient())
    assert (m.self_id, m.namespace) == ("from-downward-api", "from-env")
    m = KubernetesMembership(pod_name="arg", namespace="arg-ns", api_client=client.ApiClient())
    assert (m.self_id, m.namespace) == ("arg", "arg-ns")


def test_missing_pod_name_or_namespace_says_how_to_fix(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    for var in ("POD_NAME", "HOSTNAME", "POD_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(k8s_config, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "absent")
    with pytest.raises(KubernetesConfigurationError, match="POD_NAME from the downward API"):
        KubernetesMembership(namespace="ns", api_client=client.ApiClient())
    with pytest.raises(KubernetesConfigurationError, match="POD_NAMESPACE"):
        KubernetesMembership(pod_name="p", api_client=client.ApiClient())


def test_no_cluster_and_no_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    with pytest.raises(KubernetesConfigurationError, match="not running in a cluster"):
        KubernetesMembership(pod_name="p", namespace="ns")
    with pytest.raises(KubernetesConfigurationError, match="cannot load kubeconfig"):
        KubernetesMembership(pod_name="p", namespace="ns", kubeconfig=str(tmp_path / "nope"))


def test_kubeconfig_is_used_when_given(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(textwrap.dedent("""\
        apiVersion: v1
        kind: Config
        clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
        users: [{name: u, user: {token: abc}}]
        contexts: [{name: x, context: {cluster: c, user: u, namespace: ns}}]
        current-context: x
        """))
    m = KubernetesMembership(pod_name="p", namespace="ns", kubeconfig=str(kubeconfig))
    configuration = m.api.core.api_client.configuration
    assert configuration.host == "http://127.0.0.1:1"
    assert configuration.retries is False, "only KubeAPI retries, not urllib3 as well"
    m.close()


def test_hashring_imports_without_kubernetes_installed() -> None:
    code = textwrap.dedent("""
        import sys
        sys.modules["kubernetes"] = None  # as if the k8s extra were not installed
        import hashring
        from hashring import KubernetesMembership, ConfigurationError
        from hashring.errors import KubernetesNotInstalledError
        try:
            KubernetesMembership(pod_name="p", namespace="ns")
        except KubernetesNotInstalledError as exc:
            assert isinstance(exc, ConfigurationError) and isinstance(exc, ValueError)
            print(exc)
        else:
            raise SystemExit("constructing without kubernetes must fail")
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "pip install 'kinesis-hashring[k8s]'" in out.stdout


def test_exported_from_hashring() -> None:
    assert hashring.KubernetesMembership is KubernetesMembership
    assert "KubernetesMembership" in hashring.__all__
    assert issubclass(KubernetesNotInstalledError, ConfigurationError)
