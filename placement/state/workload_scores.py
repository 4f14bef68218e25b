"""The workload policies' score components over the live index: what ``core.workload_policies`` needs per node.

``ClusterIndex.judge`` hands each pod's judge ``PolicyScores.scorer``: after kube-scheduler's constraint
scores, the ``workload`` and ``tenant`` components join the scores of the feasible nodes at the configured
weights, on every path that scores (Score, Reserve, Explain, the gang planner's members).

Per node it reads the pods of the pod's own workload (the scheduling facts' placed pods: bound, or reserved
by us or the binder) and whether the node is in the tier's pools (the facts' label columns). Both are kept
while they hold: the counts of a workload until the placed pods change (``pods_version``), the pools' node
masks until any node's labels change (``labels_version``). Call under the index lock.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from placement.core.constraints.selectors import Selector
from placement.core.pods import PendingPod
from placement.core.scoring import Scores, with_constraint_scores
from placement.core.vocabulary import BoolArray, FloatArray, IntArray, NodeArrays, demand_of
from placement.core.workload_policies import (
    TENANT_PLUGIN,
    WORKLOAD_PLUGIN,
    WorkloadClass,
    WorkloadPolicies,
    node_load,
    pool_component,
    selector_rows,
    workload_component,
    workload_key,
)
from placement.state.scheduling_facts import SchedulingFacts

_KEPT_WORKLOADS = 1024  # workloads whose per-slot counts are kept between pod changes


class PolicyScores:
    """The policies' components for one cluster; ``policies`` may be replaced whole (a new configuration)."""

    def __init__(self, policies: WorkloadPolicies, facts: SchedulingFacts) -> None:
        self.policies = policies
        self._facts = facts
        self._counts: dict[tuple[str, str], IntArray] = {}
        self._counts_at: tuple[int, int] = (-1, -1)
        self._pools: dict[Selector, BoolArray] = {}
        self._pools_at: tuple[int, int] = (-1, -1)

    def scorer(self, pod: PendingPod, arrays: Callable[[], NodeArrays]) -> Callable[[Scores], Scores] | None:
        """What adds the pod's policy components to its scores; None when the policies leave it alone."""
        policies = self.policies
        kind = policies.workload_class(pod.controller[0], pod.labels, pod.annotations)
        tier = policies.tier_of(pod.namespace, pod.labels)
        workload_weight = {WorkloadClass.SERVICE: policies.workload_weight, WorkloadClass.BATCH: policies.batch_weight}
        workload = workload_weight.get(kind, 0.0) > 0
        tenant = tier is not None and bool(tier.pools) and policies.tenant_weight > 0
        if not (workload or tenant):
            return None
        weights = {WORKLOAD_PLUGIN: workload_weight.get(kind, 0.0), TENANT_PLUGIN: policies.tenant_weight}

        def scored(scores: Scores) -> Scores:
            rows = scores.rows
            if not len(rows):
                return scores
            components: dict[str, FloatArray] = {}
            if workload:
                load = node_load(arrays(), rows, demand_of(pod.pod))
                own = self._own(pod) if kind is WorkloadClass.SERVICE else None
                value = workload_component(kind, load, np.zeros(len(rows), np.int64) if own is None else own[rows])
                if value is not None:
                    components[WORKLOAD_PLUGIN] = 100.0 * value
            if tenant:
                value = pool_component(tier, lambda pool: self._pool(pool)[rows], len(rows))
                if value is not None:
                    components[TENANT_PLUGIN] = 100.0 * value
            return with_constraint_scores(scores, components, weights)

        return scored

    def _own(self, pod: PendingPod) -> IntArray | None:
        """Per slot, the placed pods of the pod's workload (itself left out); None for a pod without one."""
        name = workload_key(*pod.controller, pod.labels)
        if not name:
            return None
        facts = self._facts
        stamp = (facts.pods_version, facts.capacity)
        if stamp != self._counts_at or len(self._counts) >= _KEPT_WORKLOADS:
            self._counts.clear()
            self._counts_at = stamp
        key = (pod.namespace, name)
        counts = self._counts.get(key)
        if counts is None:
            placed, slots = facts.placed_pods()
            mine = [
                position
                for position, other in enumerate(placed)
                if other.workload == name and other.namespace == pod.namespace and other.name != pod.name
            ]
            counts = np.bincount(slots[mine], minlength=facts.capacity).astype(np.int64)
            self._counts[key] = counts
        return counts

    def _pool(self, pool: Selector) -> BoolArray:
        """Per slot, whether the node is in ``pool``."""
        facts = self._facts
        stamp = (facts.labels_version, facts.capacity)
        if stamp != self._pools_at:
            self._pools.clear()
            self._pools_at = stamp
        mask = self._pools.get(pool)
        if mask is None:
            mask = self._pools[pool] = selector_rows(pool, facts.label_column, np.arange(facts.capacity))
        return mask
