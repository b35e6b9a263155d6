"""A moto server in its own process, for benchmarks.

Benchmarks that load the server hard (a fleet of members, or a reader measured against a
baseline) run it in a separate process: an in-process server shares the GIL with the code
being measured, so the figures would mostly measure moto.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any

from kinesis.testing import client_for


class MotoProcess:
    """A moto server in its own process (its own GIL: a fleet of members would saturate an
    in-process server and the figures would measure moto, not the lease loop)."""

    def __init__(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.endpoint_url = f"http://127.0.0.1:{port}"
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    raise RuntimeError("the moto server process did not start") from None
                time.sleep(0.1)

    def client(self, service: str) -> Any:
        return client_for(service, self.endpoint_url)

    def __enter__(self) -> MotoProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.terminate()
        self._proc.wait(10)
