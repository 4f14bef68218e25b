"""The leader-election flags of every process that campaigns for a Lease (``kubenexus-placement serve``
and ``binder``), and the ``LeaseConfig`` they make. Standard library only: building a parser loads no client."""

from __future__ import annotations

import argparse
import os

DEFAULT_NAMESPACE = "kubenexus-system"


def add_lease_arguments(parser: argparse.ArgumentParser, *, lease_name: str) -> None:
    group = parser.add_argument_group("leader election")
    group.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="elect one leader among replicas through a coordination.k8s.io Lease (default: on)",
    )
    group.add_argument("--lease-name", default=lease_name)
    group.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", DEFAULT_NAMESPACE))
    group.add_argument(
        "--identity", default=os.environ.get("POD_NAME", ""), help="this replica's identity (default: $POD_NAME)"
    )
    group.add_argument("--lease-duration", type=float, default=15.0, metavar="S")
    group.add_argument("--renew-deadline", type=float, default=10.0, metavar="S")
    group.add_argument("--retry-period", type=float, default=2.0, metavar="S")
