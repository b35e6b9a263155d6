"""Logs a person can follow: timestamps, lease moves naming the shard and the other member,
read errors logged once in full and then one line each, and logging set up only on request."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from typing import Any

import pytest

from kinesis.consumer.worker import worker as worker_module
from kinesis.testing import LocalAWS
from tests.support.waiting import eventually
from tests.support.worker_journal import Journal, make_worker, put_records

COORDINATOR = "kinesis.lease_loop"  # the lease loop's modules log under it
CONSUMER = "kinesis.consumer.shard.consumer"
SHARD = "app/orders/shardId-000000000000"


def lines(caplog: pytest.LogCaptureFixture, logger: str, needle: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith(logger) and needle in r.getMessage()]


def test_setup_logging_adds_timestamps_once_and_never_overrides_the_application() -> None:
    code = (
        "import logging, sys, kinesis\n"
        "first = kinesis.setup_logging(stream=sys.stdout)\n"
        "second = kinesis.setup_logging(stream=sys.stdout)\n"
        "logging.getLogger('kinesis.lease_loop.coordinator').info('w1: acquired lease x')\n"
        "logging.getLogger('botocore.endpoint').info('chatty')\n"
        "print(first, second)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO +kinesis\.lease_loop\.coordinator "
                     r"\[MainThread\] w1: acquired lease x$", out, re.M), out
    assert "chatty" not in out, "botocore is raised to WARNING"
    assert out.strip().endswith("True False"), "the second call changes nothing"
    app_configured = ("import logging, sys, kinesis\n"
                      "logging.basicConfig(stream=sys.stdout, format='APP %(message)s', level=logging.INFO)\n"
                      "print(kinesis.setup_logging())\n"
                      "logging.getLogger('kinesis').info('hello')\n")
    out = subprocess.run([sys.executable, "-c", app_configured], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["False", "APP", "hello"], out


@pytest.mark.parametrize("configure", [True, False])
def test_run_sets_up_logging_unless_told_not_to(aws: LocalAWS, configure: bool,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(worker_module, "setup_logging", lambda *a: calls.append(a) or True)
    aws.client("kinesis").create_stream(StreamName="orders", ShardCount=1)
    worker = make_worker(aws, Journal(), "w1")
    worker.request_stop()  # run() starts, sees the stop request and stops gracefully
    assert worker.run(install_signal_handlers=False, configure_logging=configure)
    assert calls == ([()] if configure else [])


def test_lease_moves_are_logged_at_info_with_the_shard_and_the_other_member(
        aws: LocalAWS, caplog: pytest.LogCaptureFixture) -> None:
    aws.client("kinesis").create_stream(StreamName="orders", ShardCount=1)
    journal = Journal()
    timing = {"lease_duration": 1.5, "tick_interval": 0.5}
    caplog.set_level(logging.INFO, logger=COORDINATOR)
    w1 = make_worker(aws, journal, "w1", **timing).start()
    w2 = None
    try:
        eventually(lambda: [m for m in lines(caplog, COORDINATOR, f"lease {SHARD}")
                            if re.match(r"w1: acquired (free|new) lease", m)], 30, "w1 acquires")
        w2 = make_worker(aws, journal, "w2", **timing).start()
        # w1 must see w2 before it stops, or it has nobody to hand off to and releases the lease
        eventually(lambda: "w2" in w1.status().members, 30, "w1 sees w2")
        # one shard, two members: the planner may keep it on w1 or hand it to w2; stop w1 gracefully
        # so it surely moves by hand-off, then crash w2 and let w1's successor take it over
        w1.stop(graceful=True, timeout=10)
        eventually(lambda: lines(caplog, COORDINATOR, f"w2: adopted lease {SHARD} handed off by w1"),
                   30, "w2 adopts from w1")
        assert lines(caplog, COORDINATOR, f"w1: handed {SHARD} off to w2")
        w3 = make_worker(aws, journal, "w3", **timing).start()
        try:
            eventually(lambda: "w3" in w3.status().members, 30, "w3 listed")
            w2.stop(graceful=False)  # a crash: nothing handed off, the lease expires
            w2 = None
            eventually(lambda: lines(caplog, COORDINATOR, f"w3: took over lease {SHARD} from w2"),
                       30, "w3 takes over from w2")
        finally:
            w3.stop(graceful=False, timeout=5)
    finally:
        for w in (w1, w2):
            if w is not None:
                w.stop(graceful=False, timeout=5)
    moves = [r for r in caplog.records if r.name.startswith(COORDINATOR)
             and re.search(r"acquired lease|adopted lease|handed .* off to|took over lease", r.getMessage())]
    assert moves and all(r.levelno == logging.INFO for r in moves)


def test_a_deleted_stream_is_logged_in_full_once_then_one_line_per_retry_without_restarts(
        aws: LocalAWS, caplog: pytest.LogCaptureFixture) -> None:
    kinesis = aws.client("kinesis")
    kinesis.create_stream(StreamName="orders", ShardCount=1)
    put_records(kinesis, "orders", 3)
    journal = Journal()
    caplog.set_level(logging.INFO, logger=CONSUMER)
    worker = make_worker(aws, journal, "w1").start()
    try:
        assert journal.wait_for(lambda es: sum(e.kind == "record" for e in es) >= 3, 30)
        kinesis.delete_stream(StreamName="orders")
        eventually(lambda: worker.status().worker_counters["read_errors"] >= 3, 30, "3 failed reads")
        counters = worker.status().worker_counters
        held = worker.status().held
    finally:
        worker.stop(graceful=False, timeout=5)
    assert counters["consumers_started"] == 1, "the consumer kept its lease instead of restarting"
    assert held == (SHARD,)
    failed = [r for r in caplog.records if r.name == CONSUMER and "read failed" in r.getMessage()]
    first, later = failed[0].getMessage(), [r.getMessage() for r in failed[1:]]
    assert "StreamNotFoundError" in first and "'orders'" in first and "the lease is kept" in first
    assert later and all(m.endswith("StreamNotFoundError") and "read failed again" in m for m in later)
    waits = [float(m) for m in re.findall(r"retrying in ([\d.]+) s", " ".join(r.getMessage() for r in failed))]
    assert waits == sorted(waits) and waits[-1] > waits[0], f"backs off: {waits}"
    assert not [r for r in caplog.records if r.exc_info], "no traceback for a named error"


def test_a_member_back_from_a_pause_logs_each_lost_lease_with_its_new_owner(
        aws: LocalAWS, caplog: pytest.LogCaptureFixture) -> None:
    from kinesis.lease_loop.table.leases import LeaseTable
    from tests.coordinator_fleet import Fleet, shared_client

    table = LeaseTable.open(shared_client(aws), "logging-test")
    fleet = Fleet(table, [f"queue-{i}" for i in range(4)], ["a", "b"], replicas=1)
    fleet.round()
    paused = set(fleet.coordinators["b"].held_keys())
    assert paused
    fleet.crash("b")  # b stops ticking (a long GC pause, SIGSTOP): a takes its leases over
    caplog.set_level(logging.INFO, logger=COORDINATOR)
    for _ in range(20):
        fleet.round()
        if set(fleet.coordinators["a"].held_keys()) >= paused:
            break
    taken = lines(caplog, COORDINATOR, "a: took over lease")
    assert {m.split("took over lease ")[1].split(" from b,")[0] for m in taken} == paused
    fleet.crashed.discard("b")  # b wakes up and renews what it thinks it holds
    fleet.tick("b")
    lost = [r for r in caplog.records if r.name.startswith(COORDINATOR) and r.getMessage().startswith("b: lost lease")]
    assert {r.getMessage().split()[3] for r in lost} == paused
    assert all("now owner 'a'" in r.getMessage() and r.levelno == logging.WARNING for r in lost)
