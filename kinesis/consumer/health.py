"""HTTP health endpoints for Kubernetes probes (stdlib ``http.server`` on a daemon thread).

=============== =============================================================================
``/livez``      200 while the lease loop ticks (the last tick is younger than
                ``liveness_timeout``), else 503: a stuck worker gets restarted. An
                unreachable table does not fail it (a restart would not help).
                Aliases: ``/healthz``, ``/live``.
``/readyz``     200 while the worker can do its work: it runs, has ticked, read the lease
                table and the member list within ``readiness_timeout`` and (with
                ``DynamoDBMembership``) is in the member list; 503 with the reason
                otherwise (table unreachable, membership stale, stopping). Alias: ``/ready``.
``/status``     the worker's :meth:`~kinesis.consumer.worker.Worker.status` as JSON.
``/metrics``    Prometheus text format (404 without the ``metrics`` extra).
=============== =============================================================================

Example probes::

    livenessProbe:  {httpGet: {path: /livez,  port: 8080}, periodSeconds: 10}
    readinessProbe: {httpGet: {path: /readyz, port: 8080}, periodSeconds: 5}
"""

from __future__ import annotations

import errno
import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from kinesis.errors import HealthServerError

log = logging.getLogger(__name__)


def _explain_bind_error(host: str, port: int, exc: OSError) -> str:
    where = f"the health server cannot listen on {host}:{port} ({exc.strerror or exc})"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{where}: WorkerConfig.health_port {port} is already in use, probably by another "
            "Worker in this process or pod. Give each Worker its own health_port, 0 for any free "
            "port, or None for no health server"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{where}: WorkerConfig.health_host {host!r} is not an address of this machine (use 0.0.0.0)"
    if exc.errno == errno.EACCES:
        return f"{where}: ports below 1024 need privileges; choose a WorkerConfig.health_port >= 1024"
    return f"{where}: check WorkerConfig.health_host and health_port"


class HealthSource(Protocol):
    """What the server asks (a :class:`~kinesis.consumer.worker.Worker`)."""

    def is_live(self) -> bool: ...

    def is_ready(self) -> bool: ...

    def status_dict(self) -> dict[str, Any]: ...

    def metrics_text(self) -> tuple[bytes, str] | None: ...


class HealthServer:
    """Serves the probes of one worker on ``host:port`` (port 0: any free port)."""

    def __init__(self, source: HealthSource, host: str = "0.0.0.0", port: int = 8080):
        self.source = source
        handler = _handler(source)
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise HealthServerError(_explain_bind_error(host, port, exc)) from exc
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{self.port}"

    def start(self) -> HealthServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, name="worker-health", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()


def _handler(source: HealthSource) -> type[BaseHTTPRequestHandler]:
    def probe(check: Callable[[], bool | tuple[bool, str]], name: str) -> tuple[int, bytes, str]:
        why = ""
        try:
            result = check()
            ok, why = result if isinstance(result, tuple) else (result, "")
        except Exception as exc:  # a probe never crashes the server
            log.warning("%s probe failed: %s", name, exc)
            ok, why = False, f"probe raised {type(exc).__name__}"
        if ok:
            return 200, b"ok\n", "text/plain"
        return 503, (f"not {name}: {why}\n" if why else f"not {name}\n").encode(), "text/plain"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            if path in ("/livez", "/healthz", "/live"):
                code, body, ctype = probe(source.is_live, "live")
            elif path in ("/readyz", "/ready"):
                code, body, ctype = probe(getattr(source, "readiness", source.is_ready), "ready")
            elif path == "/status":
                code, body, ctype = 200, json.dumps(source.status_dict(), indent=2).encode(), "application/json"
            elif path == "/metrics":
                rendered = source.metrics_text()
                if rendered is None:
                    code, body, ctype = 404, b"metrics need prometheus_client (the 'metrics' extra)\n", "text/plain"
                else:
                    body, ctype = rendered
                    code = 200
            else:
                code, body, ctype = 404, b"try /livez, /readyz, /status or /metrics\n", "text/plain"
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("health: " + format, *args)

    return Handler
