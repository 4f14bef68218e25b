"""How the running agent is observed: Prometheus metrics, /healthz and /readyz, JSON log lines."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from kubenexus.jsonlog import JsonFormatter


@contextlib.contextmanager
def json_logging(stream: Any, *, level: int = logging.INFO) -> Iterator[None]:
    """Every logger (ours, urllib3's, ...) writes JSON lines to ``stream`` while the block runs;
    other handlers (a test runner's capture) are left alone."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    previous_level = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(previous_level)


class AgentMetrics:
    """The agent's metrics, in their own registry so that tests and benchmarks can read them."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.discovery_seconds = Histogram(
            "kubenexus_agent_discovery_duration_seconds",
            "Time one topology discovery pass took (sysfs, NVML, kubelet).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=self.registry,
        )
        self.publish_results = Counter(
            "kubenexus_agent_publish_results",
            "Results per pass by target (node, nrt) and outcome (updated, unchanged, skipped, dry-run, failed).",
            ["target", "outcome"],
            registry=self.registry,
        )
        self.api_writes = Counter(
            "kubenexus_agent_api_writes",
            "Write requests sent to the Kubernetes API.",
            ["target"],
            registry=self.registry,
        )
        self.last_success = Gauge(
            "kubenexus_agent_last_publish_success_timestamp_seconds",
            "Unix time of the last pass whose every target was published (or already up to date).",
            registry=self.registry,
        )
        self.warnings = Gauge(
            "kubenexus_agent_discovery_warnings", "Warnings the last discovery pass reported.", registry=self.registry
        )


class Health:
    """Readiness: the last successful publish is at most ``window_s`` old. Thread-safe."""

    def __init__(self, window_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._window_s = window_s
        self._clock = clock
        self._last_success: float | None = None
        self._lock = threading.Lock()

    def mark_success(self) -> None:
        with self._lock:
            self._last_success = self._clock()

    def ready(self) -> bool:
        with self._lock:
            last = self._last_success
        return last is not None and self._clock() - last <= self._window_s


class HealthServer:
    """``/metrics``, ``/healthz`` (the process answers) and ``/readyz`` on a daemon thread."""

    def __init__(self, address: str, metrics: AgentMetrics, health: Health) -> None:
        host, port = parse_address(address)
        self._server = ThreadingHTTPServer((host, port), _handler(metrics, health))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="health-server", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def parse_address(address: str) -> tuple[str, int]:
    """``:9400`` (every interface), ``127.0.0.1:9400``, ``[::1]:9400``; port 0 picks a free one."""
    host, separator, port = address.rpartition(":")
    if not separator or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"metrics address {address!r} is not HOST:PORT or :PORT")
    return host.strip("[]"), int(port)


def _handler(metrics: AgentMetrics, health: Health) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._reply(200, b"ok\n")
            elif path == "/readyz":
                if health.ready():
                    self._reply(200, b"ok\n")
                else:
                    self._reply(503, b"no successful publish recently\n")
            else:
                self._reply(404, b"not found\n")

        def _reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # probes every few seconds would drown the agent's own log lines

    return Handler
