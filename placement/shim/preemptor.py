"""The binder's writes for a preemption the placement service decided: nominate, evict, tell.

The service chose the victims (lower priority, gangs whole, budgets respected, the exact plan checked
without them) and holds the nominated nodes for the preemptor; this module writes that decision into the
cluster, in this order:

1. **Nominate.** ``status.nominatedNodeName`` on each preemptor (a merge patch on the ``pods/status``
   subresource, as kube-scheduler's ``PatchPodStatus`` writes it), so ``kubectl get pod -o wide`` shows
   where it is headed. A failure here evicts nothing.
2. **Evict** each victim through the Eviction API (``POST pods/{name}/eviction`` with a ``policy/v1
   Eviction``): the API server checks the victim's PodDisruptionBudget once more. A ``429`` (a budget
   refused it, or is being processed) stops the plan: no further victim is evicted, and the preemptor is
   told why (Warning ``PreemptionBlocked``). A victim already gone (404) counts as evicted.
3. **Tell.** On each evicted victim a Normal ``Preempted`` Event whose message starts as kube-scheduler's
   does (pkg/scheduler/framework/preemption/preemption.go: "Preempted by pod <uid> on node <node>"),
   followed by the preemptor's namespace/name, priority and the service's reason; on the preemptor a
   Normal ``Preempting`` Event naming the victims and their nodes.

kube-scheduler deletes its victims (``util.DeletePod``) after choosing candidates that violate the
fewest budgets; going through the Eviction API instead means a budget is never broken by us, at the cost
of a plan that can stop part-way (the victims already evicted are gone; the hold keeps their room for the
preemptor until it expires).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kubenexus.kube.client import Json, KubeClient
from kubenexus.kube.errors import API_ERRORS, ApiError, describe
from placement.api.v1 import placement_pb2 as pb

log = logging.getLogger("kubenexus.placement.preemptor")

PodKey = tuple[str, str]
# Writes an Event on a pod: (pod, type, reason, message); the binder's, which says each message once.
Tell = Callable[[Json, str, str, str], None]
_NAMED_VICTIMS = 8  # victims an Event names before "and N more"


@dataclass(frozen=True)
class Carried:
    """What the binder did with one preemption."""

    nominated: tuple[PodKey, ...]
    evicted: tuple[PodKey, ...]
    blocked: str  # why the plan stopped ("" when every victim was evicted)


class Preemptor:
    """Nominates, evicts and tells for the binder (see the module docstring)."""

    def __init__(self, api: KubeClient, *, tell: Tell) -> None:
        self._api = api
        self._tell = tell

    def carry_out(self, answer: pb.PreemptResponse, preemptors: Mapping[PodKey, Json]) -> Carried:
        """Write ``answer`` (preempted) for ``preemptors`` (the pods the request carried, by key)."""
        nominated = self._nominate(answer.nominations, preemptors)
        if nominated is None:
            return Carried((), (), "the nomination could not be written")
        evicted: list[PodKey] = []
        blocked = ""
        for victim in answer.victims:
            key = (victim.pod.namespace or "default", victim.pod.name)
            try:
                pod = self._api.get(f"/api/v1/namespaces/{key[0]}/pods/{key[1]}")
            except API_ERRORS as error:
                blocked = f"preemption stopped: reading victim {key[0]}/{key[1]} failed: {describe(error)}"
                break
            if pod is None:
                evicted.append(key)  # gone already: its room is free
                continue
            refusal = self._evict(key, (pod.get("metadata") or {}).get("uid"))
            if refusal:
                blocked = refusal
                break
            evicted.append(key)
            self._tell_victim(pod, victim, answer, preemptors)
        preemptor = next(iter(preemptors.values()))
        if evicted:
            self._tell(preemptor, "Normal", "Preempting", _preempting_message(answer, evicted))
        if blocked:
            self._tell(preemptor, "Warning", "PreemptionBlocked", blocked)
        return Carried(tuple(nominated), tuple(evicted), blocked)

    def _nominate(self, nominations: Sequence[pb.Nomination], preemptors: Mapping[PodKey, Json]) -> list[PodKey] | None:
        done: list[PodKey] = []
        for nomination in nominations:
            key = (nomination.pod.namespace or "default", nomination.pod.name)
            pod = preemptors.get(key)
            if pod is None:
                continue  # a member this binder did not send: not ours to write
            namespace, name = key
            patch: Json = {"status": {"nominatedNodeName": nomination.node}}
            uid = (pod.get("metadata") or {}).get("uid")
            if uid:
                patch["metadata"] = {"uid": uid}  # this pod, not a namesake created since
            try:
                self._api.merge_patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status", patch)
            except API_ERRORS as error:
                log.warning(
                    "could not nominate a node; evicting nothing",
                    extra={"pod": f"{namespace}/{name}", "node": nomination.node, "error": describe(error)},
                )
                return None
            done.append(key)
        return done

    def _evict(self, key: PodKey, uid: str | None) -> str:
        """Evict one victim (the pod with ``uid``, not a namesake created since); "" when it is gone, else why
        the plan stops."""
        namespace, name = key
        body: Json = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        if uid:
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        try:
            self._api.create(f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body)
        except ApiError as error:
            if error.status == 404:
                return ""  # gone already: its room is free
            why = (
                f"a disruption budget refused evicting {namespace}/{name}: {error.message}"
                if error.status == 429
                else f"evicting {namespace}/{name} failed: {describe(error)}"
            )
            log.warning("eviction refused; stopping the preemption", extra={"pod": f"{namespace}/{name}", "error": why})
            return f"preemption stopped: {why}"
        except API_ERRORS as error:
            why = f"evicting {namespace}/{name} failed: {describe(error)}"
            log.warning("eviction failed; stopping the preemption", extra={"pod": f"{namespace}/{name}", "error": why})
            return f"preemption stopped: {why}"
        log.info("evicted", extra={"pod": f"{namespace}/{name}"})
        return ""

    def _tell_victim(
        self, pod: Json, victim: pb.Victim, answer: pb.PreemptResponse, preemptors: Mapping[PodKey, Json]
    ) -> None:
        # The preemptor nominated to the victim's node (a gang has one per member), else the first sent.
        key = next(
            ((n.pod.namespace or "default", n.pod.name) for n in answer.nominations if n.node == victim.node),
            next(iter(preemptors)),
        )
        preemptor = preemptors.get(key) or next(iter(preemptors.values()))
        metadata, spec = preemptor.get("metadata") or {}, preemptor.get("spec") or {}
        who = f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"
        priority = spec.get("priority")
        message = (
            f"Preempted by pod {metadata.get('uid', '')} on node {victim.node} ({who}, priority "
            f"{priority if isinstance(priority, int) else 0}; this pod's priority {victim.priority}"
            + (f", evicted with its pod group {victim.pod_group}" if victim.pod_group else "")
            + f"): {answer.reason}"
        )
        self._tell(pod, "Normal", "Preempted", message)


def _preempting_message(answer: pb.PreemptResponse, evicted: Sequence[PodKey]) -> str:
    gone = set(evicted)
    named = [
        f"{v.pod.namespace or 'default'}/{v.pod.name} on {v.node}"
        + (f" (pod group {v.pod_group})" if v.pod_group else "")
        for v in answer.victims
        if (v.pod.namespace or "default", v.pod.name) in gone
    ]
    shown = ", ".join(named[:_NAMED_VICTIMS])
    more = f", and {len(named) - _NAMED_VICTIMS} more" if len(named) > _NAMED_VICTIMS else ""
    nodes = sorted({n.node for n in answer.nominations})
    return (
        f"preempted {len(named)} lower-priority pod(s): {shown}{more}; nominated node(s) {', '.join(nodes)}, "
        f"held {answer.hold_seconds:.0f}s: {answer.reason}"
    )
