"""The agent's loop: discover -> kubelet availability -> encode -> publish, until told to stop.

A pass that fails anywhere leaves what was published before in place and is retried on the next
tick; nothing here exits on a transient error, so a broken API server or kubelet cannot turn into
a crash loop. SIGTERM and SIGINT end the loop between passes (or a retry's backoff) and the
published data stays: the next agent, or the placement service, keeps reading the last good state.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from types import FrameType

from agent.discovery import UnusableHostRoot, discover
from agent.hostfs import HostFS
from agent.publish import (
    Mode,
    Outcome,
    Publisher,
    PublishResult,
    RetryPolicy,
    Target,
    connect_nodes,
)
from agent.serving import AgentMetrics, Health
from agent.sources.kubelet import KubeletOverrides, ZoneReading, read_kubelet_settings, read_zone_resources
from agent.sources.nvml import load_nvml
from kubenexus.http_endpoint import HttpEndpoint
from kubenexus.jsonlog import json_logging
from kubenexus.kube.errors import ApiUnavailable
from kubenexus.topology.labels import encode_node_metadata
from kubenexus.topology.model import DiscoveryWarning, NodeTopology
from kubenexus.topology.nrt import encode_nrt
from kubenexus.topology.podfingerprint import METHOD_ALL

EXIT_OK = 0
EXIT_PUBLISH_FAILED = 1
EXIT_USAGE = 2

log = logging.getLogger("kubenexus.agent")


@dataclass(frozen=True)
class RunOptions:
    node_name: str
    host_root: str
    nvml: bool
    mode: str
    interval_s: float
    resync_s: float
    once: bool
    dry_run: bool
    kubelet_config: str
    topology_manager_policy: str | None
    topology_manager_scope: str | None
    pod_resources_socket: str | None
    allocatable_refresh_s: float
    metrics_address: str | None
    kubeconfig: str | None
    api_attempts: int


def run_agent(options: RunOptions, *, debug: bool = False, stop: threading.Event | None = None) -> int:
    with json_logging(sys.stderr, level=logging.DEBUG if debug else logging.INFO):
        return _run_agent(options, stop or threading.Event())


def _run_agent(options: RunOptions, stop: threading.Event) -> int:
    try:
        api = connect_nodes(options.kubeconfig)
    except ApiUnavailable as error:
        log.error("no Kubernetes API credentials", extra={"error": str(error)})
        return EXIT_USAGE
    metrics = AgentMetrics()
    # Ready while publishing keeps succeeding: three missed passes (or a minute) is an outage.
    health = Health(window_s=max(3 * options.interval_s, 60.0))
    server = None
    if options.metrics_address:
        try:
            server = HttpEndpoint(
                options.metrics_address,
                metrics.registry,
                ready=health.ready,
                not_ready="no successful publish recently",
            ).start()
        except (ValueError, OSError) as error:
            log.error("cannot serve metrics", extra={"address": options.metrics_address, "error": str(error)})
            return EXIT_USAGE
        log.info("serving /metrics, /healthz, /readyz", extra={"address": options.metrics_address, "port": server.port})
    loop = _Loop(
        options,
        metrics=metrics,
        health=health,
        publisher=Publisher(
            api,
            options.node_name,
            resync_s=options.resync_s,
            dry_run=options.dry_run,
            retry=RetryPolicy(attempts=options.api_attempts),
            sleep=stop.wait,
        ),
    )
    try:
        with _stop_on_signals(stop):
            return loop.run(stop)
    finally:
        if server is not None:
            server.close()


class _Loop:
    def __init__(self, options: RunOptions, *, metrics: AgentMetrics, health: Health, publisher: Publisher) -> None:
        self._options = options
        self._mode = Mode(options.mode)
        self._metrics = metrics
        self._health = health
        self._publisher = publisher
        self._fs = HostFS(options.host_root)
        self._nvml = load_nvml()[0] if options.nvml else None
        self._hardware: NodeTopology | None = None
        self._discovered_at = -float("inf")
        self._last_good_zones: ZoneReading | None = None
        self._dropped: tuple[str, ...] = ()
        self._left_to: tuple[str, ...] | None = None  # the NRT's other writers, as last warned about

    def run(self, stop: threading.Event) -> int:
        log.info(
            "agent started",
            extra={"node": self._options.node_name, "mode": str(self._mode), "dry_run": self._options.dry_run},
        )
        while True:
            try:
                ok = self._pass()
            except UnusableHostRoot as error:
                log.error("unusable host root", extra={"error": str(error)})
                if self._options.once:
                    return EXIT_USAGE
                ok = False
            if self._options.once:
                return EXIT_OK if ok else EXIT_PUBLISH_FAILED
            if stop.wait(min(self._options.interval_s, self._options.allocatable_refresh_s)):
                log.info("stopping; the published topology stays in place")
                return EXIT_OK

    def _pass(self) -> bool:
        started = time.perf_counter()
        try:
            topology = self._discover()
        except UnusableHostRoot:
            raise
        except Exception:  # a bug or a host surprise: skip this pass, keep the last good data
            log.exception("discovery failed; the last published topology stays in place")
            return False
        self._metrics.discovery_seconds.observe(time.perf_counter() - started)
        self._metrics.warnings.set(len(topology.warnings))

        metadata = None
        if self._mode.labels:
            metadata = encode_node_metadata(topology)
            if metadata.dropped != self._dropped:  # once per change, not once a minute
                for key in metadata.dropped:
                    log.warning("label dropped: not a valid Kubernetes label", extra={"key": key})
                self._dropped = metadata.dropped
        nrt = encode_nrt(topology, node_name=self._options.node_name) if self._mode.nrt else None

        results = self._publisher.publish(metadata=metadata, nrt=nrt)
        for result in results:
            self._report(result)
        ok = all(result.outcome is not Outcome.FAILED for result in results)
        if ok:
            self._health.mark_success()
            self._metrics.last_success.set(time.time())
        return ok

    def _discover(self) -> NodeTopology:
        """The hardware (every --interval) with the kubelet's view (every tick: --allocatable-refresh).

        The kubelet changes faster than the hardware: device plugins register minutes after boot and
        pods come and go, so a tick between two discoveries re-reads only the kubelet.
        """
        now = time.monotonic()
        if self._hardware is None or now - self._discovered_at >= self._options.interval_s:
            # `run` describes the machine it runs on, so NVML may describe the host root too (the
            # DaemonSet mounts the host's /sys at /host); --no-nvml keeps a snapshot honest in tests.
            self._hardware = discover(self._fs, nvml=self._nvml, nvml_with_host_root=True)
            self._discovered_at = now
        hardware = self._hardware
        settings = read_kubelet_settings(
            self._fs,
            self._options.kubelet_config,
            overrides=KubeletOverrides(self._options.topology_manager_policy, self._options.topology_manager_scope),
        )
        zones = self._zones(hardware)
        return replace(
            hardware,
            kubelet=settings.settings,
            zone_resources=zones.zone_resources,
            pods_fingerprint=zones.pods_fingerprint,
            pods_fingerprint_method=METHOD_ALL if zones.pods_fingerprint is not None else None,
            warnings=hardware.warnings + settings.warnings + zones.warnings,
        )

    def _zones(self, hardware: NodeTopology) -> ZoneReading:
        if self._options.pod_resources_socket is None:
            return ZoneReading((), None)
        reading = read_zone_resources(hardware, self._options.pod_resources_socket)
        if reading.pods_fingerprint is not None:
            self._last_good_zones = reading
            return reading
        if self._last_good_zones is None:
            return reading
        # A kubelet restart or a slow answer must not wipe the zones the scheduler relies on: keep
        # the last reading, and say so in the warnings.
        stale = DiscoveryWarning("kubelet", "PodResources unreadable; zones are from the last successful reading")
        return replace(self._last_good_zones, warnings=(*reading.warnings, stale))

    def _report(self, result: PublishResult) -> None:
        self._metrics.publish_results.labels(str(result.target), str(result.outcome)).inc()
        self._metrics.api_writes.labels(str(result.target)).inc(result.writes)
        fields = {
            "target": str(result.target),
            "outcome": str(result.outcome),
            "attempts": result.attempts,
            "writes": result.writes,
        }
        if result.outcome is Outcome.FAILED:
            log.error("publish failed; the last published data stays", extra={**fields, "error": result.error})
        elif result.outcome is Outcome.LEFT:
            if result.left_to != self._left_to:  # once per change of writer, not once a minute
                self._warn_left(result.left_to, fields)
                self._left_to = result.left_to
        elif result.outcome is Outcome.SKIPPED:
            log.debug("nothing changed since the last publish", extra=fields)
        else:
            log.info("published", extra=fields)
            if result.target is Target.NRT:
                self._left_to = None

    def _warn_left(self, writers: tuple[str, ...], fields: dict[str, object]) -> None:
        by = ", ".join(writers) or "another writer"
        if self._mode.labels:
            log.warning(
                f"the node's NodeResourceTopology is written by {by} (Node Feature Discovery?): left as it is; "
                "the placement service reads this node's model from the Node's annotations",
                extra={**fields, "writers": list(writers)},
            )
        else:
            log.warning(
                f"the node's NodeResourceTopology is written by {by} (Node Feature Discovery?): left as it is, "
                "and with --mode=nrt nothing publishes this node's model: the placement service reads that "
                "NRT's NUMA cells and amounts only; run with --mode=both",
                extra={**fields, "writers": list(writers)},
            )


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM/SIGINT set ``stop``; the previous handlers come back afterwards (tests call ``main``)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only; whoever runs us elsewhere owns ``stop``
        return

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal received", extra={"signal": signal.Signals(signum).name})
        stop.set()

    previous = {signum: signal.signal(signum, request_stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
