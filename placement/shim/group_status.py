"""The binder's write-back of a group's progress into its object's status, as each API's own scheduler does.

Merge patches only, and only when the status would change: a pass that learns nothing new writes nothing.
``GroupStatusWriter.observe`` compares with the object as last seen or, while the binder's cache still
holds the version from before its last write (the same ``resourceVersion``: the watch has not delivered
the write yet), with what it wrote: a pass on the stale copy neither writes the same status again nor
rewrites it from older fields (a condition's ``lastTransitionTime``).

* **scheduler-plugins** PodGroup (``scheduling.x-k8s.io``, through ``/status``): ``phase`` as
  scheduler-plugins' PodGroup controller sets it (pkg/controllers/podgroup_controller.go, ``Reconcile``):
  ``Pending`` while fewer pods than ``minMember`` exist; then ``Scheduling``; ``Running`` once running plus
  succeeded members reach ``minMember``; ``Finished`` once succeeded ones do; ``Failed`` once a member failed
  and failed plus running plus succeeded reach it. ``running``, ``succeeded``, ``failed`` count the members
  by pod phase, as its ``getCurrentPodStats``. ``scheduleStartTime`` is set when the group first enters
  ``Scheduling`` (nothing upstream sets it today; the controller reads it for its 48-hour give-up).
* **Volcano** PodGroup (``scheduling.volcano.sh``, through the object: its CRD has no status subresource):
  ``phase`` as Volcano's ``getPodGroupPhase`` (pkg/scheduler/framework/session.go): ``Running`` once bound
  members reach ``minMember`` (``Completed`` once all of those finished); ``Inqueue`` once the service
  reserved the group (Volcano's enqueue admits a job whose resources fit); ``Pending`` before. Conditions as
  its gang plugin writes them (pkg/scheduler/plugins/gang/gang.go): ``Unschedulable`` (status True, reason
  ``NotEnoughResources``, message ``"N/M tasks in gang unschedulable: <why>"``) while the service finds no
  room, ``Scheduled`` (True, reason ``"tasks in gang are ready to be scheduled"``) once placed; a condition
  of the same type is replaced, others are kept. ``running``, ``succeeded``, ``failed`` as above.
* **native** PodGroup (``scheduling.k8s.io``, through ``/status`` of the version it is read at), one
  condition as kube-scheduler sets it (pkg/scheduler/schedule_one_podgroup.go, ``updatePodGroupCondition``):
  ``True`` with reason ``Scheduled`` once ``minCount`` members are bound, ``False`` with reason
  ``Unschedulable`` (``PodGroupReasonUnschedulable``) and the service's message while no room is found;
  ``observedGeneration`` the object's generation. Members still missing leave it as it is. Its type by
  version: ``PodGroupInitiallyScheduled`` in v1beta1 and v1alpha3 (Kubernetes 1.37, k8s.io/api
  scheduling/v1beta1 types.go, the well-known condition types), terminal once ``True``: never turned back
  to ``False`` (``updatePodGroupCondition`` does not regress it); ``PodGroupScheduled`` in v1alpha2
  (Kubernetes 1.36, KEP-5832 "PodGroup Status Lifecycle"), which follows the group both ways.
* **native** Workload (``scheduling.k8s.io/v1alpha1``): the API has no status; nothing is written.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from kubenexus.kube.client import Json, KubeClient
from kubenexus.kube.errors import API_ERRORS, describe
from kubenexus.kube.paths import collection_path, object_path
from placement.core.gang_sources import (
    SOURCE_PODGROUP,
    SOURCE_SCHEDULER_PLUGINS,
    SOURCE_VOLCANO,
    GroupDefinition,
    PodGroupKey,
)
from placement.shim.gang_directory import GroupApi, Seen

log = logging.getLogger("kubenexus.placement.binder")

VOLCANO_UNSCHEDULABLE_REASON = "NotEnoughResources"  # volcano.sh/apis scheduling/v1beta1 NotEnoughResourcesReason
VOLCANO_SCHEDULED_REASON = "tasks in gang are ready to be scheduled"  # gang.go, the Scheduled condition's reason
INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"  # k8s.io/api scheduling/v1beta1 PodGroupInitiallyScheduled
NATIVE_CONDITION = {"v1beta1": INITIALLY_SCHEDULED, "v1alpha3": INITIALLY_SCHEDULED, "v1alpha2": "PodGroupScheduled"}
_FINISHED = ("Succeeded", "Failed")


class GroupOutcome(enum.Enum):
    """What the binder's last pass found for a group."""

    WAITING_FOR_MEMBERS = "waiting-for-members"  # fewer members than the minimum exist
    UNSCHEDULABLE = "unschedulable"  # every member exists; the service finds no room (waiting or never)
    PLACED = "placed"  # reserved and binding, or bound


