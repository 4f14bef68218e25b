"""Preemption: kube-scheduler's DefaultPreemption for pods and for whole groups, at PostFilter.

PostFilter chooses victims for a pod, or a group's waiting members, that fits nowhere: the fewest and lowest,
with the exact plan checked without them (``placement.state.preemption_search``); a group's victims include
whole gangs, never part of one. The nominated nodes are held for the preemptor meanwhile (the framework's
``Nominations``: Reserve keeps every pod of priority <= the preemptor's off them). It decides only: the binder
or kube-scheduler evicts. CheckEviction answers kube-scheduler's own choice of victims (the extender's preempt
verb): whether the pod fits each node once those victims are gone (``placement.state.eviction_check``).
"""

from __future__ import annotations

from collections.abc import Sequence

from placement.core.podgroup import DomainConstraint, SpreadPolicy
from placement.core.pods import PendingPod
from placement.core.preemption_rules import EvictionCandidate, EvictionVerdict
from placement.service.framework.handle import Handle
from placement.service.results import PreemptOutcome
from placement.state.eviction_check import check_eviction
from placement.state.preemption_search import NoPreemption, find_preemption


class Preemption:
    name = "Preemption"

    def __init__(self, handle: Handle) -> None:
        self._handle = handle

    def post_filter(
        self,
        pods: Sequence[PendingPod],
        candidates: Sequence[str] | None,
        *,
        topology: tuple[DomainConstraint, ...] = (),
        spread: SpreadPolicy = SpreadPolicy.PACKED,
    ) -> PreemptOutcome:
        handle = self._handle
        index = handle.index
        priority = min(pod.priority for pod in pods)  # a gang's is its lowest member's, as for its victims
        with index.lock:
            decision = find_preemption(
                index,
                pods,
                candidates=candidates,
                constraints=topology,
                policy=spread,
                # Among otherwise equal candidates, the pods of lower tenant tiers are evicted first.
                victim_tier=index.policy_scores.policies.tenant_tier,
                levels=handle.levels,
            )
            if isinstance(decision, NoPreemption):
                return PreemptOutcome(False, decision.reason, (), (), 0.0)
            hold_s = handle.nominations.hold(decision, priority)
        return PreemptOutcome(True, decision.reason, decision.victims, decision.nominations, hold_s)

    def check_eviction(
        self, pending: PendingPod, candidates: Sequence[EvictionCandidate]
    ) -> tuple[EvictionVerdict, ...]:
        with self._handle.index.lock:
            return check_eviction(self._handle.index, pending, candidates)
