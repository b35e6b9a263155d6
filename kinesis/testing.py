"""Test doubles: an embedded AWS (moto server) on 127.0.0.1 for tests, demos and local runs,
a fake clock (:class:`FakeClock`) and a checkpointer kept in memory (:class:`InMemoryCheckpointer`).

boto3 talks real HTTP to the embedded AWS, exactly as to AWS except for ``endpoint_url``.
Needs the ``testing`` extra (``pip install 'kinesis-hashring[testing]'``: moto's server only).
"""

from __future__ import annotations

import logging
import urllib.request
from typing import Any

import boto3
from botocore.config import Config

from kinesis.consumer.shard.processor import InMemoryCheckpointer as InMemoryCheckpointer
from kinesis.errors import ConfigurationError
from kinesis.lease_loop.timing import FakeClock as FakeClock

DEFAULT_REGION = "us-east-1"
FAKE_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


class LocalAWS:
    """A moto server running in a background thread of this process."""

    def __init__(self, region: str = DEFAULT_REGION, port: int = 0):
        try:
            from moto.server import ThreadedMotoServer
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ConfigurationError(
                "the embedded AWS needs moto's server: pip install 'kinesis-hashring[testing]'"
            ) from exc
        self.region = region
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.endpoint_url = ""

    def start(self) -> LocalAWS:
        """Start serving; ``endpoint_url`` is set once this returns."""
        werkzeug = logging.getLogger("werkzeug")
        if werkzeug.level == logging.NOTSET:  # one INFO line per request otherwise
            werkzeug.setLevel(logging.WARNING)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.stop()

    def reset(self) -> None:
        """Forget every resource (streams, tables, records)."""
        req = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass

    def client(self, service: str, **kwargs: Any) -> Any:
        """A boto3 client for ``service`` pointed at this server."""
        return client_for(service, self.endpoint_url, self.region, **kwargs)

    def __enter__(self) -> LocalAWS:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def client_for(service: str, endpoint_url: str, region: str = DEFAULT_REGION, **kwargs: Any) -> Any:
    """A boto3 client with dummy credentials for a local endpoint (32 pooled connections,
    so several coordinators' writer threads can share it)."""
    kwargs.setdefault("config", Config(max_pool_connections=32))
    return boto3.session.Session(region_name=region, **FAKE_CREDENTIALS).client(
        service, endpoint_url=endpoint_url, **kwargs
    )
