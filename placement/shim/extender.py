"""A kube-scheduler HTTP extender over the placement service: ``filter``, ``prioritize``, ``preempt``, ``bind``.

kube-scheduler POSTs JSON with capitalised keys (``k8s.io/kube-scheduler/extender/v1``):

* ``filter``: ExtenderArgs ``{Pod, Nodes, NodeNames}`` -> ExtenderFilterResult ``{Nodes, NodeNames,
  FailedNodes, FailedAndUnresolvableNodes, Error}``. Configured ``nodeCacheCapable: true``, so only
  ``NodeNames`` comes and goes (a ``Nodes`` list is still read when sent). A node whose topology can
  never hold the pod (unknown node, kubelet topology policy, the pod's NUMA intent, isolation) is
  *unresolvable*: preempting pods would not help, so kube-scheduler does not try. A node short of free
  resources is merely *failed*: preemption may free it.
* ``prioritize``: ExtenderArgs -> HostPriorityList ``[{Host, Score}]``, the service's 0..100 scaled to
  the extender range 0..10 (kube-scheduler multiplies by the configured weight and rescales).
* ``preempt``: ExtenderPreemptionArgs ``{Pod, NodeNameToVictims, NodeNameToMetaVictims}`` ->
  ExtenderPreemptionResult ``{NodeNameToMetaVictims}``. kube-scheduler has chosen victims on each candidate
  node by its own model (kubernetes pkg/scheduler/framework/preemption/preemption.go ``callExtenders``,
  pkg/scheduler/extender.go ``ProcessPreemption``); the extender keeps only the nodes where the service's
  exact model (``CheckEviction``: the kubelet's NUMA admission, the device plugin's GPU choice) lets the pod
  in once those victims are gone, their victims unchanged, and drops the others, so kube-scheduler never
  evicts for room the kubelet would still refuse, nor a pod Kueue admitted (Kueue evicts those). With
  ``nodeCacheCapable: true`` the victims come as ``{Pods: [{UID}], NumPDBViolations}``; full pods
  (``NodeNameToVictims``) are read too. The answer is
  always MetaVictims (UIDs), as kube-scheduler expects. A node with no victims is dropped (kube-scheduler
  refuses such an answer: "expected at least one victim pod on node"). The service unreachable: a 503, so
  kube-scheduler's preemption fails this cycle rather than evict unchecked (``ignorable: false``).
* ``bind``: ExtenderBindingArgs ``{PodName, PodNamespace, PodUID, Node}`` -> ExtenderBindingResult
  ``{Error}``. The extender reserves the pod on that node (its NUMA cells and GPUs), records the
  placement on the pod as the binder does (``placement.shim.binder``), and binds it. A member of a pod
  group is held at bind until its group's minimum of members are bound or held, then all bind together;
  a group that does not fill within its timeout releases every held member (each bind answers an Error,
  kube-scheduler retries them), so a group never binds in part.

Pod groups come from every gang API, as in the binder: membership by ``gang_sources.group_of`` (our labels,
scheduler-plugins' label, Volcano's annotation, ``spec.schedulingGroup``, ``spec.workloadRef``, Kueue's pod
group name); the minimum from our ``min-available`` label or Kueue's ``pod-group-total-count`` annotation
(``gang_sources.label_group_definition``), or from the group's object read by a ``GangDirectory`` (started by
``start``); the timeout from the object (scheduler-plugins' ``scheduleTimeoutSeconds``) or ``gang_timeout_s``,
never longer than ``max_hold_s``: kube-scheduler gives up on a bind call after its extender ``httpTimeout``
(the ``http.Client`` timeout of pkg/scheduler/extender.go ``NewHTTPExtender``) and would schedule the pod
again while this hold still ran. A group whose object is missing or unreadable, or a pod naming two
groups, answers bind with an Error saying why before anything is reserved; a basic-policy group (native
``basic``, Volcano ``minMember: 0``) binds pod by pod. The group's topology constraint is not applied here:
kube-scheduler chooses each member's node alone (docs/gang.md).

Errors never escape as a traceback: a malformed body is a 400 with one line, a refused pod an
``Error`` in the result (what kube-scheduler puts in the pod's FailedScheduling event).
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kubenexus.kube.client import Json, KubeClient
from kubenexus.kube.errors import API_ERRORS, describe
from placement.api.v1 import placement_pb2 as pb
from placement.core.annotations import (
    ASSIGNED_CELLS_KEY,
    ASSIGNED_GPUS_KEY,
    GROUP_NAME_KEY,
    RESERVED_NODE_KEY,
    SCHEDULER_PLUGINS_KEY,
    format_ids,
)
from placement.core.gang_sources import (
    LABEL_DEFINED_SOURCES,
    SOURCE_OURS,
    SOURCE_SCHEDULER_PLUGINS,
    GangSourceError,
    GroupDefinition,
    PodGroupKey,
    group_of,
    label_group_definition,
)
from placement.shim.client import PlacementClient, ServiceError
from placement.shim.flags import DEFAULT_GANG_TIMEOUT_S, DEFAULT_MAX_GANG_HOLD_S, SCHEDULER_NAME
from placement.shim.gang_directory import GangDirectory, Unresolved
from placement.shim.server_tls import ServerTls

log = logging.getLogger("kubenexus.placement.extender")

MAX_EXTENDER_PRIORITY = 10  # extenderv1.MaxExtenderPriority
MAX_BODY_BYTES = 16 * 1024 * 1024
# The Subject CN of kube-scheduler's client certificate as deployed (deploy/placement/cert-manager): the
# identity that may call bind.
DEFAULT_CALLER = "kubenexus-kube-scheduler"
# A TLS handshake takes milliseconds; a client silent for this long is dropped.
HANDSHAKE_TIMEOUT_S = 10.0
# A kept-alive connection idle for this long is closed: longer than the 90 s after which kube-scheduler's
# HTTP client (Go's http.Transport, IdleConnTimeout) drops its own idle connections, so that it never sends
# a request on a connection the extender is closing.
IDLE_TIMEOUT_S = 120.0
# Kinds where preemption cannot help: the node's topology or the pod's own intent rules it out.
_UNRESOLVABLE = frozenset(
    {
        pb.REJECTION_KIND_UNKNOWN_NODE,
        pb.REJECTION_KIND_NO_TOPOLOGY,
        pb.REJECTION_KIND_KUBELET_TOPOLOGY,
        pb.REJECTION_KIND_INTENT,
        pb.REJECTION_KIND_ISOLATION,
        pb.REJECTION_KIND_NODE_CONSTRAINT,
    }
)
# The label that narrows the listing of a group's members, for the sources that pods join by a label only; the
# others (an annotation, a spec field; Kueue's group name, an annotation or else a label) cannot be selected
# by the API server and are filtered here.
_MEMBER_LABEL = {SOURCE_OURS: GROUP_NAME_KEY, SOURCE_SCHEDULER_PLUGINS: SCHEDULER_PLUGINS_KEY}


class BadRequest(ValueError):
    """The request body is not what kube-scheduler sends; answered 400 with this message."""


@dataclass
class _Group:
    minimum: int
    held: set[str] = field(default_factory=set)
    complete: threading.Event = field(default_factory=threading.Event)


class Extender:
    """The four verbs as plain methods (decoded JSON in, JSON out); ``serve`` puts them on HTTP."""

    def __init__(
        self,
        api: KubeClient,
        service: PlacementClient,
        *,
        gang_timeout_s: float = DEFAULT_GANG_TIMEOUT_S,
        max_hold_s: float = DEFAULT_MAX_GANG_HOLD_S,
        scheduler_name: str = SCHEDULER_NAME,
        watch_timeout_s: float = 300.0,
    ) -> None:
        self._api = api
        self._service = service
        self._gang_timeout_s = gang_timeout_s
        self._max_hold_s = max_hold_s
        self._scheduler_name = scheduler_name
        self._groups: dict[PodGroupKey, _Group] = {}
        self._groups_lock = threading.Lock()
        self._stop = threading.Event()
        # The group objects of every served gang API, read as the binder reads them.
        self._directory = GangDirectory(api, stop=self._stop, watch_timeout_s=watch_timeout_s)

    def start(self) -> None:
        """Start reading the gang APIs' objects; until an API is read, its groups' members are refused."""
        self._directory.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop reading the gang APIs (after the HTTP server: no bind is answered from here on)."""
        self._stop.set()
        self._api.close_streams()
        for thread in self._directory.threads:
            thread.join(timeout_s)

    def filter(self, args: Json) -> Json:
        pod, names = _extender_args(args)
        try:
            answer = self._service.filter(pod, names)
        except ServiceError as error:
            return {
                "Nodes": None,
                "NodeNames": None,
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": str(error),
            }
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        for group in answer.rejected:
            target = unresolvable if group.kind in _UNRESOLVABLE else failed
            target.update(dict.fromkeys(group.nodes, group.reason))
        # Which pods kube-scheduler asks about (docs/scheduler.md: every pod of the profile, no managedResources).
        log.debug("filter", extra={"pod": _pod_name(pod), "nodes": len(names), "feasible": len(answer.feasible_nodes)})
        return {
            "Nodes": None,
            "NodeNames": list(answer.feasible_nodes),
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": "",
        }

    def prioritize(self, args: Json) -> list[Json]:
        pod, names = _extender_args(args)
        try:
            answer = self._service.score(pod, names)
        except ServiceError as error:
            # HostPriorityList has no error field: a non-200 makes kube-scheduler report the failure.
            raise RuntimeError(str(error)) from None
        scores = dict(zip(answer.nodes, answer.scores, strict=True))
        log.debug("prioritize", extra={"pod": _pod_name(pod), "nodes": len(names)})
        return [{"Host": name, "Score": scaled_score(scores.get(name, 0.0))} for name in names]

    def preempt(self, args: Json) -> Json:
        pod, victims = _preemption_args(args)
        candidates = [
            pb.EvictionCandidate(node=node, victim_uids=[v["UID"] for v in meta["Pods"]])
            for node, meta in victims.items()
            if meta["Pods"]
        ]
        if not candidates:
            return {"NodeNameToMetaVictims": {}}
        try:
            answer = self._service.check_eviction(pod, candidates)
        except ServiceError as error:
            # ExtenderPreemptionResult has no error field: a non-200 fails kube-scheduler's preemption.
            raise RuntimeError(str(error)) from None
        kept: dict[str, Json] = {}
        for verdict in answer.verdicts:
            if verdict.fits:
                kept[verdict.node] = victims[verdict.node]
                continue
            log.info(
                "preemption candidate dropped",
                extra={"pod": _pod_name(pod), "node": verdict.node, "reason": verdict.reason},
            )
        log.debug("preempt", extra={"pod": _pod_name(pod), "candidates": sorted(victims), "kept": sorted(kept)})
        return {"NodeNameToMetaVictims": kept}

    def bind(self, args: Json) -> Json:
        namespace, name, node = _binding_args(args)
        pod = self._api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        if pod is None:
            return {"Error": f"pod {namespace}/{name} not found"}
        uid = str(args.get("PodUID") or "")
        if uid and (pod.get("metadata") or {}).get("uid") not in (None, uid):
            return {"Error": f"pod {namespace}/{name} was replaced (uid {uid} is gone)"}
        scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
        if scheduler != self._scheduler_name:
            return {"Error": f"pod {namespace}/{name} belongs to scheduler {scheduler!r}, not {self._scheduler_name!r}"}
        if (pod.get("spec") or {}).get("nodeName"):
            return {"Error": f"pod {namespace}/{name} is already bound"}
        group = self._group_of(pod)
        if isinstance(group, str):
            return {"Error": group}  # nothing reserved or written yet
        try:
            answer = self._service.reserve(pod, [node])
        except ServiceError as error:
            return {"Error": str(error)}
        if not answer.reserved:
            reasons = "; ".join(g.reason for g in answer.rejected if node in g.nodes) or "no longer fits"
            return {"Error": f"node {node} cannot hold pod {namespace}/{name}: {reasons}"}
        placement = answer.placement
        annotations = {
            **dict(placement.annotations),
            RESERVED_NODE_KEY: node,
            ASSIGNED_CELLS_KEY: format_ids(placement.numa_cells),
        }
        if placement.gpu_ids:
            annotations[ASSIGNED_GPUS_KEY] = format_ids(placement.gpu_ids)
        try:
            self._patch(namespace, name, annotations)
            waited = "" if group is None else self._wait_for_group(name, group)
            if waited:
                self._release(namespace, name)
                return {"Error": waited}
            self._api.create(
                f"/api/v1/namespaces/{namespace}/pods/{name}/binding",
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                },
            )
        except API_ERRORS as error:
            self._release(namespace, name)
            return {"Error": f"binding {namespace}/{name} to {node} failed: {describe(error)}"}
        log.info("bound", extra={"pod": f"{namespace}/{name}", "node": node, "cells": list(placement.numa_cells)})
        return {"Error": ""}

    # --- gangs ----------------------------------------------------------------------------------------

    def _group_of(self, pod: Json) -> GroupDefinition | str | None:
        """The gang the pod is a member of; None for a lone pod or a basic-policy group (bound on its own);
        why it cannot bind now when its group reference or definition is refused or missing."""
        try:
            key = group_of(pod)
        except GangSourceError as error:
            return str(error)
        if key is None:
            return None
        if key.source in LABEL_DEFINED_SOURCES:
            try:
                return label_group_definition(key, [pod])  # ours without min-available: a group of one
            except GangSourceError as error:
                return str(error)
        definition = self._directory.definition(key)
        if isinstance(definition, Unresolved):
            return definition.message
        return definition if definition.gang else None

    def _wait_for_group(self, name: str, definition: GroupDefinition) -> str:
        """Hold a group member until its group fills; "" to bind now, else why it gave up."""
        key = definition.key
        asked = self._gang_timeout_s if definition.timeout_s is None else definition.timeout_s
        timeout_s = min(asked, self._max_hold_s)
        bound = self._bound_members(key)
        with self._groups_lock:
            group = self._groups.setdefault(key, _Group(minimum=definition.min_member))
            group.held.add(name)
            if len(group.held) + bound >= group.minimum:
                group.complete.set()
                del self._groups[key]  # the next arrival (a scale-up) starts a fresh count
        if group.complete.wait(timeout_s):
            return ""
        with self._groups_lock:
            group.held.discard(name)
            present = len(group.held) + bound + 1
        return (
            f"waiting for pod group {key.object_name}: {present}/{group.minimum} members reached bind "
            f"within {timeout_s:g} s; released, will retry"
        )

    def _bound_members(self, key: PodGroupKey) -> int:
        """Members of the group on a node and not finished, whatever way they name it."""
        label = _MEMBER_LABEL.get(key.source)
        query = {"labelSelector": f"{label}={key.name}"} if label else None
        pods = self._api.list(f"/api/v1/namespaces/{key.namespace}/pods", query)
        return sum(1 for p in pods.get("items") or [] if _bound(p) and _member_of(p, key))

    def _release(self, namespace: str, name: str) -> None:
        try:
            self._service.unreserve(namespace, name)
        except ServiceError as error:
            log.warning("could not release a reservation", extra={"pod": f"{namespace}/{name}", "error": str(error)})
        try:
            self._patch(namespace, name, dict.fromkeys((RESERVED_NODE_KEY, ASSIGNED_CELLS_KEY, ASSIGNED_GPUS_KEY)))
        except API_ERRORS as error:
            log.warning("could not clear a reservation", extra={"pod": f"{namespace}/{name}", "error": describe(error)})

    def _patch(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        self._api.merge_patch(f"/api/v1/namespaces/{namespace}/pods/{name}", {"metadata": {"annotations": annotations}})


def _bound(pod: Mapping[str, Any]) -> bool:
    """On a node and not finished: a member its group still counts (as the binder counts them)."""
    on_node = bool((pod.get("spec") or {}).get("nodeName"))
    return on_node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _member_of(pod: Mapping[str, Any], key: PodGroupKey) -> bool:
    try:
        return group_of(pod) == key
    except GangSourceError:
        return False  # a pod naming two groups joins neither


def _pod_name(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"


def scaled_score(score: float) -> int:
    """The service's 0..100 as an extender priority 0..10."""
    return max(0, min(MAX_EXTENDER_PRIORITY, round(score * MAX_EXTENDER_PRIORITY / 100)))


def _extender_args(args: Json) -> tuple[Json, list[str]]:
    pod = args.get("Pod")
    if not isinstance(pod, dict):
        raise BadRequest("ExtenderArgs.Pod must be a Pod object")
    names = args.get("NodeNames")
    if names is None:
        nodes = args.get("Nodes") or {}
        items = nodes.get("items") if isinstance(nodes, dict) else None
        names = [((item or {}).get("metadata") or {}).get("name") for item in items or []]
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise BadRequest("ExtenderArgs.NodeNames must be a list of node names")
    return pod, names


def _preemption_args(args: Json) -> tuple[Json, dict[str, Json]]:
    """The pod and, per candidate node, its victims as MetaVictims ``{Pods: [{UID}], NumPDBViolations}``: what
    kube-scheduler sends with ``nodeCacheCapable: true``, or made from the full pods it sends without."""
    pod = args.get("Pod")
    if not isinstance(pod, dict):
        raise BadRequest("ExtenderPreemptionArgs.Pod must be a Pod object")
    meta = args.get("NodeNameToMetaVictims")
    field = "NodeNameToMetaVictims" if meta is not None else "NodeNameToVictims"
    nodes = args.get(field)
    if nodes is None:
        return pod, {}
    if not isinstance(nodes, dict):
        raise BadRequest(f"ExtenderPreemptionArgs.{field} must map node names to victims")
    victims: dict[str, Json] = {}
    for node, found in nodes.items():
        where = f"the victims on node {node!r}"
        if not node or not isinstance(found, dict) or not isinstance(found.get("Pods") or [], list):
            raise BadRequest(f"{where} must be {{Pods: [...], NumPDBViolations: n}}")
        violations = found.get("NumPDBViolations") or 0
        if not isinstance(violations, int) or isinstance(violations, bool):
            raise BadRequest(f"{where}: NumPDBViolations must be an integer")
        uids = [_victim_uid(victim, where, full=meta is None) for victim in found.get("Pods") or []]
        victims[node] = {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": violations}
    return pod, victims


def _victim_uid(victim: Any, where: str, *, full: bool) -> str:
    """A victim's UID: a MetaPod's ``UID``, or a full Pod's ``metadata.uid``."""
    uid: Any = None
    if isinstance(victim, dict):
        uid = (victim.get("metadata") or {}).get("uid") if full else victim.get("UID")
    if not isinstance(uid, str) or not uid:
        shape = "a Pod with metadata.uid" if full else "{UID: <pod uid>}"
        raise BadRequest(f"{where}: every victim must be {shape}")
    return uid


def _binding_args(args: Json) -> tuple[str, str, str]:
    values = [args.get(key) for key in ("PodNamespace", "PodName", "Node")]
    if not all(isinstance(v, str) and v for v in values):
        raise BadRequest("ExtenderBindingArgs needs PodNamespace, PodName and Node")
    namespace, name, node = (str(v) for v in values)
    return namespace, name, node


# --- HTTP ------------------------------------------------------------------------------------------------


def serve(
    extender: Extender,
    address: tuple[str, int],
    *,
    prefix: str = "",
    tls: ServerTls | None = None,
    writers: frozenset[str] = frozenset({DEFAULT_CALLER}),
) -> ThreadingHTTPServer:
    """Start the HTTP server on its own thread; ``shutdown()`` stops it. Paths: ``{prefix}/filter`` etc.

    ``tls``: HTTPS, its files read again when they change (``ServerTls``). With client certificates required
    (``tls`` verifying them), ``bind`` (which reserves and binds) answers
    only a certificate whose Subject CN is one of ``writers`` (kube-scheduler's), as the service's gRPC
    port lets only its writer identities reserve; any certificate from the CA may call the other verbs,
    which decide nothing. A certificate naming several CNs is refused: whose would it be?"""
    routes: dict[str, Callable[[Json], Any]] = {
        f"{prefix}/filter": extender.filter,
        f"{prefix}/prioritize": extender.prioritize,
        f"{prefix}/preempt": extender.preempt,
        f"{prefix}/bind": extender.bind,
    }
    authenticate = tls is not None and tls.requires_client_certificates

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            if route is None:
                self._answer(
                    HTTPStatus.NOT_FOUND, {"error": f"no such verb {self.path}; POST filter, prioritize, preempt, bind"}
                )
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 < length <= MAX_BODY_BYTES:
                    raise BadRequest(f"a JSON body of 1 to {MAX_BODY_BYTES} bytes is required")
                body = json.loads(self.rfile.read(length))
                if authenticate and route == extender.bind:  # after the body: the connection stays usable
                    refused = _refusal(common_names_of(self.connection), writers)
                    if refused:
                        self._answer(HTTPStatus.FORBIDDEN, {"error": refused})
                        return
                if not isinstance(body, dict):
                    raise BadRequest("the body must be a JSON object")
                self._answer(HTTPStatus.OK, route(body))
            except (BadRequest, ValueError) as error:
                self._answer(HTTPStatus.BAD_REQUEST, {"error": str(error)})
            except RuntimeError as error:  # prioritize, preempt: the service refused
                self._answer(HTTPStatus.SERVICE_UNAVAILABLE, {"error": str(error)})
            except API_ERRORS as error:  # the API server, reading the pod to bind
                self._answer(HTTPStatus.SERVICE_UNAVAILABLE, {"error": describe(error)})

        def _answer(self, status: HTTPStatus, document: Any) -> None:
            data = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("extender request", extra={"request": format % args})

    Handler.timeout = IDLE_TIMEOUT_S
    server = _HTTPServer(address, Handler, tls)
    threading.Thread(target=server.serve_forever, name="extender http", daemon=True).start()
    return server


def common_names_of(connection: Any) -> list[str]:
    """The Subject CNs of the client certificate ``connection`` (an ``ssl.SSLSocket``) presented."""
    certificate = connection.getpeercert() if isinstance(connection, ssl.SSLSocket) else None
    subject: tuple[tuple[tuple[str, str], ...], ...] = (certificate or {}).get("subject", ())  # type: ignore[assignment]
    return [value for name in subject for key, value in name if key == "commonName"]


def _refusal(names: list[str], writers: frozenset[str]) -> str:
    """Why a caller with these CNs may not bind ("" when it may)."""
    if len(names) != 1:
        found = "none" if not names else ", ".join(repr(name) for name in names)
        return f"bind needs a client certificate naming one identity (Subject CN); this one names {found}"
    if names[0] not in writers:
        allowed = ", ".join(sorted(writers))
        return f"client {names[0]!r} may not bind: only {allowed} (--writer-identity) may"
    return ""


class _HTTPServer(ThreadingHTTPServer):
    """The TLS handshake runs on each connection's own thread, within ``HANDSHAKE_TIMEOUT_S``: a client that
    connects and never handshakes holds that thread until then, never the accept loop (where a listening
    socket wrapped whole would run it, and one idle socket would stall every caller)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], tls: ServerTls | None) -> None:
        super().__init__(address, handler)
        self._tls = tls

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self._tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            connection = self._tls.context().wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as error:  # no certificate, another CA, silence, a reset
            log.debug("extender TLS handshake failed", extra={"client": client_address[0], "error": str(error)})
            return
        try:
            super().finish_request(connection, client_address)
        finally:
            connection.close()
