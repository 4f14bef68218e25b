"""The shim's gRPC client of the placement service: deadlines, pods as JSON, one error type.

Pods travel as ``pod_json`` (the Kubernetes object as the shim has it), so the service validates them
with the same code whatever the client.

Calls go one of two ways (docs/scheduler.md, "High availability"). Decisions (Reserve, Unreserve,
PlaceGang, Preempt) go to the decision address: the leader, which alone holds reservations; so does
CheckEviction, read-only but followed by evictions, which a lagging replica's answer could make needless.
Filter and Score go to the read address when one is given: a gRPC target that resolves to every replica
(a headless Service), spread over them by gRPC's ``round_robin`` policy, which skips a replica whose
health check is not SERVING (its cache is not synced) and retries a read that a replica answers
UNAVAILABLE, FAILED_PRECONDITION or CANCELLED (going away, or its cache just broke) on another.

Every failure leaves as ``ServiceError`` carrying the gRPC status code name and the service's message: the
extender turns it into its ``Error`` field, the binder into an Event or a retry, neither into a traceback.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from kubenexus.reloaded_files import Reloaded
from placement.api.v1 import placement_pb2 as pb
from placement.api.v1 import placement_pb2_grpc as pb_grpc
from placement.core.podgroup import DomainConstraint

DEFAULT_DEADLINE_S = 5.0
# How often a call looks whether the client certificate was renewed, and how long old channels live on
# after a renewal (longer than any call's deadline).
CERTIFICATE_CHECK_S = 10.0
RETIRE_S = 60.0
log = logging.getLogger("kubenexus.placement.client")
_SERVICE = pb.DESCRIPTOR.services_by_name["Placement"].full_name
# The calls spread over the replicas: a stale answer costs a scheduling cycle at most (Reserve judges
# afresh at the leader). Every other call goes to the leader.
READ_METHODS = ("Filter", "Score")
# A read tried on up to three replicas: the deployed two, and one more try should DNS still list one that
# left. Each code means "this replica, not the request": another replica may answer it. CANCELLED is what a
# replica that begins to stop answers a call that reached it at that moment (seen under load); a read is
# safe to ask again, and a call this client cancels itself is never retried by gRPC.
READ_RETRY_POLICY = {
    "maxAttempts": 3,
    "initialBackoff": "0.02s",
    "maxBackoff": "0.2s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE", "FAILED_PRECONDITION", "CANCELLED"],
}
# The target schemes of gRPC's resolvers that a read address may name; a bare HOST:PORT is dns too.
_TARGET_SCHEMES = ("dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:")


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


def read_service_config() -> str:
    """The read channel's gRPC service config: ``round_robin`` over every address its target resolves to,
    client-side health checks (a replica whose cache is not synced says NOT_SERVING and gets no reads), and
    ``READ_RETRY_POLICY`` on the read methods."""
    return json.dumps(
        {
            "loadBalancingConfig": [{"round_robin": {}}],
            "healthCheckConfig": {"serviceName": _SERVICE},
            "methodConfig": [
                {
                    "name": [{"service": _SERVICE, "method": method} for method in READ_METHODS],
                    "retryPolicy": READ_RETRY_POLICY,
                }
            ],
        }
    )


def check_read_target(target: str) -> str:
    """``target`` when gRPC can resolve it to replicas (``dns:///NAME:PORT``, ``ipv4:A:P,B:P``, ``HOST:PORT``);
    ``ValueError`` naming it otherwise."""
    if target.startswith(_TARGET_SCHEMES) or ("/" not in target and _host_port(target)):
        return target
    raise ValueError(
        f"read address {target!r} is not a gRPC target: give HOST:PORT, dns:///NAME:PORT (every address NAME "
        "resolves to, as a headless Service gives them) or ipv4:ADDRESS:PORT,ADDRESS:PORT"
    )


def _host_port(target: str) -> bool:
    host, separator, port = target.rpartition(":")
    return bool(host) and bool(separator) and port.isdigit() and int(port) <= 65535


Channels = tuple[grpc.Channel, grpc.Channel | None]  # decisions, reads (None: the decisions channel)


class PlacementClient:
    """Synchronous calls with a deadline each; thread-safe (a gRPC channel is).

    ``channel`` carries the decisions (and CheckEviction); ``reads`` (default: ``channel``) the
    ``READ_METHODS``.

    ``renewed`` (as ``connect`` makes it with a client certificate): the channels, made again once the TLS
    files change (``kubenexus.reloaded_files``). Every ``CERTIFICATE_CHECK_S`` a call looks; once the files
    changed and the new key matches the new certificate, new channels carry the calls from then on, and the
    old ones are closed ``RETIRE_S`` later, after the calls in flight on them. A connection is authenticated when it is
    opened, so without this a client kept its first certificate for every reconnection, past its expiry."""

    def __init__(
        self,
        channel: grpc.Channel,
        *,
        reads: grpc.Channel | None = None,
        deadline_s: float = DEFAULT_DEADLINE_S,
        renewed: Reloaded[Channels] | None = None,
    ) -> None:
        self._deadline_s = deadline_s
        self._install(channel, reads)
        self._renewed = renewed
        self._checked = time.monotonic()

    def _install(self, channel: grpc.Channel, reads: grpc.Channel | None) -> None:
        self._channels = (channel,) if reads is None else (channel, reads)
        self._decision_stub = pb_grpc.PlacementStub(channel)
        self._read_stub = self._decision_stub if reads is None else pb_grpc.PlacementStub(reads)

    @property
    def reconnections(self) -> int:
        return 0 if self._renewed is None else self._renewed.reloads

    @property
    def _decisions(self) -> pb_grpc.PlacementStub:
        self._renew_if_due()
        return self._decision_stub

    @property
    def _reads(self) -> pb_grpc.PlacementStub:
        self._renew_if_due()
        return self._read_stub

    def _renew_if_due(self) -> None:
        if self._renewed is None or time.monotonic() - self._checked < CERTIFICATE_CHECK_S:
            return
        self._checked = time.monotonic()
        retired = self._channels
        if not self._renewed.refresh():
            return
        channel, reads = self._renewed.value
        self._install(channel, reads)
        timer = threading.Timer(RETIRE_S, lambda: [old.close() for old in retired])
        timer.daemon = True
        timer.start()

    @classmethod
    def connect(
        cls,
        address: str,
        *,
        read_address: str = "",
        tls: TlsFiles | None = None,
        deadline_s: float = DEFAULT_DEADLINE_S,
    ) -> PlacementClient:
        """Decisions to ``address``; reads spread over the replicas ``read_address`` resolves to (when given,
        see ``read_service_config``), both with the same ``tls`` credentials."""

        def channels() -> Channels:
            if tls is not None and tls.cert is not None and tls.key is not None:
                ssl.create_default_context().load_cert_chain(tls.cert, tls.key)  # a renewed pair belongs together
            reads = None
            if read_address:
                options = [("grpc.service_config", read_service_config()), ("grpc.enable_retries", 1)]
                reads = _channel(check_read_target(read_address), tls, options)
            return _channel(address, tls, []), reads

        if tls is None or tls.cert is None:
            channel, reads = channels()
            return cls(channel, reads=reads, deadline_s=deadline_s)
        files = [path for path in (tls.ca, tls.cert, tls.key) if path is not None]
        renewed = Reloaded(files, channels, what="client TLS files", log=log)
        channel, reads = renewed.value
        return cls(channel, reads=reads, deadline_s=deadline_s, renewed=renewed)

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    def filter(self, pod: Mapping[str, Any], nodes: Sequence[str]) -> pb.FilterResponse:
        answer: pb.FilterResponse = self._call(
            self._reads.Filter, pb.FilterRequest(pod_json=_json(pod), node_names=nodes)
        )
        return answer

    def score(self, pod: Mapping[str, Any], nodes: Sequence[str]) -> pb.ScoreResponse:
        # The extender needs the ranking only, not each component's points.
        request = pb.ScoreRequest(pod_json=_json(pod), node_names=nodes, without_breakdown=True)
        answer: pb.ScoreResponse = self._call(self._reads.Score, request)
        return answer

    def reserve(self, pod: Mapping[str, Any], nodes: Sequence[str]) -> pb.ReserveResponse:
        answer: pb.ReserveResponse = self._call(
            self._decisions.Reserve, pb.ReserveRequest(pod_json=_json(pod), node_names=nodes)
        )
        return answer

    def unreserve(self, namespace: str, name: str) -> bool:
        request = pb.UnreserveRequest(pod=pb.PodRef(namespace=namespace, name=name))
        answer: pb.UnreserveResponse = self._call(self._decisions.Unreserve, request)
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
        answer: pb.PlaceGangResponse = self._call(self._decisions.PlaceGang, pb.PlaceGangRequest(group=group))
        return answer

    def preempt(self, pod: Mapping[str, Any], nodes: Sequence[str]) -> pb.PreemptResponse:
        """Victims whose eviction would let the lone ``pod`` in (chosen and held by the service, evicted by no one)."""
        answer: pb.PreemptResponse = self._call(
            self._decisions.Preempt, pb.PreemptRequest(pod_json=_json(pod), node_names=nodes)
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
        answer: pb.PreemptResponse = self._call(self._decisions.Preempt, pb.PreemptRequest(group=group))
        return answer

    def check_eviction(
        self, pod: Mapping[str, Any], candidates: Sequence[pb.EvictionCandidate]
    ) -> pb.CheckEvictionResponse:
        """Whether ``pod`` fits each candidate node once that candidate's victims are gone; read-only, yet asked
        of the leader (the module docstring says why)."""
        answer: pb.CheckEvictionResponse = self._call(
            self._decisions.CheckEviction, pb.CheckEvictionRequest(pod_json=_json(pod), candidates=candidates)
        )
        return answer

    def _call(self, method: Any, request: Any) -> Any:
        try:
            return method(request, timeout=self._deadline_s)
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.Call) else None
            details = error.details() if isinstance(error, grpc.Call) else str(error)
            raise ServiceError(code.name if code is not None else "UNKNOWN", details or "") from None


def _channel(target: str, tls: TlsFiles | None, options: list[tuple[str, Any]]) -> grpc.Channel:
    if tls is None:
        return grpc.insecure_channel(target, options=options)
    return grpc.secure_channel(target, tls.credentials(), options=options)


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
