"""How the running agent is observed: its Prometheus metrics and its readiness (``kubenexus.http_endpoint``
serves them, with /healthz)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


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
