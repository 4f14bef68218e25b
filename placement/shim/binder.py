"""The standalone binder: a secondary scheduler for pods with ``schedulerName: kubenexus-scheduler``.

It watches those pods, asks the placement service where each pending one goes (``Reserve`` for a lone
pod, ``PlaceGang`` for a pod group) and binds through the Binding API, in two phases:

1. **reserve**: write the placement on every pod of the decision (``RESERVED_NODE_KEY``, the assigned NUMA
   cells and GPUs). From here on the decision is in the cluster, not only in this process: any replica's
   cluster feed charges those cells to those pods.
2. **bind**: one Binding per pod, then a ``Scheduled`` Event naming the cells, GPUs and DRA devices.

Before phase 1, a pod with DRA claims gets the devices the service chose written into its claims
(``claim_writer``: ``status.allocation`` and ``reservedFor``, as kube-scheduler's PreBind writes them).

A binder that dies between the phases loses nothing: the next leader finds pods that carry a reservation
and binds each to its reserved node, asking nothing new (the cells are still charged to them, so nothing
is double-booked). A group whose reservation was only partly written is cleared and planned again.

Users follow it with ``kubectl describe pod``: ``Scheduled`` (Normal), ``WaitingForPodGroup`` (Normal,
"waiting for pod group ns/name: 3/8 members"), ``FailedScheduling`` (Warning: an invalid annotation, or
why no node holds the pod). An invalid request leaves the pod pending with its Event until it changes.

When no node holds a pod (Reserve answers not reserved) or a complete group waits for capacity (PlaceGang
answers WAITING), the binder asks the service to ``Preempt``; a preemption it gets is written by
``preemptor.Preemptor`` (nominated node, evictions, ``Preempted`` / ``Preempting`` Events). It does not ask
again for a pod while the service holds its nominated node (``hold_seconds``), nor for
``PREEMPT_RETRY_S`` after an answer of no preemption; a pod with ``preemptionPolicy: Never`` (any member,
for a group) is never a preemptor.

Pods are grouped by ``placement.core.gang_sources.group_of``: our labels, scheduler-plugins' label,
Volcano's annotation, a native PodGroup (``spec.schedulingGroup``) or Workload (``spec.workloadRef``), a
Kueue pod group (its name and total count on the pods). A group its pods define (ours, Kueue's) takes its
minimum from them (``label_group_definition``). A group defined by an object takes its minimum, timeout
and topology from it (``gang_directory``), waits while the object is missing, and has its progress written
into the object's status (``group_status``); a basic-policy group's pods are placed one by one
(docs/gang.md, "Gangs from the operators' APIs").

Only the leader of the binder's Lease binds; the others keep their watch warm for a fast takeover.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubenexus.kube.client import Json, KubeClient
from kubenexus.kube.errors import API_ERRORS, ApiError, describe
from kubenexus.kube.paths import PODS_PATH
from kubenexus.kube.reflector import Reflector
from placement.api.v1 import placement_pb2 as pb
from placement.core.annotations import (
    ASSIGNED_CELLS_KEY,
    ASSIGNED_GPUS_KEY,
    RESERVED_NODE_KEY,
    InvalidValue,
    format_ids,
    parse_ids,
    pod_key,
)
from placement.core.gang_sources import (
    LABEL_DEFINED_SOURCES,
    GangSourceError,
    GroupDefinition,
    PodGroupKey,
    group_of,
    label_group_definition,
)
from placement.shim.claim_writer import ClaimWriteError, ClaimWriter
from placement.shim.client import PlacementClient, ServiceError
from placement.shim.flags import SCHEDULER_NAME
from placement.shim.gang_directory import GangDirectory, Unresolved
from placement.shim.group_status import GroupOutcome, GroupStatusWriter
from placement.shim.preemptor import Preemptor

log = logging.getLogger("kubenexus.placement.binder")

PodKey = tuple[str, str]
_MESSAGE_REASONS = 8  # reasons an Event names before "and N more"
_CLAIM_ERRORS: tuple[type[BaseException], ...] = (ClaimWriteError, *API_ERRORS)
# After an answer of no preemption, how long before the binder asks again for the same pod: choosing
# victims is the service's costliest decision, and a cluster that had none rarely has some a pass later.
PREEMPT_RETRY_S = 5.0


@dataclass(frozen=True)
class Assignment:
    """One pod's placement as the binder writes it."""

    pod: Json
    node: str
    cells: tuple[int, ...]
    gpus: tuple[int, ...]
    annotations: Mapping[str, str]
    claims: tuple[pb.ClaimAllocation, ...] = ()  # DRA: written into the claims before the pod binds


