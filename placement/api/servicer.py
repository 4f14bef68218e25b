"""The gRPC servicer: decode -> engine -> encode, one line each; errors are the interceptor's business.

Filter and Score arrive with the key of their node-name list (``node_names.KeyedRequest``, the server's
deserializer for them). They run on the event loop's thread: they are a millisecond or two of work that holds the GIL
throughout, so a hop to a worker thread would only add its own cost (about 0.2 ms a call, measured on a
minimal Filter). So do a Reserve naming one node (kube-scheduler's plugin names the node it chose: one node's
plan, less work than a Score) and Unreserve (one pod's release): on the default install both are on every pod's
scheduling path, where the hop cost about 0.1 ms each (docs/benchmarks.md). Calls that can take longer (a
Reserve choosing among candidates, PlaceGang, Preempt, CheckEviction, Explain, the views) run on the worker pool,
and the loop keeps answering health checks meanwhile.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from placement.api import codec
from placement.api.access import AccessPolicy, caller_of
from placement.api.metrics import PlacementMetrics
from placement.api.node_names import KeyedRequest
from placement.api.v1 import placement_pb2 as pb
from placement.api.v1 import placement_pb2_grpc
from placement.service.engine import PlacementEngine
from placement.service.results import ReserveOutcome

_T = TypeVar("_T")
Context = grpc.aio.ServicerContext[Any, Any]


class PlacementServicer(placement_pb2_grpc.PlacementServicer):
    def __init__(
        self,
        engine: PlacementEngine,
        metrics: PlacementMetrics,
        run: Callable[[Callable[[], _T]], Awaitable[_T]],
        access: AccessPolicy,
    ) -> None:
        self._engine = engine
        self._metrics = metrics
        self._run: Callable[[Callable[[], Any]], Awaitable[Any]] = run
        self._access = access

    # The server registers Filter and Score with a deserializer that keys the node names (server.py).
    async def Filter(self, request: KeyedRequest[pb.FilterRequest], context: Context) -> pb.FilterResponse:  # type: ignore[override]
        message = request.message
        outcome = self._engine.filter(codec.decode_pod(message), message.node_names, names_key=request.names_key)
        self._metrics.count_rejections(outcome.rejected)
        return codec.filter_response(outcome)

    async def Score(self, request: KeyedRequest[pb.ScoreRequest], context: Context) -> pb.ScoreResponse:  # type: ignore[override]
        message = request.message
        outcome = self._engine.score(
            codec.decode_pod(message),
            message.node_names,
            names_key=request.names_key,
            breakdown=not message.without_breakdown,
        )
        return codec.score_response(outcome)

    async def Reserve(self, request: pb.ReserveRequest, context: Context) -> pb.ReserveResponse:
        caller = caller_of(context)

        def reserve() -> ReserveOutcome:
            return self._engine.reserve(codec.decode_pod(request), request.node_names, caller=caller)

        outcome = reserve() if len(request.node_names) == 1 else await self._run(reserve)
        self._metrics.count_rejections(outcome.rejected)
        return codec.reserve_response(outcome)

    async def Unreserve(self, request: pb.UnreserveRequest, context: Context) -> pb.UnreserveResponse:
        caller = caller_of(context)
        override = self._access.may_override(caller)
        released = self._engine.unreserve(request.pod.namespace, request.pod.name, caller=caller, override=override)
        return pb.UnreserveResponse(released=released)

    async def PlaceGang(self, request: pb.PlaceGangRequest, context: Context) -> pb.PlaceGangResponse:
        caller = caller_of(context)
        outcome = await self._run(
            lambda: self._engine.place_gang(codec.decode_gang(request), request.node_names, caller=caller)
        )
        return codec.gang_response(outcome)

    async def Preempt(self, request: pb.PreemptRequest, context: Context) -> pb.PreemptResponse:
        caller = caller_of(context)
        outcome = await self._run(
            lambda: self._engine.preempt(codec.decode_preemptor(request), request.node_names, caller=caller)
        )
        self._metrics.count_preemption(outcome)
        return codec.preempt_response(outcome)

    async def CheckEviction(self, request: pb.CheckEvictionRequest, context: Context) -> pb.CheckEvictionResponse:
        pod, candidates = codec.decode_pod(request), codec.decode_eviction_candidates(request)
        return codec.eviction_response(await self._run(lambda: self._engine.check_eviction(pod, candidates)))

    async def PermitStatus(self, request: pb.PermitStatusRequest, context: Context) -> pb.PermitStatusResponse:
        outcome = await self._run(lambda: self._engine.permit_status(request.pod.namespace, request.pod.name))
        return codec.permit_response(outcome)

    async def GetNodeTopology(self, request: pb.GetNodeTopologyRequest, context: Context) -> pb.NodeTopology:
        return codec.node_topology(await self._run(lambda: self._engine.node_topology(request.node)))

    async def ListNodes(self, request: pb.ListNodesRequest, context: Context) -> pb.ListNodesResponse:
        return codec.list_nodes_response(await self._run(self._engine.list_nodes))

    async def Explain(self, request: pb.ExplainRequest, context: Context) -> pb.ExplainResponse:
        explanation = await self._run(lambda: self._engine.explain(codec.decode_pod(request), request.node))
        return codec.explain_response(explanation)
