"""SIGTERM in the driver-side Python process of a group-mode query runs a graceful stop.

PySpark ends that process (the streaming source runner) with SIGTERM on ``query.stop()``
without calling the reader's ``stop()``; see ``spark_integration/sigterm.py``. Real signals
need a process of their own: each case runs a child interpreter and signals it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest

from kinesis.lease_loop.table.leases import LeaseTable
from kinesis.lease_loop.table.model import Checkpoint
from kinesis.testing import LocalAWS
from spark_integration.errors import InvalidOptionError
from spark_integration.group import wait_for_handover
from spark_integration.sigterm import SigtermStop
from tests.spark_support import create_stream, put_json
from tests.support.paths import ROOT


def _child(code: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def _line(proc: subprocess.Popen[str]) -> str:
    """The child's next line, read from the pipe itself one byte at a time.

    Not ``proc.stdout.readline()``: that fills the text wrapper's buffer with whatever the
    child has written so far (often the next lines too), and ``communicate()`` in
    :func:`_finish` reads the pipe directly, so those lines would be lost.
    """
    assert proc.stdout is not None
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(proc.stdout.fileno(), 1)
        if not byte:
            proc.wait(30)
            raise AssertionError(f"the child exited ({proc.returncode}) before it was ready")
        line += byte
    return line.decode().strip()


def _finish(proc: subprocess.Popen[str]) -> list[str]:
    out, _ = proc.communicate(timeout=60)
    return out.split()


PRELUDE = """
    import os, signal, sys
    from spark_integration.sigterm import SigtermStop
    def say(word):
        print(word, flush=True)
"""


def test_sigterm_while_idle_runs_the_stop_then_terminates_by_sigterm() -> None:
    proc = _child(PRELUDE + """
    def stop():
        say("stopping")
        os.kill(os.getpid(), signal.SIGTERM)  # PySpark sends a second one: ignored
        say("stopped")
    guard = SigtermStop(stop)
    say("installed" if guard.install() else "not-installed")
    sys.stdin.read()  # blocked in a read, like the runner waiting for the JVM
    say("not reached")
    """)
    assert _line(proc) == "installed"
    proc.send_signal(signal.SIGTERM)
    assert _finish(proc) == ["stopping", "stopped"]
    assert proc.returncode == -signal.SIGTERM  # terminated as SIGTERM would have


def test_sigterm_inside_a_busy_section_acts_when_the_section_ends() -> None:
    proc = _child(PRELUDE + """
    guard = SigtermStop(lambda: say("stop"))
    guard.install()
    with guard.busy():
        with guard.busy():
            os.kill(os.getpid(), signal.SIGTERM)
            say("inner-done")
        say("outer-done")
    say("not reached")
    """)
    assert _finish(proc) == ["inner-done", "outer-done", "stop"]
    assert proc.returncode == -signal.SIGTERM


def test_a_previous_python_handler_is_called_after_the_stop() -> None:
    proc = _child(PRELUDE + """
    def previous(signum, frame):
        say(f"previous-{signum}")
    signal.signal(signal.SIGTERM, previous)
    guard = SigtermStop(lambda: say("stop"))
    guard.install()
    os.kill(os.getpid(), signal.SIGTERM)
    say("handler-restored" if signal.getsignal(signal.SIGTERM) is previous else "still-ours")
    os.kill(os.getpid(), signal.SIGTERM)  # now the previous handler's alone
    say("done")
    """)
    assert _finish(proc) == ["stop", f"previous-{int(signal.SIGTERM)}", "handler-restored",
                             f"previous-{int(signal.SIGTERM)}", "done"]
    assert proc.returncode == 0


def test_a_failing_stop_still_terminates() -> None:
    proc = _child(PRELUDE + """
    def stop():
        raise RuntimeError("boom")
    guard = SigtermStop(stop)
    guard.install()
    os.kill(os.getpid(), signal.SIGTERM)
    say("not reached")
    """)
    assert _finish(proc) == []
    assert proc.returncode == -signal.SIGTERM


def test_install_leaves_an_ignored_sigterm_alone_and_uninstall_restores() -> None:
    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        assert not SigtermStop(lambda: None).install()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        guard = SigtermStop(lambda: None)
        assert guard.install() and guard.installed
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
        guard.uninstall()
        guard.uninstall()  # idempotent
        assert not guard.installed
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_install_off_the_main_thread_changes_nothing() -> None:
    before = signal.getsignal(signal.SIGTERM)
    result: list[bool] = []
    worker = threading.Thread(target=lambda: result.append(SigtermStop(lambda: None).install()))
    worker.start()
    worker.join()
    assert result == [False]
    assert signal.getsignal(signal.SIGTERM) == before


READER = """
    import json, sys, time
    from spark_integration.options import parse_options
    from spark_integration.readers import KinesisStreamReader

    options = parse_options(json.loads(OPTIONS), streaming=True)
    reader = KinesisStreamReader(options)
    limit = reader.getDefaultReadLimit()
    start = reader.initialOffset()
    deadline = time.monotonic() + 30
    end1 = reader.latestOffset(start, limit)
    while end1 == start:  # until the lease loop has taken the shard's lease
        assert time.monotonic() < deadline, "the reader never took the lease"
        time.sleep(0.05)
        end1 = reader.latestOffset(start, limit)
    reader.partitions(start, end1)
    reader.commit(end1)  # batch 1 reached the sink: its end is the lease's checkpoint
    end2 = reader.latestOffset(end1, limit)  # batch 2 is planned, never committed
    print(json.dumps({"committed": end1, "planned": end2}), flush=True)
    sys.stdin.read()  # waiting for the JVM, as the streaming source runner does
