"""kmock's KubernetesEmulator on a real TCP port, in its own thread and event loop, as strict as a real API
server wherever the programs could tell the difference.

The agent uses the synchronous official client and kubectl is a separate process, so the emulator cannot
share the test's thread. On top of kmock 0.8 (``StrictKubernetes``):

* **Conformance.** Every object a write would store (a create's body, the object a merge patch results in,
  a Binding) is checked by ``tests.api_conformance``: the official schemas of Kubernetes 1.30 to the newest
  kubernetes-validate ships, strict (unknown fields are errors); the NRT CRD's structural schema; the
  metadata rules (names, label keys and values, annotations). A violation is answered ``422 Invalid`` as a
  real API server answers it, stores nothing, and is recorded: leaving ``with Emulator()`` with violations
  recorded fails with the list, so no test passes on a write a real cluster would refuse. A test that
  sends invalid objects on purpose takes them with ``take_violations()``.
* **resourceVersion.** One counter for the whole store, as etcd's revision: every stored write gets the next
  value in ``metadata.resourceVersion`` (kmock tracks none); a list answers the current one. A merge patch
  or a Binding whose ``metadata.resourceVersion`` or ``metadata.uid`` differs from the stored object's is
  refused with ``409 Conflict`` (the leader election relies on it), as is binding a pod already bound.
* **A refused write stores nothing.** kmock stores a write before any scripted reaction answers it; here a
  write is stored only when its answer is a success, so a scripted ``<< 409`` or ``<< 500`` leaves the
  object as it was and the watches see nothing.
* **Merge patches only** (``application/merge-patch+json``, RFC 7386: ``null`` removes a key, objects merge,
  lists replace); other patch types are answered 415. PUT is not emulated.
* **Watches** honour ``resourceVersion`` (unset or "0": the current objects as ADDED first; otherwise only
  the changes after it, from the whole history kept in memory, so never 410 unless a test scripts one)
  and ``timeoutSeconds``: the server ends the stream then, after a BOOKMARK at the current version when
  ``allowWatchBookmarks``, and a reflector resumes from the last version it saw (kmock replays every object
  as ADDED on each watch and never ends one).
* **Creates** take the URL's namespace (none for a cluster-scoped object; a namespaced body naming another is
  answered 400); an existing name is answered 409 AlreadyExists.
* **Namespaces as a resource**: kmock reads ``/api/v1/namespaces[/NAME]`` as a namespaced path that lacks
  its collection (and answers 500); here it is the Namespace collection, or one Namespace.
* **kubectl**: the core discovery document (kmock answers ``groupVersion: "/v1"``) and lists with their
  ``apiVersion`` and ``kind`` (kmock's carry neither, and ``resourceVersion: "..."``).

**Who still uses it, and why.** The end-to-end tests run against a real kube-apiserver v1.37
(``tests/cluster/``, marker ``cluster``). The emulator stays for what a real server cannot be made
to do on demand, each module's docstring saying which:

* scripted refusals of one given request: a 409 then a 500 (test_agent_cluster), a 503 on the Nth binding
  mid-gang and a 410 sent as an error event inside a watch stream (test_shim_e2e);
* a follower's pod watch held back so that its cache lags the leader's (test_read_replicas_e2e);
* API versions a 1.37 server no longer serves, or serves whatever a test wants: the 1.35 and 1.36 gang APIs
  (test_gang_sources_e2e, test_extender_gang_sources), a cluster without DRA or serving only v1beta1, a slice
  the real validation would refuse, a failing discovery (test_dra_feed);
* callers and bodies the real kube-scheduler never sends (test_shim_access, test_extender_preempt), where the
  API behind the door is incidental;
* the emulator's own strictness (test_api_conformance_emulator).

Not emulated: field and label selectors (ignored: a list or watch gets the whole collection), defaulting,
``generateName``, strategic merge and apply patches, status subresources, finalizers.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import aiohttp.web
import attrs
import kmock
from kmock._internal import parsing as kmock_parsing

from tests.api_conformance import custom_resource_violations, violations
from tests.conftest import STARTUP_TIMEOUT_S

NODES = kmock.resource("", "v1", "nodes")
NRTS = kmock.resource("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies")
MERGE_PATCH = "application/merge-patch+json"
_WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
_STORING_ACTIONS = (kmock.action.CREATE, kmock.action.UPDATE, kmock.action.DELETE)

Json = dict[str, Any]
Key = tuple[kmock.resource, str | None, str]  # (resource, namespace, name)
T = TypeVar("T")


_kmock_parse_path = kmock_parsing.parse_path


def _parse_path(path: str) -> kmock_parsing.ParsedPath:
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and len(parts) <= 4:
        name = parts[3] if len(parts) == 4 else None
        return kmock_parsing.ParsedPath(group="", version="v1", plural="namespaces", name=name)
    return _kmock_parse_path(path)


kmock_parsing.parse_path = _parse_path


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, without touching either argument: ``null`` removes a key, objects merge, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def refusal(status: int, reason: str, message: str) -> kmock.KubernetesError:
    """An error kmock answers as a Kubernetes ``Status`` with this code, reason and message."""
    return kmock.KubernetesError(status, reason, message)


def api_version_of(resource: kmock.resource) -> str:
    return f"{resource.group}/{resource.version}" if resource.group else str(resource.version)


@attrs.define(kw_only=True)
class StrictKubernetes(kmock.KubernetesEmulator):
    """kmock's emulator with a real API server's checks, resource versions and watch semantics."""

    violations: list[str] = attrs.field(factory=list, init=False)
    # The oldest Kubernetes release whose schemas judge the writes ("": every release from OLDEST on); a
    # cluster that serves resource.k8s.io/v1 is 1.34 or newer, and its pods are judged as such.
    oldest_release: str = attrs.field(default="", init=False)
    # The newest release whose schemas judge the writes ("": up to the newest we have): a cluster serving an
    # alpha API that a later release removed (scheduling.k8s.io/v1alpha1 Workload, 1.35 only) is that old.
    newest_release: str = attrs.field(default="", init=False)
    # Custom resources a test installs besides deploy/crd: (apiVersion, kind) -> schema (crd_schemas).
    custom_schemas: dict[tuple[str, str], Json] = attrs.field(factory=dict, init=False)
    resource_version: int = attrs.field(default=0, init=False)
    # Every stored change in order, as (resourceVersion, resource, watch event): what a watch resumes from.
    _changes: list[tuple[int, kmock.resource, Json]] = attrs.field(factory=list, init=False)
    _stored: set[int] = attrs.field(factory=set, init=False)  # ids of the write requests a fallback stored

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        storing = request.resource is not None and request.action in _STORING_ACTIONS
        if storing:
            async with self._lock:
                self._outcome(request)  # checked before any reaction: a scripted answer skips no check
        # The reactions, then the fallbacks, without kmock's own storing (it stores before anything answers).
        response = await kmock.RawHandler._handle(self, request)
        if storing and request.id not in self._stored and 200 <= response.status < 300:
            await self._store(request)  # a scripted success: the write is stored, as a real server would have
        self._stored.discard(request.id)
        return response

    # --- the fallbacks: what an unscripted request is answered -------------------------------------------------

    async def _serve_create(self, request: kmock.Request) -> kmock.Payload:
        return await self._store(request)

    async def _serve_update(self, request: kmock.Request) -> kmock.Payload:
        return await self._store(request)

    async def _serve_delete(self, request: kmock.Request) -> kmock.Payload:
        return await self._store(request)

    async def _serve_list(self, request: kmock.Request) -> kmock.Payload:
        assert request.resource is not None
        if request.resource not in self.resources:
            raise kmock.KubernetesResourceNotFoundError()
        async with self._lock:
            items, version = self._listed(request), self.resource_version
        return {
            "apiVersion": api_version_of(request.resource),
            "kind": f"{self.resources[request.resource].kind}List",
            "metadata": {"resourceVersion": str(version)},
            "items": items,
        }

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[kmock.Payload]:
        assert request.resource is not None
        since = request.params.get("resourceVersion") or "0"
        if not since.isdigit():
            raise refusal(400, "BadRequest", f"invalid resourceVersion {since!r}")
        timeout_s = float(request.params.get("timeoutSeconds") or 0) or None
        bus = self._buses[request.resource]
        yield b""  # the headers go out now: a quiet watch is a connected one
        async with self._lock:  # no write between the backlog and the mark: nothing missed, nothing twice
            if since == "0":
                backlog = [{"type": "ADDED", "object": obj} for obj in self._listed(request)]
            else:
                backlog = [e for v, r, e in self._changes if v > int(since) and r == request.resource]
            marker = await bus.mark()
        try:
            for event in backlog:
                if _watched(request, event):
                    yield event
            events = bus.stream(since=marker)
            clock = asyncio.get_running_loop()
            deadline = None if timeout_s is None else clock.time() + timeout_s
            while deadline is None or clock.time() < deadline:
                try:
                    event = await asyncio.wait_for(anext(events), None if deadline is None else deadline - clock.time())
                except TimeoutError:
                    break
                if _watched(request, event):
                    yield event
        finally:
            await bus.unmark(marker)
        if request.params.get("allowWatchBookmarks") == "true":
            bookmark = {
                "apiVersion": api_version_of(request.resource),
                "kind": self.resources[request.resource].kind,
                "metadata": {"resourceVersion": str(self.resource_version)},
            }
            yield {"type": "BOOKMARK", "object": bookmark}

    # --- storing ------------------------------------------------------------------------------------------------

    async def _store(self, request: kmock.Request) -> Json:
        async with self._lock:  # checked again: another write may have landed since the request came in
            key, result = self._outcome(request)
            stored = await self.commit(key, result)
        self._stored.add(request.id)
        return stored

    def _outcome(self, request: kmock.Request) -> tuple[Key, Json | None]:
        """Where a write lands and what it stores there (None: deleted), or the refusal a real server answers."""
        resource = request.resource
        assert resource is not None
        if resource not in self.resources:
            raise refusal(404, "NotFound", f"the server could not find the requested resource ({resource.plural})")
        if request.action == kmock.action.DELETE:
            key = (resource, request.namespace, str(request.name))
            self.existing(key)
            return key, None
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        if request.action == kmock.action.UPDATE and content_type != MERGE_PATCH:
            raise refusal(
                415, "UnsupportedMediaType", f"the emulated API takes {MERGE_PATCH} only, not {content_type!r}"
            )
        body = request.data
        if not isinstance(body, dict):
            raise refusal(
                400, "BadRequest", f"{request.method.value} {request.url.path}: the body is not a JSON object"
            )
        metadata: Mapping[str, Any] = body["metadata"] if isinstance(body.get("metadata"), dict) else {}
        if request.action == kmock.action.CREATE:
            namespaced = bool(self.resources[resource].namespaced)
            if namespaced and metadata.get("namespace") not in (None, "", request.namespace):
                raise refusal(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            key = (resource, request.namespace, str(metadata.get("name") or ""))
            if self.current(key) is not None:
                raise refusal(409, "AlreadyExists", f'{resource.plural} "{key[2]}" already exists')
            # The URL's namespace, or none for a cluster-scoped object (a merge patch's null removes the key).
            result = merge_patch(body, {"metadata": {"namespace": request.namespace}})
        else:
            key = (resource, request.namespace, str(request.name))
            current = self.existing(key)
            self.check_preconditions(current, metadata, resource)
            result = merge_patch(current, body)
        self.conform(result, api_version=api_version_of(resource), kind=str(self.resources[resource].kind))
        return key, result

    async def commit(self, key: Key, obj: Json | None) -> Json:
        """Store ``obj`` at ``key`` (None: delete it) at the next resourceVersion and tell the watches.

        The caller holds ``self._lock``.
        """
        self.resource_version += 1
        version = {"metadata": {"resourceVersion": str(self.resource_version)}}
        current = self.current(key)
        stored: Json
        if obj is None:
            assert current is not None
            stored, change = copy.deepcopy(merge_patch(current, version)), "DELETED"
            self._objects[key].delete()
        else:
            stored, change = copy.deepcopy(merge_patch(obj, version)), "ADDED" if current is None else "MODIFIED"
            if key in self._objects:
                self._objects[key].create(stored)  # a new version in kmock's history of the object
            else:
                self._objects[key] = stored
        event = {"type": change, "object": stored}
        self._changes.append((self.resource_version, key[0], event))
        await self._buses[key[0]].put(event)
        return stored

    async def put_object(self, key: Key, obj: Json) -> Json:
        """Create or replace an object as a test sets the scene (checked as any write is)."""
        async with self._lock:
            self.conform(obj, api_version=api_version_of(key[0]), kind=str(self.resources[key[0]].kind))
            return await self.commit(key, obj)

    # --- the checks ---------------------------------------------------------------------------------------------

    def conform(self, obj: Json, *, api_version: str, kind: str) -> None:
        """Refuse (422) an object a real API server would refuse, and record why."""
        schema = self.custom_schemas.get((api_version, kind))
        if schema is not None:
            problems = custom_resource_violations(obj, schema)
        else:
            problems = violations(
                obj, api_version=api_version, kind=kind, oldest=self.oldest_release, newest=self.newest_release
            )
        if problems:
            name = (obj.get("metadata") or {}).get("name")
            self.violations += (f"{kind} {name!r}: {problem}" for problem in problems)
            raise refusal(422, "Invalid", f'{kind} "{name}" is invalid: ' + "; ".join(problems))

    def check_preconditions(self, current: Json, metadata: Mapping[str, Any], resource: kmock.resource) -> None:
        """A write's ``metadata.uid`` and ``metadata.resourceVersion`` must be the stored object's (else 409)."""
        stored = current.get("metadata") or {}
        uid, version = metadata.get("uid"), metadata.get("resourceVersion")
        if uid and uid != stored.get("uid"):
            raise refusal(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {stored.get('uid')}",
            )
        if version and version != stored.get("resourceVersion"):
            plural = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
            raise refusal(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {plural} "{stored.get("name")}": the object has been modified; '
                "please apply your changes to the latest version and try again",
            )

    # --- reading ------------------------------------------------------------------------------------------------

    def current(self, key: Key) -> Json | None:
        if key not in self._objects or self._objects[key].deleted:
            return None
        return self._objects[key].raw

    def existing(self, key: Key) -> Json:
        current = self.current(key)
        if current is None:
            raise refusal(404, "NotFound", f'{key[0].plural} "{key[2]}" not found')
        return current

    def _listed(self, request: kmock.Request) -> list[Json]:
        return [
            obj.raw
            for (resource, namespace, _), obj in self._objects.items()
            if resource == request.resource and not obj.deleted and request.namespace in (None, namespace)
        ]


def _watched(request: kmock.Request, event: Json) -> bool:
    metadata = event["object"].get("metadata") or {}
    return request.namespace in (None, metadata.get("namespace")) and request.name in (None, metadata.get("name"))


class Emulator:
    """Start with ``with Emulator() as api:``; ``api.kmock`` is the emulator for scripting reactions."""

    def __init__(self) -> None:
        self.kmock = StrictKubernetes()
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._serve(),), daemon=True)
        self._error: BaseException | None = None
        self._declare_resources()

    def __enter__(self) -> Emulator:
        self._thread.start()
        if not self._ready.wait(STARTUP_TIMEOUT_S) or self._error is not None:
            raise RuntimeError(f"the Kubernetes emulator did not start: {self._error!r}")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)
        self._loop.close()
        refused = self.take_violations()
        if refused:
            report = "the emulated API refused writes that a real API server refuses:\n" + "\n".join(refused)
            if exc is None:
                raise AssertionError(report)
            exc.add_note(report)

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
        verbs = {"get", "list", "watch", "create", "patch", "delete"}
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
        # A real API server's readiness endpoint, which ``kubenexus.kube.liveness`` asks.
        self.kmock["get /readyz"] << b"ok"
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

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the emulator's loop (the store is the loop's) and return its result."""
        if not self._ready.is_set():
            coroutine.close()
            raise RuntimeError("the emulator is not running: use it inside `with Emulator() as api:`")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    def take_violations(self) -> list[str]:
        """The writes refused as non-conformant so far, forgotten: for tests that send them on purpose."""
        taken = list(self.kmock.violations)
        del self.kmock.violations[: len(taken)]
        return taken

    # --- state -----------------------------------------------------------------------------------

    def add_node(self, name: str, labels: dict[str, str] | None = None) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels or {}), "annotations": {}},
            "spec": {},
        }
        self.run(self.kmock.put_object((NODES, None, name), node))

    def node(self, name: str) -> dict[str, Any]:
        return dict(self.kmock.objects[NODES, None, name].raw)

    def nrt(self, name: str) -> dict[str, Any] | None:
        return self.kmock.current((NRTS, None, name))

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
