"""The placement service over gRPC: a thin servicer (decode -> engine -> encode) on a ``grpc.aio`` server.

* Errors become status codes in ONE place, ``_StatusInterceptor``: the engine's ``PlacementError``
  subclasses map to INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, UNIMPLEMENTED and UNAVAILABLE (a
  follower asked to reserve: clients retry, and reach the leader) with their own
  message; a request whose bytes are not the method's message is INVALID_ARGUMENT (gRPC's default would
  be an opaque INTERNAL); anything else is a bug: INTERNAL with a generic message, traceback in the log.
  It also times every call for the latency histogram.
* Engine work runs in a thread pool, so the event loop keeps accepting calls and answering health checks
  while a decision runs. A call whose deadline already passed is not started; a call cancelled while it
  waits for a worker is dropped from the queue.
* The standard health service says SERVING only while the engine says its cache is synced (polled);
  server reflection lists the placement, health and reflection services for grpcurl.
* ``PlacementServer.stop`` is graceful: health goes NOT_SERVING, new calls are refused, calls in flight
  get ``grace_s`` to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from placement.api.v1 import placement_pb2 as pb
from placement.api.v1 import placement_pb2_grpc
from placement.engine import (
    Amount,
    FilterOutcome,
    GangSpec,
    GangState,
    PermitState,
    Placement,
    PlacementEngine,
    Rejection,
    RejectionKind,
    Rejections,
    ScoreOutcome,
)
from placement.errors import (
    CacheNotSynced,
    GangsUnavailable,
    InvalidRequest,
    NodeNotFound,
    NotLeader,
    PlacementError,
)
from placement.metrics import PlacementMetrics
from placement.pod_spec import ContainerSpec, PodSpec, pod_spec_from_json

log = logging.getLogger("kubenexus.placement.server")

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["Placement"].full_name
_T = TypeVar("_T")
_STATUS_OF: dict[type[PlacementError], grpc.StatusCode] = {
    InvalidRequest: grpc.StatusCode.INVALID_ARGUMENT,
    NodeNotFound: grpc.StatusCode.NOT_FOUND,
    CacheNotSynced: grpc.StatusCode.FAILED_PRECONDITION,
    GangsUnavailable: grpc.StatusCode.UNIMPLEMENTED,
    NotLeader: grpc.StatusCode.UNAVAILABLE,
}
_KIND_TO_PB = {
    RejectionKind.UNKNOWN_NODE: pb.REJECTION_KIND_UNKNOWN_NODE,
    RejectionKind.NO_TOPOLOGY: pb.REJECTION_KIND_NO_TOPOLOGY,
    RejectionKind.INSUFFICIENT_RESOURCES: pb.REJECTION_KIND_INSUFFICIENT_RESOURCES,
    RejectionKind.KUBELET_TOPOLOGY: pb.REJECTION_KIND_KUBELET_TOPOLOGY,
    RejectionKind.INTENT: pb.REJECTION_KIND_INTENT,
    RejectionKind.ISOLATION: pb.REJECTION_KIND_ISOLATION,
}
_GANG_TO_PB = {
    GangState.PLACED: pb.GANG_STATE_PLACED,
    GangState.WAITING: pb.GANG_STATE_WAITING,
    GangState.INFEASIBLE: pb.GANG_STATE_INFEASIBLE,
}
_PERMIT_TO_PB = {
    PermitState.ALLOW: pb.PERMIT_STATE_ALLOW,
    PermitState.WAIT: pb.PERMIT_STATE_WAIT,
    PermitState.REJECT: pb.PERMIT_STATE_REJECT,
}
MIB = 1024 * 1024


@dataclass(frozen=True)
class TlsFiles:
    """Server certificate and key (PEM); with ``client_ca`` clients must present a certificate it signed."""

    cert: Path
    key: Path
    client_ca: Path | None = None


@dataclass(frozen=True)
class ServerOptions:
    listen: str = "127.0.0.1:50051"
    tls: TlsFiles | None = None
    # 10,000 candidate names are ~200 KB; 16 MiB leaves room for the largest sane pod group.
    max_receive_bytes: int = 16 * MIB
    max_send_bytes: int = 64 * MIB
    workers: int = 4
    grace_s: float = 5.0
    health_interval_s: float = 1.0


# --- decoding and encoding -------------------------------------------------------------------------------


def _container(message: pb.Container) -> ContainerSpec:
    return ContainerSpec(
        name=message.name,
        requests=dict(message.requests),
        limits=dict(message.limits),
        restartable=message.restartable,
    )


def _pod(message: pb.Pod) -> PodSpec:
    return PodSpec(
        namespace=message.namespace,
        name=message.name,
        labels=dict(message.labels),
        annotations=dict(message.annotations),
        containers=tuple(_container(c) for c in message.containers),
        init_containers=tuple(_container(c) for c in message.init_containers),
    )


def decode_pod(request: pb.FilterRequest | pb.ScoreRequest | pb.ReserveRequest | pb.ExplainRequest) -> PodSpec:
    """The request's pod, from the ``Pod`` message or from ``pod_json``."""
    source = request.WhichOneof("pod_source")
    if source == "pod":
        return _pod(request.pod)
    if source == "pod_json":
        return pod_spec_from_json(request.pod_json)
    raise InvalidRequest("a pod is required: set `pod` or `pod_json`")


