"""kube-scheduler's constraints for a pod group's members, judged against the cluster under the index lock.

The gang planner (``placement.core.gang``) places members only where their constraints admit them
(``member_rules``: each member's verdict over every slot, and one node each for members whose required
anti-affinity on the hostname selects themselves). What the planner does not model, constraints between
members (spread among them, pod affinity to one another, anti-affinity between members of different
shapes), is checked on the finished plan as kube-scheduler would meet them: member by member, each judged
with the members before it placed (``plan_conflict``). A plan that breaks one is replaced by a plan made
the same way (``plan_in_order``): each member on its best node given the members before it, which is how
kube-scheduler places a group's pods one after the other, so whatever it could place, this places too.

Every function here runs under the index lock; the members it places in the scheduling facts to judge the
next ones are taken out again before it returns (the reservation puts them there for good).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np

from placement.core.constraints.model import PlacedPod
from placement.core.constraints.selectors import SelectorError
from placement.core.constraints.terms import incoming_terms, matches_existing
from placement.core.constraints.verdicts import FilterStage
from placement.core.decision import rank
from placement.core.gang import GangMember, GangPlan, GangUnplaceable, GpusOf, MemberPlan, MemberRules, Workspace
from placement.core.podgroup import SpreadPolicy
from placement.core.pods import PendingPod
from placement.core.scoring import ScoringWeights
from placement.core.vocabulary import IntArray
from placement.state.cluster_index import ClusterIndex
from placement.state.scheduling_facts import SchedulingFacts

HOSTNAME_KEY = "kubernetes.io/hostname"  # the kubelet sets it on every node, unique per node
MAX_TRIES_PER_MEMBER = 16  # ranked nodes to try per member when planning member by member
_TOP_REASONS = 3
Key = tuple[str, str]


def member_rules(
    index: ClusterIndex, pods: Sequence[PendingPod]
) -> tuple[dict[Key, MemberRules], dict[Key, MemberRules]]:
    """Each member's rules against the cluster as it is, and the same kept to what the nodes themselves
    decide (readiness, cordon, name, taints, node affinity: what an emptied cluster still refuses).

    Members alike in namespace, labels and constraints share one ``MemberRules`` (the planner keeps their
    one-per-node rule across shapes by it); members without any constraint share none.
    """
    slots = np.arange(index.arrays().numa_count.shape[0], dtype=np.int64)
    rules: dict[Key, MemberRules] = {}
    node_rules: dict[Key, MemberRules] = {}
    shared: dict[object, tuple[MemberRules, MemberRules]] = {}
    for pod in pods:
        signature = (pod.namespace, pod.sorted_labels(), pod.constraints)
        pair = shared.get(signature)
        if pair is None:
            verdict = index.judge(pod).verdict(slots)
            apart = _one_per_node(index.facts, pod)
            pair = shared[signature] = (
                MemberRules(verdict, apart),
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


def plan_conflict(index: ClusterIndex, pods: Mapping[Key, PendingPod], plan: GangPlan) -> str | None:
    """The first constraint the plan breaks when its members are placed in order, each judged with those
    before it placed; None when it breaks none."""
    with _tentative(index.facts) as place:
        for step in plan.members:
            pod = pods[step.key]
            refused = index.judge(pod).verdict(np.array([step.row], dtype=np.int64)).rejected(0)
            node = index.name_of(step.row) or ""
            if refused is not None:
                return f"member {pod.namespace}/{pod.name} on {node}: {refused.message}"
            place(pod.placed_on(node))
    return None


def plan_in_order(
    index: ClusterIndex,
    members: Sequence[tuple[PendingPod, GangMember]],
    rows: IntArray,
    *,
    gpus: GpusOf,
    policy: SpreadPolicy,
    weights: ScoringWeights | None = None,
) -> GangPlan | GangUnplaceable:
    """Each member in turn on its best node among ``rows``, judged (resources, the kubelet's exact model and
    the constraints) with the members before it placed; or why a member finds none."""
    workspace = Workspace(index.arrays(), gpus)
    plans: list[MemberPlan] = []
    with _tentative(index.facts) as place:
        for pod, member in members:
            ranking = rank(
                workspace.arrays,
                rows,
                member.demand,
                intent=member.intent,
                weights=weights,
                constraints=index.judge(pod),
            )
            plan: MemberPlan | None = None
            for position in ranking.order[:MAX_TRIES_PER_MEMBER].tolist():
                outcome = workspace.place(member, int(ranking.scores.rows[position]))
                if isinstance(outcome, MemberPlan):
                    plan = outcome
                    break
            if plan is None:
                filtered = ranking.filtered
                codes = filtered.reason_codes[~filtered.feasible]
                counts = np.bincount(codes, minlength=len(filtered.messages) + 1)
                top = sorted(
                    ((int(counts[c]), filtered.messages[c - 1]) for c in range(1, counts.size) if counts[c]),
                    reverse=True,
                )
                why = "; ".join(f"{count} node(s): {message}" for count, message in top[:_TOP_REASONS])
                reason = (
                    f"placed member by member, {len(plans)} of {len(members)} placed; "
                    f"member {pod.namespace}/{pod.name} fits no node"
                )
                return GangUnplaceable(reason=reason + (f" ({why})" if why else ""), placed=len(plans))
            plans.append(plan)
            place(pod.placed_on(index.name_of(plan.row) or ""))
    return GangPlan(members=tuple(plans), policy=policy)


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
