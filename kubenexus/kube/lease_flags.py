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
        # %(default)s, not a fixed word: `serve` turns it off by default, the binder keeps it on.
        help="elect one leader among replicas through a coordination.k8s.io Lease (default: %(default)s)",
    )
    group.add_argument(
        "--lease-name", default=lease_name, metavar="NAME", help="the Lease's name (default: %(default)s)"
    )
    group.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE", DEFAULT_NAMESPACE),
        metavar="NAMESPACE",
        help=f"the Lease's namespace (default: $POD_NAMESPACE, else {DEFAULT_NAMESPACE}; here %(default)s)",
    )
    group.add_argument(
        "--identity",
        default=os.environ.get("POD_NAME", ""),
        metavar="NAME",
        help="this replica's identity in the Lease (default: $POD_NAME, here %(default)r)",
    )
    group.add_argument(
        "--lease-duration",
        type=float,
        default=15.0,
        metavar="S",
        help="seconds a leader's Lease lasts without renewal before another replica may take it (default: %(default)s)",
    )
    group.add_argument(
        "--renew-deadline",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds the leader keeps trying to renew before it steps down (default: %(default)s)",
    )
    group.add_argument(
        "--retry-period",
        type=float,
        default=2.0,
        metavar="S",
        help="seconds between attempts to acquire or renew the Lease (default: %(default)s)",
    )
