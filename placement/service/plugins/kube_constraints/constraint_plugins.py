"""KubeConstraints: kube-scheduler's own plugins over what the pod states (node selector and affinity, taints
and tolerations, inter-pod affinity, topology spread, node name, unschedulable, ports, scheduling gates, volume
zones and limits), ported in ``placement.core.constraints`` and judged against upstream's code by the scheduler
oracle (``tests/oracles/scheduler``).

Filter merges their refusals in kube-scheduler's order: a plugin that runs before NodeResourcesFit there
(``FilterStage``) gives its reason even where the resources refuse too. Score adds their scores at
kube-scheduler's default weights against the topology score (``scoring.with_constraint_scores``).
"""

from __future__ import annotations

from placement.core.feasibility import FilterResult
from placement.core.scoring import Scores
from placement.service.framework.cycle_state import CycleState
from placement.service.framework.handle import Handle


class KubeConstraints:
    name = "KubeConstraints"

    def __init__(self, handle: Handle) -> None:
        del handle  # the pod's judge is the cycle's (``CycleState.constraints``)

    def filter(self, cycle: CycleState, verdict: FilterResult) -> FilterResult:
        return cycle.constraints.filtered(verdict)

    def score(self, cycle: CycleState, scores: Scores) -> Scores:
        return cycle.constraints.plugin_scored(scores)
