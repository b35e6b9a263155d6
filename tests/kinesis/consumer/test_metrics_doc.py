"""docs/metrics.md names exactly the metrics a Worker exports, with their types and labels."""

from __future__ import annotations

import re

import pytest

from kinesis.consumer.keyed.runner import KeyedStatus
from kinesis.consumer.shard.consumer import ShardStatus
from kinesis.consumer.shard.load import LoadSample
from kinesis.consumer.worker.health import WorkerStatus
from tests.support.paths import ROOT

prometheus_client = pytest.importorskip("prometheus_client")


def documented() -> dict[str, tuple[str, set[str]]]:
    rows = re.findall(r"^\| `(kinesis_worker_\w+)` \| (\w+) \|([^|]*)\|", (ROOT / "docs" / "metrics.md").read_text(), re.M)
    return {name: (kind, {"worker", *re.findall(r"`(\w+)`", labels)}) for name, kind, labels in rows}


def exported() -> dict[str, tuple[str, set[str]]]:
    from kinesis.consumer.worker.metrics import WorkerCollector

    shard = ShardStatus("app/orders/s1", "app", "orders", "s1", "processing", 5, 1, 0, None, lag_seconds=0.0,
                        lag_age_seconds=0.1, processing_rate=1.0, arrival_rate=1.0, catch_up_seconds=0.0,
                        load=LoadSample(5.0, 5000.0, 0.01, 0.02, 60.0),
                        keyed=KeyedStatus(3, 10, 40, 0.5, 7, 120, 0))
    status = WorkerStatus("w1", "running", True, True, ("w1",), (shard.key,), {}, (shard,), {"handoffs": 1}, {},
                          {"app/orders": 5}, 3, 0.1, 0.0, 1.0, 1.0, 0.0, cpu_utilisation=0.3, load_share=1.1,
                          hot_shards={shard.key: 1.1})

    class Source:
        def status(self) -> WorkerStatus:
            return status

    out = {}
    for family in WorkerCollector(Source()).collect():  # type: ignore[arg-type]
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = {label for sample in family.samples for label in sample.labels}
        out[name] = (family.type, labels)
    return out


def test_the_reference_table_matches_what_the_worker_exports() -> None:
    assert documented() == exported()