class Binder:
    """Watches our pods and, while ``is_leader()``, schedules the pending ones every ``interval_s``."""

    def __init__(
        self,
        api: KubeClient,
        service: PlacementClient,
        *,
        is_leader: Callable[[], bool],
        identity: str,
        scheduler_name: str = SCHEDULER_NAME,
        interval_s: float = 1.0,
        watch_timeout_s: float = 300.0,
    ) -> None:
        self._api = api
        self._service = service
        self._claims = ClaimWriter(api)
        self._is_leader = is_leader
        self._identity = identity
        self._scheduler_name = scheduler_name
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._pods: dict[PodKey, Json] = {}
        self._said: dict[PodKey, str] = {}  # the last Event message per pod, so a waiting pod is told once
        # Pod groups defined by objects (placement.core.gang_sources): their definitions, and what the last
        # pass found for each, written back into the object's status.
        self._groups = GangDirectory(api, stop=self._stop, watch_timeout_s=watch_timeout_s, on_change=self._wake.set)
        self._statuses = GroupStatusWriter(api)
        self._outcomes: dict[PodGroupKey, tuple[GroupOutcome, str]] = {}
        self._preemptor = Preemptor(api, tell=self._tell)
        # Preemptors not to ask Preempt for again before this time.monotonic() (their nominated nodes are
        # held, or the service found no victims a moment ago), with what their Events say meanwhile.
        self._no_preempt_until: dict[PodKey, tuple[float, str]] = {}
        self._reflector = Reflector(
            api,
            PODS_PATH,
            self,
            stop=self._stop,
            query={"fieldSelector": f"spec.schedulerName={scheduler_name}"},
            watch_timeout_s=watch_timeout_s,
        )
        self._threads: list[threading.Thread] = []

    # --- the watch (Reflector's handler) --------------------------------------------------------------

    def replace(self, objects: list[Json]) -> None:
        with self._lock:
            self._pods = {pod_key(obj): obj for obj in objects if self._ours(obj)}
        self._wake.set()

    def apply(self, kind: str, obj: Json) -> None:
        if not self._ours(obj):
            return
        key = pod_key(obj)
        with self._lock:
            if kind == "DELETED":
                self._pods.pop(key, None)
                self._said.pop(key, None)
                self._no_preempt_until.pop(key, None)
            else:
                self._pods[key] = obj
                if (obj.get("spec") or {}).get("nodeName"):
                    self._no_preempt_until.pop(key, None)  # placed: no longer a preemptor
        self._wake.set()

    def healthy(self) -> bool:
        """The pod watch has listed and is connected (readiness: a binder blind to pods must not lead)."""
        return self._reflector.healthy

    def _ours(self, obj: Json) -> bool:
        # The field selector already filters on a real API server; this keeps the rule in one place.
        return (obj.get("spec") or {}).get("schedulerName") == self._scheduler_name

    # --- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        for target, name in ((self._reflector.run, "binder watch"), (self._loop, "binder")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        self._groups.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        self._api.close_streams()
        for thread in self._threads + self._groups.threads:
            thread.join(timeout_s)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval_s)
            self._wake.clear()
            if self._stop.is_set() or not self._is_leader() or not self._reflector.healthy:
                continue  # a follower, or a watch known to miss pods: decide nothing
            try:
                self.schedule_pending()
            except Exception:  # a bug must not stop scheduling for good; the next pass retries
                log.exception("scheduling pass failed")

    # --- one pass -------------------------------------------------------------------------------------

    def schedule_pending(self) -> None:
        """Place and bind every pending pod once: lone pods, then pod groups."""
        with self._lock:
            pods = list(self._pods.values())
        groups: dict[PodGroupKey, list[Json]] = {}
        lone: list[Json] = []
        for pod in pods:
            try:
                key = group_of(pod)
            except GangSourceError as error:
                if _schedulable(pod):
                    self._tell(pod, "Warning", "FailedScheduling", str(error))
                continue
            if key is not None:
                groups.setdefault(key, []).append(pod)
            elif _schedulable(pod):
                lone.append(pod)
        gangs: list[tuple[GroupDefinition, list[Json]]] = []
        for key, members in groups.items():
            definition = self._definition(key, members)
            if isinstance(definition, Unresolved):
                kind, reason = "Normal", "WaitingForPodGroup"
                if definition.warning:
                    kind, reason = "Warning", "FailedScheduling"
                for pod in filter(_schedulable, members):
                    self._tell(pod, kind, reason, definition.message)
            elif definition.gang:
                gangs.append((definition, members))
            else:
                lone += filter(_schedulable, members)  # a basic policy: each pod on its own
        for pod in sorted(lone, key=_queue_order):
            self._schedule_one(pod)
        self._outcomes = {key: self._outcomes[key] for key in groups if key in self._outcomes}
        for definition, members in sorted(gangs, key=lambda item: _group_order(item[0].key, item[1])):
            if any(_schedulable(member) for member in members):
                self._schedule_group(definition, members)
            self._report(definition, members)

    def _schedule_one(self, pod: Json) -> None:
        if _annotations(pod).get(RESERVED_NODE_KEY):
            self._resume([pod])  # reserved by an earlier leader: finish its work
            return
        try:
            answer = self._service.reserve(pod, [])
        except ServiceError as error:
            self._refused(pod, error)
            return
        if not answer.reserved:
            preemption = self._preempt([pod], lambda: self._service.preempt(pod, []))
            self._tell(pod, "Warning", "FailedScheduling", _no_node_message(answer.rejected) + preemption)
            return
        assignment = _assignment(pod, answer.placement)
        if self._allocate_claims([assignment]) and self._reserve_all([assignment]):
            self._bind_all([assignment])

    def _definition(self, key: PodGroupKey, members: Sequence[Json]) -> GroupDefinition | Unresolved:
        """The group's definition: from its object, or for a group its pods define (our labels, Kueue's
        pod group) from its members."""
        if key.source not in LABEL_DEFINED_SOURCES:
            return self._groups.definition(key)
        try:
            return label_group_definition(key, members)
        except GangSourceError as error:
            return Unresolved(str(error), warning=True)

    def _report(self, definition: GroupDefinition, members: Sequence[Json]) -> None:
        """Write the group's progress into its object's status (``group_status``), where it has one."""
        key = definition.key
        if key.source in LABEL_DEFINED_SOURCES:
            return
        if not any(_schedulable(member) for member in members) and sum(map(_bound, members)) >= definition.min_member:
            self._outcomes[key] = (GroupOutcome.PLACED, "")
        outcome, message = self._outcomes.get(key, (GroupOutcome.WAITING_FOR_MEMBERS, ""))
        self._statuses.observe(definition, self._groups.current(key), members, outcome, message)

    def _schedule_group(self, definition: GroupDefinition, members: list[Json]) -> None:
        namespace, group = definition.key.namespace, definition.key.group_name
        pending = [member for member in members if _schedulable(member)]
        bound = sum(1 for member in members if _bound(member))
        minimum = definition.min_member
        reserved = [pod for pod in pending if _annotations(pod).get(RESERVED_NODE_KEY)]
        if reserved and len(reserved) == len(pending):
            self._resume(reserved)  # an earlier leader's complete reservation
            return
        if reserved:
            # An earlier leader died while writing the reservation: release it and plan the group anew
            # once every replica's feed has seen the release.
            log.info("clearing a partly written group reservation", extra={"group": f"{namespace}/{group}"})
            self._clear(list(reserved))
            return
        present = bound + len(pending)
        if present < minimum:
            message = f"waiting for pod group {definition.key.object_name}: {present}/{minimum} members"
            self._outcomes[definition.key] = (GroupOutcome.WAITING_FOR_MEMBERS, message)
            for pod in pending:
                self._tell(pod, "Normal", "WaitingForPodGroup", message)
            return
        try:
            answer = self._service.place_gang(
                namespace,
                group,
                max(0, minimum - bound),
                pending,
                source=definition.source,
                topology=definition.topology,
                timeout_s=definition.timeout_s,
            )
        except ServiceError as error:
            for pod in pending:
                self._refused(pod, error)
            return
        if answer.state != pb.GANG_STATE_PLACED:
            reason = answer.reason or f"waiting for pod group {namespace}/{group}: {answer.placed}/{minimum}"
            self._outcomes[definition.key] = (GroupOutcome.UNSCHEDULABLE, reason)
            if answer.state == pb.GANG_STATE_WAITING:
                # Every member is present (checked above): the group waits for room, which victims may free.
                needed = max(0, minimum - bound)
                reason += self._preempt(
                    pending,
                    lambda: self._service.preempt_gang(
                        namespace, group, needed, pending, source=definition.source, topology=definition.topology
                    ),
                )
            for pod in pending:
                self._tell(pod, "Normal", "WaitingForPodGroup", reason)
            return
        by_key = {pod_key(pod): pod for pod in pending}
        assignments = [
            _assignment(by_key[(m.pod.namespace or "default", m.pod.name)], m.placement)
            for m in answer.members
            if (m.pod.namespace or "default", m.pod.name) in by_key
        ]
        if self._allocate_claims(assignments) and self._reserve_all(assignments):
            self._outcomes[definition.key] = (GroupOutcome.PLACED, answer.reason)
            self._bind_all(assignments)

    # --- preemption -----------------------------------------------------------------------------------

    def _preempt(self, pods: Sequence[Json], ask: Callable[[], pb.PreemptResponse]) -> str:
        """Ask the service for victims that make room for ``pods`` (one pod, or a group's waiting members)
        and write what it decided; not while their nomination holds or soon after an answer of no.

        Returns what the pods' waiting Event adds, as kube-scheduler's FailedScheduling message adds it
        (" preemption: ..."); "" when the service could not be asked."""
        keys = [pod_key(pod) for pod in pods]
        now = time.monotonic()
        remembered = [self._no_preempt_until[key] for key in keys if key in self._no_preempt_until]
        if remembered and max(until for until, _ in remembered) > now:
            return max(remembered)[1]
        if any((pod.get("spec") or {}).get("preemptionPolicy") == "Never" for pod in pods):
            return " preemption: not eligible due to preemptionPolicy=Never."
        try:
            answer = ask()
        except ServiceError as error:
            log.warning("preemption request failed", extra={"pods": [_name(pod) for pod in pods], "error": str(error)})
            return ""
        if answer.preempted:
            nodes = ", ".join(sorted({n.node for n in answer.nominations}))
            note = f" preemption: waiting for the preempted pods to leave nominated node(s) {nodes}."
            carried = self._preemptor.carry_out(answer, {pod_key(pod): pod for pod in pods})
            log.info(
                "preempted",
                extra={
                    "pods": [_name(pod) for pod in pods],
                    "evicted": ["/".join(key) for key in carried.evicted],
                    "blocked": carried.blocked,
                },
            )
        else:
            note = f" preemption: {answer.reason}"
            log.info("no preemption", extra={"pods": [_name(pod) for pod in pods], "reason": answer.reason})
        until = now + (answer.hold_seconds if answer.preempted else PREEMPT_RETRY_S)
        for key in keys:
            self._no_preempt_until[key] = (until, note)
        return note

    # --- the two phases -------------------------------------------------------------------------------

    def _resume(self, pods: Sequence[Json]) -> None:
        """Bind what an earlier leader reserved; a reservation that cannot be read is cleared and planned anew."""
        try:
            assignments = [_restored(pod) for pod in pods]
        except InvalidValue as error:
            pods_named = [_name(pod) for pod in pods]
            log.warning("clearing a reservation that cannot be read", extra={"pods": pods_named, "error": str(error)})
            self._clear(pods)
            return
        self._bind_all(assignments)

    def _allocate_claims(self, assignments: Sequence[Assignment]) -> bool:
        """DRA, before phase 1: write every claim's allocation and reservation, or take back those written.

        Claims first: a binder that dies after them leaves claims allocated and reserved for the pod, which
        the next plan respects (the pod goes where its devices are); one that dies after phase 1 binds
        from the recorded reservation, its claims already written."""
        written: list[tuple[Assignment, pb.ClaimAllocation]] = []
        for assignment in assignments:
            for claim in assignment.claims:
                try:
                    self._claims.allocate(assignment.pod, claim)
                except _CLAIM_ERRORS as error:
                    message = str(error) if isinstance(error, ClaimWriteError) else describe(error)
                    log.warning(
                        "could not allocate a claim; releasing the decision",
                        extra={
                            "pod": _name(assignment.pod),
                            "claim": f"{claim.namespace}/{claim.name}",
                            "error": message,
                        },
                    )
                    for done, written_claim in written:
                        self._release_claim(done.pod, written_claim)
                    for undo in assignments:
                        self._unreserve(undo.pod)
                    self._tell(assignment.pod, "Warning", "FailedScheduling", f"allocating claims: {message}")
                    return False
                written.append((assignment, claim))
        return True

    def _release_claim(self, pod: Json, claim: pb.ClaimAllocation) -> None:
        try:
            self._claims.release(pod, claim)
        except API_ERRORS as error:
            log.warning(
                "could not release a claim reservation",
                extra={"pod": _name(pod), "claim": f"{claim.namespace}/{claim.name}", "error": describe(error)},
            )

    def _reserve_all(self, assignments: Sequence[Assignment]) -> bool:
        """Phase 1: write every reservation, or none (a failure undoes the written ones)."""
        written: list[Assignment] = []
        for assignment in assignments:
            try:
                self._patch_annotations(assignment.pod, dict(assignment.annotations))
            except API_ERRORS as error:
                log.warning(
                    "could not record a reservation; releasing the decision",
                    extra={"pod": _name(assignment.pod), "error": describe(error)},
                )
                self._clear([a.pod for a in written])
                for undo in assignments:
                    self._unreserve(undo.pod)
                return False
            written.append(assignment)
        return True

    def _bind_all(self, assignments: Sequence[Assignment]) -> None:
        """Phase 2: one Binding per pod; a failure is retried next pass from the recorded reservation."""
        for assignment in assignments:
            if not self._is_leader():
                return  # lost the Lease mid-way: the next leader binds the rest from the recorded reservations
            namespace, name = pod_key(assignment.pod)
            metadata: Json = {"name": name, "namespace": namespace}
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": metadata,
                "target": {"apiVersion": "v1", "kind": "Node", "name": assignment.node},
            }
            uid = (assignment.pod.get("metadata") or {}).get("uid")
            if uid:
                metadata["uid"] = uid  # binds this pod, not a namesake created since
            try:
                self._api.create(f"/api/v1/namespaces/{namespace}/pods/{name}/binding", body)
            except ApiError as error:
                if error.status == 409:
                    continue  # already bound (by us before a restart): nothing left to do
                log.warning(
                    "binding failed; retrying next pass", extra={"pod": _name(assignment.pod), "error": describe(error)}
                )
                continue
            except API_ERRORS as error:
                log.warning(
                    "binding failed; retrying next pass", extra={"pod": _name(assignment.pod), "error": describe(error)}
                )
                continue
            where = f"NUMA cells {format_ids(assignment.cells)}"
            if assignment.gpus:
                where += f", GPUs {format_ids(assignment.gpus)}"
            for claim in assignment.claims:
                where += f", claim {claim.name}: devices {','.join(d.device for d in claim.devices)}"
            message = f"Successfully assigned {namespace}/{name} to {assignment.node} ({where})"
            log.info(
                "bound",
                extra={
                    "pod": f"{namespace}/{name}",
                    "node": assignment.node,
                    "cells": list(assignment.cells),
                    "gpus": list(assignment.gpus),
                },
            )
            self._tell(assignment.pod, "Normal", "Scheduled", message)

    def _clear(self, pods: Sequence[Json]) -> None:
        for pod in pods:
            try:
                self._patch_annotations(pod, dict.fromkeys((RESERVED_NODE_KEY, ASSIGNED_CELLS_KEY, ASSIGNED_GPUS_KEY)))
            except API_ERRORS as error:
                log.warning("could not clear a reservation", extra={"pod": _name(pod), "error": describe(error)})

    def _unreserve(self, pod: Json) -> None:
        try:
            self._service.unreserve(*pod_key(pod))
        except ServiceError as error:
            log.warning("could not release a reservation", extra={"pod": _name(pod), "error": str(error)})

    def _patch_annotations(self, pod: Json, annotations: Mapping[str, str | None]) -> None:
        namespace, name = pod_key(pod)
        self._api.merge_patch(f"/api/v1/namespaces/{namespace}/pods/{name}", {"metadata": {"annotations": annotations}})

    # --- what users see -------------------------------------------------------------------------------

    def _refused(self, pod: Json, error: ServiceError) -> None:
        if error.invalid_request:
            self._tell(pod, "Warning", "FailedScheduling", f"invalid placement request: {error.message}")
        else:
            # Not the pod's fault (the service is starting, not the leader, or unreachable): retry quietly.
            log.warning(
                "placement service call failed; retrying next pass", extra={"pod": _name(pod), "error": str(error)}
            )

    def _tell(self, pod: Json, kind: str, reason: str, message: str) -> None:
        """A core/v1 Event on the pod, once per distinct message (what ``kubectl describe pod`` shows)."""
        key = pod_key(pod)
        if self._said.get(key) == message:
            return
        namespace, name = key
        metadata = pod.get("metadata") or {}
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": namespace,
                "name": name,
                "uid": metadata.get("uid", ""),
                "resourceVersion": metadata.get("resourceVersion", ""),
            },
            "type": kind,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self._scheduler_name},
            "reportingComponent": self._scheduler_name,
            "reportingInstance": self._identity,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self._api.create(f"/api/v1/namespaces/{namespace}/events", event)
        except API_ERRORS as error:
            log.warning("could not record an event", extra={"pod": f"{namespace}/{name}", "error": describe(error)})
            return
        self._said[key] = message


