"""A placement server on a real loopback socket for tests: its own event loop on a thread, a sync client."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import grpc

from placement.api.server import PlacementServer, ServerOptions
from placement.api.v1 import placement_pb2_grpc
from placement.service.engine import PlacementEngine
from tests.conftest import STARTUP_TIMEOUT_S

_T = TypeVar("_T")


class RunningServer:
    """``PlacementServer`` started on 127.0.0.1 (a random port) in a background event loop."""

    def __init__(self, engine: PlacementEngine, options: ServerOptions | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="test grpc loop", daemon=True)
        self._thread.start()
        options = options or ServerOptions(listen="127.0.0.1:0", health_interval_s=0.05, grace_s=1.0)
        self.server = self._call(self._make(engine, options))
        self.port = self._call(self.server.start())
        self.address = f"127.0.0.1:{self.port}"
        self.channel = grpc.insecure_channel(self.address)
        self.stub = placement_pb2_grpc.PlacementStub(self.channel)

    @staticmethod
    async def _make(engine: PlacementEngine, options: ServerOptions) -> PlacementServer:
        # grpc.aio binds its server to the loop that creates it.
        return PlacementServer(engine, options)

    def _call(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=STARTUP_TIMEOUT_S)

    def close(self) -> None:
        self.channel.close()
        self._call(self.server.stop(0.5))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
