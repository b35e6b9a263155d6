"""Group mode with ``membership=kubernetes``: options, start-up errors, and a real Spark query.

Real parts only: the official ``kubernetes`` client talks HTTP to the fake API server
(``tests/support/fake_k8s.py``, enforcing ``examples/k8s/rbac.yaml``) through a kubeconfig
file written to ``tmp_path``; boto3 talks HTTP to the moto server; Spark is the shared local
session. The Spark driver's lease loop runs in Spark's Python worker (another process), so
the tests observe it the way an operator would: the lease table, the sink and the query.
"""

from __future__ import annotations

import json
import logging
import socket
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hashring import plan_assignment
from hashring.errors import (
    KubernetesAPIError,
    KubernetesConfigurationError,
    KubernetesPermissionError,
    OwnPodNotFoundError,
    PodOwnerError,
)
from kinesis.testing import LocalAWS
from spark_integration.errors import InvalidOptionError
from spark_integration.membership import open_kubernetes_membership
from spark_integration.options import KubernetesOptions, parse_options
from tests.spark_support import create_stream, read_json_sink, wait_for
from tests.support.fake_k8s import FakeKubernetes

NS = "streaming"  # the fake_k8s fixture's namespace
APP = "orders-app"
STREAM = "orders"
TABLE = "spark-k8s-leases"
SHARDS = 8


# --- helpers ---------------------------------------------------------------------------


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig (JSON is YAML) whose current context points at ``server``."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "driver", "user": {"token": "fake-token"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "driver",
                                                  "namespace": NS}}],
        "current-context": "fake",
    }))
    return path


