"""Between protobuf and the service's types: requests decoded into ``PodSpec`` and ``GangSpec``, outcomes
encoded into responses. No logic beyond the mapping; the servicer calls one decoder and one encoder a call.

Filter and Score answer hundreds of nodes per call, so their answers are columns (node names, scores,
points per component) and rejections grouped by reason: each field is filled from a list in one call, not
one message per node.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
from google.protobuf.message import Message

from placement.api.v1 import placement_pb2 as pb
from placement.core.dra.pod_claims import PodResourceClaim
from placement.core.node_amounts import Amount
from placement.core.pod_placement import Placement
from placement.core.podgroup import DomainConstraint, PermitVerdict
from placement.core.pods import ContainerSpec, PodParseError, PodSpec, pod_spec_from_json
from placement.core.preemption_rules import EvictionCandidate, EvictionVerdict
from placement.core.quantity import resource_quantity
from placement.core.vocabulary import CPU, MEMORY, RejectionKind
from placement.service.errors import InvalidRequest
from placement.service.results import (
    Explanation,
    FilterOutcome,
    GangOutcome,
    GangSpec,
    GangState,
    PermitOutcome,
    PreemptOutcome,
    Rejection,
    Rejections,
    ReserveOutcome,
    ScoreOutcome,
)
from placement.service.views import NodeSummary, NodeView

KIND_TO_PB = {
    RejectionKind.UNKNOWN_NODE: pb.REJECTION_KIND_UNKNOWN_NODE,
    RejectionKind.NO_TOPOLOGY: pb.REJECTION_KIND_NO_TOPOLOGY,
    RejectionKind.INSUFFICIENT_RESOURCES: pb.REJECTION_KIND_INSUFFICIENT_RESOURCES,
    RejectionKind.KUBELET_TOPOLOGY: pb.REJECTION_KIND_KUBELET_TOPOLOGY,
    RejectionKind.INTENT: pb.REJECTION_KIND_INTENT,
    RejectionKind.ISOLATION: pb.REJECTION_KIND_ISOLATION,
    RejectionKind.HELD_FOR_GANG: pb.REJECTION_KIND_HELD_FOR_GANG,
    RejectionKind.NODE_CONSTRAINT: pb.REJECTION_KIND_NODE_CONSTRAINT,
    RejectionKind.POD_CONSTRAINT: pb.REJECTION_KIND_POD_CONSTRAINT,
}
_GANG_TO_PB = {
    GangState.PLACED: pb.GANG_STATE_PLACED,
    GangState.WAITING: pb.GANG_STATE_WAITING,
    GangState.INFEASIBLE: pb.GANG_STATE_INFEASIBLE,
}
_PERMIT_TO_PB = {
    PermitVerdict.ALLOW: pb.PERMIT_STATE_ALLOW,
    PermitVerdict.WAIT: pb.PERMIT_STATE_WAIT,
    PermitVerdict.REJECT: pb.PERMIT_STATE_REJECT,
}
_MILLI = 1000.0

# --- requests ----------------------------------------------------------------------------------------


def _container(message: pb.Container) -> ContainerSpec:
    return ContainerSpec(
        name=message.name,
        requests=dict(message.requests),
        limits=dict(message.limits),
        restartable=message.restartable,
        ports=[_as_json(p) for p in message.ports],
    )


def _pod(message: pb.Pod) -> PodSpec:
    return PodSpec(
        namespace=message.namespace,
        name=message.name,
        labels=dict(message.labels),
        annotations=dict(message.annotations),
        containers=tuple(_container(c) for c in message.containers),
        init_containers=tuple(_container(c) for c in message.init_containers),
        node_name=message.node_name,
        node_selector=dict(message.node_selector),
        affinity=_as_json(message.affinity) if message.HasField("affinity") else None,
        tolerations=[_as_json(t) for t in message.tolerations],
        topology_spread_constraints=[_as_json(c) for c in message.topology_spread_constraints],
        host_network=message.host_network,
        priority=message.priority if message.HasField("priority") else None,
        priority_class_name=message.priority_class_name,
        preemption_policy=message.preemption_policy,
        scheduling_gates=tuple(gate.name for gate in message.scheduling_gates),
        overhead=dict(message.overhead),
        claims=tuple(message.persistent_volume_claims),
        resource_claims=_resource_claims(message),
        uid=message.uid,
        source=message.SerializeToString(deterministic=True),
    )


def _resource_claims(message: pb.Pod) -> tuple[PodResourceClaim, ...]:
    generated = {
        status.name: status.resource_claim_name if status.HasField("resource_claim_name") else None
        for status in message.resource_claim_statuses
    }
    return tuple(
        PodResourceClaim(
            name=claim.name,
            claim_name=claim.resource_claim_name,
            template_name=claim.resource_claim_template_name,
            listed=claim.name in generated,
            generated_name=generated.get(claim.name),
        )
        for claim in message.resource_claims
    )


def _as_json(message: Message) -> dict[str, Any]:
    """A message mirroring a Kubernetes type as that type's JSON: the fields set, under their JSON names
    (``requiredDuringSchedulingIgnoredDuringExecution``, ``hostIP``), for ``validate_pod`` to read as it
    reads ``pod_json``. A message field set but empty stays an empty object: an empty label selector."""
    return {field.json_name: _json_value(field, value) for field, value in message.ListFields()}


def _json_value(field: FieldDescriptor, value: Any) -> Any:
    if field.message_type is None:
        return list(value) if field.is_repeated else value
    if field.message_type.GetOptions().map_entry:
        return dict(value)  # string to string in every mirrored type
    if field.is_repeated:
        return [_as_json(item) for item in value]
    return _as_json(value)


def _pod_json(text: str) -> PodSpec:
    try:
        return _decoded_pod_json(text) if len(text) <= _KEPT_POD_CHARS else pod_spec_from_json(text)
    except PodParseError as error:
        raise InvalidRequest(str(error)) from None


# kube-scheduler's plugin sends the same pod's JSON at PreFilter (Score) and again at Reserve, a few ms apart:
# the second is not decoded again. A pod is a pure function of its text, and nothing changes a PodSpec once
# made. An invalid text raises, and is not kept. The engine keeps the validated pods by the same text
# (``PlacementEngine._validated``, ``PodSpec.source``), so a kept one holds the same string. A pod is a few
# kB; one of more than 64 KiB (at most 1.5 MiB are accepted) is decoded each time, so the texts kept here
# stay within 4 MiB.
_DECODED_PODS = 64
_KEPT_POD_CHARS = 64 * 1024


@functools.lru_cache(maxsize=_DECODED_PODS)
def _decoded_pod_json(text: str) -> PodSpec:
    return pod_spec_from_json(text)


def decode_pod(
    request: pb.FilterRequest | pb.ScoreRequest | pb.ReserveRequest | pb.ExplainRequest | pb.CheckEvictionRequest,
) -> PodSpec:
    """The request's pod, from the ``Pod`` message or from ``pod_json``."""
    source = request.WhichOneof("pod_source")
    if source == "pod":
        return _pod(request.pod)
    if source == "pod_json":
        return _pod_json(request.pod_json)
    raise InvalidRequest("a pod is required: set `pod` or `pod_json`")


