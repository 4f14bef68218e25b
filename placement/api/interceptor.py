"""The one interceptor of the placement service: callers are authorized, errors become status codes here,
and every call is timed.

Authorization (``access.AccessPolicy``) runs before the request's bytes are parsed: a caller that may not
call a method learns nothing from it and costs nothing but the check.

The engine's ``PlacementError`` subclasses map to INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION,
UNIMPLEMENTED, UNAVAILABLE (a follower asked to reserve: clients retry, and reach the leader),
UNAUTHENTICATED and PERMISSION_DENIED, with their own message; a request whose bytes are not the method's
message is INVALID_ARGUMENT (gRPC's default would be an opaque INTERNAL); anything else is a bug: INTERNAL
with a generic message, traceback in the log. A call whose deadline already passed is not started.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from placement.api.access import AccessPolicy, caller_of
from placement.api.metrics import PlacementMetrics
from placement.api.v1 import placement_pb2 as pb
from placement.service.errors import (
    CacheNotSynced,
    GangsUnavailable,
    InvalidRequest,
    NodeNotFound,
    NotLeader,
    PermissionDenied,
    PlacementError,
    PreemptionUnavailable,
    Unauthenticated,
)

log = logging.getLogger("kubenexus.placement.server")

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["Placement"].full_name
_STATUS_OF: dict[type[PlacementError], grpc.StatusCode] = {
    InvalidRequest: grpc.StatusCode.INVALID_ARGUMENT,
    NodeNotFound: grpc.StatusCode.NOT_FOUND,
    CacheNotSynced: grpc.StatusCode.FAILED_PRECONDITION,
    GangsUnavailable: grpc.StatusCode.UNIMPLEMENTED,
    PreemptionUnavailable: grpc.StatusCode.UNIMPLEMENTED,
    NotLeader: grpc.StatusCode.UNAVAILABLE,
    Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
}
# Logged at INFO; the rest (not synced, not the leader) are expected while a replica starts or follows.
_CALLER_FAULTS = frozenset(
    {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED}
)


class StatusInterceptor(grpc.aio.ServerInterceptor):
    """Maps errors to status codes and times every placement call; other services pass through."""

    def __init__(self, metrics: PlacementMetrics, access: AccessPolicy) -> None:
        self._metrics = metrics
        self._access = access
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
        access = self._access

        async def behaviour(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started = time.perf_counter()
            code = grpc.StatusCode.OK
            try:
                remaining = context.time_remaining()
                if remaining is not None and remaining <= 0:
                    code = grpc.StatusCode.DEADLINE_EXCEEDED
                    await context.abort(code, "the deadline passed before the call started")
                access.check(method, caller_of(context))  # before a byte of the request is parsed
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
                # One line, no traceback: the caller's mistake (or a refusal) is not the service's bug.
                log.log(
                    logging.INFO if code in _CALLER_FAULTS else logging.DEBUG,
                    "refused a call",
                    extra={"method": method, "code": code.name, "error": str(error)},
                )
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