"""


def _options(aws: LocalAWS) -> dict[str, str]:
    return {
        "streamName": "orders", "endpointUrl": aws.endpoint_url, "region": "us-east-1",
        "initialPosition": "TRIM_HORIZON", "maxRecordsPerShard": "3",
        "leaseTable": "spark-leases", "applicationName": "app", "membership": "static",
        "members": "m1", "memberId": "m1", "leaseDuration": "60s",
    }


def _seq(offset: dict[str, Any]) -> str:
    (entry,) = offset.values()
    return str(entry["seq"])


@pytest.mark.slow
def test_sigterm_hands_the_lease_on_with_the_last_committed_checkpoint(aws: LocalAWS) -> None:
    kinesis = aws.client("kinesis")
    create_stream(kinesis, "orders", 1)
    put_json(kinesis, "orders", [{"id": i} for i in range(10)])
    options = _options(aws)
    code = READER.replace("json.loads(OPTIONS)", repr(options))
    proc = _child(code, env={"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
    offsets = json.loads(_line(proc))
    committed, planned = _seq(offsets["committed"]), _seq(offsets["planned"])
    assert int(planned) > int(committed)
    table = LeaseTable.open(aws.client("dynamodb"), "spark-leases")
    key = "app/orders/shardId-000000000000"
    held = table.get(key)
    assert held is not None and held.owner == "m1"
    assert held.checkpoint == Checkpoint(committed)
    assert wait_for_handover(options, timeout=0) == [key]

    proc.send_signal(signal.SIGTERM)
    assert wait_for_handover(options, timeout=30) == []
    _finish(proc)
    assert proc.returncode == -signal.SIGTERM
    lease = table.get(key)
    assert lease is not None
    # m1 was the only member: the graceful stop released the lease (no wait for expiry),
    # keeping the checkpoint of the committed batch, never the planned one.
    assert lease.owner is None
    assert lease.checkpoint == Checkpoint(committed)


def test_wait_for_handover_needs_group_options() -> None:
    with pytest.raises(InvalidOptionError, match="leaseTable"):
        wait_for_handover({"streamName": "orders", "region": "us-east-1"}, timeout=0)
    with pytest.raises(ValueError, match="timeout"):
        wait_for_handover({"streamName": "orders"}, timeout=-1)


def test_a_reinstall_after_an_uninstall_off_the_main_thread_still_terminates() -> None:
    proc = _child(PRELUDE + """
    import threading
    guard = SigtermStop(lambda: say("stop"))
    guard.install()
    worker = threading.Thread(target=guard.uninstall)  # cannot touch the handler from there
    worker.start(); worker.join()
    guard.install()  # must not record its own handler as "the previous one"
    say("ready")
    os.kill(os.getpid(), signal.SIGTERM)
    say("still-alive")
    """)
    assert _line(proc) == "ready"
    assert _finish(proc) == ["stop"]  # the stop ran, then SIGTERM's default ended the process
    assert proc.returncode == -signal.SIGTERM