def decode_gang(request: pb.PlaceGangRequest | pb.PreemptRequest) -> GangSpec:
    group = request.group
    members = tuple(_pod(m) for m in group.members) + tuple(_pod_json(m) for m in group.members_json)
    topology = tuple(_domain_constraint(group, i, c) for i, c in enumerate(group.topology))
    timeout_s = None
    if group.HasField("schedule_timeout_seconds"):
        if group.schedule_timeout_seconds < 1:
            raise InvalidRequest(
                f"invalid schedule_timeout_seconds {group.schedule_timeout_seconds} for pod group "
                f"{group.namespace}/{group.name}; accepted: a positive number of seconds"
            )
        timeout_s = float(group.schedule_timeout_seconds)
    return GangSpec(group.namespace, group.name, group.min_member, members, topology, group.source, timeout_s)


def _domain_constraint(group: pb.PodGroup, index: int, constraint: pb.TopologyConstraint) -> DomainConstraint:
    if not constraint.HasField("required"):
        raise InvalidRequest(
            f"pod group {group.namespace or 'default'}/{group.name}: topology[{index}] (level "
            f"{constraint.level!r}) does not say `required`; accepted: true (every member in one domain, or "
            "wait) or false (the fewest domains)"
        )
    return DomainConstraint(constraint.level, constraint.required)