def closed_port_url() -> str:
    """An http URL on 127.0.0.1 where nothing listens (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def group_options(**extra: str) -> dict[str, str]:
    return {"streamName": STREAM, "leaseTable": TABLE, "applicationName": APP,
            "membership": "kubernetes", **extra}


def parse(**extra: str) -> Any:
    return parse_options(group_options(**extra), streaming=True)


def shard_ids(aws: LocalAWS) -> list[str]:
    shards = aws.client("kinesis").list_shards(StreamName=STREAM)["Shards"]
    return sorted(s["ShardId"] for s in shards)


def produce(aws: LocalAWS, per_shard: int, start: int) -> dict[str, list[int]]:
    """``per_shard`` records into every shard (ExplicitHashKey), ids from ``start``."""
    kinesis = aws.client("kinesis")
    shards = kinesis.list_shards(StreamName=STREAM)["Shards"]
    out: dict[str, list[int]] = {}
    records, next_id = [], start
    for shard in sorted(shards, key=lambda s: s["ShardId"]):
        ids = list(range(next_id, next_id + per_shard))
        next_id += per_shard
        out[shard["ShardId"]] = ids
        records += [{"Data": json.dumps({"id": i}).encode(), "PartitionKey": str(i),
                     "ExplicitHashKey": shard["HashKeyRange"]["StartingHashKey"]} for i in ids]
    resp = kinesis.put_records(StreamName=STREAM, Records=records)
    assert resp.get("FailedRecordCount", 0) == 0, resp
    return out


def owners(aws: LocalAWS) -> dict[str, str | None]:
    """shard id -> lease owner, read straight from the lease table (empty if no table)."""
    ddb = aws.client("dynamodb")
    if TABLE not in ddb.list_tables()["TableNames"]:
        return {}
    prefix = f"{APP}/{STREAM}/"
    out: dict[str, str | None] = {}
    kwargs: dict[str, Any] = {"TableName": TABLE, "ConsistentRead": True}
    while True:
        page = ddb.scan(**kwargs)
        for item in page["Items"]:
            key = item["leaseKey"]["S"]
            if key.startswith(prefix):
                out[key[len(prefix):]] = item.get("leaseOwner", {}).get("S")
        if "LastEvaluatedKey" not in page:
            return out
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def planned_share(members: list[str], shards: list[str], me: str) -> set[str]:
    """The shards the balanced planner gives ``me`` with no current owners."""
    keys = [f"{APP}/{STREAM}/{s}" for s in shards]
    plan = plan_assignment(sorted(members), keys)
    return {k.rsplit("/", 1)[1] for k in plan.keys_of(me)}


class Query:
    """A group-mode streaming query (membership=kubernetes) into a JSON file sink."""

    def __init__(self, spark: Any, aws: LocalAWS, work: Path, member: str, kubeconfig: Path,
                 **extra: str):
        self.out, self.ck = work / "out", work / "ck"
        reader = spark.readStream.format("kinesis")
        options = group_options(
            endpointUrl=aws.endpoint_url, region="us-east-1", initialPosition="TRIM_HORIZON",
            memberId=member, kubernetesNamespace=NS, kubeconfig=str(kubeconfig),
            describeShardInterval="1s", **extra)
        for k, v in options.items():
            reader = reader.option(k, v)
        self.query = (reader.load()
                      .selectExpr("CAST(data AS STRING) AS body", "shardId", "sequenceNumber")
                      .writeStream.format("json")
                      .option("path", str(self.out))
                      .option("checkpointLocation", str(self.ck))
                      .trigger(processingTime="500 milliseconds")
                      .start())

    def check_alive(self) -> None:
        if not self.query.isActive:
            raise AssertionError(f"the query stopped: {self.query.exception()}")

    def rows(self) -> list[dict[str, Any]]:
        self.check_alive()
        if not (self.out / "_spark_metadata").exists():
            return []
        return read_json_sink(self.out)

    def ids_by_shard(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for r in self.rows():
            out.setdefault(r["shardId"], []).append(json.loads(r["body"])["id"])
        return out

    def stop(self) -> None:
        self.query.stop()


@pytest.fixture
def kubeconfig(fake_k8s: FakeKubernetes, tmp_path: Path) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig.json", fake_k8s.url)


@pytest.fixture
def stream(aws: LocalAWS) -> list[str]:
    create_stream(aws.client("kinesis"), STREAM, SHARDS)
    return shard_ids(aws)


# --- options (no Spark) ------------------------------------------------------------------


def test_kubernetes_options_are_parsed(tmp_path: Path) -> None:
    config = write_kubeconfig(tmp_path / "config", "http://127.0.0.1:1")
    o = parse(memberId="orders-0", kubernetesNamespace="streaming", kubeconfig=str(config),
              kubernetesRefreshInterval="2s", kubernetesMaxStaleness="30s")
    assert o.group is not None and o.group.member_id == "orders-0"
    assert o.group.kubernetes == KubernetesOptions(
        namespace="streaming", kubeconfig=str(config), mode="deployment", label_selector=None,
        refresh_interval_s=2.0, max_staleness_s=30.0)
    selector = parse(memberId="d-1", kubernetesLabelSelector="app=orders-spark").group
    assert selector is not None and selector.kubernetes is not None
    assert (selector.kubernetes.mode, selector.kubernetes.label_selector) == (
        "label_selector", "app=orders-spark")
    sts = parse(memberId="d-1", kubernetesMode="StatefulSet".lower()).group
    assert sts is not None and sts.kubernetes is not None and sts.kubernetes.mode == "statefulset"
    # other memberships have no Kubernetes options
    static = parse(membership="static", members="a", memberId="a").group
    assert static is not None and static.kubernetes is None


def test_member_id_defaults_to_the_pod_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Like KubernetesMembership: POD_NAME (downward API), then HOSTNAME, then the host name."""
    monkeypatch.setenv("POD_NAME", "orders-spark-7d9-abcde")
    monkeypatch.setenv("HOSTNAME", "short-host")
    assert parse().group.member_id == "orders-spark-7d9-abcde"
    monkeypatch.delenv("POD_NAME")
    assert parse().group.member_id == "short-host"
    monkeypatch.delenv("HOSTNAME")
    assert parse().group.member_id == socket.gethostname()
    monkeypatch.setenv("POD_NAME", "ignored-for-dynamodb")
    dynamodb = parse_options({"streamName": STREAM, "leaseTable": TABLE,
                              "applicationName": APP}, streaming=True).group
    assert dynamodb is not None and dynamodb.member_id == socket.gethostname()


