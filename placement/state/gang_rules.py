"""kube-scheduler's constraints for a pod group's members, judged against the cluster under the index lock.

The gang planner (``placement.core.gang_plan``) places members only where their constraints admit them
(``member_rules``: each member's verdict over every slot, and one node each for members whose required
anti-affinity on the hostname selects themselves). What the planner does not model, constraints between
members (spread among them, pod affinity to one another, anti-affinity between members of different
shapes), is checked on the finished plan as kube-scheduler would meet them: member by member, each judged
with the members before it placed (``plan_conflict``). A plan that breaks one is replaced by a plan made
the same way (``plan_in_order``): each member on its best node given the members before it, which is how
kube-scheduler places a group's pods one after the other. In both, a member refused only for want of
members not yet placed (a worker whose required affinity names the parameter server) is tried again after
the others, as kube-scheduler retries a pod that did not fit. Greedy, not exhaustive: each member takes
its best node at its turn, as kube-scheduler's would; no other assignment is searched.

Every function here runs under the index lock; the members it places in the scheduling facts to judge the
next ones are taken out again before it returns (the reservation puts them there for good).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np

from placement.core.constraints.constraint_types import PlacedPod
from placement.core.constraints.selectors import SelectorError
from placement.core.constraints.terms import incoming_terms, matches_existing
from placement.core.constraints.verdicts import AFFINITY_MISMATCH, ConstraintVerdict, FilterStage
from placement.core.decision import NodePlan, rank
from placement.core.feasibility import FilterResult
from placement.core.gang_plan import GangMember, GangPlan, GangUnplaceable, GpusOf, MemberRules, Workspace
from placement.core.pod_placement import DeviceChoice, Placement
from placement.core.podgroup import SpreadPolicy
from placement.core.pods import PendingPod
from placement.core.scoring import ScoringWeights
from placement.core.vocabulary import IntArray, Rejected, RejectionKind
from placement.state.cluster_index import ClusterIndex
from placement.state.dra_verdicts import PodWithDevices, choose_devices, holds_of
from placement.state.scheduling_facts import SchedulingFacts

HOSTNAME_KEY = "kubernetes.io/hostname"  # the kubelet sets it on every node, unique per node
MAX_TRIES_PER_MEMBER = 16  # ranked nodes to try per member when planning member by member
_TOP_REASONS = 3
_NO_ROOM = Rejected("no node admits the member", RejectionKind.POD_CONSTRAINT)  # plan_in_order's refusal
Key = tuple[str, str]


def member_rules(
    index: ClusterIndex, pods: Sequence[PendingPod], *, evicting: bool = False
) -> tuple[dict[Key, MemberRules], dict[Key, MemberRules]]:
    """Each member's rules against the cluster as it is, and the same kept to what the nodes themselves
    decide (readiness, cordon, name, taints, node affinity: what an emptied cluster still refuses).
    ``evicting`` (preemption's): a member's claims not allocated yet are left out of the rules, judged
    with the victims' devices freed instead (``state.eviction_devices``); those allocated still keep it
    to their nodes.

    Members alike in namespace, labels and constraints share one ``MemberRules`` (the planner keeps their
    one-per-node rule across shapes by it); members without any constraint share none. A member whose
    required pod affinity another member may meet is not refused for it here: no placed pod meets it yet,
    the plan is checked in order (``plan_conflict``).
    """
    slots = np.arange(index.arrays().numa_count.shape[0], dtype=np.int64)
    rules: dict[Key, MemberRules] = {}
    node_rules: dict[Key, MemberRules] = {}
    shared: dict[object, tuple[MemberRules, MemberRules]] = {}
    for pod in pods:
        signature = (pod.namespace, pod.sorted_labels(), pod.constraints)
        pair = shared.get(signature)
        if pair is None:
            judge = index.judge(pod)
            verdict = (
                judge.verdict_after_eviction(slots)
                if evicting and isinstance(judge, PodWithDevices)
                else judge.verdict(slots)
            )
            apart = _one_per_node(index.facts, pod)
            planned = _without_affinity_refusals(verdict) if _affinity_among(index.facts, pod, pods) else verdict
            pair = shared[signature] = (
                MemberRules(planned, apart),
                MemberRules(verdict.up_to(FilterStage.NODE_AFFINITY), apart),
            )
        rules[pod.key], node_rules[pod.key] = pair
    return rules, node_rules


def _one_per_node(facts: SchedulingFacts, pod: PendingPod) -> bool:
    """Whether the pod's required anti-affinity keeps two like it off one node: a term on the hostname that
    its own labels match. (A term that does not parse refuses the pod everywhere already.)"""
    constraints = pod.constraints
    if constraints.pod_anti_affinity is None:
        return False
    labels = pod.sorted_labels()
    try:
        terms = incoming_terms(pod.namespace, labels, constraints.pod_affinity, constraints.pod_anti_affinity)
    except SelectorError:
        return False
    own = dict(labels)
    namespace_labels = facts.namespace_labels(pod.namespace)
    return any(
        term.topology_key == HOSTNAME_KEY and matches_existing(term, pod.namespace, own, namespace_labels)
        for term in terms.required_anti_affinity
    )


def _affinity_among(facts: SchedulingFacts, pod: PendingPod, pods: Sequence[PendingPod]) -> bool:
    """Whether another member matches one of the pod's required pod affinity terms: placed before the pod,
    it may meet the term (kube-scheduler places a group's pods one after the other)."""
    affinity = pod.constraints.pod_affinity
    if affinity is None or not affinity.required:
        return False
    try:
        terms = incoming_terms(pod.namespace, pod.sorted_labels(), affinity, None)
    except SelectorError:
        return False
    return any(
        matches_existing(term, other.namespace, dict(other.labels), facts.namespace_labels(other.namespace))
        for other in pods
        if other.key != pod.key
        for term in terms.required_affinity
    )


def _without_affinity_refusals(verdict: ConstraintVerdict) -> ConstraintVerdict:
    """``verdict`` with its refusals for unmet required pod affinity lifted."""
    if AFFINITY_MISMATCH.message not in verdict.messages:
        return verdict
    code = verdict.messages.index(AFFINITY_MISMATCH.message) + 1
    codes = np.where(verdict.reason_codes == code, 0, verdict.reason_codes).astype(np.int16)
    return ConstraintVerdict(verdict.rows, codes, verdict.messages, verdict.kinds, verdict.stages)


def plan_conflict(index: ClusterIndex, pods: Mapping[Key, PendingPod], plan: GangPlan) -> str | None:
    """The first constraint the plan breaks when its members are placed one after the other, each judged
    with those before it placed; None when it breaks none.

    A member refused only because of members not yet placed (a worker whose required affinity names the
    parameter server) is judged again after the others, as kube-scheduler retries a pod that did not fit:
    the plan breaks a constraint only when some members are refused in every order this finds.
    """
    steps = {step.key: step for step in plan.members}

    def judge(pod: PendingPod) -> tuple[int, Rejected | None]:
        step = steps[pod.key]
        return step.row, index.judge(pod).verdict(np.array([step.row], dtype=np.int64)).rejected(0)

    refused = _in_turn(index, [pods[step.key] for step in plan.members], judge)
    if refused is None:
        return None
    pod, why = refused
    return f"member {pod.namespace}/{pod.name} on {index.name_of(steps[pod.key].row) or ''}: {why.message}"


def plan_in_order(
    index: ClusterIndex,
    members: Sequence[tuple[PendingPod, GangMember]],
    rows: IntArray,
    *,
    gpus: GpusOf,
    policy: SpreadPolicy,
    weights: ScoringWeights | None = None,
    devices: dict[Key, DeviceChoice] | None = None,
) -> GangPlan | GangUnplaceable:
    """Each member in turn on its best node among ``rows``, judged (resources, the kubelet's exact model and
    the constraints) with the members before it placed; a member that fits nowhere yet is tried again after
    the others (as in ``plan_conflict``). Or why a member finds none.

    DRA: a member's claims are allocated on its node as it is placed, and the devices held (``devices``
    gets each member's choice); the caller releases the holds when the plan is not reserved."""
    workspace = Workspace(index.arrays(), gpus)
    by_key = {pod.key: member for pod, member in members}
    plans: list[Placement] = []
    reasons: dict[Key, str] = {}

    def judge(pod: PendingPod) -> tuple[int, Rejected | None]:
        member = by_key[pod.key]
        ranking = rank(
            workspace.arrays, rows, member.demand, intent=member.intent, weights=weights, constraints=index.judge(pod)
        )
        for position in ranking.order[:MAX_TRIES_PER_MEMBER].tolist():
            outcome = workspace.place(member, int(ranking.scores.rows[position]))
            if not isinstance(outcome, Placement):
                continue
            # Its claims too, holding the devices for the members after it. Refused, the member's cells
            # stay charged in the workspace: the next members see less room there, never more.
            chosen = hold_devices(index, pod, outcome)
            if isinstance(chosen, Rejected):
                continue
            if chosen is not None and devices is not None:
                devices[pod.key] = chosen
            plans.append(outcome)
            return outcome.row, None
        reasons[pod.key] = _top_reasons(ranking.filtered)
        return -1, _NO_ROOM

    refused = _in_turn(index, [pod for pod, _ in members], judge)
    if refused is None:
        return GangPlan(members=tuple(plans), policy=policy)
    pod, _ = refused
    why = reasons[pod.key]
    reason = (
        f"placed member by member, {len(plans)} of {len(members)} placed; "
        f"member {pod.namespace}/{pod.name} fits no node"
    )
    return GangUnplaceable(reason=reason + (f" ({why})" if why else ""), placed=len(plans))


def allocate_members(
    index: ClusterIndex, pods: Mapping[Key, PendingPod], plan: GangPlan
) -> tuple[dict[Key, DeviceChoice], str | None]:
    """DRA: the devices of each member's claims on its planned node, member by member, each seeing the
    devices of those before it held (``DraState.hold``). All or nothing: when a member's claims do not fit,
    every hold made here is released and the reason returned."""
    chosen: dict[Key, DeviceChoice] = {}
    for step in plan.members:
        pod = pods[step.key]
        devices = hold_devices(index, pod, step)
        if isinstance(devices, Rejected):
            for key in chosen:
                index.dra.release(key)
            node = index.name_of(step.row) or ""
            return {}, f"member {pod.namespace}/{pod.name} on {node}: {devices.message}"
        if devices is not None:
            chosen[step.key] = devices
    return chosen, None


def hold_devices(index: ClusterIndex, pod: PendingPod, plan: Placement) -> DeviceChoice | Rejected | None:
    """Choose and hold the devices of ``pod``'s claims on its planned node (None: it has none to allocate)."""
    if not pod.resource_claims:
        return None
    node_plan = NodePlan(row=plan.row, cells=plan.cells, pinned=plan.pinned, gpus=plan.gpus)
    devices = choose_devices(index.judge(pod), node_plan)
    if isinstance(devices, DeviceChoice):
        index.dra.hold(pod.key, holds_of(devices, index.name_of(plan.row) or ""))
    return devices


def _in_turn(
    index: ClusterIndex,
    pods: Sequence[PendingPod],
    judge: Callable[[PendingPod], tuple[int, Rejected | None]],
) -> tuple[PendingPod, Rejected] | None:
    """Place ``pods`` one after the other in the scheduling facts, each where ``judge`` (called with those
    before it placed) puts it; a refused pod waits for the next pass, and passes go on while one places
    somebody. The first pod of the last pass still refused, and why; None when all are placed. The facts
    are as before on return."""
    waiting = list(pods)
    with _tentative(index.facts) as place:
        while waiting:
            refused: list[tuple[PendingPod, Rejected]] = []
            for pod in waiting:
                row, why = judge(pod)
                if why is None:
                    place(pod.placed_on(index.name_of(row) or ""))
                else:
                    refused.append((pod, why))
            if not refused:
                return None
            if len(refused) == len(waiting):
                return refused[0]
            waiting = [pod for pod, _ in refused]
    return None


def _top_reasons(filtered: FilterResult) -> str:
    """The most frequent reasons nodes refused, "N node(s): reason; ..."."""
    codes = filtered.reason_codes[~filtered.feasible]
    counts = np.bincount(codes, minlength=len(filtered.messages) + 1)
    top = sorted(((int(counts[c]), filtered.messages[c - 1]) for c in range(1, counts.size) if counts[c]), reverse=True)
    return "; ".join(f"{count} node(s): {message}" for count, message in top[:_TOP_REASONS])


@contextmanager
def _tentative(facts: SchedulingFacts) -> Iterator[Callable[[PlacedPod], None]]:
    """Place pods in the facts for the duration; what each key held before is put back afterwards."""
    before: list[tuple[PlacedPod, PlacedPod | None]] = []

    def place(pod: PlacedPod) -> None:
        before.append((pod, facts.pod(pod.namespace, pod.name)))
        facts.put_pod(pod)

    try:
        yield place
    finally:
        for pod, held in reversed(before):
            if held is None:
                facts.remove_pod(pod.namespace, pod.name)
            else:
                facts.put_pod(held)
