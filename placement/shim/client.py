"""The shim's gRPC client of the placement service: deadlines, pods as JSON, one error type.

Pods travel as ``pod_json`` (the Kubernetes object as the shim has it), so the service validates them
with the same code whatever the client. Every failure leaves as ``ServiceError`` carrying the gRPC status
code name and the service's message: the extender turns it into its ``Error`` field, the binder into an
Event or a retry, neither into a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from placement.api.v1 import placement_pb2 as pb
from placement.api.v1 import placement_pb2_grpc as pb_grpc
from placement.core.podgroup import DomainConstraint

DEFAULT_DEADLINE_S = 5.0


class ServiceError(Exception):
    """The placement service refused or could not be reached; ``code`` is the gRPC status name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"placement service: {code}: {message}")
        self.code = code
        self.message = message

    @property
    def invalid_request(self) -> bool:
        """The pod itself is at fault (a bad annotation or label): retrying will not help."""
        return self.code == "INVALID_ARGUMENT"


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for TLS to the service; ``cert`` and ``key`` add a client certificate (mTLS)."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: Path | None) -> bytes | None:
            return None if path is None else path.read_bytes()

        return grpc.ssl_channel_credentials(read(self.ca), read(self.key), read(self.cert))


class PlacementClient:
    """Synchronous calls with a deadline each; thread-safe (a gRPC channel is)."""

    def __init__(self, channel: grpc.Channel, *, deadline_s: float = DEFAULT_DEADLINE_S) -> None:
        self._channel = channel
        self._stub = pb_grpc.PlacementStub(channel)
        self._deadline_s = deadline_s

    @classmethod
    def connect(
        cls, address: str, *, tls: TlsFiles | None = None, deadline_s: float = DEFAULT_DEADLINE_S
    ) -> PlacementClient:
        channel = grpc.secure_channel(address, tls.credentials()) if tls is not None else grpc.insecure_channel(address)
        return cls(channel, deadline_s=deadline_s)

    def close(self) -> None:
        self._channel.close()

    def filter(self, pod: Mapping[str, Any], nodes: Sequence[str]) -> pb.FilterResponse:
        answer: pb.FilterResponse = self._call(
            self._stub.Filter, pb.FilterRequest(pod_json=_json(pod), node_names=nodes)
        )
        return answer

    def score(self, pod: Mapping[str, Any], nodes: Sequence[str]) -> pb.ScoreResponse:
        answer: pb.ScoreResponse = self._call(self._stub.Score, pb.ScoreRequest(pod_json=_json(pod), node_names=nodes))
        return answer

    def reserve(self, pod: Mapping[str, Any], nodes: Sequence[str]) -> pb.ReserveResponse:
        answer: pb.ReserveResponse = self._call(
            self._stub.Reserve, pb.ReserveRequest(pod_json=_json(pod), node_names=nodes)
        )
        return answer

    def unreserve(self, namespace: str, name: str) -> bool:
        request = pb.UnreserveRequest(pod=pb.PodRef(namespace=namespace, name=name))
        answer: pb.UnreserveResponse = self._call(self._stub.Unreserve, request)
        return answer.released

    def place_gang(
        self,
        namespace: str,
        name: str,
        min_member: int,
        members: Sequence[Mapping[str, Any]],
        *,
        source: str = "",
        topology: Sequence[DomainConstraint] = (),
        timeout_s: float | None = None,
    ) -> pb.PlaceGangResponse:
        """Place the group's ``members`` all at once; ``source``, ``topology`` and ``timeout_s`` (how long
        its reserved members may wait to bind) come from the group's object, when it has one."""
        group = _group(namespace, name, min_member, members, source=source, topology=topology)
        if timeout_s is not None:
            group.schedule_timeout_seconds = max(1, round(timeout_s))
        answer: pb.PlaceGangResponse = self._call(self._stub.PlaceGang, pb.PlaceGangRequest(group=group))
        return answer

    def preempt(self, pod: Mapping[str, Any], nodes: Sequence[str]) -> pb.PreemptResponse:
        """Victims whose eviction would let the lone ``pod`` in (chosen and held by the service, evicted by no one)."""
        answer: pb.PreemptResponse = self._call(
            self._stub.Preempt, pb.PreemptRequest(pod_json=_json(pod), node_names=nodes)
        )
        return answer

    def preempt_gang(
        self,
        namespace: str,
        name: str,
        min_member: int,
        members: Sequence[Mapping[str, Any]],
        *,
        source: str = "",
        topology: Sequence[DomainConstraint] = (),
    ) -> pb.PreemptResponse:
        """Victims whose eviction would let the group's waiting ``members`` in, all of them at once, within
        the group's ``topology`` constraints (from its object, when it has one)."""
        group = _group(namespace, name, min_member, members, source=source, topology=topology)
        answer: pb.PreemptResponse = self._call(self._stub.Preempt, pb.PreemptRequest(group=group))
        return answer

    def check_eviction(
        self, pod: Mapping[str, Any], candidates: Sequence[pb.EvictionCandidate]
    ) -> pb.CheckEvictionResponse:
        """Whether ``pod`` fits each candidate node once that candidate's victims are gone; read-only."""
        answer: pb.CheckEvictionResponse = self._call(
            self._stub.CheckEviction, pb.CheckEvictionRequest(pod_json=_json(pod), candidates=candidates)
        )
        return answer

    def _call(self, method: Any, request: Any) -> Any:
        try:
            return method(request, timeout=self._deadline_s)
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.Call) else None
            details = error.details() if isinstance(error, grpc.Call) else str(error)
            raise ServiceError(code.name if code is not None else "UNKNOWN", details or "") from None


def _json(pod: Mapping[str, Any]) -> str:
    return json.dumps(pod, separators=(",", ":"))


def _group(
    namespace: str,
    name: str,
    min_member: int,
    members: Sequence[Mapping[str, Any]],
    *,
    source: str,
    topology: Sequence[DomainConstraint],
) -> pb.PodGroup:
    return pb.PodGroup(
        namespace=namespace,
        name=name,
        min_member=min_member,
        members_json=[_json(m) for m in members],
        source=source,
        topology=[pb.TopologyConstraint(level=c.level, required=c.required) for c in topology],
    )