class GroupStatusWriter:
    """Writes a group's status when what the binder saw changes it; one instance per binder."""

    def __init__(self, api: KubeClient, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._api = api
        self._clock = clock
        # Per group: the resourceVersion the object had when its status was last sent, and that status.
        self._written: dict[PodGroupKey, tuple[str, Json]] = {}

    def observe(
        self,
        definition: GroupDefinition,
        current: Seen | None,
        members: Sequence[Mapping[str, Any]],
        outcome: GroupOutcome,
        message: str,
    ) -> None:
        """Patch the group's status (at the API its object was read at) if ``outcome`` (with the members'
        pods) changes it; log a failure."""
        key = definition.key
        if current is None or key.source not in (SOURCE_SCHEDULER_PLUGINS, SOURCE_VOLCANO, SOURCE_PODGROUP):
            return
        api = current.api
        obj = current.obj
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        written = self._written.get(key)
        if written is not None and version and written[0] == version:
            obj = {**obj, "status": written[1]}  # the cache has not seen the last write yet: build on it
        before: Json = dict(obj.get("status") or {})
        after = desired_status(definition, obj, members, outcome, message, api=api, now=_stamp(self._clock()))
        if after == before or (written is not None and after == written[1]):
            return
        collection = collection_path(api.group, api.version, api.plural)
        path = object_path(collection, key.namespace, key.name, "status" if api.status_subresource else "")
        try:
            self._api.merge_patch(path, {"status": after})
        except API_ERRORS as error:
            log.warning("could not write a pod group's status", extra={"group": str(key), "error": describe(error)})
            return
        self._written[key] = (version, after)
        log.info("pod group status written", extra={"group": str(key), "phase": after.get("phase", "")})

    def forget(self, key: PodGroupKey) -> None:
        self._written.pop(key, None)


def desired_status(
    definition: GroupDefinition,
    current: Mapping[str, Any],
    members: Sequence[Mapping[str, Any]],
    outcome: GroupOutcome,
    message: str,
    *,
    api: GroupApi,
    now: str,
) -> Json:
    """The object's whole status after this observation (what was there, with our fields updated), as
    ``api`` (the API the object was read at) defines it."""
    status: Json = dict(current.get("status") or {})
    counts = _counts(members)
    minimum = definition.min_member
    if api.source == SOURCE_SCHEDULER_PLUGINS:
        phase = _plugins_phase(len(members), minimum, counts)
        if phase == "Scheduling" and not status.get("scheduleStartTime"):
            status["scheduleStartTime"] = now
        status |= {"phase": phase, **counts}
    elif api.source == SOURCE_VOLCANO:
        status |= {"phase": _volcano_phase(members, minimum, outcome, str(status.get("phase") or "")), **counts}
        condition = _volcano_condition(members, minimum, outcome, message)
        if condition is not None:
            status["conditions"] = _with_condition(status.get("conditions"), condition, now)
    elif api.source == SOURCE_PODGROUP:
        condition = _native_condition(NATIVE_CONDITION[api.version], members, minimum, outcome, message)
        if condition is not None and not _regresses(status, condition):
            generation = (current.get("metadata") or {}).get("generation")
            if isinstance(generation, int):
                condition["observedGeneration"] = generation
            status["conditions"] = _with_condition(status.get("conditions"), condition, now)
    return status


def _counts(members: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    phases = [(pod.get("status") or {}).get("phase") for pod in members]
    return {
        "running": phases.count("Running"),
        "succeeded": phases.count("Succeeded"),
        "failed": phases.count("Failed"),
    }


def _plugins_phase(pods: int, minimum: int, counts: Mapping[str, int]) -> str:
    running, succeeded, failed = counts["running"], counts["succeeded"], counts["failed"]
    if pods < minimum:
        return "Pending"
    if succeeded >= minimum:
        return "Finished"
    if failed and failed + running + succeeded >= minimum:
        return "Failed"
    return "Running" if running + succeeded >= minimum else "Scheduling"


def _bound(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def _volcano_phase(members: Sequence[Mapping[str, Any]], minimum: int, outcome: GroupOutcome, phase: str) -> str:
    scheduled = [pod for pod in members if _bound(pod)]
    if len(scheduled) >= minimum:
        finished = all((pod.get("status") or {}).get("phase") in _FINISHED for pod in scheduled)
        return "Completed" if finished else "Running"
    if outcome is GroupOutcome.PLACED or phase == "Inqueue":
        return "Inqueue"
    return "Pending"


def _volcano_condition(
    members: Sequence[Mapping[str, Any]], minimum: int, outcome: GroupOutcome, message: str
) -> Json | None:
    if outcome is GroupOutcome.PLACED:
        return {"type": "Scheduled", "status": "True", "reason": VOLCANO_SCHEDULED_REASON, "message": ""}
    if outcome is GroupOutcome.UNSCHEDULABLE:
        unready = max(0, minimum - sum(1 for pod in members if _bound(pod)))
        text = f"{unready}/{len(members)} tasks in gang unschedulable: {message}"
        return {"type": "Unschedulable", "status": "True", "reason": VOLCANO_UNSCHEDULABLE_REASON, "message": text}
    return None


def _native_condition(
    kind: str, members: Sequence[Mapping[str, Any]], minimum: int, outcome: GroupOutcome, message: str
) -> Json | None:
    if sum(1 for pod in members if _bound(pod)) >= minimum:
        return {"type": kind, "status": "True", "reason": "Scheduled", "message": ""}
    if outcome is GroupOutcome.UNSCHEDULABLE:
        return {"type": kind, "status": "False", "reason": "Unschedulable", "message": message}
    return None


def _regresses(status: Mapping[str, Any], condition: Mapping[str, Any]) -> bool:
    """Whether ``condition`` would turn a True ``PodGroupInitiallyScheduled`` back: what
    ``updatePodGroupCondition`` never writes."""
    if condition["type"] != INITIALLY_SCHEDULED or condition["status"] == "True":
        return False
    conditions = status.get("conditions")
    found = [c for c in conditions if isinstance(c, Mapping)] if isinstance(conditions, list) else []
    return any(c.get("type") == INITIALLY_SCHEDULED and c.get("status") == "True" for c in found)


def _with_condition(conditions: object, condition: Json, now: str) -> list[Json]:
    """``conditions`` with ``condition`` in place of one of its type; the transition time kept unless its
    status changed (metav1.Condition's lastTransitionTime)."""
    kept = [dict(c) for c in conditions if isinstance(c, Mapping)] if isinstance(conditions, list) else []
    old = next((c for c in kept if c.get("type") == condition["type"]), None)
    if old is None:
        return [*kept, {**condition, "lastTransitionTime": now}]
    since = old.get("lastTransitionTime") if old.get("status") == condition["status"] else None
    stamped = {**condition, "lastTransitionTime": since or now}
    return [stamped if c is old else c for c in kept]


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
