"""examples/grafana/kinesis-workers.json: every query names a metric the Worker exports (the
reference table docs/metrics.md, which a test holds to the exporter) and keeps to the PromQL
subset render_dashboard.py draws docs/dashboard.png with."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from types import ModuleType

import pytest

from tests.support.paths import ROOT

GRAFANA = ROOT / "examples" / "grafana"


def renderer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_dashboard", GRAFANA / "render_dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_query_names_an_exported_metric_and_renders() -> None:
    dashboard = json.loads((GRAFANA / "kinesis-workers.json").read_text())
    exported = set(re.findall(r"^\| `(kinesis_worker_\w+)`", (ROOT / "docs" / "metrics.md").read_text(), re.M))
    render = renderer()
    used = set()
    for panel in dashboard["panels"]:
        assert panel["title"] and panel["targets"] and panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            metric = render.metric_of(target["expr"])  # raises outside the subset
            assert metric in exported, f"{panel['title']!r} queries {metric}, which no Worker exports"
            used.add(metric)
    # the operator's questions: lag, balance, moves, stuck shards, data loss, DynamoDB errors
    assert {"kinesis_worker_max_lag_seconds", "kinesis_worker_leases_held", "kinesis_worker_handoffs_total",
            "kinesis_worker_shards_stuck", "kinesis_worker_processors_hung",
            "kinesis_worker_data_loss_events_total", "kinesis_worker_lease_loop_errors_total"} <= used
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]


def test_the_renderer_evaluates_its_subset_as_prometheus_does() -> None:
    render = renderer()
    times = [0.0, 1.0, 2.0, 3.0]
    scrapes = [{("c_total", (("worker", "a"),)): v, ("c_total", (("worker", "b"),)): 2 * v,
                ("g", (("shard", "s1"), ("worker", "a"))): v, ("g", (("shard", "s1"), ("worker", "b"))): 5.0}
               for v in (0.0, 10.0, 20.0, 30.0)]
    rates = render.evaluate("sum by (worker) (rate(c_total[1m]))", times, scrapes)
    assert rates["a"][1:] == [10.0, 10.0, 10.0] and rates["b"][3] == 20.0 and math.isnan(rates["a"][0])
    assert render.evaluate("sum(increase(c_total[2s]))", times, scrapes)[""][3] == 60.0  # (30+60) - (10+20)
    assert render.evaluate("max by (shard) (g)", times, scrapes)["s1"] == [5.0, 10.0, 20.0, 30.0]
    late = [{}, {}, {("c_total", (("worker", "c"),)): 4.0}, {("c_total", (("worker", "c"),)): 10.0}]
    assert render.evaluate("sum by (worker) (rate(c_total[1m]))", times, late)["c"][3] == 6.0  # a series that starts late
    with pytest.raises(ValueError, match="outside the renderer's PromQL subset"):
        render.parse("histogram_quantile(0.9, x)")
