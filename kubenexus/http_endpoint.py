"""One small HTTP server for both programs: Prometheus ``/metrics``, ``/healthz`` and ``/readyz``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kubenexus.addresses import parse_address


class HttpEndpoint:
    """``/metrics``, ``/healthz`` (the process answers) and ``/readyz`` (``ready()``) on a daemon thread."""

    def __init__(self, address: str, registry: CollectorRegistry, *, ready: Callable[[], bool], not_ready: str) -> None:
        host, port = parse_address(address)
        self._server = ThreadingHTTPServer((host, port), _handler(registry, ready, f"{not_ready}\n".encode()))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="http-endpoint", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> HttpEndpoint:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(registry: CollectorRegistry, ready: Callable[[], bool], not_ready: bytes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._reply(200, b"ok\n")
            elif path == "/readyz":
                if ready():
                    self._reply(200, b"ok\n")
                else:
                    self._reply(503, not_ready)
            else:
                self._reply(404, b"not found\n")

        def _reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # probes every few seconds would drown the program's own log lines

    return Handler
