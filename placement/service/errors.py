"""Errors the placement engine raises on purpose; ``placement.api.interceptor`` maps each to one gRPC status code.

Anything else escaping the engine is a bug: the server answers INTERNAL with a generic message and logs it.
"""

from __future__ import annotations


class PlacementError(Exception):
    """Base class: the message is meant for the caller and says what to change."""


class InvalidRequest(PlacementError):
    """A malformed pod, quantity, annotation or argument (INVALID_ARGUMENT)."""


class NodeNotFound(PlacementError):
    """A node the request names explicitly has no topology report (NOT_FOUND)."""

    def __init__(self, node: str) -> None:
        super().__init__(f"node {node!r} is not known to the placement service (no topology report)")
        self.node = node


class CacheNotSynced(PlacementError):
    """Decisions are refused while the cluster cache is not synced or known broken (FAILED_PRECONDITION)."""


class GangsUnavailable(PlacementError):
    """Gang scheduling is not configured in this service (UNIMPLEMENTED)."""


class PreemptionUnavailable(PlacementError):
    """The service's profile leaves preemption out (UNIMPLEMENTED)."""


class NotLeader(PlacementError):
    """A decision asked of a replica that does not hold the leader Lease (UNAVAILABLE: retry the leader)."""

    def __init__(self, leader: str) -> None:
        who = f"the leader is {leader!r}" if leader else "no leader is elected yet"
        super().__init__(f"this replica is not the leader; {who}: retry the decision there")
        self.leader = leader


class Unauthenticated(PlacementError):
    """The caller presented no identity where one is required (UNAUTHENTICATED)."""


class PermissionDenied(PlacementError):
    """The caller's identity may not make this call, or not on this pod (PERMISSION_DENIED)."""