def _rejection(rejection: Rejection) -> pb.NodeRejection:
    return pb.NodeRejection(node=rejection.node, reason=rejection.reason, kind=_KIND_TO_PB[rejection.kind])


# Filter and Score answer hundreds of nodes per call, so their answers are columns (node names, scores,
# points per component) and rejections grouped by reason: each field is filled from a list in one call,
# not one message per node.


def _add_rejections(field: RepeatedCompositeFieldContainer[pb.Rejections], groups: Iterable[Rejections]) -> None:
    add = field.add
    for reason, kind, nodes in groups:
        add(reason=reason, kind=_KIND_TO_PB[kind], nodes=nodes)


def filter_response(outcome: FilterOutcome) -> pb.FilterResponse:
    response = pb.FilterResponse(feasible_nodes=outcome.feasible)
    _add_rejections(response.rejected, outcome.rejected)
    return response


def score_response(outcome: ScoreOutcome) -> pb.ScoreResponse:
    response = pb.ScoreResponse(nodes=outcome.nodes, scores=outcome.totals, numa_cells=outcome.landing_cells)
    add = response.breakdown.add
    for name, points in outcome.points.items():
        add(name=name, weight=outcome.weights.get(name, 0.0), points=points)
    _add_rejections(response.rejected, outcome.rejected)
    return response


def _placement(placement: Placement) -> pb.PodPlacement:
    return pb.PodPlacement(
        node=placement.node,
        numa_cells=placement.cells,
        gpu_ids=placement.gpus,
        pinned=placement.pinned,
        score=placement.score,
        breakdown=placement.breakdown,
        reservation_ttl_seconds=placement.ttl_s,
        annotations=placement.annotations,
    )


def _amounts(amounts: Iterable[Amount]) -> list[pb.ResourceAmount]:
    return [pb.ResourceAmount(name=a.name, total=a.total, free=a.free) for a in amounts]


# --- the servicer ----------------------------------------------------------------------------------------


