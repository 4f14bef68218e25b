"""kmock's KubernetesEmulator on a real TCP port, in its own thread and event loop.

The agent uses the synchronous official client and kubectl is a separate process, so the emulator
cannot share the test's thread. Two gaps of kmock 0.8 are filled here so that kubectl works too:
the core discovery document (kmock answers ``groupVersion: "/v1"``) and list responses (kmock's
carry no ``kind``). kmock does not track ``resourceVersion``; the agent does not rely on it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import kmock

NODES = kmock.resource("", "v1", "nodes")
NRTS = kmock.resource("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies")
_WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


class Emulator:
    """Start with ``with Emulator() as api:``; ``api.kmock`` is the emulator for scripting reactions."""

    def __init__(self) -> None:
        self.kmock = kmock.KubernetesEmulator()
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._serve(),), daemon=True)
        self._error: BaseException | None = None
        self._declare_resources()

    def __enter__(self) -> Emulator:
        self._thread.start()
        if not self._ready.wait(10) or self._error is not None:
            raise RuntimeError(f"the Kubernetes emulator did not start: {self._error!r}")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)
        self._loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        try:
            async with self.kmock, kmock.Server(self.kmock) as server:
                self.url = str(server.url).rstrip("/")
                self._ready.set()
                await self._stopping.wait()
        except BaseException as error:  # reported by __enter__, which is waiting for _ready
            self._error = error
            self._ready.set()

    def _declare_resources(self) -> None:
        verbs = {"get", "list", "create", "update", "patch", "delete"}
        self.kmock.resources[NODES] = kmock.ResourceInfo(
            kind="Node", singular="node", namespaced=False, verbs=verbs, shortnames={"no"}
        )
        self.kmock.resources[NRTS] = kmock.ResourceInfo(
            kind="NodeResourceTopology",
            singular="noderesourcetopology",
            namespaced=False,
            verbs=verbs,
            shortnames={"node-res-topo"},
        )
        self.kmock["get /api/v1"] << {
            "apiVersion": "v1",
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": [
                {
                    "name": "nodes",
                    "singularName": "node",
                    "namespaced": False,
                    "kind": "Node",
                    "verbs": sorted(verbs),
                    "shortNames": ["no"],
                }
            ],
        }
        self.kmock["list", NODES] << self._lister("v1", "NodeList")
        self.kmock["list", NRTS] << self._lister("topology.node.k8s.io/v1alpha2", "NodeResourceTopologyList")

    def _lister(self, api_version: str, kind: str) -> Any:
        def respond(request: kmock.Request) -> dict[str, Any]:
            items = [
                obj.raw
                for (resource, _, _), obj in self.kmock.objects.items()
                if resource == request.resource and not obj.deleted
            ]
            return {"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": "1"}, "items": items}

        return respond

    # --- state -----------------------------------------------------------------------------------

    def add_node(self, name: str, labels: dict[str, str] | None = None) -> None:
        self.kmock.objects[NODES, None, name] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels or {}), "annotations": {}},
            "spec": {},
        }

    def node(self, name: str) -> dict[str, Any]:
        return dict(self.kmock.objects[NODES, None, name].raw)

    def nrt(self, name: str) -> dict[str, Any] | None:
        key = (NRTS, None, name)
        if key not in self.kmock.objects or self.kmock.objects[key].deleted:
            return None
        return dict(self.kmock.objects[key].raw)

    def requests(self) -> list[kmock.Request]:
        return list(self.kmock)

    def writes(self, since: int = 0) -> list[kmock.Request]:
        """The write requests (POST, PUT, PATCH, DELETE) seen from request number ``since`` on."""
        return [request for request in self.requests()[since:] if request.method.value in _WRITE_METHODS]

    def write_kubeconfig(self, path: Path) -> Path:
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: emulator\n  cluster:\n    server: {self.url}\n"
            "users:\n- name: tester\n  user:\n    token: test-token\n"
            "contexts:\n- name: emulator\n  context:\n    cluster: emulator\n    user: tester\n"
            "current-context: emulator\n"
        )
        return path


def request_lines(requests: Iterator[kmock.Request] | list[kmock.Request]) -> list[str]:
    """``"PATCH /api/v1/nodes/n1"`` per request: what a failing assertion should show."""
    return [f"{request.method.value} {request.url.path}" for request in requests]
