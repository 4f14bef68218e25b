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
* **Constraints** (``ClusterIndex.judge``): a refusal eviction cannot lift (unknown node, no topology, node
  selector or affinity, taints, cordon, readiness, the pod's DRA claims) refuses the node. A refusal by
  placed pods (host ports, inter-pod anti-affinity, topology spread) is left to kube-scheduler, which
  re-ran those same plugins with the victims removed before asking; the index cannot remove them from the
  placed pods those plugins read.
* **DRA**: devices the victims hold are counted as still held (the devices freed by eviction are not
  simulated, as in ``state.preemption``): a pod whose claims fit only once the victims' devices are free is
  refused, which keeps kube-scheduler from evicting for room this service cannot confirm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from placement.core.constraints.context import PodInCluster
from placement.core.decision import NodePlan, plan_on_node
from placement.core.feasibility import filter_nodes
from placement.core.pods import PendingPod
from placement.core.vocabulary import PodDemand, Rejected, RejectionKind, demand_of
from placement.state.cluster_index import ClusterIndex
from placement.state.dra_verdicts import PodWithDevices

Key = tuple[str, str]
_UNKNOWN_NODE = Rejected("node unknown to the placement service (no topology report)", RejectionKind.UNKNOWN_NODE)


@dataclass(frozen=True)
class EvictionCandidate:
    """One node and the pods that would be evicted from it."""

    node: str
    victims: tuple[Key, ...] = ()  # (namespace, name)
    victim_uids: tuple[str, ...] = ()  # metadata.uid


@dataclass(frozen=True)
class EvictionVerdict:
    """Whether the pod fits ``node`` once the candidate's victims are gone; ``refusal`` says why not."""

    node: str
    refusal: Rejected | None  # None: it fits

    @property
    def fits(self) -> bool:
        return self.refusal is None


def check_eviction(
    index: ClusterIndex, pod: PendingPod, candidates: Sequence[EvictionCandidate]
) -> tuple[EvictionVerdict, ...]:
    """One verdict per candidate, in order (module docstring). Caller holds ``index.lock``; changes nothing."""
    judge = index.judge(pod)
    return tuple(EvictionVerdict(candidate.node, _refusal(index, pod, judge, candidate)) for candidate in candidates)


def _refusal(
    index: ClusterIndex, pod: PendingPod, judge: PodInCluster | PodWithDevices, candidate: EvictionCandidate
) -> Rejected | None:
    slot = index.slot_of(candidate.node)
    if slot is None:
        return _UNKNOWN_NODE
    refused = judge.verdict(np.array([slot], dtype=np.int64)).rejected(0)
    if refused is not None:
        if refused.kind is not RejectionKind.POD_CONSTRAINT:
            return _with_devices_note(pod, refused)
        if pod.resource_claims:
            # The claims are judged only where the constraints pass: here they were not judged at all.
            message = f"{refused.message}; the pod's DRA claims cannot be judged on this node until that passes"
            return Rejected(message, refused.kind)
    gone, unknown = _victims_on(index, candidate)
    plan = plan_without(index, slot, pod, demand_of(pod.pod), gone)
    if isinstance(plan, NodePlan):
        return None
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


def _with_devices_note(pod: PendingPod, refused: Rejected) -> Rejected:
    """A pod with DRA claims refused on a node: say that devices held by the victims were counted as held."""
    if not pod.resource_claims or refused.kind is not RejectionKind.NODE_CONSTRAINT:
        return refused
    message = (
        f"{refused.message} (devices the victims hold count as held: DRA devices freed by eviction are not simulated)"
    )
    return Rejected(message, refused.kind)


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