class PlacementServicer(placement_pb2_grpc.PlacementServicer):
    """Decode -> engine -> encode; errors are the interceptor's business.

    Filter and Score run on the event loop's thread: they are a millisecond or two of work that holds the
    GIL throughout, so a hop to a worker thread would only add its own cost (about 0.2 ms a call, measured
    on a minimal Filter). Calls that can take longer (Reserve, PlaceGang, Explain) run on the worker pool,
    and the loop keeps answering health checks meanwhile.
    """

    def __init__(
        self,
        engine: PlacementEngine,
        metrics: PlacementMetrics,
        run: Callable[[Callable[[], _T]], Awaitable[_T]],
    ) -> None:
        self._engine = engine
        self._metrics = metrics
        self._run: Callable[[Callable[[], Any]], Awaitable[Any]] = run

    async def Filter(self, request: pb.FilterRequest, context: grpc.aio.ServicerContext[Any, Any]) -> pb.FilterResponse:
        outcome = self._engine.filter(decode_pod(request), request.node_names)
        self._metrics.count_rejections(outcome.rejected)
        return filter_response(outcome)

    async def Score(self, request: pb.ScoreRequest, context: grpc.aio.ServicerContext[Any, Any]) -> pb.ScoreResponse:
        outcome = self._engine.score(decode_pod(request), request.node_names)
        return score_response(outcome)

    async def Reserve(
        self, request: pb.ReserveRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ReserveResponse:
        outcome = await self._run(lambda: self._engine.reserve(decode_pod(request), request.node_names))
        self._metrics.count_rejections(outcome.rejected)
        response = pb.ReserveResponse(reserved=outcome.placement is not None)
        _add_rejections(response.rejected, outcome.rejected)
        if outcome.placement is not None:
            response.placement.CopyFrom(_placement(outcome.placement))
        return response

    async def Unreserve(
        self, request: pb.UnreserveRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.UnreserveResponse:
        released = await self._run(lambda: self._engine.unreserve(request.pod.namespace, request.pod.name))
        return pb.UnreserveResponse(released=released)

    async def PlaceGang(
        self, request: pb.PlaceGangRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.PlaceGangResponse:
        def place() -> Any:
            group = request.group
            members = tuple(_pod(m) for m in group.members) + tuple(pod_spec_from_json(m) for m in group.members_json)
            spec = GangSpec(group.namespace, group.name, group.min_member, members)
            return self._engine.place_gang(spec, request.node_names)

        outcome = await self._run(place)
        return pb.PlaceGangResponse(
            state=_GANG_TO_PB[outcome.state],
            reason=outcome.reason,
            members=[
                pb.MemberPlacement(pod=pb.PodRef(namespace=p.namespace, name=p.name), placement=_placement(p))
                for p in outcome.placements
            ],
            placed=outcome.placed,
            min_member=outcome.min_member,
        )

    async def PermitStatus(
        self, request: pb.PermitStatusRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.PermitStatusResponse:
        outcome = await self._run(lambda: self._engine.permit_status(request.pod.namespace, request.pod.name))
        return pb.PermitStatusResponse(
            state=_PERMIT_TO_PB[outcome.state],
            reason=outcome.reason,
            pod_group=outcome.group,
            ready=outcome.ready,
            min_member=outcome.min_member,
        )

    async def GetNodeTopology(
        self, request: pb.GetNodeTopologyRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.NodeTopology:
        view = await self._run(lambda: self._engine.node_topology(request.node))
        return pb.NodeTopology(
            name=view.name,
            kubelet=pb.KubeletPolicy(
                topology_manager_policy=view.topology_manager_policy,
                topology_manager_scope=view.topology_manager_scope,
                cpu_manager_static=view.cpu_manager_static,
                memory_manager_static=view.memory_manager_static,
            ),
            cells=[
                pb.NumaCell(
                    id=c.id,
                    resources=_amounts(c.resources),
                    local_read_bandwidth_mbps=c.local_read_bandwidth_mbps,
                    local_distance=c.local_distance,
                    claimed=c.claimed,
                    isolated=c.isolated,
                )
                for c in view.cells
            ],
            node_resources=_amounts(view.node_resources),
            gpus=[
                pb.Gpu(
                    index=g.index, numa_cell=-1 if g.numa_cell is None else g.numa_cell, healthy=g.healthy, busy=g.busy
                )
                for g in view.gpus
            ],
            gpu_links=[pb.GpuLink(a=a, b=b, kind=kind) for a, b, kind in view.gpu_links],
            pods=[
                pb.PodOnNode(
                    pod=pb.PodRef(namespace=p.namespace, name=p.name),
                    numa_cells=p.cells,
                    gpu_ids=p.gpus,
                    bound=p.bound,
                    accounted=p.accounted,
                )
                for p in view.pods
            ],
        )

    async def ListNodes(
        self, request: pb.ListNodesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListNodesResponse:
        nodes = await self._run(self._engine.list_nodes)
        return pb.ListNodesResponse(
            nodes=[
                pb.NodeSummary(
                    name=n.name,
                    numa_cells=n.numa_cells,
                    topology_manager_policy=n.topology_manager_policy,
                    gpus=n.gpus,
                    free_gpus=n.free_gpus,
                    allocatable_cpus=n.allocatable_cpus,
                    free_cpus=n.free_cpus,
                    allocatable_memory=n.allocatable_memory,
                    free_memory=n.free_memory,
                    pods=n.pods,
                )
                for n in nodes
            ]
        )

    async def Explain(
        self, request: pb.ExplainRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ExplainResponse:
        explanation = await self._run(lambda: self._engine.explain(decode_pod(request), request.node))
        demand = explanation.demand
        response = pb.ExplainResponse(
            node=explanation.node,
            placeable=explanation.placement is not None,
            qos_class=explanation.pod.pod.qos.value,
            requests=[
                pb.ResourceAmount(name=name, total=amount / 1000.0 if name == "cpu" else amount)
                for name, amount in demand.node_requests
            ],
            exclusive_cpus=demand.exclusive_cpus,
            numa_intent="" if explanation.pod.intent.policy is None else explanation.pod.intent.policy.value,
            decided_by_exact_model=explanation.exact_model,
        )
        if explanation.rejection is not None:
            response.rejection.CopyFrom(_rejection(explanation.rejection))
        if explanation.placement is not None:
            response.placement.CopyFrom(_placement(explanation.placement))
        return response


# --- the one interceptor ---------------------------------------------------------------------------------


class _StatusInterceptor(grpc.aio.ServerInterceptor):
    """Maps errors to status codes and times every placement call; other services pass through."""

    def __init__(self, metrics: PlacementMetrics) -> None:
        self._metrics = metrics
        # The wrapped handler of each placement method, built on its first call: the servicer's handlers
        # never change, and building one per call costs more than some calls' work.
        self._wrapped: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        method_path = handler_call_details.method
        wrapped = self._wrapped.get(method_path)
        if wrapped is not None:
            return wrapped
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None or not method_path.startswith(f"/{SERVICE_NAME}/"):
            return handler
        wrapped = self._wrapped[method_path] = self._wrap(method_path, handler)
        return wrapped

    def _wrap(self, method_path: str, handler: grpc.RpcMethodHandler[Any, Any]) -> grpc.RpcMethodHandler[Any, Any]:
        method = method_path.rsplit("/", 1)[1]
        deserialize: Callable[[bytes], Any] = handler.request_deserializer  # type: ignore[assignment]
        # An aio server's handlers are coroutines; the stubs type them for both server kinds.
        inner: Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]] = handler.unary_unary  # type: ignore[assignment]
        input_name = pb.DESCRIPTOR.services_by_name["Placement"].methods_by_name[method].input_type.full_name
        metrics = self._metrics

        async def behaviour(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started = time.perf_counter()
            code = grpc.StatusCode.OK
            try:
                remaining = context.time_remaining()
                if remaining is not None and remaining <= 0:
                    code = grpc.StatusCode.DEADLINE_EXCEEDED
                    await context.abort(code, "the deadline passed before the call started")
                try:
                    request = deserialize(raw)
                except DecodeError as error:
                    raise InvalidRequest(f"the request is not a valid {input_name} message: {error}") from None
                response = await inner(request, context)
                if remaining is not None and (context.time_remaining() or 0.0) <= 0:
                    code = grpc.StatusCode.DEADLINE_EXCEEDED  # answered too late: the client has given up
                return response
            except grpc.aio.AbortError:
                raise
            except PlacementError as error:
                code = _STATUS_OF.get(type(error), grpc.StatusCode.INVALID_ARGUMENT)
                await context.abort(code, str(error))
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except Exception:
                code = grpc.StatusCode.INTERNAL
                log.exception("bug while answering %s", method, extra={"method": method})
                await context.abort(code, "internal error in the placement service; its log has the details")
            finally:
                metrics.latency.labels(method, code.name).observe(time.perf_counter() - started)

        return grpc.unary_unary_rpc_method_handler(
            behaviour, request_deserializer=None, response_serializer=handler.response_serializer
        )


# --- the server ------------------------------------------------------------------------------------------


def _credentials(tls: TlsFiles) -> grpc.ServerCredentials:
    try:
        key, cert = tls.key.read_bytes(), tls.cert.read_bytes()
        ca = tls.client_ca.read_bytes() if tls.client_ca is not None else None
    except OSError as error:
        raise ValueError(f"cannot read a TLS file: {error}") from None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


class PlacementServer:
    """The gRPC server around one engine: ``await start()`` (returns the port), ``await stop()``."""

    def __init__(
        self, engine: PlacementEngine, options: ServerOptions, *, metrics: PlacementMetrics | None = None
    ) -> None:
        self.engine = engine
        self.options = options
        self.metrics = metrics or PlacementMetrics(engine)
        self._pool = ThreadPoolExecutor(max_workers=options.workers, thread_name_prefix="placement")
        self._health = health.aio.HealthServicer()
        self._server = grpc.aio.server(
            interceptors=[_StatusInterceptor(self.metrics)],
            options=[
                ("grpc.max_receive_message_length", options.max_receive_bytes),
                ("grpc.max_send_message_length", options.max_send_bytes),
            ],
        )
        placement_pb2_grpc.add_PlacementServicer_to_server(
            PlacementServicer(engine, self.metrics, self._in_pool), self._server
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            self._server,
        )
        self._health_task: asyncio.Task[None] | None = None
        self.port = 0

    async def _in_pool(self, work: Callable[[], _T]) -> _T:
        # Cancelling the awaiting coroutine cancels the pool future too, so queued work never starts.
        return await asyncio.get_running_loop().run_in_executor(self._pool, work)

    async def start(self) -> int:
        """Bind and serve; returns the bound port (useful with port 0)."""
        listen = self.options.listen
        tls = self.options.tls
        try:
            port = (
                self._server.add_insecure_port(listen)
                if tls is None
                else self._server.add_secure_port(listen, _credentials(tls))
            )
        except RuntimeError as error:
            raise ValueError(f"cannot listen on {listen}: {error}") from None
        await self._server.start()
        self.port = port
        await self._publish_health()
        self._health_task = asyncio.create_task(self._watch_sync(), name="placement health")
        log.info("placement service listening", extra={"address": listen, "port": port, "tls": tls is not None})
        return port

    async def _publish_health(self) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if self.engine.is_synced()
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in ("", SERVICE_NAME):
            await self._health.set(service, status)

    async def _watch_sync(self) -> None:
        while True:
            await asyncio.sleep(self.options.health_interval_s)
            await self._publish_health()

    async def stop(self, grace_s: float | None = None) -> None:
        """Graceful: NOT_SERVING first (load balancers drain), then calls in flight get the grace period."""
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
        await self._health.enter_graceful_shutdown()
        await self._server.stop(self.options.grace_s if grace_s is None else grace_s)
        self._pool.shutdown(wait=False, cancel_futures=True)
        log.info("placement service stopped")

    async def wait(self) -> None:
        await self._server.wait_for_termination()


async def serve_until(server: PlacementServer, stop: asyncio.Event) -> None:
    """Run ``server`` until ``stop`` is set (SIGTERM / SIGINT in ``placement.main``), then stop it."""
    await server.start()
    await stop.wait()
    await server.stop()