def decode_preemptor(request: pb.PreemptRequest) -> PodSpec | GangSpec:
    """The preemptor a Preempt request names: one pod (``pod`` or ``pod_json``) or a group's waiting members."""
    sources = [name for name in ("pod", "group") if request.HasField(name)] + (["pod_json"] if request.pod_json else [])
    if len(sources) != 1:
        named = f"{', '.join(sources)} are set" if sources else "none is set"
        raise InvalidRequest(f"a preemptor is required: set exactly one of `pod`, `pod_json` or `group` ({named})")
    if sources == ["group"]:
        return decode_gang(request)
    return _pod(request.pod) if sources == ["pod"] else _pod_json(request.pod_json)


def decode_eviction_candidates(request: pb.CheckEvictionRequest) -> tuple[EvictionCandidate, ...]:
    """Each candidate node with its victims; a victim's empty namespace is "default", as in every PodRef."""
    return tuple(
        EvictionCandidate(
            node=candidate.node,
            victims=tuple((victim.namespace or "default", victim.name) for victim in candidate.victims),
            victim_uids=tuple(candidate.victim_uids),
        )
        for candidate in request.candidates
    )


# --- answers -----------------------------------------------------------------------------------------


def _rejection(rejection: Rejection) -> pb.NodeRejection:
    return pb.NodeRejection(node=rejection.node, reason=rejection.reason, kind=KIND_TO_PB[rejection.kind])


def _add_rejections(field: RepeatedCompositeFieldContainer[pb.Rejections], groups: Iterable[Rejections]) -> None:
    add = field.add
    for reason, kind, nodes in groups:
        add(reason=reason, kind=KIND_TO_PB[kind], nodes=nodes)


def filter_response(outcome: FilterOutcome) -> pb.FilterResponse:
    response = pb.FilterResponse(feasible_nodes=outcome.feasible)
    _add_rejections(response.rejected, outcome.rejected)
    return response


def score_response(outcome: ScoreOutcome) -> pb.ScoreResponse:
    response = pb.ScoreResponse(nodes=outcome.nodes, scores=outcome.totals, numa_cells=outcome.landing_cells)
    add = response.breakdown.add
    for name, points in outcome.points.items():
        add(name=name, weight=outcome.weights.get(name, 0.0), points=points)
    _add_rejections(response.rejected, outcome.rejected)
    return response


def _placement(placement: Placement) -> pb.PodPlacement:
    return pb.PodPlacement(
        node=placement.node,
        numa_cells=placement.cells,
        gpu_ids=placement.gpus,
        pinned=placement.pinned,
        score=placement.score,
        breakdown=placement.breakdown,
        reservation_ttl_seconds=round(placement.ttl_s, 3),
        annotations=placement.annotations,
        notes=placement.notes,
        claims=[
            pb.ClaimAllocation(
                namespace=claim.namespace,
                name=claim.name,
                devices=[
                    pb.AllocatedDevice(request=d.request, driver=d.driver, pool=d.pool, device=d.device)
                    for d in claim.devices
                ],
                allocation_json=json.dumps(claim.allocation, sort_keys=True, separators=(",", ":"))
                if claim.allocation
                else "",
                why=claim.why,
            )
            for claim in placement.claims
        ],
    )


def reserve_response(outcome: ReserveOutcome) -> pb.ReserveResponse:
    response = pb.ReserveResponse(reserved=outcome.placement is not None)
    _add_rejections(response.rejected, outcome.rejected)
    if outcome.placement is not None:
        response.placement.CopyFrom(_placement(outcome.placement))
    return response


def gang_response(outcome: GangOutcome) -> pb.PlaceGangResponse:
    return pb.PlaceGangResponse(
        state=_GANG_TO_PB[outcome.state],
        reason=outcome.reason,
        members=[
            pb.MemberPlacement(pod=pb.PodRef(namespace=p.namespace, name=p.name), placement=_placement(p))
            for p in outcome.placements
        ],
        placed=outcome.placed,
        min_member=outcome.min_member,
    )


def preempt_response(outcome: PreemptOutcome) -> pb.PreemptResponse:
    return pb.PreemptResponse(
        preempted=outcome.preempted,
        reason=outcome.reason,
        victims=[
            pb.Victim(
                pod=pb.PodRef(namespace=v.namespace, name=v.name), node=v.node, priority=v.priority, pod_group=v.group
            )
            for v in outcome.victims
        ],
        nominations=[
            pb.Nomination(pod=pb.PodRef(namespace=namespace, name=name), node=node)
            for (namespace, name), node in outcome.nominations
        ],
        hold_seconds=round(outcome.hold_s, 3),
    )


