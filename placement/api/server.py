"""The gRPC server around one engine: ``grpc.aio``, the servicer behind the interceptor, health and reflection.

* Engine work runs in a thread pool (``PlacementServicer``), so the event loop keeps accepting calls and
  answering health checks while a decision runs; a call cancelled while it waits for a worker is dropped
  from the queue.
* The standard health service says SERVING only while the engine says its cache is synced (polled);
  server reflection lists the placement, health and reflection services for grpcurl.
* ``PlacementServer.stop`` is graceful: health goes NOT_SERVING, new calls are refused, calls in flight
  get ``grace_s`` to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from kubenexus.addresses import is_loopback
from placement.api.access import DEFAULT_WRITER, AccessPolicy
from placement.api.certificates import ServerCertificates
from placement.api.interceptor import SERVICE_NAME, StatusInterceptor
from placement.api.metrics import PlacementMetrics
from placement.api.node_names import keyed_parser
from placement.api.servicer import PlacementServicer
from placement.api.v1 import placement_pb2 as pb
from placement.api.v1 import placement_pb2_grpc
from placement.service.engine import PlacementEngine

log = logging.getLogger("kubenexus.placement.server")

_T = TypeVar("_T")
MIB = 1024 * 1024
CONNECTION_AGE_GRACE_S = 30.0  # longer than any call takes (a gang plan: well under a second)


@dataclass(frozen=True)
class TlsFiles:
    """Server certificate and key (PEM); with ``client_ca`` clients must present a certificate it signed."""

    cert: Path
    key: Path
    client_ca: Path | None = None


@dataclass(frozen=True)
class ServerOptions:
    """``ValueError`` on construction for an address other machines can reach without client certificates,
    unless ``insecure`` says so: plaintext is for the loopback demo and development only."""

    listen: str = "127.0.0.1:50051"
    tls: TlsFiles | None = None
    insecure: bool = False
    writers: frozenset[str] = frozenset({DEFAULT_WRITER})  # client identities that may reserve
    admins: frozenset[str] = frozenset()  # may also release another identity's reservations
    # 10,000 candidate names are ~200 KB; 16 MiB leaves room for the largest sane pod group.
    max_receive_bytes: int = 16 * MIB
    max_send_bytes: int = 64 * MIB
    workers: int = 4
    grace_s: float = 5.0
    health_interval_s: float = 1.0
    # Connections end after this age (a GOAWAY; calls in flight get ``CONNECTION_AGE_GRACE_S``), so a client
    # balancing over a headless Service re-reads its DNS and finds replicas added since (gRPC proposal A9).
    max_connection_age_s: float = 120.0

    def __post_init__(self) -> None:
        if not self.mutual_tls and not self.insecure and not is_loopback(self.listen):
            raise ValueError(
                f"refusing to serve {self.listen} without client authentication: give --tls-cert, --tls-key and "
                "--tls-client-ca (mutual TLS), listen on a loopback address, or say --insecure"
            )

    @property
    def mutual_tls(self) -> bool:
        return self.tls is not None and self.tls.client_ca is not None

    @property
    def access(self) -> AccessPolicy:
        return AccessPolicy(authenticate=self.mutual_tls, writers=self.writers, admins=self.admins)


class _Handlers:
    """Records the handlers the generated ``add_PlacementServicer_to_server`` registers."""

    def __init__(self) -> None:
        self.methods: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        pass  # the same handlers as below, for servers without registered methods

    def add_registered_method_handlers(self, service: str, methods: dict[str, grpc.RpcMethodHandler[Any, Any]]) -> None:
        self.methods = dict(methods)


def _add_placement(servicer: PlacementServicer, server: grpc.aio.Server) -> None:
    """The generated registration, with Filter's and Score's requests parsed with their names key."""
    recorded = _Handlers()  # a recorder standing in for the server
    placement_pb2_grpc.add_PlacementServicer_to_server(servicer, recorded)  # type: ignore[arg-type]
    methods = recorded.methods
    for method, message in (("Filter", pb.FilterRequest), ("Score", pb.ScoreRequest)):
        methods[method] = methods[method]._replace(request_deserializer=keyed_parser(message.FromString))  # type: ignore[attr-defined]
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, methods),))
    server.add_registered_method_handlers(SERVICE_NAME, methods)


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
            interceptors=[StatusInterceptor(self.metrics, options.access)],
            options=[
                ("grpc.max_receive_message_length", options.max_receive_bytes),
                ("grpc.max_send_message_length", options.max_send_bytes),
                ("grpc.max_connection_age_ms", int(options.max_connection_age_s * 1000)),
                ("grpc.max_connection_age_grace_ms", int(CONNECTION_AGE_GRACE_S * 1000)),
            ],
        )
        _add_placement(PlacementServicer(engine, self.metrics, self._in_pool, options.access), self._server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            self._server,
        )
        self._health_task: asyncio.Task[None] | None = None
        self.port = 0
        self.certificates: ServerCertificates | None = None  # with TLS, once started

    async def _in_pool(self, work: Callable[[], _T]) -> _T:
        # Cancelling the awaiting coroutine cancels the pool future too, so queued work never starts.
        return await asyncio.get_running_loop().run_in_executor(self._pool, work)

    def _certificates(self, tls: TlsFiles) -> ServerCertificates:
        """The TLS files, read again at a new connection's handshake once they change (renewal)."""
        self.certificates = ServerCertificates(tls)
        return self.certificates

    async def start(self) -> int:
        """Bind and serve; returns the bound port (useful with port 0)."""
        listen = self.options.listen
        tls = self.options.tls
        try:
            port = (
                self._server.add_insecure_port(listen)
                if tls is None
                else self._server.add_secure_port(listen, self._certificates(tls).credentials())
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