# --- pods ------------------------------------------------------------------------------------------------


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def _name(pod: Mapping[str, Any]) -> str:
    return "/".join(pod_key(pod))


def _finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _bound(pod: Mapping[str, Any]) -> bool:
    """On a node and not finished (a member the group still counts)."""
    return bool((pod.get("spec") or {}).get("nodeName")) and not _finished(pod)


def _schedulable(pod: Mapping[str, Any]) -> bool:
    """Not bound, not finished, not being deleted, and not gated.

    A pod with ``spec.schedulingGates`` is held by whoever set them (kube-scheduler's
    SchedulingGates plugin keeps it out of the queue: condition ``PodScheduled=False``,
    reason ``SchedulingGated``, written by the API server at creation); we leave it alone until
    the gates are removed, and a gated member does not count as present for its group.
    """
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    return (
        not spec.get("nodeName")
        and not spec.get("schedulingGates")
        and not _finished(pod)
        and not metadata.get("deletionTimestamp")
    )


def _queue_order(pod: Mapping[str, Any]) -> tuple[int, str, str]:
    """kube-scheduler's PrioritySort: higher ``spec.priority`` first (the API server's Priority admission
    sets it from the PriorityClass), then the older pod (queue sort plugin ``queuesort/priority_sort.go``;
    the pod's creation time stands for the time it entered the queue), then the name for a stable order."""
    priority = (pod.get("spec") or {}).get("priority")
    created = (pod.get("metadata") or {}).get("creationTimestamp") or ""
    return (-priority if isinstance(priority, int) else 0, str(created), _name(pod))


