"""Autoscaling on lag: the arithmetic docs/autoscaling.md quotes (kinesis.consumer.worker.scaling)
and the recipes in examples/k8s, validated offline (the HPA through the kubernetes client's
models, KEDA's ScaledObject against a bundled schema)."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client

from kinesis import StreamConfig, WorkerConfig
from kinesis.consumer.worker.scaling import desired_replicas
from tests.support.paths import ROOT

K8S = ROOT / "examples" / "k8s"


def manifest(name: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]
    assert len(docs) == 1
    return docs[0]


def as_model(doc: dict[str, Any], kind: str) -> Any:
    """``doc`` through the kubernetes client's deserializer (its public path: a response body)."""

    class Body:
        data = json.dumps(doc)

    return client.ApiClient().deserialize(Body(), kind)


# --- the arithmetic ---------------------------------------------------------------------------


@pytest.mark.parametrize(("current", "lag", "expected"), [
    (4, 90.0, 12),   # three times the target: three times the pods
    (4, 31.0, 4),    # within the HPA's 10% tolerance: left alone
    (4, 0.0, 1),     # caught up: down to the minimum (one pod at a time, by the recipes' behavior)
    (10, 600.0, 16),  # never beyond the shard count: a pod beyond it holds no lease
    (3, 45.0, 5),    # ceil(3 x 1.5) = 5
])
def test_desired_replicas_is_the_hpa_value_rule_capped_at_the_shards(current: int, lag: float, expected: int) -> None:
    assert desired_replicas(current, lag, target_lag_seconds=30.0, shards=16) == expected


@given(current=st.integers(1, 64), lag=st.floats(0, 1e6), more=st.floats(0, 1e6),
       shards=st.integers(1, 64), target=st.floats(0.1, 600))
def test_desired_replicas_stays_in_bounds_and_grows_with_the_lag(current: int, lag: float, more: float,
                                                               shards: int, target: float) -> None:
    n = desired_replicas(current, lag, target_lag_seconds=target, shards=shards)
    assert 1 <= n <= shards
    higher = desired_replicas(current, lag + more, target_lag_seconds=target, shards=shards)
    assert higher >= n or abs(lag / target - 1) <= 0.1  # only the tolerance band keeps a count


@pytest.mark.parametrize("kwargs", [{"current": 0}, {"shards": 0}, {"target_lag_seconds": 0.0},
                                    {"max_lag_seconds": float("nan")}])
def test_desired_replicas_refuses_impossible_inputs(kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {"current": 2, "max_lag_seconds": 10.0, "target_lag_seconds": 30.0, "shards": 8, **kwargs}
    current, lag = args.pop("current"), args.pop("max_lag_seconds")
    with pytest.raises(ValueError, match="must be"):
        desired_replicas(current, lag, **args)


# --- the recipes ------------------------------------------------------------------------------


def test_the_hpa_recipe_is_a_valid_autoscaling_v2_object() -> None:
    doc = manifest("autoscaling-hpa.yaml")
    model = as_model(doc, "V2HorizontalPodAutoscaler")
    assert client.ApiClient().sanitize_for_serialization(model) == doc  # no field the API does not know
    assert doc["spec"]["metrics"][0]["external"]["metric"]["name"] == "kinesis_worker_max_lag_seconds"


def test_the_keda_recipe_is_a_valid_scaled_object() -> None:
    doc = manifest("autoscaling-keda.yaml")
    schema = json.loads((ROOT / "tests" / "data" / "keda-scaledobject.schema.json").read_text())
    jsonschema.validate(doc, schema)
    behavior = doc["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    model = as_model(behavior, "V2HorizontalPodAutoscalerBehavior")
    assert client.ApiClient().sanitize_for_serialization(model) == behavior
    bad = json.loads(json.dumps(doc))
    bad["spec"]["maxReplicas"] = 16  # the HPA's spelling, not KEDA's
    with pytest.raises(jsonschema.ValidationError, match="maxReplicas"):
        jsonschema.validate(bad, schema)


def recipes() -> list[tuple[str, int, int, dict[str, Any], str]]:
    """(file, min, max, behavior, query or metric) of each recipe."""
    hpa, keda = manifest("autoscaling-hpa.yaml"), manifest("autoscaling-keda.yaml")
    return [
        ("autoscaling-hpa.yaml", hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"], hpa["spec"]["behavior"],
         hpa["spec"]["metrics"][0]["external"]["metric"]["name"]),
        ("autoscaling-keda.yaml", keda["spec"]["minReplicaCount"], keda["spec"]["maxReplicaCount"],
         keda["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"],
         keda["spec"]["triggers"][0]["metadata"]["query"]),
    ]


def test_both_recipes_scale_the_consumer_deployment_on_its_max_lag_between_one_and_the_shards() -> None:
    deployment = manifest("deployment.yaml")
    exported = set(re.findall(r"^\| `(kinesis_worker_\w+)`", (ROOT / "docs" / "metrics.md").read_text(), re.M))
    for name in ("autoscaling-hpa.yaml", "autoscaling-keda.yaml"):
        doc = manifest(name)
        assert doc["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
        assert doc["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    for name, low, high, _, signal in recipes():
        shards = int((manifest(name)["metadata"]["annotations"])["kinesis-hashring/shards"])
        assert (low, high) == (1, shards), name
        assert "kinesis_worker_max_lag_seconds" in signal and "kinesis_worker_max_lag_seconds" in exported


def test_scale_down_lets_each_leaving_pod_hand_its_leases_off() -> None:
    pod = manifest("deployment.yaml")["spec"]["template"]["spec"]
    grace = pod["terminationGracePeriodSeconds"]
    config = WorkerConfig("leases", [StreamConfig("orders", "app")])
    assert grace > config.shutdown_grace  # SIGTERM's graceful stop ends before the kill
    for name, _, _, behavior, _ in recipes():
        down = behavior["scaleDown"]
        assert down["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": down["policies"][0]["periodSeconds"]}]
        assert down["policies"][0]["periodSeconds"] >= grace, name  # one pod at a time, each done first
        assert down["stabilizationWindowSeconds"] >= 60, name  # a dip in lag does not shed pods at once