@pytest.mark.parametrize(
    ("extra", "option", "fragment"),
    [
        ({"kubernetesNamespace": "Streaming_NS"}, "kubernetesNamespace",
         "not a Kubernetes namespace name"),
        ({"kubeconfig": "/nonexistent/kubeconfig"}, "kubeconfig", "is not a file on the driver"),
        ({"kubernetesMode": "daemonset"}, "kubernetesMode",
         "deployment, replicaset, statefulset, label_selector"),
        ({"kubernetesMode": "label_selector"}, "kubernetesLabelSelector", "is required with"),
        ({"kubernetesMode": "deployment", "kubernetesLabelSelector": "app=x"},
         "kubernetesLabelSelector", "is only used with kubernetesMode=label_selector"),
        ({"kubernetesRefreshInterval": "soon"}, "kubernetesRefreshInterval", "duration"),
        ({"kubernetesRefreshInterval": "0s"}, "kubernetesRefreshInterval", "at least"),
        ({"kubernetesRefreshInterval": "10s", "kubernetesMaxStaleness": "5s"},
         "kubernetesMaxStaleness", "less than kubernetesRefreshInterval"),
        ({"membership": "dynamodb", "kubernetesNamespace": "streaming"}, "kubernetesNamespace",
         "is only used with membership=kubernetes"),
    ],
)
def test_bad_kubernetes_options_name_the_option(extra: dict[str, str], option: str,
                                                fragment: str) -> None:
    with pytest.raises(InvalidOptionError) as info:
        parse(memberId="orders-0", **extra)
    assert info.value.option == option
    assert f"'{option}'" in str(info.value)
    assert fragment in str(info.value)


def test_kubernetes_options_need_group_mode() -> None:
    with pytest.raises(InvalidOptionError, match="set 'leaseTable' too") as info:
        parse_options({"streamName": STREAM, "kubeconfig": "/tmp/x"}, streaming=True)
    assert info.value.option == "kubeconfig"


# --- the membership group mode builds (no Spark) -------------------------------------------


def test_membership_reads_the_pods_at_start(fake_k8s: FakeKubernetes, kubeconfig: Path) -> None:
    pods = fake_k8s.add_deployment("orders-spark", replicas=2)
    group = parse(memberId=pods[0], kubernetesNamespace=NS, kubeconfig=str(kubeconfig)).group
    membership = open_kubernetes_membership(group)
    try:
        assert membership.self_id == pods[0]
        assert membership.members() == tuple(sorted(pods))
        assert fake_k8s.count("list", "pods") == 1  # read once, at start (then cached)
    finally:
        membership.close()


def test_label_selector_mode_for_driver_pods_no_deployment_owns(
        fake_k8s: FakeKubernetes, kubeconfig: Path) -> None:
    """Driver pods started by e.g. the Spark operator: bare pods matched by a label."""
    for name in ("orders-spark-b-driver", "orders-spark-a-driver"):
        fake_k8s.add_pod(name, {"group": "orders-spark", "spark-role": "driver"})
    fake_k8s.add_pod("orders-spark-a-exec-1", {"group": "orders-spark", "spark-role": "executor"})
    common = {"memberId": "orders-spark-a-driver", "kubernetesNamespace": NS,
              "kubeconfig": str(kubeconfig)}
    group = parse(**common, kubernetesLabelSelector="group=orders-spark,spark-role=driver").group
    membership = open_kubernetes_membership(group)
    try:
        assert membership.members() == ("orders-spark-a-driver", "orders-spark-b-driver")
        assert fake_k8s.count("get") == 0  # label_selector lists pods only
    finally:
        membership.close()
    # the default mode (deployment) cannot work for them, and says what to use instead
    with pytest.raises(PodOwnerError, match="mode='label_selector'") as info:
        open_kubernetes_membership(parse(**common).group)
    assert any("kubernetesMode" in note for note in info.value.__notes__)


def test_own_pod_not_ready_is_a_warning_not_an_error(
        fake_k8s: FakeKubernetes, kubeconfig: Path, caplog: pytest.LogCaptureFixture) -> None:
    pods = fake_k8s.add_deployment("orders-spark", replicas=2)
    fake_k8s.set_ready(pods[1], False)
    group = parse(memberId=pods[1], kubernetesNamespace=NS, kubeconfig=str(kubeconfig)).group
    with caplog.at_level(logging.WARNING, logger="spark_integration.membership"):
        membership = open_kubernetes_membership(group)
    membership.close()
    assert "this pod is not among the members" in caplog.text
    assert pods[1] in caplog.text