def _group_order(key: PodGroupKey, members: Sequence[Mapping[str, Any]]) -> tuple[tuple[int, str, str], PodGroupKey]:
    """Groups in the order of their first member in ``_queue_order``."""
    return (min(_queue_order(member) for member in members), key)


def _assignment(pod: Json, placement: pb.PodPlacement) -> Assignment:
    cells, gpus = tuple(placement.numa_cells), tuple(placement.gpu_ids)
    annotations = {
        ASSIGNED_CELLS_KEY: format_ids(cells),
        **dict(placement.annotations),
        RESERVED_NODE_KEY: placement.node,
    }
    if gpus:
        annotations[ASSIGNED_GPUS_KEY] = format_ids(gpus)
    return Assignment(
        pod=pod, node=placement.node, cells=cells, gpus=gpus, annotations=annotations, claims=tuple(placement.claims)
    )


def _restored(pod: Json) -> Assignment:
    """The assignment an earlier leader recorded on the pod; ``InvalidValue`` when it cannot be read."""
    annotations = _annotations(pod)
    return Assignment(
        pod=pod,
        node=str(annotations[RESERVED_NODE_KEY]),
        cells=parse_ids(ASSIGNED_CELLS_KEY, annotations.get(ASSIGNED_CELLS_KEY)),
        gpus=parse_ids(ASSIGNED_GPUS_KEY, annotations.get(ASSIGNED_GPUS_KEY)),
        annotations={},
    )


def _no_node_message(rejected: Sequence[pb.Rejections]) -> str:
    """kube-scheduler's ``FitError.Error()``: "0/3 nodes are available: 1 reason, 2 other reason."

    Each reason is prefixed with its node count, the list sorted as strings and joined with ", "
    (pkg/scheduler/framework/types.go, ``sortReasonsHistogram``); capped for the Event.
    """
    total = sum(len(group.nodes) for group in rejected)
    if not total:
        return "no nodes available to schedule pods."  # ErrNoNodesAvailable (pkg/scheduler/schedule_one.go)
    reasons = sorted(f"{len(group.nodes)} {group.reason}" for group in rejected)
    shown = ", ".join(reasons[:_MESSAGE_REASONS])
    more = f", and {len(reasons) - _MESSAGE_REASONS} more reason(s)" if len(reasons) > _MESSAGE_REASONS else ""
    return f"0/{total} nodes are available: {shown}{more}."
