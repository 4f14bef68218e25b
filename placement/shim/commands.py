"""Entry points for ``kubenexus-placement extender`` and ``kubenexus-placement binder``.

``placement.main`` owns the parser: it calls ``placement.shim.flags``' ``add_extender_arguments`` /
``add_binder_arguments`` on a sub-parser and ``run_extender`` / ``run_binder`` with the parsed arguments.

Each ``run_*`` returns an exit code and never raises for a user's mistake: bad flags, missing credentials
or an unusable TLS file are one log line and exit code 2 (1 for an API that cannot be reached at all).
"""

from __future__ import annotations

import argparse
import logging
import signal
import ssl
import threading
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, ProcessCollector

from kubenexus.addresses import is_loopback, parse_address
from kubenexus.http_endpoint import HttpEndpoint
from kubenexus.kube.client import KubeClient, connect
from kubenexus.kube.errors import ApiUnavailable
from kubenexus.kube.leader import LeaderElector, LeaseConfig
from placement.core.annotations import FIELD_MANAGER
from placement.shim.binder import Binder
from placement.shim.client import PlacementClient, TlsFiles
from placement.shim.extender import DEFAULT_CALLER, Extender, serve
from placement.shim.server_tls import ServerTls

log = logging.getLogger("kubenexus.placement.shim")


def run_extender(args: argparse.Namespace) -> int:
    try:
        host, port = parse_address(args.listen)
        tls = _server_tls(args.tls_cert, args.tls_key, args.tls_client_ca)
        if (tls is None or args.tls_client_ca is None) and not args.insecure and not is_loopback(args.listen):
            raise ValueError(
                f"refusing to serve {args.listen} without client authentication: give --tls-cert, --tls-key "
                "and --tls-client-ca, listen on a loopback address, or say --insecure"
            )
        for flag, seconds in (("--gang-timeout", args.gang_timeout), ("--max-gang-hold", args.max_gang_hold)):
            if not seconds > 0:
                raise ValueError(f"{flag} {seconds:g}: must be a positive number of seconds")
        api = connect(args.kubeconfig, context=args.context, field_manager=FIELD_MANAGER)
        service = PlacementClient.connect(
            args.service, read_address=args.read_service, tls=_client_tls(args), deadline_s=args.deadline
        )
    except (ApiUnavailable, ValueError, OSError, ssl.SSLError) as error:
        log.error("cannot start the extender", extra={"error": str(error)})
        return 2
    extender = Extender(
        api,
        service,
        gang_timeout_s=args.gang_timeout,
        max_hold_s=args.max_gang_hold,
        scheduler_name=args.scheduler_name,
    )
    try:
        writers = frozenset(args.writer_identity or (DEFAULT_CALLER,))
        server = serve(extender, (host, port), prefix=args.url_prefix.rstrip("/"), tls=tls, writers=writers)
        endpoint = _endpoint(args.metrics_address, ready=lambda: True, not_ready="")
    except (OSError, ValueError) as error:
        log.error("cannot listen", extra={"address": args.listen, "error": str(error)})
        return 2
    extender.start()  # the gang APIs' objects, read as the binder reads them
    log.info("extender listening", extra={"address": args.listen, "port": server.server_address[1]})
    _wait_for_signal()
    server.shutdown()
    server.server_close()
    extender.stop()
    if endpoint is not None:
        endpoint.close()
    service.close()
    return 0


def run_binder(args: argparse.Namespace) -> int:
    try:
        api = connect(args.kubeconfig, context=args.context, field_manager=FIELD_MANAGER)
        elector = _elector(args, api)
        service = PlacementClient.connect(args.service, tls=_client_tls(args), deadline_s=args.deadline)
    except (ApiUnavailable, ValueError, OSError) as error:
        log.error("cannot start the binder", extra={"error": str(error)})
        return 2
    binder = Binder(
        api,
        service,
        is_leader=(lambda: True) if elector is None else elector.is_leader,
        identity=args.identity or "kubenexus-binder",
        scheduler_name=args.scheduler_name,
        interval_s=args.interval,
    )
    try:
        endpoint = _endpoint(args.metrics_address, ready=binder.healthy, not_ready="the pod watch is not synced")
    except (OSError, ValueError) as error:
        log.error("cannot serve metrics", extra={"address": args.metrics_address, "error": str(error)})
        return 2
    binder.start()
    if elector is not None:
        elector.start()
    log.info("binder started", extra={"scheduler_name": args.scheduler_name, "leader_elect": elector is not None})
    _wait_for_signal()
    if elector is not None:
        elector.stop()  # hand the Lease over first: the next binder starts while this one drains
    binder.stop()
    if endpoint is not None:
        endpoint.close()
    service.close()
    return 0


def _endpoint(address: str, *, ready: Callable[[], bool], not_ready: str) -> HttpEndpoint | None:
    """/metrics (the process's own figures), /healthz and /readyz for the kubelet's probes; None when off."""
    if not address:
        return None
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    return HttpEndpoint(address, registry, ready=ready, not_ready=not_ready).start()


def _elector(args: argparse.Namespace, api: KubeClient) -> LeaderElector | None:
    if not args.leader_elect:
        return None
    # No pod label: that routes the service's traffic and belongs to the service's own Lease.
    return LeaderElector(api, LeaseConfig.from_flags(args))


def _client_tls(args: argparse.Namespace) -> TlsFiles | None:
    if args.service_ca is None and args.service_cert is None:
        return None
    if (args.service_cert is None) != (args.service_key is None):
        raise ValueError("--service-cert and --service-key go together")
    return TlsFiles(ca=args.service_ca, cert=args.service_cert, key=args.service_key)


def _server_tls(cert: Path | None, key: Path | None, client_ca: Path | None) -> ServerTls | None:
    if cert is None and key is None:
        if client_ca is not None:
            raise ValueError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if cert is None or key is None:
        raise ValueError("--tls-cert and --tls-key go together")
    return ServerTls(cert, key, client_ca)


def _wait_for_signal() -> None:
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