@pytest.mark.parametrize("failure", ["forbidden", "unreachable", "wrong-pod", "no-namespace"])
def test_membership_errors_at_start_are_specific(
        failure: str, fake_k8s: FakeKubernetes, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    pods = fake_k8s.add_deployment("orders-spark", replicas=2)
    server = closed_port_url() if failure == "unreachable" else fake_k8s.url
    config = write_kubeconfig(tmp_path / "kubeconfig.json", server)
    extra = {"memberId": "orders-typo" if failure == "wrong-pod" else pods[0],
             "kubeconfig": str(config)}
    if failure != "no-namespace":
        extra["kubernetesNamespace"] = NS
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    if failure == "forbidden":
        fake_k8s.forbid("list", "pods")
    expected: dict[str, tuple[type[Exception], str]] = {
        "forbidden": (KubernetesPermissionError,
                      '{apiGroups: [""], resources: ["pods"], verbs: ["list"]}'),
        "unreachable": (KubernetesAPIError, "Kubernetes API unavailable for get pods/"),
        "wrong-pod": (OwnPodNotFoundError, "own pod 'orders-typo' not found"),
        "no-namespace": (KubernetesConfigurationError, "cannot tell the namespace"),
    }
    kind, fragment = expected[failure]
    with pytest.raises(kind) as info:
        open_kubernetes_membership(parse(**extra).group)
    assert fragment in str(info.value)
    assert any("kubernetesNamespace" in note for note in info.value.__notes__)


# --- a real Spark query ------------------------------------------------------------------


def offsets_log(checkpoint: Path) -> dict[int, dict[str, Any]]:
    """batch id -> the source's end offset, from Spark's offset log (written before the batch
    runs, and never compacted, unlike the file sink's log)."""
    out: dict[int, dict[str, Any]] = {}
    folder = checkpoint / "offsets"
    if folder.exists():
        for f in folder.iterdir():
            if f.name.isdigit():
                lines = f.read_text().splitlines()
                if len(lines) >= 3:
                    out[int(f.name)] = json.loads(lines[2])
    return out


def first_read_batch(checkpoint: Path, shard: str) -> int | None:
    """The first batch whose end offset has a record position for ``shard``."""
    key = f"{STREAM}/{shard}"
    for batch, offset in sorted(offsets_log(checkpoint).items()):
        if "seq" in offset.get(key, {}):
            return batch
    return None


@pytest.mark.slow
def test_driver_reads_its_pods_share_then_every_shard_after_scale_in(
        spark: Any, aws: LocalAWS, fake_k8s: FakeKubernetes, kubeconfig: Path,
        stream: list[str], tmp_path: Path) -> None:
    """A Deployment of 2 pods; this driver is one of them, the other pod runs no driver.

    Phase 1 (both pods listed and Ready): the driver's lease loop plans the 8 shards over the
    two members with the balanced planner and takes exactly its 4 (created in the lease
    table and read from TRIM_HORIZON); the other 4 are planned for the other pod, so the
    driver leaves them alone. The design lets any member take a lease row that stayed
    missing or unchanged for ``orphan_timeout`` (here 2 x leaseDuration = 120 s): a
    listed-but-silent pod stalls its shards for a bounded time only (see
    ``test_a_listed_but_silent_pod_stalls_its_shards_for_a_bounded_time``). leaseDuration
    is long here so that phase 1 ends well before that, even on a loaded machine (with
    20 s the window was 40 s, and the whole test took up to ~55 s under load).

    Phase 2 (the other pod is scaled in: terminating, then deleted): the next member-list
    refresh (kubernetesRefreshInterval = 1 s) plans all 8 shards for the driver, which
    creates the 4 missing rows at once (a free lease needs no expiry wait) and reads them
    from TRIM_HORIZON in the next micro-batches: nothing lost, nothing read twice.
    """
    pods = sorted(fake_k8s.add_deployment("orders-spark", replicas=2))
    me, other = pods
    mine = planned_share(pods, stream, me)
    assert len(mine) == SHARDS // 2
    produced = produce(aws, per_shard=4, start=0)
    query = Query(spark, aws, tmp_path, me, kubeconfig, leaseDuration="60s",
                  kubernetesRefreshInterval="1s")
    try:
        # Phase 1: exactly the planned share is held and read.
        def read_my_share() -> bool:
            got = query.ids_by_shard()
            return all(sorted(got.get(s, [])) == produced[s] for s in mine)

        wait_for(read_my_share, 120, "the driver to read its 4 planned shards")
        assert owners(aws) == dict.fromkeys(mine, me), "only the planned share has lease rows"
        assert set(query.ids_by_shard()) == mine, "the driver read only its own shards"
        scale_in_batch = max(offsets_log(query.ck))  # the last batch planned so far

        # Phase 2: the other pod goes away; the driver takes and reads every shard.
        fake_k8s.terminate(other)
        fake_k8s.delete_pod(other)

        def read_everything() -> bool:
            got = query.ids_by_shard()
            return all(sorted(got.get(s, [])) == produced[s] for s in stream)

        wait_for(read_everything, 120, "the driver to read the scaled-in pod's shards")
        assert owners(aws) == dict.fromkeys(stream, me)
        took = sorted(first_read_batch(query.ck, s) or -1 for s in set(stream) - mine)
        assert took[0] > scale_in_batch
        assert took[-1] - scale_in_batch <= 3, (
            f"the other pod's shards were read in batches {took}, scale-in after batch "
            f"{scale_in_batch}: expected within 3 batches")

        # Reading goes on on all 8 shards.
        more = produce(aws, per_shard=3, start=1000)

        def read_more() -> bool:
            got = query.ids_by_shard()
            return all(set(more[s]) <= set(got.get(s, [])) for s in stream)

        wait_for(read_more, 120, "the records produced after the scale-in")
        ids = [i for r in query.rows() for i in [json.loads(r["body"])["id"]]]
        expected = [i for s in stream for i in produced[s] + more[s]]
        assert Counter(ids) == Counter(expected), "no record lost or read twice"
    finally:
        query.stop()


@pytest.mark.slow
def test_a_listed_but_silent_pod_stalls_its_shards_for_a_bounded_time(
        spark: Any, aws: LocalAWS, fake_k8s: FakeKubernetes, kubeconfig: Path,
        stream: list[str], tmp_path: Path) -> None:
    """The other pod stays listed and Ready but never runs a lease loop.

    What the lease loop does (kinesis/lease_loop/coordinator.py): the other pod's planned shards have
    no lease row; after ``orphan_timeout`` (2 x leaseDuration = 4 s here) any member may
    create and take them (orphans), so the driver does. On the next tick the plan (4/4)
    gives some back to the listed pod: the driver drains the shard (its last batch
    commits and checkpoints) and hands the lease over; the silent pod never adopts it, so
    it expires, the pod is suspected (all its leases expired) and left out of the plan, and
    the driver takes the lease back from its checkpoint. Later the pod is put on probation
    and gets one lease at a time again. The promise checked here: while the silent pod is
    listed, its shards are stalled for a bounded time only, and no record is lost.
    """
    pods = sorted(fake_k8s.add_deployment("orders-spark", replicas=2))
    me, silent = pods
    produced = produce(aws, per_shard=4, start=0)
    query = Query(spark, aws, tmp_path, me, kubeconfig, leaseDuration="2s",
                  kubernetesRefreshInterval="1s")
    try:
        def read_everything() -> bool:
            got = query.ids_by_shard()
            return all(set(produced[s]) <= set(got.get(s, [])) for s in stream)

        wait_for(read_everything, 150, "the silent pod's shards to be read as orphans")
        assert silent in fake_k8s.pod_names()  # still listed: nothing changed in the API
        rows = owners(aws)
        assert set(rows) == set(stream), "the driver (the only writer) created every lease row"
        assert set(rows.values()) <= {me, silent, None}
        ids = Counter(json.loads(r["body"])["id"] for r in query.rows())
        assert set(ids) == {i for s in stream for i in produced[s]}, "no record lost"
        # Hand-offs wait for the shard's last batch to commit its checkpoint, and a lease
        # taken back resumes from that checkpoint: nothing is read twice either.
        assert max(ids.values()) == 1, {i: n for i, n in ids.items() if n > 1}
    finally:
        query.stop()


@pytest.mark.slow
@pytest.mark.parametrize("failure", ["forbidden", "unreachable"])
def test_kubernetes_errors_fail_the_query_at_start(
        failure: str, spark: Any, aws: LocalAWS, fake_k8s: FakeKubernetes, stream: list[str],
        tmp_path: Path) -> None:
    """RBAC denial or an unreachable API server: the query fails when it starts (the group's
    first member-list read, on the driver), with the membership's error; .load() succeeds
    (options are valid) and no lease table is created."""
    pods = fake_k8s.add_deployment("orders-spark", replicas=2)
    server = closed_port_url() if failure == "unreachable" else fake_k8s.url
    config = write_kubeconfig(tmp_path / "kubeconfig.json", server)
    if failure == "forbidden":
        fake_k8s.forbid("list", "pods")
    query = Query(spark, aws, tmp_path, pods[0], config, leaseDuration="3s")
    try:
        wait_for(lambda: not query.query.isActive, 120, "the query to fail")
        error = str(query.query.exception())
    finally:
        query.stop()
    if failure == "forbidden":
        assert "KubernetesPermissionError" in error
        assert "403 Forbidden" in error
        assert '{apiGroups: [""], resources: ["pods"], verbs: ["list"]}' in error
    else:
        assert "KubernetesAPIError" in error
        assert "Kubernetes API unavailable" in error and "after 3 attempts" in error
    assert "kubernetesNamespace" in error  # the note naming the Spark options
    assert TABLE not in aws.client("dynamodb").list_tables()["TableNames"]


@pytest.mark.slow
def test_api_outage_while_running_pauses_planning_not_reading(
        spark: Any, aws: LocalAWS, fake_k8s: FakeKubernetes, kubeconfig: Path,
        stream: list[str], tmp_path: Path) -> None:
    """The API server fails (503) after the query started: the query keeps running.

    KubernetesMembership serves the last good list for kubernetesMaxStaleness (2 s), then
    raises StaleMembershipError; the lease loop logs it ("no member list ... only renewing
    this tick") and only renews. Checked here: the query does not fail, the driver keeps
    its leases and keeps reading its shards past kubernetesMaxStaleness, a scale-in it
    cannot see changes nothing, and once the API answers again it takes the scaled-in
    pod's shards and reads everything.
    """
    pods = sorted(fake_k8s.add_deployment("orders-spark", replicas=2))
    me, other = pods
    mine = planned_share(pods, stream, me)
    produced = produce(aws, per_shard=2, start=0)
    query = Query(spark, aws, tmp_path, me, kubeconfig, leaseDuration="20s",
                  kubernetesRefreshInterval="1s", kubernetesMaxStaleness="2s")
    try:
        def read(ids: dict[str, list[int]], shards: set[str] | list[str]) -> bool:
            got = query.ids_by_shard()
            return all(set(ids[s]) <= set(got.get(s, [])) for s in shards)

        wait_for(lambda: read(produced, mine), 120, "the driver to read its share")
        fake_k8s.fail(503)  # every API request from now on
        fake_k8s.terminate(other)
        fake_k8s.delete_pod(other)
        failed_before = _failed_lists(fake_k8s)
        during = produce(aws, per_shard=2, start=1000)
        wait_for(lambda: read(during, mine), 120, "the held shards to be read during the outage")
        # The driver kept failing to refresh for longer than kubernetesMaxStaleness (each
        # refresh is 3 attempts, one per kubernetesRefreshInterval), so it planned nothing:
        wait_for(lambda: _failed_lists(fake_k8s) >= failed_before + 9, 60,
                 "three more failed refreshes")
        later = produce(aws, per_shard=2, start=2000)
        wait_for(lambda: read(later, mine), 60, "reading to go on past kubernetesMaxStaleness")
        assert owners(aws) == dict.fromkeys(mine, me), "no shard taken on a stale view"
        assert set(query.ids_by_shard()) == mine

        fake_k8s.clear_faults()
        wait_for(lambda: all(read(ids, stream) for ids in (produced, during, later)), 120,
                 "the driver to take every shard once the API answers")
        assert owners(aws) == dict.fromkeys(stream, me)
    finally:
        query.stop()


def _failed_lists(fake: FakeKubernetes) -> int:
    return sum(1 for r in list(fake.requests) if r.verb == "list" and r.status == 503)
