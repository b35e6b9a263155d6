"""README's "Run it locally" section, run as a newcomer would: its Python files and its
``python -c`` one-liners, with only the ports changed (8080 and 5000 may be taken here)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from benchmarks.moto_process import MotoProcess
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parent.parent
STANDALONE = "http://127.0.0.1:5000"


def section() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("\n## Run it locally\n", 1)[1].split("\n## ", 1)[0]


def python_files() -> dict[str, str]:
    """``# name.py: ...``-headed python blocks of the section, by file name."""
    blocks = re.findall(r"```python\n(.*?)```", section(), re.S)
    return {re.match(r"# (\S+\.py):", b).group(1): b for b in blocks}  # type: ignore[union-attr]


def one_liners() -> list[str]:
    """The ``python -c "..."`` commands of the section's bash blocks, in order."""
    bash = "\n".join(re.findall(r"```bash\n(.*?)```", section(), re.S))
    return [line.split("  #")[0].strip() for line in bash.splitlines() if line.startswith('python -c "')]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Run:
    """A snippet running in its own Python process; stdout lines collected as they come."""

    def __init__(self, path: Path, env: dict[str, str]):
        self.proc = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env, cwd=path.parent)
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    @staticmethod
    def _pump(stream: Any, sink: list[str]) -> None:
        for line in stream:
            sink.append(line.rstrip("\n"))

    def wait_for(self, predicate: Any, timeout: float, what: str) -> Any:
        """``eventually``, with the process's exit code and output in the failure message."""
        try:
            return eventually(predicate, timeout, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; exit code {self.proc.poll()}\nstdout:\n"
                                 + "\n".join(self.out[-20:]) + "\nstderr:\n"
                                 + "\n".join(self.err[-60:])) from None

    def stop(self) -> int:
        """Ctrl-C, as the README says; the exit code."""
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(60)


@contextmanager
def running(path: Path, env: dict[str, str]) -> Iterator[Run]:
    run = Run(path, env)
    try:
        yield run
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait(10)


def status(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as response:
        data: dict[str, Any] = json.loads(response.read())
        return data


def processed(state: dict[str, Any], n: int) -> dict[str, Any] | None:
    """``state`` once its shards count ``n`` records processed."""
    return state if sum(s["records_processed"] for s in state["shards"]) == n else None


def printed_events(out: list[str]) -> list[str]:
    """The ``b'event N'`` payloads printed, in order. Two shard threads print at once, and
    ``print`` writes the text and the newline separately, so lines may interleave: match in
    the whole output, not line by line."""
    return re.findall(r"shardId-\d+ \d+ (b'event \d+')", "".join(out))


def env_without_aws() -> dict[str, str]:
    """The test run's environment minus AWS settings (the README exports its own)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}


def test_the_section_has_what_a_newcomer_needs() -> None:
    text = section()
    for phrase in ("[testing]", "git+https://", "pip wheel", "moto_server", "AWS_ACCESS_KEY_ID=testing",
                   "/status", "configure_logging=False", "setup_logging"):
        assert phrase in text, phrase
    assert set(python_files()) == {"local_run.py", "worker.py"}
    assert len(one_liners()) == 2


@pytest.mark.slow
def test_local_run_py_processes_the_records_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    code = python_files()["local_run.py"]
    assert "health_port=8080" in code
    script = tmp_path / "local_run.py"
    script.write_text(code.replace("health_port=8080", f"health_port={port}"))
    with running(script, env_without_aws()) as run:
        run.wait_for(lambda: len(printed_events(run.out)) >= 10, 120, "10 records printed")
        state = run.wait_for(lambda: processed(status(port), 10), 30, "/status counts 10 records")
        assert len(state["held"]) == 2 and state["ready"]
        assert run.stop() == 0, "\n".join(run.err)
    assert sorted(printed_events(run.out)) == sorted(f"b'event {i}'" for i in range(10)), "each record once"
    logs = "\n".join(run.err)
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO +kinesis\.consumer\.worker\.worker .* started: "
                     r"table orders-app-leases", logs, re.M), logs
    assert "acquired free lease orders-app/orders/shardId-000000000000" in logs
    assert "stopped (clean)" in logs
    assert "HTTP/1.1" not in logs, "no per-request lines of the embedded server"


@pytest.mark.slow
def test_worker_py_against_a_standalone_server_with_the_one_line_producer(tmp_path: Path) -> None:
    port = free_port()
    code = python_files()["worker.py"]
    assert STANDALONE in code and "health_port=8080" in code
    with MotoProcess() as server:  # `moto_server` in its own process, as in the README
        env = {**env_without_aws(), "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        create, produce = one_liners()
        shell(create, server.endpoint_url, env)
        script = tmp_path / "worker.py"
        script.write_text(code.replace(STANDALONE, server.endpoint_url)
                          .replace("health_port=8080", f"health_port={port}"))
        with running(script, env) as run:
            run.wait_for(lambda: _ready(port), 60, "the worker is ready")
            shell(produce, server.endpoint_url, env)
            run.wait_for(lambda: any("b'hello'" in line for line in run.out), 60, "the record printed")
            assert run.stop() == 0, "\n".join(run.err)
    assert "stopped (clean)" in "\n".join(run.err)


def shell(command: str, endpoint: str, env: dict[str, str]) -> None:
    """Run a README ``python -c`` line with this interpreter, against ``endpoint``."""
    argv = shlex.split(command.replace(STANDALONE, endpoint))
    subprocess.run([sys.executable, *argv[1:]], env=env, check=True, timeout=60)


def _ready(port: int) -> bool:
    try:
        return bool(status(port)["ready"])
    except OSError:
        return False
