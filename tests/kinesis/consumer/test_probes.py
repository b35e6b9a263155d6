"""Probes that tell the truth, and errors that name the option and the real cause.

Real workers against the moto server; the lease table's client goes through a fault proxy
(tests/support/fault_proxy.py) that can make DynamoDB unreachable.
"""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from kinesis import StreamConfig, Worker, WorkerConfig
from kinesis.consumer.discovery.shards import ShardDiscovery
from kinesis.consumer.retrieval.failures import call_with_retries
from kinesis.errors import HealthServerError, KinesisRetriesExhaustedError
from kinesis.testing import LocalAWS, client_for
from tests.support.fault_proxy import FaultProxy, fault_proxy
from tests.support.waiting import eventually
from tests.support.worker_journal import Journal, JournalProcessor

NO_BOTO_RETRIES = Config(retries={"total_max_attempts": 1}, connect_timeout=1, read_timeout=2)


def probe(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def worker_behind_proxy(aws: LocalAWS) -> Iterator[tuple[Worker, FaultProxy]]:
    aws.client("kinesis").create_stream(StreamName="orders", ShardCount=2)
    journal = Journal()
    with fault_proxy(aws.endpoint_url) as proxy:
        config = WorkerConfig(
            "probe-leases", [StreamConfig("orders", "app", "TRIM_HORIZON")], worker_id="w1",
            lease_duration=3.0, readiness_timeout=1.5, idle_backoff=0.1, health_port=0, health_host="127.0.0.1",
        )
        worker = Worker(
            config, lambda: JournalProcessor(journal, "w1"),
            kinesis_client=aws.client("kinesis"),
            dynamodb_client=client_for("dynamodb", proxy.endpoint_url, aws.region, config=NO_BOTO_RETRIES),
        )
        worker.table.retry_max_wait = 0.05
        worker.start()
        try:
            yield worker, proxy
        finally:
            proxy.randomly(0, 0)
            worker.stop(graceful=False)


def test_readiness_fails_while_the_lease_table_is_unreachable_and_liveness_does_not(
    worker_behind_proxy: tuple[Worker, FaultProxy],
) -> None:
    worker, proxy = worker_behind_proxy
    url = worker.health_url
    assert url is not None
    eventually(lambda: probe(url + "/readyz")[0] == 200, 20, "ready at start")
    proxy.randomly(seed=1, rate=1.0, kinds=("reset",))  # DynamoDB unreachable
    _code, body = eventually(lambda: (r := probe(url + "/readyz"))[0] == 503 and r, 20, "not ready")
    assert "lease table not read for" in body and "readiness_timeout 1.5 s" in body
    # the loop still runs (it is not stuck): liveness stays green through further rounds
    ticks = worker.coordinator.status().ticks
    eventually(lambda: worker.coordinator.status().ticks >= ticks + 3, 20, "ticks during the outage")
    assert probe(url + "/livez")[0] == 200
    assert worker.coordinator.status().last_error is not None
    assert worker.status().held == ()  # its leases could not be renewed: others may take them
    proxy.randomly(seed=1, rate=0)  # DynamoDB back
    eventually(lambda: probe(url + "/readyz") == (200, "ok\n"), 20, "ready again")


def test_readiness_fails_while_the_member_list_cannot_be_read(aws: LocalAWS) -> None:
    from hashring import StaticMembership
    from hashring.errors import StaleMembershipError

    class Flaky(StaticMembership):
        broken = False

        def members(self) -> list[str]:
            if self.broken:
                raise StaleMembershipError("the Kubernetes API is unreachable (injected)", age=9.0, last_error=None)
            return list(super().members())

    aws.client("kinesis").create_stream(StreamName="orders", ShardCount=1)
    membership = Flaky(["w1"], "w1")
    config = WorkerConfig("probe-leases", [StreamConfig("orders", "app")], lease_duration=3.0,
                          readiness_timeout=1.5, health_port=0, health_host="127.0.0.1")
    worker = Worker(config, lambda: JournalProcessor(Journal(), "w1"), kinesis_client=aws.client("kinesis"),
                    dynamodb_client=aws.client("dynamodb"), membership=membership).start()
    try:
        url = worker.health_url
        assert url is not None
        eventually(lambda: probe(url + "/readyz")[0] == 200, 20)
        membership.broken = True
        _code, body = eventually(lambda: (r := probe(url + "/readyz"))[0] == 503 and r, 20)
        assert "member list not read for" in body and "StaleMembershipError" in body
        assert probe(url + "/livez")[0] == 200
        membership.broken = False
        eventually(lambda: probe(url + "/readyz")[0] == 200, 20)
    finally:
        worker.stop(graceful=False)


def test_a_busy_health_port_names_the_option(aws: LocalAWS) -> None:
    aws.client("kinesis").create_stream(StreamName="orders", ShardCount=1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = WorkerConfig("probe-leases", [StreamConfig("orders", "app")], worker_id="w2",
                              health_port=port, health_host="127.0.0.1")
        worker = Worker(config, lambda: JournalProcessor(Journal(), "w2"),
                        kinesis_client=aws.client("kinesis"), dynamodb_client=aws.client("dynamodb"))
        with pytest.raises(HealthServerError, match=rf"health_port {port} is already in use.*0 for any free port"):
            worker.start()
        assert worker.state == "new" and worker.coordinator.status().held == ()
        assert isinstance(HealthServerError("x"), OSError)


def test_a_refused_connection_is_reported_as_unreachable_not_as_throttling() -> None:
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
    kinesis = client_for("kinesis", endpoint, config=NO_BOTO_RETRIES)
    discovery = ShardDiscovery(kinesis, "orders", max_attempts=2, retry_option="WorkerConfig.kinesis_retry_attempts")
    with pytest.raises(KinesisRetriesExhaustedError) as caught:
        discovery.list_shards(force=True)
    message = str(caught.value)
    assert "could not be reached" in message and "endpoint_url" in message
    assert "WorkerConfig.kinesis_retry_attempts" in message and "throttl" not in message


def test_throttling_is_reported_as_throttling() -> None:
    error: dict[str, Any] = {"Error": {"Code": "ProvisionedThroughputExceededException"},
                             "ResponseMetadata": {"HTTPStatusCode": 400}}

    def throttled() -> None:
        raise ClientError(error, "GetRecords")

    with pytest.raises(KinesisRetriesExhaustedError, match=r"throttled the calls .*add shards"):
        call_with_retries(throttled, what="GetRecords", max_attempts=2, initial_wait=0.001)


def test_startup_line_says_how_the_worker_runs(worker_behind_proxy: tuple[Worker, FaultProxy]) -> None:
    worker, _ = worker_behind_proxy
    line = worker.startup_line()
    assert line.startswith("worker w1 started: table probe-leases, streams [app/orders from TRIM_HORIZON]")
    assert "membership SessionMembership, lease 3 s (tick 1 s, light rounds 0.333 s)" in line
    assert f"health {worker.health_url}" in line
