"""A moto server in its own process with ``tests/support/moto_kinesis.py``'s resharding fixes
applied (the patch changes moto's classes in the process it runs in, so it is applied here,
in the server's process), for the chaos suite's split and merge faults.

    python tests/chaos/moto_resharding.py -H 127.0.0.1 -p PORT
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kinesis.testing import client_for  # noqa: E402


class ReshardingMoto:
    """This script as a server process (like ``benchmarks/moto_process.MotoProcess``)."""

    def __init__(self, start_timeout: float = 60.0) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.endpoint_url = f"http://127.0.0.1:{port}"
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(ROOT),
        )
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    self._proc.kill()
                    raise RuntimeError("the moto server process did not start") from None
                time.sleep(0.1)

    def client(self, service: str) -> Any:
        return client_for(service, self.endpoint_url)

    def __enter__(self) -> ReshardingMoto:
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def main(argv: list[str]) -> None:
    from moto.server import main as serve

    from tests.support.moto_kinesis import kinesis_resharding

    with kinesis_resharding():
        serve(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
