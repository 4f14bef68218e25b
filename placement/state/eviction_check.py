"""Would a pod fit a node once some pods are gone from it: the check behind kube-scheduler's extender
preemption verb (``CheckEviction``; docs/preemption.md, "Extender mode").

kube-scheduler chooses the victims on each candidate node by its own model (node-level requests, its filter
plugins re-run without them) and asks the extender which of those choices to keep. This module answers
for one pod and each (node, victims) pair with the model the placement itself uses: the node's arrays
recomputed without the victims (``ClusterIndex.arrays_without``), the vectorised filter (free amounts, the
pod's NUMA intent), then the kubelet's Topology Manager admission and the device plugin's GPU choice
(``plan_on_node``). Nothing is reserved or evicted; the caller holds ``index.lock``.

* **Victims** are named by namespace/name or by metadata.uid (kube-scheduler's ``MetaPod`` carries only the
  uid). Only the pods the index holds on that node count: a victim it does not know there charges nothing
  in its model, so its eviction frees nothing either, and the verdict is the one without it.
* **Kueue**: a candidate with a victim Kueue admitted (``PlacedPod.kueue_admitted``) is refused: Kueue evicts
  the pods it admitted, by quota, and kube-scheduler's preemption must not (as the service's own:
  ``placement.state.preemption_search``).
* **Constraints** (``ClusterIndex.judge``): a refusal eviction cannot lift (unknown node, no topology, node
  selector or affinity, taints, cordon, readiness) refuses the node. A refusal by placed pods (host ports,
  inter-pod anti-affinity, topology spread) is left to kube-scheduler, which re-ran those same plugins with
  the victims removed before asking; the index cannot remove them from the placed pods those plugins read.
* **DRA** (``state.eviction_devices``): after the kubelet's admission, the pod's claims are judged with the
  devices the victims free: a claim allocated already must be usable on the node, the others allocatable
  by best fit there, as ``Preempt`` judges them. A claim shared with a pod that is not a victim keeps its
  devices.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from placement.core.constraints.context import PodInCluster
from placement.core.decision import NodePlan, plan_on_node
from placement.core.feasibility import filter_nodes
from placement.core.kueue import KUEUE_EVICTS_ITS_OWN
from placement.core.pods import PendingPod
from placement.core.preemption_rules import EvictionCandidate, EvictionVerdict
from placement.core.vocabulary import PodDemand, Rejected, RejectionKind, demand_of
from placement.state.cluster_index import ClusterIndex
from placement.state.dra_verdicts import NOT_ON_NODE, PodWithDevices
from placement.state.eviction_devices import ClaimsAfterEviction

Key = tuple[str, str]
_SHOWN = 5  # Kueue's victims named in a refusal; the rest are counted
_UNKNOWN_NODE = Rejected("node unknown to the placement service (no topology report)", RejectionKind.UNKNOWN_NODE)


def check_eviction(
    index: ClusterIndex, pod: PendingPod, candidates: Sequence[EvictionCandidate]
) -> tuple[EvictionVerdict, ...]:
    """One verdict per candidate, in order (module docstring). Caller holds ``index.lock``; changes nothing."""
    judge = index.judge(pod)
    # The claims are judged after the kubelet's admission, with the victims' devices freed: not by the
    # judge's own verdict, which counts them as held.
    constraints = judge.constraints if isinstance(judge, PodWithDevices) else judge
    devices = ClaimsAfterEviction.of(judge)
    return tuple(
        EvictionVerdict(candidate.node, _refusal(index, pod, constraints, devices, candidate))
        for candidate in candidates
    )


def _refusal(
    index: ClusterIndex,
    pod: PendingPod,
    constraints: PodInCluster,
    devices: ClaimsAfterEviction | Rejected | None,
    candidate: EvictionCandidate,
) -> Rejected | None:
    slot = index.slot_of(candidate.node)
    if slot is None:
        return _UNKNOWN_NODE
    refused = constraints.verdict(np.array([slot], dtype=np.int64)).rejected(0)
    if refused is not None and refused.kind is not RejectionKind.POD_CONSTRAINT:
        return refused
    if isinstance(devices, Rejected):
        return devices
    if devices is not None and not devices.usable_on(slot):
        message = f"{NOT_ON_NODE.message} (ResourceClaims {devices.allocated_names()} are allocated already)"
        return Rejected(message, NOT_ON_NODE.kind)
    gone, unknown = _victims_on(index, candidate)
    kueue = sorted("/".join(key) for key in gone if (placed := index.facts.pod(*key)) and placed.kueue_admitted)
    if kueue:
        named = ", ".join(kueue[:_SHOWN]) + (f" and {len(kueue) - _SHOWN} more" if len(kueue) > _SHOWN else "")
        message = f"victim(s) {named} were admitted by Kueue: {KUEUE_EVICTS_ITS_OWN}"
        return Rejected(message, RejectionKind.POD_CONSTRAINT)  # placed pods in the way; other victims may do
    plan: NodePlan | Rejected = plan_without(index, slot, pod, demand_of(pod.pod), gone)
    if isinstance(plan, NodePlan):
        fit = None if devices is None else devices.fit(index, slot, plan, gone)
        if not isinstance(fit, Rejected):
            return None
        plan = Rejected(f"its ResourceClaims: {fit.message}", fit.kind)
    unknown_note = (
        f"; {unknown} victim(s) are not pods the placement service knows on this node, so their eviction frees "
        "nothing in its model"
        if unknown
        else ""
    )
    return Rejected(f"even with {len(gone)} victim(s) evicted, {plan.message}{unknown_note}", plan.kind)


def plan_without(
    index: ClusterIndex, slot: int, pod: PendingPod, demand: PodDemand, gone: frozenset[Key]
) -> NodePlan | Rejected:
    """The exact plan of ``pod`` on ``slot`` with the pods ``gone`` evicted, or why the node still refuses it:
    the node's arrays recomputed without them, the vectorised filter (free amounts, the pod's NUMA intent),
    then the kubelet's Topology Manager admission and the device plugin's GPU choice (``plan_on_node``)."""
    arrays = index.arrays_without(gone, slots=[slot])
    first_row = np.zeros(1, dtype=np.int64)
    refused = filter_nodes(arrays, first_row, demand, pod.intent if pod.intent.constrains else None).rejected(0)
    if refused is not None:
        return refused
    shape = index.gpu_shape(slot)
    return plan_on_node(
        arrays,
        0,
        demand,
        intent=pod.intent,
        landing_cell=-1,
        gpu_table=None if shape is None else shape.table,
        free_gpus=frozenset() if shape is None else shape.healthy - index.busy_gpus(slot, without=gone),
        gpu_share_left=None if shape is None else index.gpu_share_left(slot, without=gone),
    )


def _victims_on(index: ClusterIndex, candidate: EvictionCandidate) -> tuple[frozenset[Key], int]:
    """The keys of the candidate's victims that the index holds on its node, and how many victims named none."""
    on_node = {usage.key for usage, _, _ in index.pods_on(candidate.node)}
    by_uid: dict[str, Key] = {}
    if candidate.victim_uids:
        for key in on_node:
            placed = index.facts.pod(*key)
            if placed is not None and placed.uid:
                by_uid[placed.uid] = key
    named = set(candidate.victims)
    uids = set(candidate.victim_uids)
    gone = {key for key in named if key in on_node} | {by_uid[uid] for uid in uids if uid in by_uid}
    unknown = sum(key not in on_node for key in named) + sum(uid not in by_uid for uid in uids)
    return frozenset(gone), unknown