def eviction_response(verdicts: Iterable[EvictionVerdict]) -> pb.CheckEvictionResponse:
    return pb.CheckEvictionResponse(
        verdicts=[
            pb.EvictionVerdict(node=v.node, fits=True)
            if v.refusal is None
            else pb.EvictionVerdict(node=v.node, fits=False, reason=v.refusal.message, kind=KIND_TO_PB[v.refusal.kind])
            for v in verdicts
        ]
    )


def permit_response(outcome: PermitOutcome) -> pb.PermitStatusResponse:
    return pb.PermitStatusResponse(
        state=_PERMIT_TO_PB[outcome.state],
        reason=outcome.reason,
        pod_group=outcome.group,
        ready=outcome.ready,
        min_member=outcome.min_member,
    )


def _amounts(amounts: Iterable[Amount]) -> list[pb.ResourceAmount]:
    return [
        pb.ResourceAmount(name=a.name, total=resource_quantity(a.name, a.total), free=resource_quantity(a.name, a.free))
        for a in amounts
    ]


def node_topology(view: NodeView) -> pb.NodeTopology:
    kubelet = view.kubelet
    return pb.NodeTopology(
        name=view.name,
        kubelet=pb.KubeletPolicy(
            topology_manager_policy=kubelet.topology_manager_policy,
            topology_manager_scope=kubelet.topology_manager_scope,
            cpu_manager_static=kubelet.cpu_manager_static,
            memory_manager_static=kubelet.memory_manager_static,
        ),
        cells=[
            pb.NumaCell(
                id=c.id,
                resources=_amounts(c.resources),
                local_read_bandwidth_mbps=c.local_read_bandwidth_mbps,
                local_distance=c.local_distance,
                claimed=c.claimed,
                isolated=c.isolated,
            )
            for c in view.cells
        ],
        node_resources=_amounts(view.node_resources),
        gpus=[
            pb.Gpu(index=g.index, numa_cell=-1 if g.numa_cell is None else g.numa_cell, healthy=g.healthy, busy=g.busy)
            for g in view.gpus
        ],
        gpu_links=[pb.GpuLink(a=a, b=b, kind=kind) for a, b, kind in view.gpu_links],
        pods=[
            pb.PodOnNode(
                pod=pb.PodRef(namespace=p.namespace, name=p.name),
                numa_cells=p.cells,
                gpu_ids=p.gpus,
                bound=p.bound,
                accounted=p.accounted,
            )
            for p in view.pods
        ],
        notes=view.notes,
    )


def list_nodes_response(nodes: Iterable[NodeSummary]) -> pb.ListNodesResponse:
    return pb.ListNodesResponse(
        nodes=[
            pb.NodeSummary(
                name=n.name,
                numa_cells=n.numa_cells,
                topology_manager_policy=n.topology_manager_policy,
                gpus=n.gpus,
                free_gpus=n.free_gpus,
                allocatable_cpus=resource_quantity(CPU, n.allocatable_cpus),
                free_cpus=resource_quantity(CPU, n.free_cpus),
                allocatable_memory=resource_quantity(MEMORY, n.allocatable_memory),
                free_memory=resource_quantity(MEMORY, n.free_memory),
                pods=n.pods,
            )
            for n in nodes
        ]
    )


def explain_response(explanation: Explanation) -> pb.ExplainResponse:
    demand = explanation.demand
    response = pb.ExplainResponse(
        node=explanation.node,
        placeable=explanation.placement is not None,
        qos_class=explanation.pod.pod.qos.value,
        requests=[
            pb.ResourceAmount(name=name, total=resource_quantity(name, amount / _MILLI if name == CPU else amount))
            for name, amount in demand.node_requests
        ],
        exclusive_cpus=demand.exclusive_cpus,
        numa_intent="" if explanation.pod.intent.policy is None else explanation.pod.intent.policy.value,
        decided_by_exact_model=explanation.exact_model,
    )
    if explanation.rejection is not None:
        response.rejection.CopyFrom(_rejection(explanation.rejection))
    if explanation.placement is not None:
        response.placement.CopyFrom(_placement(explanation.placement))
    return response
