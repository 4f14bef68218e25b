"""The flags of ``kubenexus-placement extender`` and ``binder``.

Kept apart from ``placement.shim.commands`` so that building the parser loads neither the Kubernetes
client nor gRPC: ``serve --demo`` never needs them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kubenexus.kube.lease_flags import add_lease_arguments

SCHEDULER_NAME = "kubenexus-scheduler"
DEFAULT_GANG_TIMEOUT_S = 10.0
# The longest the extender holds a bind call, whatever a group's own timeout asks: below the 30 s
# httpTimeout of deploy/scheduler/kube-scheduler-config.yaml, after which kube-scheduler gives the call up.
DEFAULT_MAX_GANG_HOLD_S = 25.0


def add_cluster_arguments(parser: argparse.ArgumentParser, *, lease_name: str) -> None:
    """The API connection and leader election flags of the extender and the binder."""
    group = parser.add_argument_group("cluster")
    group.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig file (default: in-cluster service account, else ~/.kube/config)",
    )
    group.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the file's current one)")
    add_lease_arguments(parser, lease_name=lease_name)


def add_service_client_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("placement service")
    group.add_argument(
        "--service",
        default="127.0.0.1:50051",
        metavar="HOST:PORT",
        help="placement service gRPC address (default: %(default)s)",
    )
    group.add_argument(
        "--service-ca",
        type=Path,
        metavar="PEM",
        help="CA bundle for TLS to the service (default: none; with neither it nor --service-cert, plaintext)",
    )
    group.add_argument("--service-cert", type=Path, metavar="PEM", help="client certificate for mTLS to the service")
    group.add_argument("--service-key", type=Path, metavar="PEM", help="client key for mTLS to the service")
    group.add_argument(
        "--deadline", type=float, default=5.0, metavar="S", help="seconds each call may take (default: %(default)s)"
    )


def add_extender_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster")
    group.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig file (default: in-cluster service account, else ~/.kube/config)",
    )
    group.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the file's current one)")
    add_service_client_arguments(parser)
    parser.add_argument(
        "--read-service",
        default="",
        metavar="TARGET",
        help="gRPC target of the Filter and Score calls, spread round robin over every "
        "replica it resolves to, e.g. dns:///kubenexus-placement-replicas-headless.kubenexus-system.svc:50051; "
        "decisions still go to --service (default: --service, for both)",
    )
    parser.add_argument(
        "--listen",
        default="127.0.0.1:8888",
        metavar="HOST:PORT",
        help="address the extender serves kube-scheduler on (default: %(default)s)",
    )
    parser.add_argument(
        "--url-prefix",
        default="",
        metavar="PATH",
        help="path prefix of the verbs, the path of the extender's urlPrefix (default: none)",
    )
    parser.add_argument("--tls-cert", type=Path, metavar="PEM", help="serve HTTPS with this certificate")
    parser.add_argument("--tls-key", type=Path, metavar="PEM", help="the certificate's key")
    parser.add_argument(
        "--tls-client-ca",
        type=Path,
        metavar="PEM",
        help="require kube-scheduler's client certificate, signed by this CA (the extender's tlsConfig)",
    )
    parser.add_argument(
        "--writer-identity",
        action="append",
        metavar="CN",
        help="with --tls-client-ca, the client certificate Subject CN that may call bind, which reserves and "
        "binds (repeatable; default: kubenexus-kube-scheduler); any certificate from the CA may call filter, "
        "prioritize and preempt",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="serve a non-loopback address without client certificates (development only)",
    )
    parser.add_argument(
        "--scheduler-name",
        default=SCHEDULER_NAME,
        metavar="NAME",
        help="bind only pods whose spec.schedulerName is this (default: %(default)s)",
    )
    parser.add_argument(
        "--gang-timeout",
        type=float,
        default=DEFAULT_GANG_TIMEOUT_S,
        metavar="S",
        help="how long bind holds a group member whose group sets no timeout of its own (default: %(default)s)",
    )
    parser.add_argument(
        "--max-gang-hold",
        type=float,
        default=DEFAULT_MAX_GANG_HOLD_S,
        metavar="S",
        help="the longest bind holds a group member, whatever its group's scheduleTimeoutSeconds asks; keep it "
        "below kube-scheduler's extender httpTimeout (default: %(default)s)",
    )
    add_metrics_argument(parser)


def add_binder_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser, lease_name="kubenexus-binder")
    add_service_client_arguments(parser)
    parser.add_argument(
        "--scheduler-name",
        default=SCHEDULER_NAME,
        metavar="NAME",
        help="schedule and bind the pending pods whose spec.schedulerName is this (default: %(default)s)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds between passes over the pending pods (default: %(default)s)",
    )
    add_metrics_argument(parser)


def add_metrics_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-address",
        default="",
        metavar="HOST:PORT",
        help="serve /metrics, /healthz and /readyz over plain HTTP on HOST:PORT (default: off)",
    )
