"""Helpers for the Spark tests: a local session and Kinesis fixtures on the moto server."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from tests.support.moto_trim import MOTO_ACCOUNT as MOTO_ACCOUNT
from tests.support.moto_trim import moto_stream as moto_stream
from tests.support.moto_trim import trim_oldest as trim_oldest


def make_session(master: str = "local[2]", app_name: str = "kinesis-hashring-tests") -> Any:
    """A local SparkSession whose Python workers run this interpreter (the project's venv)."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    from spark_integration.local import local_session

    return local_session(app_name, master, **{"spark.default.parallelism": "2",
                                              "spark.sql.streaming.stopTimeout": "60s"})


def create_stream(kinesis: Any, name: str, shards: int) -> None:
    """Create a stream and wait until it is ACTIVE."""
    kinesis.create_stream(StreamName=name, ShardCount=shards)
    kinesis.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.1})


def put_json(kinesis: Any, stream: str, payloads: Iterable[dict[str, Any]],
             key: Callable[[dict[str, Any]], str] = lambda p: str(p["id"])) -> list[str]:
    """PutRecords in chunks of 500; returns the sequence numbers, in order."""
    items = [{"Data": json.dumps(p).encode(), "PartitionKey": key(p)} for p in payloads]
    seqs: list[str] = []
    for i in range(0, len(items), 500):
        resp = kinesis.put_records(StreamName=stream, Records=items[i:i + 500])
        assert resp.get("FailedRecordCount", 0) == 0, resp
        seqs.extend(r["SequenceNumber"] for r in resp["Records"])
    return seqs


def read_json_sink(path: Path) -> list[dict[str, Any]]:
    """Every row of a JSON-lines file sink directory (Spark's committed files only)."""
    rows: list[dict[str, Any]] = []
    meta = path / "_spark_metadata"
    files: list[Path]
    if meta.exists():
        files = []
        logs = {int(p.name.removesuffix(".compact")): p for p in meta.iterdir()
                if p.name.removesuffix(".compact").isdigit()}
        # every 10th log is compacted: "<n>.compact" lists the files of all batches up to n
        compacted = max((n for n, p in logs.items() if p.name.endswith(".compact")), default=-1)
        for n in sorted(logs):
            if n < compacted:
                continue
            log = logs[n]
            for line in log.read_text().splitlines()[1:]:
                entry = json.loads(line)
                if entry.get("action", "add") == "add":
                    files.append(Path(entry["path"].removeprefix("file:")))
    else:
        files = sorted(path.glob("part-*.json"))
    for f in files:
        rows.extend(json.loads(line) for line in f.read_text().splitlines() if line)
    return rows


def wait_for(predicate: Callable[[], bool], timeout: float, what: str,
             interval: float = 0.2) -> None:
    """Poll ``predicate`` until it is true, or fail after ``timeout`` seconds naming ``what``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@contextmanager
def kinesis_calls(operations: Iterable[str] = ("get_records", "get_shard_iterator")
                  ) -> Iterator[Counter[tuple[str, str]]]:
    """Count the Kinesis requests the in-process moto server answers, by (operation, role).

    The role comes from the User-Agent the source's clients send
    (``kinesis-hashring-spark/driver`` or ``/executor``); other clients count as "other". It
    sees every process (Spark's planner and executor Python workers too), since they all
    talk HTTP to this server. Operations are moto's method names, e.g. ``"get_records"``.
    """
    from moto.kinesis.responses import KinesisResponse

    counts: Counter[tuple[str, str]] = Counter()
    lock = threading.Lock()

    def counting(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            agent = str(self.headers.get("User-Agent", ""))
            role = "other"
            for candidate in ("driver", "executor"):
                if f"kinesis-hashring-spark/{candidate}" in agent:
                    role = candidate
            with lock:
                counts[(name, role)] += 1
            return original(self, *args, **kwargs)
        return wrapper

    with ExitStack() as stack:
        for name in operations:
            original = getattr(KinesisResponse, name)
            stack.enter_context(mock.patch.object(KinesisResponse, name, counting(name, original)))
        yield counts


@contextmanager
def signed_requests() -> Iterator[list[tuple[str, str, str, str]]]:
    """Every request the in-process moto server answers, as (service, action, role, access key).

    The access key is the one in the request's SigV4 ``Authorization`` header (who signed
    it); the role is the source's User-Agent tag as in :func:`kinesis_calls`. It sees every
    process that talks HTTP to this server (Spark's Python workers too).
    """
    from moto.core.responses import BaseResponse

    seen: list[tuple[str, str, str, str]] = []
    lock = threading.Lock()
    original = BaseResponse.call_action

    def recording(self: Any) -> Any:
        agent = str(self.headers.get("User-Agent", ""))
        role = next((r for r in ("driver", "executor") if f"kinesis-hashring-spark/{r}" in agent),
                    "other")
        auth = str(self.headers.get("Authorization", ""))
        key = auth.split("Credential=", 1)[1].split("/", 1)[0] if "Credential=" in auth else ""
        with lock:
            seen.append((str(self.service_name), self._get_action(), role, key))
        return original(self)

    with mock.patch.object(BaseResponse, "call_action", recording):
        yield seen


def stream_reader(endpoint_url: str, streams: str = "orders", **options: str) -> Any:
    """A ``KinesisStreamReader`` (driver side) with validated options, outside Spark."""
    from spark_integration.options import parse_options
    from spark_integration.readers import KinesisStreamReader

    parsed = parse_options({"streamName": streams, "endpointUrl": endpoint_url,
                            "region": "us-east-1", **options}, streaming=True)
    return KinesisStreamReader(parsed)


def executor_ids(reader: Any, start: dict[str, Any], end: dict[str, Any]) -> list[int]:
    """The ``id``\\ s an executor reads for the batch (start, end], in order: the partitions
    and the reader are pickled and unpickled on the way, as Spark ships them."""
    import pickle

    executor = pickle.loads(pickle.dumps(reader))
    ids = []
    for partition in reader.partitions(start, end):
        for batch in executor.read(pickle.loads(pickle.dumps(partition))):
            ids.extend(json.loads(d)["id"] for d in batch.column("data").to_pylist())
    return ids


def logged_offsets(reader: Any) -> list[dict[str, Any]]:
    """The offsets a query would log with ``reader``, from its initial offset until caught up."""
    offsets = [reader.initialOffset()]
    limit = reader.getDefaultReadLimit()
    while (end := reader.latestOffset(offsets[-1], limit)) != offsets[-1]:
        offsets.append(end)
    return offsets


